"""World-model benchmark: held-out fidelity, rollouts, simulated vs real step latency, throughput 1 vs 8 sessions.

    # build a model the newcomer's way, then measure it (about 25 minutes on a shared 2-core machine)
    .venv/bin/python services/worldmodel/bench.py --build standard --out bench/results
    # or measure an existing build (its model directory and the transitions it was built from); with no
    # arguments (`make bench`) the one `make worldmodel` left in .webenv/worldmodel
    .venv/bin/python services/worldmodel/bench.py --model .webenv/worldmodel/model \\
        --data .webenv/worldmodel/data/transitions.jsonl --out bench/results
    # reasoning injection: add a model trained with --reasoning-fraction on the same data
    ... --reasoning-model runs/wm-reasoning/model

Everything is scored on websites the task catalog holds out (never seen in training). Side by side in one run:
* fidelity: copy-state, lookup (page cache by URL) and the world model — overall and per action kind — plus the
  language model alone, and with reasoning injection off/on when a reasoning-trained model is given;
* open-loop 30-step rollouts: line F1 by horizon vs keeping the start state (and a PNG plot);
* latency: the same recorded held-out actions replayed as Steps over gRPC against the world model and against
  the browser farm (real Chromium on the sites service), both started here under the same load;
* throughput: simulated steps/s with 1 session vs 8 concurrent sessions on one StepStream (the collector's path).
Writes <out>/worldmodel.json, <out>/worldmodel.md and <out>/worldmodel-rollouts.png.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from webenv.actions import parse_action
from webenv.client import make_channel
from webenv.v1 import common_pb2, environment_pb2, environment_pb2_grpc
from webenv.worldmodel.dataset import episodes, read_transitions
from webenv.worldmodel.evaluate import evaluate, plot_rollouts, single_step, to_markdown
from webenv.worldmodel.page import action_kind
from webenv.worldmodel.predict import load_world_model

AXTREE = common_pb2.ObservationSpec(formats=[common_pb2.OBSERVATION_FORMAT_AXTREE])


def held_out_episodes(data: Path, n: int, steps: int) -> list[list]:
    """Held-out recorded episodes of page actions (crawls first: they are the longest)."""
    eps = [ep for ep in episodes(r for r in read_transitions([data]) if r.split == "test").values() if len(ep) >= steps]
    return eps[:n]


async def replay(stub: environment_pb2_grpc.EnvironmentServiceStub, ep: list, steps: int) -> list[float]:
    """Step times (seconds, client side) of one recorded episode replayed on an environment."""
    opened = await stub.OpenSession(environment_pb2.OpenSessionRequest(start_url=ep[0].url, observation_spec=AXTREE),
                                    timeout=60)
    sid = opened.session.session_id
    out = []
    for i, r in enumerate(ep[:steps]):
        if action_kind(r.action_text) == "answer":
            break
        t0 = time.perf_counter()
        await stub.Step(environment_pb2.StepRequest(session_id=sid, action=parse_action(r.action_text), step_index=i,
                                                    observation_spec=AXTREE), timeout=60)
        out.append(time.perf_counter() - t0)
    await stub.CloseSession(environment_pb2.CloseSessionRequest(session_id=sid), timeout=30)
    return out


def _summary(times: list[float]) -> dict:
    return {"steps": len(times), "p50_ms": round(1000 * statistics.median(times), 1),
            "mean_ms": round(1000 * statistics.fmean(times), 1), "p90_ms": round(1000 * sorted(times)[int(0.9 * len(times))], 1)}


async def simulated_latency_and_throughput(model: str, eps: list[list], steps: int) -> dict:
    from webenv.worldmodel.app import serving
    from webenv.worldmodel.config import Settings

    settings = Settings(grpc_port=0, metrics_port=0, host="127.0.0.1", worldmodel_model_path=model,
                        worldmodel_start_states=str(BENCH_STARTS), worldmodel_horizon=1000, log_json=False)
    out: dict = {}
    async with serving(settings) as (server, _, _):
        async with make_channel(f"127.0.0.1:{server.port}", timeout=None) as ch:
            stub = environment_pb2_grpc.EnvironmentServiceStub(ch)
            times: list[float] = []
            for ep in eps:
                times += await replay(stub, ep, steps)
            out["latency"] = _summary(times)
            out["throughput"] = {n: await _stream_throughput(stub, eps, steps, n) for n in (1, 8)}
        await server.stop()
    return out


async def _stream_throughput(stub: environment_pb2_grpc.EnvironmentServiceStub, eps: list[list], steps: int,
                             concurrent: int, sessions: int = 8) -> dict:
    """Simulated steps/s replaying the same `sessions` held-out episodes on one StepStream, `concurrent` sessions
    at a time (1: one after another; 8: all at once), so both settings do exactly the same steps."""
    chosen = [eps[i % len(eps)] for i in range(sessions)]
    t0 = time.perf_counter()
    answered = 0
    for start in range(0, sessions, concurrent):
        answered += await _stream_batch(stub, chosen[start:start + concurrent], steps)
    elapsed = time.perf_counter() - t0
    return {"concurrent_sessions": concurrent, "steps": answered, "seconds": round(elapsed, 2),
            "steps_per_s": round(answered / elapsed, 1)}


async def _stream_batch(stub: environment_pb2_grpc.EnvironmentServiceStub, chosen: list[list], steps: int) -> int:
    """Replay these episodes concurrently on one StepStream (each session's next step sent when its last returns)."""
    sids = [(await stub.OpenSession(environment_pb2.OpenSessionRequest(start_url=ep[0].url, observation_spec=AXTREE))).session.session_id
            for ep in chosen]
    queue: asyncio.Queue = asyncio.Queue()
    next_step = dict.fromkeys(range(len(chosen)), 0)
    total = sum(min(steps, len(ep)) for ep in chosen)
    answered = 0

    def request(k: int) -> environment_pb2.StepStreamRequest:
        r = chosen[k][next_step[k]]
        action = parse_action(r.action_text if action_kind(r.action_text) != "answer" else "noop()")
        return environment_pb2.StepStreamRequest(tag=str(k), step=environment_pb2.StepRequest(
            session_id=sids[k], action=action, step_index=next_step[k], observation_spec=AXTREE))

    async def requests():
        for k in range(len(chosen)):
            yield request(k)
        while (item := await queue.get()) is not None:
            yield item

    async for resp in stub.StepStream(requests()):
        k = int(resp.tag)
        answered += 1
        next_step[k] += 1
        if next_step[k] < min(steps, len(chosen[k])):
            await queue.put(request(k))
        if answered == total:
            await queue.put(None)
    for sid in sids:
        await stub.CloseSession(environment_pb2.CloseSessionRequest(session_id=sid))
    return answered


async def real_latency(eps: list[list], steps: int, sites_count: int) -> dict:
    """The same replays against the browser farm (real Chromium) on the sites service, started here."""
    from webenv.cli.stack import Stack

    stack = Stack(Path(tempfile.mkdtemp(prefix="wm-bench-stack-")), free_ports=True, sites_count=sites_count)
    try:
        stack.start(("sites", "browser"))
        async with make_channel(stack.address("browser"), timeout=None) as ch:
            stub = environment_pb2_grpc.EnvironmentServiceStub(ch)
            times: list[float] = []
            for ep in eps:
                times += await replay(stub, ep, steps)
        return _summary(times)
    finally:
        stack.stop()


BENCH_STARTS = Path(tempfile.gettempdir()) / "wm-bench-starts.jsonl"
DEFAULT_MODEL = Path(".webenv") / "worldmodel" / "model"


async def fidelity(records: list, model: str, a) -> dict:
    """The fidelity report of `model`, and with --reasoning-model the reasoning-injection comparison."""
    predictor = await load_world_model("transformers", model, threads=1)
    # the language model alone: here on its own, or below beside a reasoning-trained one (same steps, same data)
    res = await evaluate(records, predictor, rollout_episodes=32, compare_lm=not a.reasoning_model,
                         lm_limit=a.lm_limit)
    if a.reasoning_model:
        with_reasoning = await load_world_model("transformers", a.reasoning_model, threads=1, mode="lm")
        test_eps = episodes(r for r in records if r.split == "test")
        plain = await load_world_model("transformers", a.lm_model or model, threads=1, mode="lm", reason=False)
        models = {"lm_only (no reasoning data)": plain, "lm_only, reasoning data, reasoning off": with_reasoning}
        import copy

        on = copy.copy(with_reasoning)
        on.reason = True
        models["lm_only, reasoning data, reasoning on"] = on
        rs = await single_step(test_eps, models, a.lm_limit)
        res["reasoning_injection"] = {"model": a.reasoning_model, "without": a.lm_model or model,
                                      "transitions": rs["transitions"], "overall": rs["overall"]}
    return res


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", type=Path, default=Path("bench/results"))
    p.add_argument("--build", default="", help="build a model first with this preset (quick, standard, large)")
    p.add_argument("--model", default="", help="model directory to measure (instead of --build)")
    p.add_argument("--data", default="", help="the transitions the model was built from (with --model)")
    p.add_argument("--reasoning-model", default="", help="a model trained with --reasoning-fraction on the same data")
    p.add_argument("--lm-model", default="", help="the same model without reasoning examples (default: --model's)")
    p.add_argument("--lm-limit", type=int, default=300, help="held-out transitions for the language-model-only rows")
    p.add_argument("--latency-episodes", type=int, default=6)
    p.add_argument("--latency-steps", type=int, default=20)
    p.add_argument("--sites-count", type=int, default=200, help="the sites service's size the build used")
    p.add_argument("--workdir", type=Path, default=None)
    a = p.parse_args()
    report: dict = {}
    t0 = time.perf_counter()
    if a.build:
        work = a.workdir or Path(tempfile.mkdtemp(prefix="wm-bench-"))
        cmd = [str(Path(sys.executable).with_name("webenv")), "worldmodel", "build", "--out", str(work), "--preset", a.build]
        subprocess.run(cmd, check=True)
        model, data = str(work / "model"), work / "data" / "transitions.jsonl"
        report["build"] = {"command": " ".join(cmd), **json.loads((work / "model" / "build.json").read_text())}
    else:
        if not a.model and (DEFAULT_MODEL / "config.json").exists():  # `make bench` after `make worldmodel`
            a.model, a.data = str(DEFAULT_MODEL), str(DEFAULT_MODEL.parent / "data" / "transitions.jsonl")
        if not (a.model and a.data):
            p.error("give --build PRESET, or --model DIR and --data FILE (or run `make worldmodel` first)")
        model, data = a.model, Path(a.data)
        build = Path(model) / "build.json"
        if build.exists():
            report["build"] = json.loads(build.read_text())
    records = read_transitions([data])
    res = asyncio.run(fidelity(records, model, a))
    report["eval"] = res
    a.out.mkdir(parents=True, exist_ok=True)
    if res["rollout"]["per_step"]:
        plot_rollouts(res, a.out / "worldmodel-rollouts.png")

    eps = held_out_episodes(data, a.latency_episodes, a.latency_steps)
    BENCH_STARTS.write_text("".join(json.dumps({"url": ep[0].url, "state": ep[0].state, "links": ep[0].links}) + "\n" for ep in eps))
    sim = asyncio.run(simulated_latency_and_throughput(model, eps, a.latency_steps))
    report["simulated_step"] = sim["latency"]
    report["throughput"] = sim["throughput"]
    report["real_step"] = asyncio.run(real_latency(eps, a.latency_steps, a.sites_count))
    report["seconds"] = round(time.perf_counter() - t0, 1)
    (a.out / "worldmodel.json").write_text(json.dumps(report, indent=2))
    md = ["# worldmodel benchmark", "",
          "Command: `" + (report["build"]["command"] if "command" in report.get("build", {}) else
                         f".venv/bin/python services/worldmodel/bench.py --model {model} --data {data}"
                         + (f" --reasoning-model {a.reasoning_model}" if a.reasoning_model else "")
                         + (f" --lm-model {a.lm_model}" if a.lm_model else "")) + "`", ""]
    if "build" in report and "timings" in report["build"]:
        t = report["build"]["timings"]
        md.append("Build: " + ", ".join(f"{k.removesuffix('_s')} {v / 60:.1f} min" for k, v in t.items()) + ".")
        md.append("")
    md.append(to_markdown(res))
    md.append("![rollouts](worldmodel-rollouts.png)\n")
    if "reasoning_injection" in res:
        ri = res["reasoning_injection"]
        md += [f"Reasoning injection (WebWorld): the language model alone on the first {ri['transitions']} held-out "
               "transitions, trained without and with reasoning examples, the latter serving with reasoning off and on:", "",
               "| system | line F1 | exact match | URL accuracy |", "| --- | --- | --- | --- |"]
        md += [f"| {k} | {s['line_f1']:.3f} | {s['exact_match']:.3f} | {s['url_accuracy']:.3f} |" for k, s in ri["overall"].items()]
        md.append("")
    s, r = report["simulated_step"], report["real_step"]
    md += ["Step latency, the same recorded held-out actions replayed over gRPC on this machine, side by side:", "",
           "| environment | steps | p50 ms | mean ms | p90 ms |", "| --- | --- | --- | --- | --- |",
           f"| world model (simulated) | {s['steps']} | {s['p50_ms']} | {s['mean_ms']} | {s['p90_ms']} |",
           f"| browser farm (Chromium) | {r['steps']} | {r['p50_ms']} | {r['mean_ms']} | {r['p90_ms']} |", "",
           "Simulated steps/s on one StepStream, the same 8 held-out episodes replayed one session at a time vs 8 "
           "concurrent sessions: " + ", ".join(
               f"{v['concurrent_sessions']} at a time {v['steps_per_s']}" for v in report["throughput"].values())
           + f" (8 vs 1: {report['throughput'][8]['steps_per_s'] / max(report['throughput'][1]['steps_per_s'], 1e-9):.2f}x).", ""]
    (a.out / "worldmodel.md").write_text("\n".join(md) + "\n")
    print("\n".join(md))


if __name__ == "__main__":
    main()

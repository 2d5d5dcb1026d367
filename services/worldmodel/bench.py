"""World-model benchmark: collect -> train -> evaluate -> serve, with the figures the issue asks for.

    .venv/bin/python services/worldmodel/bench.py --out bench/results            # bounded smoke run (~8 min)
    .venv/bin/python services/worldmodel/bench.py --out bench/results --full     # 14-minute training run

Collects transitions with real Chromium over generated sites (held-out sites by name), trains the tiny
model from scratch on this CPU within the time budget, scores it against the copy-state and lookup-table
baselines on held-out sites, replays recorded episodes open-loop, and times a simulated step over gRPC
against the real browser step. Writes <out>/worldmodel.json and <out>/worldmodel.md. `--model DIR` skips
collection of the training set and training and evaluates an existing model instead (`--data` then too).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from dataclasses import asdict
from pathlib import Path

import grpc
from webenv.actions import parse_action
from webenv.v1 import environment_pb2, environment_pb2_grpc
from webenv.worldmodel.backends import load_backend
from webenv.worldmodel.collect import collect
from webenv.worldmodel.dataset import read_transitions
from webenv.worldmodel.evaluate import evaluate, to_markdown
from webenv.worldmodel.train import TrainConfig, train


async def served_step_latency(model_dir: str, data: Path, steps: int = 40) -> dict:
    """p50/mean of a simulated Step over a real gRPC channel, replaying recorded held-out actions."""
    from webenv.worldmodel.app import serving
    from webenv.worldmodel.config import Settings

    records = [r for r in read_transitions([data]) if r.split == "test"]
    settings = Settings(grpc_port=0, metrics_port=0, host="127.0.0.1", worldmodel_model_path=model_dir,
                        worldmodel_start_states=str(data), worldmodel_horizon=1000, log_json=False)
    lat: list[float] = []
    async with serving(settings) as (server, _, _):
        async with grpc.aio.insecure_channel(f"127.0.0.1:{server.port}") as ch:
            env = environment_pb2_grpc.EnvironmentServiceStub(ch)
            by_ep: dict[str, list] = {}
            for r in records:
                by_ep.setdefault(r.episode_id, []).append(r)
            for ep in by_ep.values():
                ep.sort(key=lambda r: r.step_index)
                sid = (await env.OpenSession(environment_pb2.OpenSessionRequest(start_url=ep[0].url))).session.session_id
                for r in ep:
                    t0 = time.perf_counter()
                    await env.Step(environment_pb2.StepRequest(session_id=sid, action=parse_action(r.action_text), step_index=-1))
                    lat.append(time.perf_counter() - t0)
                if len(lat) >= steps:
                    break
        await server.stop()
    return {"steps": len(lat), "p50_s": round(statistics.median(lat), 4), "mean_s": round(statistics.fmean(lat), 4)}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", type=Path, default=Path("bench/results"))
    p.add_argument("--full", action="store_true", help="full data set and a 14-minute training run")
    p.add_argument("--model", default="", help="evaluate this model instead of training one")
    p.add_argument("--data", default="", help="transitions JSONL (with --model)")
    p.add_argument("--rollouts", default="", help="transitions JSONL with long held-out episodes")
    p.add_argument("--workdir", type=Path, default=None)
    a = p.parse_args()
    work = a.workdir or Path(tempfile.mkdtemp(prefix="wm-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    report: dict = {"full": a.full}
    t0 = time.perf_counter()
    if a.model:
        data, model_dir = Path(a.data), a.model
    else:
        data = work / "transitions.jsonl"
        per_family, episodes = (10, 6) if a.full else (4, 4)
        stats = asyncio.run(collect(data, sites_per_family=per_family, episodes_per_site=episodes, steps=12))
        data.with_suffix(".stats.json").write_text(json.dumps(asdict(stats)))
        report["collect"] = asdict(stats)
        cfg = TrainConfig(data=[str(data)], out=str(work / "run"), max_steps=3000,
                          max_minutes=14.0 if a.full else 4.0, eval_every=50 if a.full else 40, augment_names=True)
        res = train(cfg, progress=sys.stderr.isatty())
        report["train"] = asdict(res)
        report["loss_curve"] = [json.loads(line) for line in (work / "run" / "metrics.jsonl").read_text().splitlines()
                                if "eval_loss" in line]
        model_dir = res.model_dir
    rollouts = read_transitions([a.rollouts]) if a.rollouts else None
    backend = load_backend("transformers", model_dir, threads=1)
    report["eval"] = evaluate(read_transitions([data]), backend, limit=300 if a.full else 120,
                              rollout_episodes=12 if a.full else 6, rollout_records=rollouts)
    stats_file = data.with_suffix(".stats.json")
    browser_p50 = json.loads(stats_file.read_text())["step_seconds_p50"] if stats_file.exists() else None
    report["served_step"] = asyncio.run(served_step_latency(model_dir, data))
    report["browser_step_p50_s"] = browser_p50
    report["seconds"] = round(time.perf_counter() - t0, 1)
    a.out.mkdir(parents=True, exist_ok=True)
    (a.out / "worldmodel.json").write_text(json.dumps(report, indent=2))
    md = ["# worldmodel benchmark", "", to_markdown(report["eval"], browser_p50),
          f"Simulated Step over gRPC: p50 {report['served_step']['p50_s'] * 1000:.0f} ms, mean {report['served_step']['mean_s'] * 1000:.0f} ms"
          + (f" vs real browser step p50 {browser_p50 * 1000:.0f} ms." if browser_p50 else ".")]
    if "train" in report:
        tr = report["train"]
        md.insert(2, f"Trained {tr['steps']} steps in {tr['elapsed_s'] / 60:.1f} min ({tr['parameters']:,} parameters); "
                     f"final eval loss {tr['eval_loss']:.3f}.\n")
    (a.out / "worldmodel.md").write_text("\n".join(md) + "\n")
    print("\n".join(md))


if __name__ == "__main__":
    main()

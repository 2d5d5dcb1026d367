"""Judge benchmark: deterministic verdicts/s (in-process and over gRPC, one core) and LLM verdict latency.

Run: .venv/bin/python services/judge/bench.py --out bench/results
Writes bench/results/judge.json and bench/results/judge.md. Bounded: about 1-2 minutes.

Workload: 30-step shop trajectories (cleaned HTML + AXTree per step, final observation, answer,
site state) graded against the 10-fact rubric of webenv.judge.examples (every deterministic kind).
Baseline, run side by side: the same criteria without the judge's caches (rubric compiled per
evaluation, HTML parsed per fact), i.e. what a straightforward per-fact judge does.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from webenv.judge.cache import VerdictCache
from webenv.judge.context import EvalContext
from webenv.judge.engine import Judge, to_result
from webenv.judge.examples import fact, shop_episode, task_for
from webenv.judge.llm import LlmJudge
from webenv.judge.rubric import _compile
from webenv.judge.verdict import answer_supported, assemble
from webenv.testing import free_port, wait_for_port
from webenv.v1 import common_pb2, judge_pb2, judge_pb2_grpc

STEPS = 30


def pin_one_core() -> str:
    """Pin this process to one CPU so verdicts/s means 'on one core'."""
    try:
        cpu = sorted(os.sched_getaffinity(0))[-1]
        os.sched_setaffinity(0, {cpu})
        return str(cpu)
    except (AttributeError, OSError):
        return "unpinned"


def workload(n: int, related: int = 4) -> list[tuple[common_pb2.Task, common_pb2.Trajectory]]:
    """n different episodes (half successful) with their 10-fact tasks."""
    out = []
    for i in range(n):
        ep = shop_episode(steps=STEPS, seed=i, success=i % 2 == 0, related=related)
        out.append((task_for(ep), ep.trajectory))
    return out


def baseline_verdict(task: common_pb2.Task, traj: common_pb2.Trajectory) -> common_pb2.Verdict:
    """The per-fact judge without caches: compile every time, fresh parse per fact."""
    facts, problems = _compile(task.rubric, 512)
    assert not problems
    results = []
    for cf in facts:
        assert cf.checker is not None
        results.append(to_result(cf, cf.checker(EvalContext(task, traj))))
    supported, _ = answer_supported(EvalContext(task, traj), needs_answer=True)
    return assemble(task.rubric, results, [not cf.group.optional for cf in facts], supported, False)


def rate(fn: Any, items: list[Any], seconds: float) -> tuple[float, int]:
    """Calls per second of fn over items, cycling, for about ``seconds``."""
    n = 0
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        task, traj = items[n % len(items)]
        fn(task, traj)
        n += 1
    return n / (time.perf_counter() - t0), n


def side_by_side(fn: Any, base: Any, items: list[Any], seconds: float, rounds: int = 6) -> tuple[float, float, int, int]:
    """Median rates of fn and base, measured in alternating short rounds (the machine is shared and noisy)."""
    a, b, na, nb = [], [], 0, 0
    for _ in range(rounds):
        r, n = rate(fn, items, seconds / rounds)
        a.append(r)
        na += n
        r, n = rate(base, items, seconds / rounds)
        b.append(r)
        nb += n
    return statistics.median(a), statistics.median(b), na, nb


async def grpc_rate(port: int, items: list[Any], seconds: float, concurrency: int) -> tuple[float, float]:
    """Verdicts/s and p50 latency (ms) against a judge server, with ``concurrency`` calls in flight."""
    from webenv.client import make_channel

    channel = make_channel(f"127.0.0.1:{port}", timeout=30)
    stub = judge_pb2_grpc.JudgeServiceStub(channel)
    reqs = [judge_pb2.EvaluateRequest(task=t, trajectory=tr) for t, tr in items]
    for r in reqs[:4]:
        await stub.Evaluate(r)  # warm up
    lat: list[float] = []
    done = 0
    t0 = time.perf_counter()

    async def worker(k: int) -> None:
        nonlocal done
        i = k
        while time.perf_counter() - t0 < seconds:
            s = time.perf_counter()
            await stub.Evaluate(reqs[i % len(reqs)])
            lat.append(time.perf_counter() - s)
            done += 1
            i += concurrency

    await asyncio.gather(*(worker(k) for k in range(concurrency)))
    elapsed = time.perf_counter() - t0
    await channel.close()
    return done / elapsed, statistics.median(lat) * 1000


def start_server(cpu: str) -> tuple[subprocess.Popen[bytes], int]:
    """`python -m webenv.judge` on a free port, pinned to one core (taskset) when possible."""
    port = free_port()
    env = {**os.environ, "WEBENV_GRPC_PORT": str(port), "WEBENV_METRICS_PORT": "0", "WEBENV_HOST": "127.0.0.1",
           "WEBENV_LOG_LEVEL": "WARNING", "WEBENV_JUDGE_LLM_BACKEND": "none"}
    cmd = [sys.executable, "-m", "webenv.judge"]
    if cpu != "unpinned" and os.path.exists("/usr/bin/taskset"):
        other = str((int(cpu) + 1) % os.cpu_count()) if (os.cpu_count() or 1) > 1 else cpu
        cmd = ["/usr/bin/taskset", "-c", other, *cmd]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    wait_for_port(port, timeout=60)
    return proc, port


async def llm_latency(reps: int) -> dict[str, Any]:
    """Latency of a verdict with 2 LLM facts (tiny local model) + 8 deterministic, uncached and cached."""
    from webenv.judge.examples import build_tiny_judge_model
    from webenv.llm.transformers_backend import TransformersBackend

    with tempfile.TemporaryDirectory() as d:
        build_tiny_judge_model(d)
        backend = TransformersBackend(d, device="cpu", dtype="float32")
        judge = Judge(llm=LlmJudge(backend, VerdictCache(1024), constrained=True, max_tokens=8, timeout_seconds=60))
        ep = shop_episode(steps=STEPS, seed=1)
        task = task_for(ep)
        g = task.rubric.groups[1]
        del g.facts[-2:]
        g.facts.append(fact("l1", "The cart page lists the product", llm=common_pb2.LlmCriterion()))
        g.facts.append(fact("l2", "The order confirmation is shown", llm=common_pb2.LlmCriterion()))
        uncached, cached = [], []
        for i in range(reps):
            ep.trajectory.episode_id = f"ep-{i}"
            ep.trajectory.final_observation.title = f"Cart {i}"  # new evidence -> cache miss
            opts = judge_pb2.JudgeOptions(allow_llm=True)
            ev = await judge.evaluate(task, ep.trajectory, opts)
            assert not ev.cached
            uncached.append(ev.latency_seconds)
            ev = await judge.evaluate(task, ep.trajectory, opts)
            assert ev.cached
            cached.append(ev.latency_seconds)
        return {
            "model": "tiny llama (2 layers, hidden 64), transformers CPU, constrained verdict + 8 reason tokens",
            "llm_facts": 2,
            "uncached_p50_ms": round(statistics.median(uncached) * 1000, 2),
            "cached_p50_ms": round(statistics.median(cached) * 1000, 3),
            "speedup": round(statistics.median(uncached) / statistics.median(cached), 1),
            "reps": reps,
        }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", default="bench/results")
    parser.add_argument("--seconds", type=float, default=4.0, help="measurement window per case")
    parser.add_argument("--llm-reps", type=int, default=5)
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    cpu = pin_one_core()
    items = workload(16)
    judge = Judge()
    for task, traj in items:  # same verdicts from both implementations
        a, b = judge.evaluate_deterministic(task, traj), baseline_verdict(task, traj)
        assert [r.outcome for r in a.results] == [r.outcome for r in b.results]
    judge_rate, base_rate, n_judge, n_base = side_by_side(judge.evaluate_deterministic, baseline_verdict, items,
                                                          args.seconds)
    heavy = workload(8, related=150)
    heavy_kb = statistics.mean(tr.ByteSize() for _, tr in heavy) / 1024
    heavy_rate, heavy_base, _, _ = side_by_side(judge.evaluate_deterministic, baseline_verdict, heavy, args.seconds)
    proc, port = start_server(cpu)
    try:
        grpc_1, p50_1 = asyncio.run(grpc_rate(port, items, args.seconds, 1))
        grpc_8, p50_8 = asyncio.run(grpc_rate(port, items, args.seconds, 8))
    finally:
        proc.terminate()
        proc.wait(timeout=20)
    llm = asyncio.run(llm_latency(args.llm_reps))
    traj_kb = statistics.mean(tr.ByteSize() for _, tr in items) / 1024
    result = {
        "service": "judge",
        "machine": {"cpus": os.cpu_count(), "pinned_cpu": cpu, "python": platform.python_version()},
        "workload": {"steps": STEPS, "facts": 10, "trajectory_kb": round(traj_kb, 1), "episodes": len(items)},
        "deterministic": {
            "in_process_verdicts_per_s": round(judge_rate, 1),
            "baseline_verdicts_per_s": round(base_rate, 1),
            "speedup_vs_baseline": round(judge_rate / base_rate, 2),
            "in_process_evaluations": n_judge,
            "grpc_verdicts_per_s_concurrency_1": round(grpc_1, 1),
            "grpc_p50_ms_concurrency_1": round(p50_1, 2),
            "grpc_verdicts_per_s_concurrency_8": round(grpc_8, 1),
            "grpc_p50_ms_concurrency_8": round(p50_8, 2),
            "target_verdicts_per_s": 1000,
            "baseline_evaluations": n_base,
            "heavy_trajectory_kb": round(heavy_kb, 1),
            "heavy_in_process_verdicts_per_s": round(heavy_rate, 1),
            "heavy_baseline_verdicts_per_s": round(heavy_base, 1),
        },
        "llm": llm,
    }
    (out / "judge.json").write_text(json.dumps(result, indent=2))
    d = result["deterministic"]
    md = [
        "# judge benchmark",
        "",
        f"Workload: {STEPS}-step shop trajectories (~{traj_kb:.0f} KB each: HTML + AXTree per step), 10-fact rubric "
        "(url, page with selector/condition, category, answer, site state, element state, env reward). "
        f"Client pinned to CPU {cpu}; gRPC server a `python -m webenv.judge` process on another core.",
        "",
        "| case | verdicts/s | p50 ms |",
        "| --- | --- | --- |",
        f"| in-process, judge (rubric + parse caches) | {d['in_process_verdicts_per_s']} | |",
        f"| in-process, baseline (no caches) | {d['baseline_verdicts_per_s']} | |",
        f"| gRPC, 1 in flight | {d['grpc_verdicts_per_s_concurrency_1']} | {d['grpc_p50_ms_concurrency_1']} |",
        f"| gRPC, 8 in flight | {d['grpc_verdicts_per_s_concurrency_8']} | {d['grpc_p50_ms_concurrency_8']} |",
        f"| in-process, judge, heavy pages (~{heavy_kb:.0f} KB/trajectory, ~25 KB HTML/page) | "
        f"{d['heavy_in_process_verdicts_per_s']} | |",
        f"| in-process, baseline, heavy pages | {d['heavy_baseline_verdicts_per_s']} | |",
        "",
        f"Speed-up of the judge over the baseline: {d['speedup_vs_baseline']}x (target: >= 1,000 verdicts/s).",
        "",
        f"LLM-judged verdict (2 LLM facts + 8 deterministic, {llm['model']}): "
        f"p50 {llm['uncached_p50_ms']} ms uncached, {llm['cached_p50_ms']} ms cached ({llm['speedup']}x).",
        "",
    ]
    (out / "judge.md").write_text("\n".join(md))
    print("\n".join(md))


if __name__ == "__main__":
    main()

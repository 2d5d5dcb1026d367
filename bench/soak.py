"""Soak: the local stack running real episodes at 32 sessions for a long time, memory sampled.

The stack is started as ``webenv up`` does (sites, browser farm on real Chromium, policy, judge, collector as
processes, free loopback ports, default settings). The collector runs real episodes without pause: one long run
(``--episodes`` synthetic tasks, the random policy, horizon 8) at ``--concurrency`` (32) episodes in flight, so
the farm holds ~32 sessions throughout (another run follows if it ends). Every ``--interval`` seconds the script samples the RSS of every service process, the
farm's whole process tree (its Chromium processes included), the number of Chromium processes, the farm's open
sessions and the collector's finished episodes.

Verdict: after a warm-up (``--warmup`` seconds: caches, warm pools and the first browser recycle fill up), the
mean RSS of the last fifth of the samples may exceed the mean of the first fifth after warm-up by at most
``--max-growth`` (10%) for every service process. The farm's tree (its Chromium processes) follows the number
of open sessions (~150 MB each), so its growth is the time trend of a least-squares fit
``tree = a + b * sessions + c * t`` over the run, ``c * duration`` relative to the mean tree, with the same
bound. Once the stack is stopped no Chromium process the farm ever started may still be alive (no leaks).

    .venv/bin/python -m bench.soak --minutes 30 --out bench/results        # the full soak (30 minutes)
    .venv/bin/python -m bench.soak --minutes 6                             # shortened, on a busy machine

Writes bench/results/soak.json and soak.md. Not part of ``make bench`` or CI: it takes as long as it is told.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import psutil
from webenv.cli.stack import Stack
from webenv.client import make_channel
from webenv.v1 import browser_pb2, browser_pb2_grpc, collector_pb2, collector_pb2_grpc, common_pb2

MB = 1024 * 1024


def sample(st: Stack, chromium_seen: dict[int, float]) -> dict:
    """RSS (MB) of each service, the farm's tree and its Chromium processes (remembered for the leak check)."""
    out: dict = {"t": time.time(), "rss_mb": {}}
    for name, proc in st.procs.items():
        try:
            out["rss_mb"][name] = round(psutil.Process(proc.pid).memory_info().rss / MB, 1)
        except psutil.NoSuchProcess:
            out["rss_mb"][name] = None
    farm = psutil.Process(st.procs["browser"].pid)
    tree, chromium = farm.memory_info().rss, 0
    for kid in farm.children(recursive=True):
        try:
            tree += kid.memory_info().rss
            if "chrom" in kid.name().lower():
                chromium += 1
                chromium_seen.setdefault(kid.pid, kid.create_time())
        except psutil.NoSuchProcess:
            continue
    out["farm_tree_mb"] = round(tree / MB, 1)
    out["chromium_processes"] = chromium
    return out


async def keep_running(stub, args: argparse.Namespace, stop: asyncio.Event, counts: dict) -> None:
    """One run after another until ``stop``: real episodes, ``concurrency`` at a time."""
    seed = 0
    while not stop.is_set():
        seed += 1
        spec = collector_pb2.RunSpec(policy="random", episodes=args.episodes, concurrency=args.concurrency,
                                     seed=seed, name=f"soak-{seed}", max_retries=1,
                                     horizons=collector_pb2.Horizons(easy=8, medium=8, hard=8))
        spec.tasks.sources.append(common_pb2.TASK_SOURCE_SYNTHETIC)
        run = (await stub.StartRun(collector_pb2.StartRunRequest(spec=spec), timeout=120)).run
        counts["runs"] += 1
        async for resp in stub.WatchRun(collector_pb2.WatchRunRequest(run_id=run.run_id)):
            counts["finished_in_run"] = resp.run.counts.finished
            counts["errored_in_run"] = resp.run.counts.errored
            for ep in resp.finished:
                if ep.error:
                    key = ep.error[:120]
                    counts["errors"][key] = counts["errors"].get(key, 0) + 1
            if stop.is_set():
                await stub.StopRun(collector_pb2.StopRunRequest(run_id=run.run_id), timeout=120)
                break
        counts["finished"] += counts.pop("finished_in_run", 0)
        counts["errored"] += counts.pop("errored_in_run", 0)


async def soak(args: argparse.Namespace, data: Path) -> dict:
    st = Stack(data, free_ports=True, extra_env={"WEBENV_LOG_JSON": "false",
                                                 "WEBENV_MAX_RUN_EPISODES": str(max(args.episodes, 10_000))})
    st.start(timeout=180)
    chromium_seen: dict[int, float] = {}
    samples: list[dict] = []
    counts: dict = {"runs": 0, "finished": 0, "errored": 0, "errors": {}}
    stop = asyncio.Event()
    try:
        async with make_channel(st.address("collector"), timeout=None) as ch, \
                make_channel(st.address("browser"), timeout=None) as farm_ch:
            stub = collector_pb2_grpc.CollectorServiceStub(ch)
            farm = browser_pb2_grpc.BrowserFarmServiceStub(farm_ch)
            worker = asyncio.create_task(keep_running(stub, args, stop, counts))
            t0 = time.monotonic()
            while time.monotonic() - t0 < args.minutes * 60:
                await asyncio.sleep(args.interval)
                if worker.done():
                    worker.result()  # a failed run loop fails the soak loudly
                s = sample(st, chromium_seen)
                cap = await farm.GetCapacity(browser_pb2.GetCapacityRequest(), timeout=30)
                s["sessions"] = cap.active_sessions
                s["episodes"] = counts["finished"] + counts.get("finished_in_run", 0)
                s["elapsed"] = round(time.monotonic() - t0)
                samples.append(s)
                print(f"  {s['elapsed']:>5}s sessions {s['sessions']:>2} episodes {s['episodes']:>5} "
                      f"chromium {s['chromium_processes']:>2} farm tree {s['farm_tree_mb']:>7} MB  "
                      + " ".join(f"{k} {v}" for k, v in s["rss_mb"].items()), flush=True)
            stop.set()
            await asyncio.wait_for(worker, 180)
    finally:
        stop.set()
        st.stop()
    await asyncio.sleep(2)
    leaked = [pid for pid, created in chromium_seen.items() if _alive(pid, created)]
    return {"samples": samples, "counts": counts, "chromium_seen": len(chromium_seen), "leaked_chromium": leaked}


def _alive(pid: int, created: float) -> bool:
    try:
        p = psutil.Process(pid)
        return abs(p.create_time() - created) < 1 and p.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def verdict(res: dict, args: argparse.Namespace) -> dict:
    samples = [s for s in res["samples"] if s["elapsed"] > args.warmup]
    fifth = max(len(samples) // 5, 1)
    series = {name: [s["rss_mb"][name] for s in samples] for name in (samples[0]["rss_mb"] if samples else {})}
    growth = {}
    for name, values in series.items():
        values = [v for v in values if v is not None]
        if len(values) < 2:
            continue
        first, last = statistics.mean(values[:fifth]), statistics.mean(values[-fifth:])
        growth[name] = {"first_mb": round(first, 1), "last_mb": round(last, 1), "max_mb": max(values),
                        "growth": round(last / first - 1, 4)}
    if len(samples) >= 3:  # the farm's tree: time trend with the open sessions held constant
        tree = np.array([s["farm_tree_mb"] for s in samples])
        x = np.column_stack([np.ones(len(samples)), [s["sessions"] for s in samples], [s["elapsed"] for s in samples]])
        (a, b, c), *_ = np.linalg.lstsq(x, tree, rcond=None)
        span = samples[-1]["elapsed"] - samples[0]["elapsed"]
        growth["farm tree (with Chromium), time trend at equal sessions"] = {
            "first_mb": round(float(tree[:fifth].mean()), 1), "last_mb": round(float(tree[-fifth:].mean()), 1),
            "max_mb": float(tree.max()), "growth": round(float(c * span / tree.mean()), 4),
            "mb_per_session": round(float(b), 1)}
    ok = bool(growth) and all(g["growth"] <= args.max_growth for g in growth.values()) and not res["leaked_chromium"]
    sessions = [s["sessions"] for s in samples]
    return {"growth": growth, "ok": ok, "samples_after_warmup": len(samples),
            "sessions_mean": round(statistics.mean(sessions), 1) if sessions else 0,
            "chromium_min_max": [min((s["chromium_processes"] for s in samples), default=0),
                                 max((s["chromium_processes"] for s in samples), default=0)]}


def markdown(result: dict) -> str:
    v, args = result["verdict"], result["args"]
    lines = [f"# Soak ({result['when']})", "",
             f"`{result['command']}` - {args['minutes']} minutes"
             + (" (**shortened**: the full soak is `--minutes 30`)" if args["minutes"] < 30 else ""), "",
             f"Verdict: **{'pass' if v['ok'] else 'FAIL'}** (growth <= {args['max_growth']:.0%} for every process "
             f"after a {args['warmup']} s warm-up, no leaked Chromium process).", "",
             f"Episodes finished: {result['counts']['finished']} in {result['counts']['runs']} runs "
             f"({result['counts']['errored']} errored); farm sessions open on average {v['sessions_mean']} "
             f"(concurrency {args['concurrency']}); Chromium processes {v['chromium_min_max'][0]}-"
             f"{v['chromium_min_max'][1]}, {result['chromium_seen']} seen in all, "
             f"{len(result['leaked_chromium'])} alive after the stack stopped.", "",
             "Episode errors (first 120 characters, count): "
             + ("; ".join(f"`{k}` x{v}" for k, v in sorted(result["counts"]["errors"].items(), key=lambda kv: -kv[1])[:3])
                or "none"), "",
             "| process | RSS first fifth (MB) | RSS last fifth (MB) | max (MB) | growth |", "| --- | --- | --- | --- | --- |"]
    for name, g in v["growth"].items():
        lines.append(f"| {name} | {g['first_mb']} | {g['last_mb']} | {g['max_mb']} | {g['growth']:+.1%} |")
    lines += ["", "Samples (every " f"{args['interval']} s; RSS MB):", "",
              "| s | sessions | episodes | Chromium | farm tree | " + " | ".join(result["samples"][0]["rss_mb"]) + " |",
              "| --- | --- | --- | --- | --- | " + " | ".join("---" for _ in result["samples"][0]["rss_mb"]) + " |"]
    for s in result["samples"]:
        lines.append(f"| {s['elapsed']} | {s['sessions']} | {s['episodes']} | {s['chromium_processes']} | "
                     f"{s['farm_tree_mb']} | " + " | ".join(str(x) for x in s["rss_mb"].values()) + " |")
    lines += ["", result["note"], ""]
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--minutes", type=float, default=30.0)
    ap.add_argument("--concurrency", type=int, default=32, help="episodes (farm sessions) in flight")
    ap.add_argument("--episodes", type=int, default=100_000, help="episodes per run (another run follows if it ends)")
    ap.add_argument("--interval", type=float, default=15.0, help="seconds between samples")
    ap.add_argument("--warmup", type=float, default=120.0, help="seconds left out of the growth check")
    ap.add_argument("--max-growth", type=float, default=0.10)
    ap.add_argument("--out", default="bench/results")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        res = asyncio.run(soak(args, Path(d)))
    result = {
        "when": datetime.now(UTC).isoformat(timespec="seconds"), "args": vars(args),
        "command": f"python -m bench.soak --minutes {args.minutes:g} --concurrency {args.concurrency} "
                   f"--episodes {args.episodes} --interval {args.interval:g} --warmup {args.warmup:g}",
        **res,
        "note": ("Random-policy episodes (horizon 8) on synthetic tasks, real Chromium, chDB store, judge; all on "
                 "one shared 2-core machine, so episodes are slow and the figures are what this machine gives. RSS "
                 "is of each service's Python process; the farm tree adds its Chromium processes, whose count moves "
                 "as the farm recycles browsers (every WEBENV_FARM_CONTEXTS_PER_BROWSER contexts)."),
    }
    result["verdict"] = verdict(res, args)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "soak.json").write_text(json.dumps(result, indent=2))
    (out / "soak.md").write_text(markdown(result))
    print(markdown(result))
    raise SystemExit(0 if result["verdict"]["ok"] else 1)


if __name__ == "__main__":
    main()

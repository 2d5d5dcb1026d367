"""Abuse benchmark: the local stack under a seeded fuzz, ListRuns at 1/30/300 stored runs, and the
memory each service keeps afterwards; optionally the same against a baseline checkout, side by side.

For each tree (this one, and ``--baseline-src DIR`` when given) the script starts sites, the browser farm,
policy, judge and collector as processes on free loopback ports (the launcher of ``webenv up``), then:

1. ListRuns(page_size=5) and GetRun latency (median of 3) once 1, 30 and 300 runs are stored (each run started
   with one episode and stopped at once, so the store and the collector's memory hold 300 real runs);
2. RSS of every service (the farm also with its Chromium processes), then ``--per-method`` fuzzed calls over the
   RPCs of every gRPC service the tree has (``webenv.fuzz``, seed ``--seed``), every run the fuzz started stopped, then RSS after 8, 20 and 60 s
   idle (the issue measured after 8 s; the embedded store's own memory after inserts decays over tens of seconds);
3. calls that ended UNKNOWN/INTERNAL or with an unbounded message, by RPC.

    .venv/bin/python -m bench.abuse --baseline-src /path/to/old/checkout --out bench/results

Not part of ``make bench`` (it needs two trees to compare and several minutes on a 2-core machine); its report
is committed as bench/results/abuse.md.
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

import psutil
from webenv import fuzz
from webenv.cli.stack import Stack
from webenv.client import make_channel
from webenv.v1 import (
    browser_pb2,
    browser_pb2_grpc,
    collector_pb2,
    collector_pb2_grpc,
)

SERVICES = {name: fuzz.SERVED_BY[name] for name in ("browser", "sites", "policy", "judge", "collector", "trainer")}
MB = 1024 * 1024


def memory(st: Stack) -> dict[str, dict]:
    """RSS (MB) of each service process, and of the farm's whole process tree with its Chromium count."""
    out = {}
    for name, proc in st.procs.items():
        try:
            p = psutil.Process(proc.pid)
            kids = p.children(recursive=True)
            tree = p.memory_info().rss + sum(k.memory_info().rss for k in kids if k.is_running())
            out[name] = {"rss_mb": round(p.memory_info().rss / MB), "tree_mb": round(tree / MB),
                         "chromium": sum(1 for k in kids if "chrom" in k.name().lower())}
        except psutil.NoSuchProcess:
            out[name] = {"rss_mb": None, "tree_mb": None, "chromium": 0}
    return out


async def timed(call, n: int = 3) -> float:
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        await call()
        times.append(time.perf_counter() - t0)
    return round(statistics.median(times) * 1000, 1)


async def list_runs_scaling(stub, sizes: list[int]) -> list[dict]:
    """Stored runs: start one-episode runs and stop them at once; time ListRuns and GetRun at each size."""
    spec = collector_pb2.RunSpec(policy="oracle", episodes=1, task_limit=1, concurrency=1)
    have, first, out = 0, "", []
    for size in sizes:
        while have < size:
            run = (await stub.StartRun(collector_pb2.StartRunRequest(spec=spec), timeout=120)).run
            await stub.StopRun(collector_pb2.StopRunRequest(run_id=run.run_id), timeout=120)
            first = first or run.run_id
            have += 1
        one = 1 if size >= 300 else 3  # the baseline takes ~0.3 s per stored run: 300 runs, one call
        list_ms = await timed(lambda: stub.ListRuns(collector_pb2.ListRunsRequest(page_size=5), timeout=600), one)
        get = collector_pb2.GetRunRequest(run_id=first)
        get_ms = await timed(lambda get=get: stub.GetRun(get, timeout=60))
        out.append({"stored_runs": size, "list_runs_ms": list_ms, "get_run_ms": get_ms})
        print(f"    {size} runs: ListRuns {list_ms} ms, GetRun {get_ms} ms", flush=True)
    return out


async def stop_everything(stub) -> int:
    """Stop every live run (the fuzz may have started some); returns how many."""
    stopped = 0
    resp = await stub.ListRuns(collector_pb2.ListRunsRequest(page_size=500), timeout=600)
    for run in resp.runs:
        if run.state in (collector_pb2.RUN_STATE_PENDING, collector_pb2.RUN_STATE_RUNNING):
            await stub.StopRun(collector_pb2.StopRunRequest(run_id=run.run_id), timeout=120)
            stopped += 1
    return stopped


def services_in(src: str | None) -> tuple[str, ...]:
    """The fuzzed services a tree has (an older checkout may predate some)."""
    root = Path(src) if src else Path(__file__).resolve().parents[1]
    return tuple(n for n in SERVICES if (root / "services" / n).is_dir())


def service_env(label: str, src: str | None, tmp: Path) -> dict[str, str]:
    env = {"WEBENV_LOG_JSON": "false", "WEBENV_EXPORT_ROOT": str(tmp / label / "exports")}
    if src:
        env["PYTHONPATH"] = ":".join(str(p) for p in sorted(Path(src).glob("services/*/src")))
    return env


async def measure(label: str, src: str | None, args: argparse.Namespace, tmp: Path) -> dict:
    env = service_env(label, src, tmp)
    st = Stack(tmp / label, free_ports=True, extra_env=env)
    print(f"== {label} ({src or 'this tree'})", flush=True)
    names = services_in(src)
    st.start(names, timeout=180)
    try:
        async with make_channel(st.address("collector"), timeout=None) as ch:
            stub = collector_pb2_grpc.CollectorServiceStub(ch)
            print("  ListRuns:", flush=True)
            scaling = await list_runs_scaling(stub, args.runs)
        await asyncio.sleep(8)
        before = memory(st)
        per_method = args.per_method
        fuzzer = fuzz.Fuzzer(args.seed)
        report = fuzz.Report()
        t0 = time.monotonic()
        for name in names:
            async with make_channel(st.address(name), timeout=None) as ch:
                for service in SERVICES[name]:
                    part = await fuzz.fuzz_service(ch, service, fuzzer, per_method=per_method, deadline=30)
                    report.outcomes += part.outcomes
                    print(f"  fuzzed {service.name}: {part.counts()}", flush=True)
        fuzz_seconds = time.monotonic() - t0
        async with make_channel(st.address("browser"), timeout=None) as ch:
            await browser_pb2_grpc.BrowserFarmServiceStub(ch).Drain(browser_pb2.DrainRequest(draining=False))
        async with make_channel(st.address("collector"), timeout=None) as ch:
            stub = collector_pb2_grpc.CollectorServiceStub(ch)
            stopped = await stop_everything(stub)
            after_list_ms = await timed(lambda: stub.ListRuns(collector_pb2.ListRunsRequest(page_size=5), timeout=600), 1)
        await asyncio.sleep(8)
        after8 = memory(st)
        await asyncio.sleep(12)
        after20 = memory(st)
        await asyncio.sleep(40)
        after60 = memory(st)
        failures: dict[str, int] = {}
        for o in report.failures():
            failures[f"{o.method} {o.code.name}"] = failures.get(f"{o.method} {o.code.name}", 0) + 1
        codes: dict[str, int] = {}
        for o in report.outcomes:
            codes[o.code.name] = codes.get(o.code.name, 0) + 1
        return {
            "tree": src or "this tree", "services": list(names), "list_runs": scaling, "calls": len(report.outcomes),
            "fuzz_seconds": round(fuzz_seconds, 1), "codes": codes, "failures": failures,
            "example_failures": [f"{o.method} {o.code.name}: {o.details[:160]}" for o in report.failures()[:8]],
            "runs_stopped_after_fuzz": stopped, "list_runs_after_fuzz_ms": after_list_ms,
            "memory": {"before": before, "after_8s": after8, "after_20s": after20, "after_60s": after60}, "dead": st.dead(),
        }
    finally:
        st.stop()


def markdown(result: dict) -> str:
    trees = result["trees"]
    lines = [f"# Abuse benchmark ({result['when']})", "",
             f"`{result['command']}`", "",
             "## ListRuns (page_size 5) and GetRun, median ms, by runs stored", "",
             "| stored runs | " + " | ".join(f"ListRuns {t['label']} | GetRun {t['label']}" for t in trees) + " |",
             "| --- | " + " | ".join("--- | ---" for _ in trees) + " |"]
    for i, size in enumerate(result["runs"]):
        cells = []
        for t in trees:
            row = t["list_runs"][i]
            cells += [str(row["list_runs_ms"]), str(row["get_run_ms"])]
        lines.append(f"| {size} | " + " | ".join(cells) + " |")
    lines += ["", f"## Fuzz: {result['per_method']} hostile messages and one undecodable request per RPC (seed {result['seed']})", "",
              "| | " + " | ".join(t["label"] for t in trees) + " |", "| --- | " + " | ".join("---" for _ in trees) + " |",
              "| services fuzzed | " + " | ".join(", ".join(t["services"]) for t in trees) + " |",
              "| calls | " + " | ".join(str(t["calls"]) for t in trees) + " |",
              "| seconds | " + " | ".join(str(t["fuzz_seconds"]) for t in trees) + " |",
              "| UNKNOWN / INTERNAL / unbounded calls | " + " | ".join(str(sum(t["failures"].values())) for t in trees) + " |",
              "| runs left running, stopped after the fuzz | " + " | ".join(str(t["runs_stopped_after_fuzz"]) for t in trees) + " |",
              "| ListRuns after the fuzz (ms) | " + " | ".join(str(t["list_runs_after_fuzz_ms"]) for t in trees) + " |",
              "| services dead | " + " | ".join(", ".join(t["dead"]) or "none" for t in trees) + " |"]
    lines += ["", "## RSS (MB) before the fuzz -> 8 s / 20 s / 60 s after it (farm: its process, and with Chromium)", "",
              "| service | " + " | ".join(t["label"] for t in trees) + " |", "| --- | " + " | ".join("---" for _ in trees) + " |"]
    for name in SERVICES:
        cells = []
        for t in trees:
            m = t["memory"]
            if name not in m["before"]:
                cells.append("(not in this tree)")
                continue
            key = "rss_mb"
            cell = (f"{m['before'][name][key]} -> {m['after_8s'][name][key]} / {m['after_20s'][name][key]} / "
                    f"{m['after_60s'][name][key]}")
            if name == "browser":
                cell += (f" (tree {m['before'][name]['tree_mb']} -> {m['after_60s'][name]['tree_mb']}, "
                         f"Chromium processes {m['before'][name]['chromium']} -> {m['after_60s'][name]['chromium']})")
            cells.append(cell)
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    for t in trees:
        if t["failures"]:
            lines += ["", f"Failures in {t['label']}: " + json.dumps(t["failures"]),
                      *(f"- {e}" for e in t["example_failures"])]
    lines += ["", result["note"], ""]
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="bench/results")
    ap.add_argument("--baseline-src", default="", help="a checkout whose services/*/src the baseline runs")
    ap.add_argument("--per-method", type=int, default=100, help="hostile messages per RPC (plus one undecodable)")
    ap.add_argument("--seed", type=int, default=18)
    ap.add_argument("--runs", default="1,30,300", help="stored-run counts at which ListRuns is timed")
    args = ap.parse_args()
    args.runs = [int(x) for x in args.runs.split(",")]
    trees = []
    with tempfile.TemporaryDirectory() as d:
        for label, src in (("baseline", args.baseline_src), ("this tree", "")):
            if label == "baseline" and not src:
                continue
            res = asyncio.run(measure(label.replace(" ", "-"), src or None, args, Path(d)))
            trees.append({"label": label, **res})
    result = {
        "when": datetime.now(UTC).isoformat(timespec="seconds"), "seed": args.seed, "runs": args.runs,
        "per_method": args.per_method,
        "command": "python -m bench.abuse " + " ".join(
            f"--{k.replace('_', '-')} {','.join(map(str, v)) if isinstance(v, list) else v}"
            for k, v in vars(args).items() if k != "out" and v),
        "trees": trees,
        "note": ("Each run in the ListRuns part has one planned episode and is stopped at once, so the runs are real "
                 "(stored, and owned by the collector). RSS is of each service's Python process; the farm's tree "
                 "adds its Chromium processes. Every run the fuzz started is stopped before the idle measurements. "
                 "Figures are from a shared 2-core machine: latencies vary by tens of ms between runs."),
    }
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "abuse.json").write_text(json.dumps(result, indent=2))
    (out / "abuse.md").write_text(markdown(result))
    print(markdown(result))


if __name__ == "__main__":
    main()

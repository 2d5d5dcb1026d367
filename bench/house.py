"""Before and after a restructuring, interleaved: the browser farm of two source trees, side by side.

    .venv/bin/python bench/house.py --before ../old-checkout --after . --out bench/results [--seconds 8] [--ks 1,4]

A change to the code every step goes through (the EnvironmentService lifecycle moving into the sdk's
`webenv.envservice`) must not cost the farm anything. Two farms run at once, identical but for the source tree their
`python -m webenv.browser` imports (PYTHONPATH = that tree's services/*/src, so the process runs that tree's farm,
sdk and stubs), on the farm bench's page (services/browser/bench.py). Per K, the unary Step loop and the StepStream
loop each run before, after, after, before for seconds/2 at a time, so a drift of the machine's load hits both
trees alike, and report totals with the farm process's own CPU per step: on a shared 2-core machine CPU per step
is the steadier figure, steps/s the one a user sees. OpenSession latency is measured on both, alternately. A tree
of the earlier step-index rule (before 92f325b: an unset index was 0, -1 no check) gets its unchecked steps as -1.

The collector's half (``--collector-levels``, default 100,1000; empty to skip): the orchestrator bench
(bench/orchestrator.py, this tree's script: zero-cost environment and policy, the real judge, the collector with its
chDB store in the bench's process) runs once per tree and level in the same order, before, after, after, before,
with PYTHONPATH set to that tree, so its collector, judge, sdk and stubs are that tree's. Reported per level:
episodes/s, steps/s and the collector's CPU per step (its store writer included), summed over the two passes.
Writes OUT/house.json and OUT/house.md.
"""

from __future__ import annotations

import argparse
import asyncio
import http.server
import importlib.util
import json
import os
import statistics
import sys
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "services" / "browser"))  # the farm bench's helpers (bgym, speed, ... beside it)
_spec = importlib.util.spec_from_file_location("farm_bench", ROOT / "services" / "browser" / "bench.py")
fb = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(fb)

from webenv.client import make_channel  # noqa: E402
from webenv.v1 import environment_pb2, environment_pb2_grpc  # noqa: E402


def tree_path(tree: Path) -> str:
    """PYTHONPATH that makes a process import ``tree``'s distributions (services/*/src and, where the tree has them,
    the libraries' libs/*/src) before the installed ones."""
    srcs = sorted([*(tree / "services").glob("*/src"), *(tree / "libs").glob("*/src")])
    if not srcs or not (tree / "services" / "sdk" / "src" / "webenv" / "v1").is_dir():
        raise SystemExit(f"{tree}: no services/*/src with generated stubs (services/sdk/src/webenv/v1: make protos)")
    return os.pathsep.join(str(p.resolve()) for p in srcs)


def unset_means_no_check(tree: Path) -> bool:
    """Whether the tree's contract has StepRequest.step_index optional (unset: no check; since 92f325b). Before,
    an unset index was 0, a checked one, and -1 meant no check."""
    proto = (tree / "protos" / "webenv" / "v1" / "environment.proto").read_text()
    return "optional int32 step_index = 5;" in proto


class NoCheckAsMinusOne:
    """An EnvironmentService stub for a farm of the earlier step-index rule: a step sent without an index (the
    bench's "no check") goes out as step_index=-1, which that farm reads as no check. Everything else passes."""

    def __init__(self, stub: Any) -> None:
        self._stub = stub

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stub, name)

    @staticmethod
    def _legacy(req: Any) -> Any:
        if not req.HasField("step_index"):
            req.step_index = -1
        return req

    def Step(self, req: Any, **kw: Any) -> Any:
        return self._stub.Step(self._legacy(req), **kw)

    def StepStream(self, requests: Any, **kw: Any) -> Any:
        async def mapped() -> Any:
            async for r in requests:
                if r.HasField("step"):
                    self._legacy(r.step)
                yield r

        return self._stub.StepStream(mapped(), **kw)


async def compare(sites_addr: str, trees: dict[str, Path], ks: list[int], seconds: float, opens: int) -> dict[str, Any]:
    url = "http://bench.web.test/products"
    farms = {name: fb.FarmProc(sites_addr, max(ks) + 8, {"PYTHONPATH": tree_path(t)}) for name, t in trees.items()}
    out: dict[str, Any] = {"points": [], "open": {}}
    try:
        for f in farms.values():
            await f.ready()
        channels = {n: make_channel(f.address, timeout=120) for n, f in farms.items()}
        stubs = {n: environment_pb2_grpc.EnvironmentServiceStub(c) for n, c in channels.items()}
        stubs = {n: s if unset_means_no_check(trees[n]) else NoCheckAsMinusOne(s) for n, s in stubs.items()}
        order = ("before", "after", "after", "before")
        opened: dict[str, list[dict[str, Any]]] = {n: [] for n in farms}
        for n in order:  # OpenSession latency, alternately (each after the warm pool refilled)
            opened[n].append(await fb.open_latency(stubs[n], url, opens))
        out["open"] = {n: {"open_p50_ms": statistics.median(r["open_p50_ms"] for r in rs),
                           "open_server_p50_ms": statistics.median(r["open_server_p50_ms"] for r in rs)}
                       for n, rs in opened.items()}
        print("open", out["open"], flush=True)
        for k in ks:
            sids = {n: [(await stubs[n].OpenSession(environment_pb2.OpenSessionRequest(
                start_url=url, observation_spec=fb.SPEC))).session.session_id for _ in range(k)] for n in farms}
            for stream in (False, True):
                parts: dict[str, list[dict[str, Any]]] = {n: [] for n in farms}
                for n in order:
                    parts[n].append(await fb.step_loop(stubs[n], sids[n], seconds / 2, fb.click, farms[n],
                                                       stream=stream))
                point = {"k": k, "mode": "StepStream" if stream else "Step"}
                point.update({n: fb.combine(p) for n, p in parts.items()})
                b, a = point["before"], point["after"]
                point["throughput_ratio"] = a["steps_per_s"] / b["steps_per_s"]
                point["cpu_ratio"] = a["farm_cpu_ms_per_step"] / b["farm_cpu_ms_per_step"]
                out["points"].append(point)
                print(point["mode"], k, f"after/before steps/s {point['throughput_ratio']:.3f}, "
                      f"farm CPU/step {point['cpu_ratio']:.3f}", flush=True)
            for n in farms:
                for s in sids[n]:
                    await stubs[n].CloseSession(environment_pb2.CloseSessionRequest(session_id=s))
        for c in channels.values():
            await c.close()
    finally:
        for f in farms.values():
            f.stop()
    return out


def compare_collector(trees: dict[str, Path], levels: list[int], seconds: float) -> list[dict[str, Any]]:
    """The orchestrator bench under each tree, interleaved before, after, after, before, per level."""
    import subprocess
    import tempfile

    script = ROOT / "bench" / "orchestrator.py"
    points = []
    for level in levels:
        parts: dict[str, list[dict[str, Any]]] = {n: [] for n in trees}
        for n in ("before", "after", "after", "before"):
            with tempfile.TemporaryDirectory() as d:
                env = {**os.environ, "PYTHONPATH": tree_path(trees[n])}
                r = subprocess.run([sys.executable, str(script), "--levels", str(level), "--seconds", str(seconds / 2),
                                    "--out", d], env=env, capture_output=True, text=True, timeout=1800)
                if r.returncode:
                    raise SystemExit(f"orchestrator bench under {n} ({trees[n]}) failed: {r.stderr[-2000:]}")
                part = json.loads((Path(d) / "orchestrator.json").read_text())["levels"][0]
                if not part["steps"]:
                    raise SystemExit(f"orchestrator bench under {n} ({trees[n]}) stepped nothing: {part['states']}, "
                                     f"{part['errored']} errored; {r.stdout[-1500:]}")
                parts[n].append(part)
        point: dict[str, Any] = {"level": level}
        for n, ps in parts.items():
            wall, steps = sum(p["wall_seconds"] for p in ps), sum(p["steps"] for p in ps)
            point[n] = {"episodes_per_s": sum(p["episodes"] for p in ps) / wall, "steps_per_s": steps / wall,
                        "collector_cpu_ms_per_step": sum(p["collector_cpu_ms_per_step"] * p["steps"] for p in ps)
                        / max(steps, 1), "errored": sum(p["errored"] for p in ps)}
        b, a = point["before"], point["after"]
        point["throughput_ratio"] = a["steps_per_s"] / b["steps_per_s"]
        point["cpu_ratio"] = a["collector_cpu_ms_per_step"] / b["collector_cpu_ms_per_step"]
        print("collector", level, f"after/before steps/s {point['throughput_ratio']:.3f}, "
              f"collector CPU/step {point['cpu_ratio']:.3f}", flush=True)
        points.append(point)
    return points


def write(out_dir: Path, result: dict[str, Any]) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "house.json").write_text(json.dumps(result, indent=1))
    lines = ["# The farm before and after a restructuring, interleaved", "",
             f"`python bench/house.py --before {result['trees']['before']} --after {result['trees']['after']}` "
             f"({result['commits']['before']} vs {result['commits']['after']}); load average at start "
             f"{result['load_avg_1m_at_start']:.1f} on {os.cpu_count()} CPUs, {result['seconds_per_point']} s a point "
             "(before, after, after, before). Ratios are after / before: 1.00 is no change.", "",
             "| K | loop | before steps/s | after steps/s | ratio | before farm CPU ms/step | after | ratio | "
             "errors before / after |", "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for p in result["points"]:
        b, a = p["before"], p["after"]
        lines.append(f"| {p['k']} | {p['mode']} | {b['steps_per_s']:.1f} | {a['steps_per_s']:.1f} | "
                     f"{p['throughput_ratio']:.3f} | {b['farm_cpu_ms_per_step']:.2f} | {a['farm_cpu_ms_per_step']:.2f} | "
                     f"{p['cpu_ratio']:.3f} | {b['errors']} / {a['errors']} |")
    o = result["open"]
    lines += [] if not o else ["", f"OpenSession p50 (client): before {o['before']['open_p50_ms']:.1f} ms, after "
                  f"{o['after']['open_p50_ms']:.1f} ms (server side {o['before']['open_server_p50_ms']:.1f} / "
                  f"{o['after']['open_server_p50_ms']:.1f} ms)."]
    if result.get("collector"):
        lines += ["", "## The collector (bench/orchestrator.py under each tree, before, after, after, before)", "",
                  "| concurrent episodes | before episodes/s | after | before steps/s | after | ratio | "
                  "before collector CPU ms/step | after | ratio | errored before / after |",
                  "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
        for p in result["collector"]:
            b, a = p["before"], p["after"]
            lines.append(f"| {p['level']:,} | {b['episodes_per_s']:.1f} | {a['episodes_per_s']:.1f} | "
                         f"{b['steps_per_s']:.1f} | {a['steps_per_s']:.1f} | {p['throughput_ratio']:.3f} | "
                         f"{b['collector_cpu_ms_per_step']:.2f} | {a['collector_cpu_ms_per_step']:.2f} | "
                         f"{p['cpu_ratio']:.3f} | {b['errored']} / {a['errored']} |")
    (out_dir / "house.md").write_text("\n".join(lines) + "\n")


def commit(tree: Path) -> str:
    import subprocess
    r = subprocess.run(["git", "-C", str(tree), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    return r.stdout.strip() or "?"


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--before", type=Path, required=True, help="checkout of the code before the change")
    ap.add_argument("--after", type=Path, default=ROOT, help="checkout of the code after it (default: this one)")
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results")
    ap.add_argument("--seconds", type=float, default=8.0, help="seconds per point and tree (half before, half after)")
    ap.add_argument("--ks", default="1,4", help="concurrent sessions per point (empty: skip the farm's half)")
    ap.add_argument("--opens", type=int, default=8, help="OpenSession calls per round (4 rounds)")
    ap.add_argument("--collector-levels", default="100,1000",
                    help="concurrent episodes of the collector's half (bench/orchestrator.py levels; empty: skip)")
    ap.add_argument("--collector-seconds", type=float, default=20.0, help="orchestrator window per level and tree")
    args = ap.parse_args()
    trees = {"before": args.before.resolve(), "after": args.after.resolve()}
    load = os.getloadavg()[0]
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), fb._Handler)
    srv.daemon_threads = True
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    t0 = time.time()
    ks = [int(k) for k in args.ks.split(",") if k]
    try:
        result = (await compare(f"127.0.0.1:{srv.server_address[1]}", trees, ks, args.seconds, args.opens) if ks
                  else {"points": [], "open": {}})
    finally:
        srv.shutdown()
    result.update(trees={k: str(v) for k, v in trees.items()}, commits={k: commit(v) for k, v in trees.items()},
                  load_avg_1m_at_start=load, seconds_per_point=args.seconds, collector=[])
    write(args.out, result)  # the farm's half, kept if the collector's fails
    levels = [int(x) for x in args.collector_levels.split(",") if x]
    result["collector"] = compare_collector(trees, levels, args.collector_seconds) if levels else []
    result["wall_s"] = round(time.time() - t0, 1)
    write(args.out, result)
    print(f"wrote {args.out / 'house.md'}")


if __name__ == "__main__":
    asyncio.run(main())

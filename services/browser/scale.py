"""The farm's scale: one node vs two behind one collector, and memory per session up to K=128 (called by bench.py;
`bench.py --scale-only` runs just this; `make bench`).

(a) nodes: the real stack as processes (`webenv.cli.stack.Stack`: sites, browser farm node-a, oracle policy,
    judge, collector) plus a second farm node-b (`Stack.add_browser_node`), all on loopback. The same collector run
    (oracle policy on synthetic tasks, same seed, episodes and concurrency) is started with `env_address` naming
    node-a alone and naming both ("a,b": the collector sends episode i to address i mod 2, and retries an attempt
    whose environment failed on the next address), in the order 1, 2, 2, 1 so the machine's drift hits both ways.
    Both nodes run in both ways (node-b idles in the one-node runs), so only the spreading differs. Measured: steps
    and episodes per second of wall time (StartRun to the run's end), the stored episodes per node (ExportRun), and
    CPU seconds per step of every process tree (each node with its Chromium, collector, policy, judge, sites) next
    to the whole machine's busy CPU, so the split says where the cores went and how much other work took.
(b) memory (bench.py's `scale_memory`): K concurrent sessions open on one farm, one step each, then PSS of the farm
    process and of all its Chromium processes; per session at each K and the slope between the two largest K.
"""

from __future__ import annotations

import asyncio
import json
import os
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil
from webenv.cli.stack import Stack
from webenv.client import make_channel
from webenv.v1 import collector_pb2, collector_pb2_grpc, common_pb2

CpuOf = Callable[[psutil.Process], tuple[float, float]]  # bench.cpu_seconds: (own, descendants) CPU seconds
STACK = ("sites", "browser", "policy", "judge")


def _cpu(st: Stack, cpu_of: CpuOf) -> dict[str, float]:
    """CPU seconds so far of each process of the stack; a farm node's as its own process and its Chromium."""
    out = {}
    for name, p in st.procs.items():
        try:
            own, kids = cpu_of(psutil.Process(p.pid))
        except psutil.Error:
            continue
        if name.startswith("browser"):
            node = "node-a" if name == "browser" else name.removeprefix("browser-")
            out[f"{node} farm"], out[f"{node} Chromium"] = own, kids
        else:
            out[name] = own + kids
    return out


def _busy() -> float:
    """CPU seconds the whole machine spent not idle so far (every process, ours and others')."""
    t = psutil.cpu_times()
    return sum(t) - t.idle - getattr(t, "iowait", 0.0)


async def _run(stub: Any, st: Stack, addresses: list[str], episodes: int, concurrency: int, seed: int,
               cpu_of: CpuOf, export_dir: Path) -> dict[str, Any]:
    spec = collector_pb2.RunSpec(policy="oracle", episodes=episodes, seed=seed, concurrency=concurrency,
                                 max_retries=2, env_address=",".join(addresses))
    spec.tasks.sources.append(common_pb2.TASK_SOURCE_SYNTHETIC)
    spec.tasks.difficulties.append(common_pb2.DIFFICULTY_EASY)
    load0, cpu0, busy0 = os.getloadavg()[0], _cpu(st, cpu_of), _busy()
    t0 = time.perf_counter()
    run = (await stub.StartRun(collector_pb2.StartRunRequest(spec=spec), timeout=120)).run
    last = None
    async for resp in stub.WatchRun(collector_pb2.WatchRunRequest(run_id=run.run_id), timeout=900):
        last = resp
    wall = time.perf_counter() - t0
    cpu1, busy1 = _cpu(st, cpu_of), _busy()
    c = last.run.counts
    exp = await stub.ExportRun(collector_pb2.ExportRunRequest(
        run_id=run.run_id, format=collector_pb2.EXPORT_FORMAT_JSONL, destination=str(export_dir / run.run_id)),
        timeout=120)
    text = await asyncio.to_thread(Path(exp.paths[0]).read_text)
    eps = [json.loads(line) for line in text.splitlines()]
    steps = max(c.steps, 1)
    cpu_ms = {k: (cpu1[k] - cpu0.get(k, 0.0)) * 1e3 / steps for k in cpu1}
    ours = sum(cpu1[k] - cpu0.get(k, 0.0) for k in cpu1)
    return {"nodes": len(addresses), "state": collector_pb2.RunState.Name(last.run.state), "wall_s": wall,
            "episodes": c.finished, "errored": c.errored, "passed": c.passed, "steps": c.steps,
            "steps_per_s": c.steps / wall, "episodes_per_s": c.finished / wall,
            "episodes_by_node": dict(Counter(e["browser_node"] for e in eps)),
            "steps_by_node": dict(sum((Counter({e["browser_node"]: e["steps"]}) for e in eps), Counter())),
            "retried": sum(e["attempts"] > 1 for e in eps),
            "cpu_ms_per_step": cpu_ms, "machine_busy_cpu_s": busy1 - busy0, "stack_cpu_s": ours,
            "load_avg_1m_at_start": load0}


def _combine(parts: list[dict[str, Any]]) -> dict[str, Any]:
    """One figure per way from its runs: totals over totals."""
    wall, steps, eps = (sum(p[k] for p in parts) for k in ("wall_s", "steps", "episodes"))
    keys = {k for p in parts for k in p["cpu_ms_per_step"]}
    busy = sum(p["machine_busy_cpu_s"] for p in parts)
    return {"runs": len(parts), "wall_s": wall, "steps": steps, "episodes": eps,
            "errored": sum(p["errored"] for p in parts), "steps_per_s": steps / wall, "episodes_per_s": eps / wall,
            "cpu_ms_per_step": {k: sum(p["cpu_ms_per_step"].get(k, 0.0) * p["steps"] for p in parts) / steps
                                for k in sorted(keys)},
            "machine_busy_cores": busy / wall, "stack_share_of_busy": sum(p["stack_cpu_s"] for p in parts) / busy}


async def nodes_bench(episodes: int, concurrency: int, cpu_of: CpuOf, order: str = "1221", seed: int = 7,
                      sites_count: int = 12) -> dict[str, Any]:
    """Part (a): the stack with two farm nodes, the same run on one node and on both, in ``order``."""
    with tempfile.TemporaryDirectory(prefix="webenv-scale-") as tmp:
        st = Stack(Path(tmp) / "stack", free_ports=True, sites_count=sites_count,
                   extra_env={"WEBENV_LOG_JSON": "false", "WEBENV_LOG_LEVEL": "WARNING", "WEBENV_NODE_NAME": "node-a"})
        try:
            await asyncio.to_thread(st.start, STACK, 120)
            b_addr = await asyncio.to_thread(st.add_browser_node, "node-b")
            await asyncio.to_thread(st.start, ("collector",), 120)
            ways = {"1": [st.address("browser")], "2": [st.address("browser"), b_addr]}
            async with make_channel(st.address("collector"), timeout=None) as ch:
                stub = collector_pb2_grpc.CollectorServiceStub(ch)
                # warm-up: every task's site and the nodes' first pages, not measured
                await _run(stub, st, ways["2"], max(4, concurrency), concurrency, seed + 1, cpu_of, Path(tmp))
                runs = []
                for way in order:
                    runs.append(await _run(stub, st, ways[way], episodes, concurrency, seed, cpu_of, Path(tmp)))
                    print("scale nodes", {k: v for k, v in runs[-1].items() if k != "cpu_ms_per_step"}, flush=True)
        finally:
            await asyncio.to_thread(st.stop)
    summary = {n: _combine([r for r in runs if r["nodes"] == n]) for n in (1, 2)}
    return {"episodes_per_run": episodes, "concurrency": concurrency, "order": order, "seed": seed,
            "runs": runs, "one_node": summary[1], "two_nodes": summary[2],
            "two_vs_one_steps_per_s": summary[2]["steps_per_s"] / summary[1]["steps_per_s"]}


def machine() -> dict[str, Any]:
    vm = psutil.virtual_memory()
    return {"cpus": os.cpu_count(), "ram_total_mb": vm.total / 2**20, "ram_available_mb": vm.available / 2**20,
            "load_avg_1m": os.getloadavg()[0]}


def render_md(r: dict[str, Any]) -> str:
    m0, m1, nb, mem = r["machine_at_start"], r["machine_at_end"], r["nodes"], r["memory"]
    one, two = nb["one_node"], nb["two_nodes"]
    lines = [
        "# Browser farm: scale on one machine (one node vs two, memory per session)", "",
        f"`.venv/bin/python services/browser/bench.py --scale-only --out bench/results` (also part of the full run). "
        f"Machine: {m0['cpus']} CPUs, {m0['ram_total_mb'] / 1024:.1f} GiB RAM ({m0['ram_available_mb'] / 1024:.1f} "
        f"available at start), 1-min load {m0['load_avg_1m']:.1f} at start, {m1['load_avg_1m']:.1f} at end "
        "(other engineers' work shares the machine).", "",
        "## One farm node vs two behind one collector", "",
        f"The real stack (sites, oracle policy, judge, collector; farm node-a and node-b, each its own "
        f"`python -m webenv.browser` with its own Chromium), the same run each way: {nb['episodes_per_run']} episodes "
        f"of synthetic easy tasks (seed {nb['seed']}), concurrency {nb['concurrency']}, `env_address` = node-a or "
        f"node-a,node-b; runs in the order {', '.join(nb['order'])} (nodes) after an unmeasured warm-up run. Wall "
        "time from StartRun to the run's end; episodes per node from the stored episodes (ExportRun).", "",
        "| nodes | runs | episodes | errored | steps | wall s | steps/s | episodes/s | machine busy cores | "
        "stack share of busy CPU |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for n, s in ((1, one), (2, two)):
        lines.append(f"| {n} | {s['runs']} | {s['episodes']} | {s['errored']} | {s['steps']} | {s['wall_s']:.1f} | "
                     f"{s['steps_per_s']:.2f} | {s['episodes_per_s']:.2f} | {s['machine_busy_cores']:.2f} | "
                     f"{s['stack_share_of_busy']:.0%} |")
    lines += ["", f"Two nodes vs one: **{nb['two_vs_one_steps_per_s']:.2f}x** steps/s.", "",
              "Each run (in order):", "",
              "| # | nodes | steps/s | episodes/s | wall s | load at start | episodes by node | retried |",
              "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for i, x in enumerate(nb["runs"], 1):
        by = ", ".join(f"{k} {v}" for k, v in sorted(x["episodes_by_node"].items()))
        lines.append(f"| {i} | {x['nodes']} | {x['steps_per_s']:.2f} | {x['episodes_per_s']:.2f} | {x['wall_s']:.1f} | "
                     f"{x['load_avg_1m_at_start']:.1f} | {by} | {x['retried']} |")
    procs = sorted(set(one["cpu_ms_per_step"]) | set(two["cpu_ms_per_step"]))
    lines += ["", "CPU ms per step by process (a farm node: its own process, and its Chromium processes together):",
              "",
              "| nodes | " + " | ".join(procs) + " | all of the stack |", "| --- " * (len(procs) + 2) + "|"]
    for n, s in ((1, one), (2, two)):
        c = s["cpu_ms_per_step"]
        lines.append(f"| {n} | " + " | ".join(f"{c.get(p, 0.0):.1f}" for p in procs) + f" | {sum(c.values()):.1f} |")
    cpu1, cpu2 = sum(one["cpu_ms_per_step"].values()), sum(two["cpu_ms_per_step"].values())
    farm1 = sum(v for k, v in one["cpu_ms_per_step"].items() if k.startswith("node-"))
    lines += ["", f"Where the cores go: a step costs the whole stack {cpu1:.0f} ms of CPU on one node and {cpu2:.0f} ms "
              f"on two ({farm1 / cpu1:.0%} of it the farm and its Chromium on one node); at that cost the "
              f"{m0['cpus']} cores of this machine, were they the stack's alone, would cap it near "
              f"{m0['cpus'] * 1000 / cpu1:.0f} steps/s on one node and {m0['cpus'] * 1000 / cpu2:.0f} on two. During "
              f"the runs the machine was {one['machine_busy_cores']:.2f} / {two['machine_busy_cores']:.2f} cores busy "
              f"(one / two nodes), the stack's share of that {one['stack_share_of_busy']:.0%} / "
              f"{two['stack_share_of_busy']:.0%} (the rest: other work on the machine). A second node on the same "
              "cores adds a second farm event loop and a second Chromium (more CPU per step), not cores: it pays "
              "where each node has cores of its own (another machine or pod). A farm's own process is not what "
              f"limits one node: {one['cpu_ms_per_step'].get('node-a farm', 0.0):.1f} ms of its event loop per step "
              "(its Chromium does the rest). Here the second node shows the collector spreading episodes over the "
              f"nodes (episodes by node above) at {nb['two_vs_one_steps_per_s']:.2f}x the throughput of one node"
              + ("; on cores shared with other work, that gain is the stack's larger share of them (more runnable "
                 "processes under the same scheduler), not cores of its own."
                 if nb["two_vs_one_steps_per_s"] > 1.05 and two["stack_share_of_busy"] > one["stack_share_of_busy"]
                 else "."),
              "", "## Memory per session (PSS)", "",
              f"One farm node (`WEBENV_FARM_MAX_SESSIONS={mem['max_sessions']}`), K concurrent sessions on the "
              f"~300-element product page (opened {mem['open_concurrency']} at a time), one StepStream step each, "
              "then PSS (proportional set size: shared pages split between the processes that map them) of the farm "
              "process and of all its Chromium processes. K=0: the idle node with its warm pool.", "",
              "| K | opened | errors | farm process MB | Chromium MB | total MB | total / K MB | Chromium processes |",
              "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for p in mem["points"]:
        per = f"{p['total_mb'] / p['k']:.1f}" if p["k"] else "-"
        lines.append(f"| {p['k']} | {p['opened']} | {p['errors']} | {p['farm_mb']:.0f} | {p['chromium_mb']:.0f} | "
                     f"{p['total_mb']:.0f} | {per} | {p['chromium_processes']} |")
    lines += ["", f"Marginal PSS per session (slope from K={mem['slope_from_k']} to K={mem['slope_to_k']}): "
              f"**{mem['slope_mb_per_session']:.1f} MB**; at K={mem['slope_to_k']}, "
              f"{mem['per_session_at_max_mb']:.1f} MB per session all in. At that slope, memory would hold about "
              f"**{mem['sessions_fit_in_total_ram']}** sessions of this page in the {m0['ram_total_mb'] / 1024:.1f} GiB "
              f"of this machine, **{mem['sessions_fit_in_available_ram']}** in the "
              f"{mem['ram_available_mb_at_k0'] / 1024:.1f} GiB available with the idle node up (its K=0 PSS taken off "
              "the total, the rest over the slope); the CPU, not memory, bounds how many of them can step at a useful "
              "rate (one node's `WEBENV_FARM_MAX_SESSIONS` is 64 by default)."]
    if r.get("notes"):
        lines += [""] + r["notes"]
    return "\n".join(lines) + "\n"


def write_results(out: Path, r: dict[str, Any]) -> None:
    """<out>/browser_scale.json and .md."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "browser_scale.json").write_text(json.dumps(r, indent=2))
    (out / "browser_scale.md").write_text(render_md(r))
    print((out / "browser_scale.md").read_text())

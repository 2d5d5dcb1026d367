"""Per-step overhead of the adapters vs direct gRPC, on the real stack (sites, farm, judge, the OpenEnv server).

    .venv/bin/python tools/adapter_overhead.py --steps 30

Each path steps `noop()` on one MiniWoB click-test session (5 warm-up steps not counted), observing the axtree
(+ html where the adapter asks for it): direct `EnvironmentClient.step` (gRPC, axtree + html), `WebEnv(api="browsergym")`
(translation + BrowserGym dict, `noop(0)`, axtree + html), the OpenEnv server over its WebSocket (openenv-core's
client; axtree + html), the MCP server over stdio (the official client; `scroll` by 0, axtree), and the TRL
environment's `scroll(0)` tool (axtree). Prints p50 and mean milliseconds per step.

    .venv/bin/python tools/adapter_overhead.py --sessions 16 --out bench/results/adapter_sessions.md

Concurrent sessions held per adapter process: N episodes open at once through one OpenEnv server process (N
openenv-core WebSocket clients), N TRL `WebTaskEnv` instances in one process (as GRPOTrainer pools them), and N MCP
server processes (an MCP server serves one farm session by design: its figure is the memory a session costs); for
each, how many opened, one `noop` step on all N at once (p50 / max ms) and the adapter process's resident memory
before and with the N sessions (from /proc). The farm is the same for all (one node, its own contexts).
"""

from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
import os
import statistics
import subprocess
import sys
import tempfile
import time

from webenv.cli.stack import Stack, wait_serving
from webenv.client import EnvironmentClient, make_sync_channel, observation_spec
from webenv.compat.gym import WebEnv
from webenv.runtime.ports import free_port
from webenv.v1 import task_pb2, task_pb2_grpc

WARMUP = 5


def summary(name: str, xs: list[float]) -> str:
    return f"{name:28s} p50 {statistics.median(xs) * 1000:7.1f} ms   mean {statistics.fmean(xs) * 1000:7.1f} ms"


async def direct(address: str, task, n: int) -> list[float]:
    async with EnvironmentClient(address) as env:
        opened = await env.open(task=task, spec=observation_spec(("axtree", "html")))
        sid, out = opened.session.session_id, []
        for _ in range(n):
            t = time.perf_counter()
            await env.step(sid, "noop()")
            out.append(time.perf_counter() - t)
        await env.close(sid)
        return out


async def first_observation(address: str, task):
    async with EnvironmentClient(address) as env:
        opened = await env.open(task=task, spec=observation_spec(("axtree", "html", "elements", "screenshot")))
        await env.close(opened.session.session_id)
        return opened.observation


def gym(address: str, task, n: int) -> list[float]:
    env = WebEnv(address, task=task, api="browsergym", formats=("axtree", "html"))
    env.reset(seed=0)
    out = []
    for _ in range(n + WARMUP):
        t = time.perf_counter()
        env.step("noop(0)")
        out.append(time.perf_counter() - t)
    env.close()
    return out[WARMUP:]


def openenv(url: str, task_id: str, n: int) -> list[float]:
    from webenv.openenv.client import WebEnvClient
    from webenv.openenv.env import WebAction

    out = []
    with WebEnvClient(base_url=url).sync() as env:
        env.reset(task_id=task_id)
        for _ in range(n + WARMUP):
            t = time.perf_counter()
            env.step(WebAction(action="noop()"))
            out.append(time.perf_counter() - t)
    return out[WARMUP:]


def trl(browser: str, sites: str, judge: str, task_id: str, n: int) -> list[float]:
    from webenv.compat.trl import WebTaskEnv

    env = WebTaskEnv(browser, sites, judge, max_steps=n + WARMUP + 5)
    env.reset(task_id=task_id)
    out = []
    for _ in range(n + WARMUP):
        t = time.perf_counter()
        env.scroll(0)
        out.append(time.perf_counter() - t)
    env._close()
    return out[WARMUP:]


async def mcp(browser: str, sites: str, task_id: str, n: int) -> list[float]:
    from mcp import Client
    from mcp.client.stdio import StdioServerParameters

    server = StdioServerParameters(command=sys.executable, env={"PYTHONPATH": os.environ.get("PYTHONPATH", "")},
                                   args=["-m", "webenv.compat.mcp", "--browser", browser, "--sites", sites,
                                         "--task-id", task_id])
    out = []
    async with Client(server) as client:
        await client.call_tool("snapshot", {})
        for _ in range(n + WARMUP):
            t = time.perf_counter()
            await client.call_tool("scroll", {"dy": 0})
            out.append(time.perf_counter() - t)
    return out[WARMUP:]


def translation_cost(observation, n: int = 200) -> str:
    """The adapters' own CPU per step, without the farm: BrowserGym text -> Action, Observation -> BrowserGym dict."""
    from webenv.compat import browsergym as bgym

    t = time.perf_counter()
    for _ in range(n):
        bgym.to_actions("fill('11', 'blue mug')\nclick('12')", observation)
    parse = (time.perf_counter() - t) / n
    chat = bgym.Chat.start("goal")
    t = time.perf_counter()
    for _ in range(20):
        bgym.observation_dict(observation, goal="goal", chat=chat)
    build = (time.perf_counter() - t) / 20
    return f"translation: to_actions {parse * 1e6:.0f} us; observation_dict {build * 1000:.1f} ms (screenshot decode included)"


def children(pid: int) -> list[int]:
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return [int(c) for c in f.read().split()]
    except OSError:
        return []


def rss_mb(pid: int, tree: bool = True) -> float:
    """Resident memory of a process (and with ``tree`` its children) in MiB, from /proc."""
    total, todo = 0, [pid]
    while todo:
        p = todo.pop()
        try:
            with open(f"/proc/{p}/status") as f:
                total += next(int(x.split()[1]) for x in f if x.startswith("VmRSS:"))
        except (OSError, StopIteration):
            continue
        todo += children(p) if tree else []
    return total / 1024


def attempt(fn, *args):
    """``fn(*args)``, or the error's first line (a session that did not open or step is counted, not fatal)."""
    try:
        return fn(*args)
    except Exception as exc:  # the farm's refusals and timeouts under load
        return f"error: {str(exc).splitlines()[0][:160]}"


def held(name: str, n: int, opened: int, step_s: list, before_mb: float, after_mb: float) -> dict:
    errs = [x for x in step_s if isinstance(x, str)]
    xs = sorted(x for x in step_s if not isinstance(x, str)) or [float("nan")]
    return {"adapter": name, "sessions": n, "held": opened, "step_errors": len(errs), "first_error": (errs or [""])[0],
            "step_p50_ms": statistics.median(xs) * 1000,
            "step_max_ms": xs[-1] * 1000, "rss_before_mb": before_mb, "rss_after_mb": after_mb,
            "mb_per_session": (after_mb - before_mb) / max(opened, 1)}


def sessions_openenv(url: str, task_id: str, n: int, server_pid: int) -> dict:
    from webenv.openenv.client import WebEnvClient
    from webenv.openenv.env import WebAction

    before = rss_mb(server_pid)
    clients = [WebEnvClient(base_url=url).sync() for _ in range(n)]
    with concurrent.futures.ThreadPoolExecutor(n) as pool:
        resets = list(pool.map(lambda c: attempt(lambda: c.__enter__().reset(task_id=task_id)), clients))
        live = [c for c, r in zip(clients, resets, strict=True) if not isinstance(r, str)]
        after = rss_mb(server_pid)

        def step(c) -> float:
            t = time.perf_counter()
            c.step(WebAction(action="noop()"))
            return time.perf_counter() - t

        times = list(pool.map(lambda c: attempt(step, c), live)) + [r for r in resets if isinstance(r, str)]
        list(pool.map(lambda c: attempt(c.__exit__, None, None, None), clients))
        opened = len(live)
    return held("OpenEnv server (1 process)", n, opened, times, before, after)


def sessions_trl(browser: str, sites: str, judge: str, task_id: str, n: int) -> dict:
    from webenv.compat.trl import WebTaskEnv

    before = rss_mb(os.getpid(), tree=False)  # (this process's children are the stack's services)
    envs = [WebTaskEnv(browser, sites, judge) for _ in range(n)]
    with concurrent.futures.ThreadPoolExecutor(n) as pool:
        resets = list(pool.map(lambda e: attempt(e.reset, task_id), envs))
        live = [e for e, r in zip(envs, resets, strict=True) if r.startswith("Task:")]
        after = rss_mb(os.getpid(), tree=False)

        def step(e) -> float:
            t = time.perf_counter()
            e.scroll(0)
            return time.perf_counter() - t

        times = list(pool.map(lambda e: attempt(step, e), live)) + [r for r in resets if not r.startswith("Task:")]
        list(pool.map(lambda e: e._close(), envs))
        opened = len(live)
    return held("TRL WebTaskEnv (1 process)", n, opened, times, before, after)


async def sessions_mcp(browser: str, sites: str, task_id: str, n: int) -> dict:
    from contextlib import AsyncExitStack

    from mcp import Client
    from mcp.client.stdio import StdioServerParameters

    server = StdioServerParameters(command=sys.executable, env={"PYTHONPATH": os.environ.get("PYTHONPATH", "")},
                                   args=["-m", "webenv.compat.mcp", "--browser", browser, "--sites", sites,
                                         "--task-id", task_id])
    services = set(children(os.getpid()))  # the stack's
    async with AsyncExitStack() as stack:
        clients = [await stack.enter_async_context(Client(server)) for _ in range(n)]
        snaps = await asyncio.gather(*(c.call_tool("snapshot", {}) for c in clients))
        opened = sum(1 for r in snaps if not r.is_error)
        mine = set(children(os.getpid())) - services
        per_process = statistics.fmean(rss_mb(pid) for pid in mine) if mine else float("nan")

        async def step(c) -> float:
            t = time.perf_counter()
            await c.call_tool("scroll", {"dy": 0})
            return time.perf_counter() - t

        times = await asyncio.gather(*(step(c) for c in clients))
    return held("MCP stdio (1 process a session)", n, opened, list(times), 0.0, per_process * opened)


def sessions_report(rows: list[dict], command: str) -> str:
    out = ["# Concurrent sessions per adapter process", "", f"`{command}` (nice 19, on the shared 2-core development "
           f"machine, load average {os.getloadavg()[0]:.0f})", "",
           "| adapter | sessions asked | held | one step on all, p50 / max ms | process RSS before / with them, MiB "
           "| MiB a session |", "| --- | --- | --- | --- | --- | --- |"]
    for r in rows:
        out.append(f"| {r['adapter']} | {r['sessions']} | {r['held']} | {r['step_p50_ms']:.0f} / {r['step_max_ms']:.0f} "
                   f"| {r['rss_before_mb']:.0f} / {r['rss_after_mb']:.0f} | {r['mb_per_session']:.1f} |")
    errors = [f"- {r['adapter']}: {r['step_errors']} sessions failed, first: {r['first_error']}" for r in rows
              if r["step_errors"]]
    return "\n".join(out + ([""] + errors if errors else [])) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--sessions", type=int, default=0, help="Measure N concurrent sessions per adapter instead.")
    ap.add_argument("--out", default="", help="Write the sessions report (markdown) here too.")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp, Stack(tmp, free_ports=True, sites_count=8) as s:
        s.start(("sites", "browser", "judge"))
        http, gport = free_port(), free_port()
        env = {**os.environ, "WEBENV_HTTP_PORT": str(http), "WEBENV_HTTP_HOST": "127.0.0.1", "WEBENV_HOST": "127.0.0.1",
               "WEBENV_GRPC_PORT": str(gport), "WEBENV_METRICS_PORT": str(free_port()),
               "WEBENV_BROWSER_ADDR": s.address("browser"), "WEBENV_SITES_ADDR": s.address("sites"),
               "WEBENV_JUDGE_ADDR": s.address("judge"), "WEBENV_OPENENV_MAX_STEPS": str(args.steps + WARMUP + 5)}
        proc = subprocess.Popen([sys.executable, "-m", "webenv.openenv"], env=env, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL)
        try:
            wait_serving(f"127.0.0.1:{gport}", 60, proc)
            with make_sync_channel(s.address("sites"), timeout=None) as ch:
                task = task_pb2_grpc.TaskServiceStub(ch).GetTask(task_pb2.GetTaskRequest(task_id="miniwob/click-test")).task
            if args.sessions:
                rows = [sessions_openenv(f"http://127.0.0.1:{http}", task.task_id, args.sessions, proc.pid),
                        sessions_trl(s.address("browser"), s.address("sites"), s.address("judge"), task.task_id,
                                     args.sessions),
                        asyncio.run(sessions_mcp(s.address("browser"), s.address("sites"), task.task_id,
                                                 min(args.sessions, 4)))]
                report = sessions_report(rows, "tools/adapter_overhead.py " + " ".join(sys.argv[1:]))
                print(report)
                if args.out:
                    with open(args.out, "w") as f:
                        f.write(report)
                return
            print(translation_cost(asyncio.run(first_observation(s.address("browser"), task))))
            print(summary("direct gRPC", asyncio.run(direct(s.address("browser"), task, args.steps))))
            print(summary("gym api=browsergym", gym(s.address("browser"), task, args.steps)))
            print(summary("OpenEnv WebSocket", openenv(f"http://127.0.0.1:{http}", task.task_id, args.steps)))
            print(summary("MCP stdio", asyncio.run(mcp(s.address("browser"), s.address("sites"), task.task_id,
                                                       args.steps))))
            print(summary("TRL WebTaskEnv tool", trl(s.address("browser"), s.address("sites"), s.address("judge"),
                                                     task.task_id, args.steps)))
            print(summary("direct gRPC (again)", asyncio.run(direct(s.address("browser"), task, args.steps))))
        finally:
            proc.terminate()
            proc.wait(20)


if __name__ == "__main__":
    main()

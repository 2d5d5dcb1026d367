"""Per-step overhead of the adapters vs direct gRPC, on the real stack (sites, farm, judge, the OpenEnv server).

    .venv/bin/python tools/adapter_overhead.py --steps 30

Each path steps `noop()` on one MiniWoB click-test session (5 warm-up steps not counted), observing the axtree
(+ html where the adapter asks for it): direct `EnvironmentClient.step` (gRPC, axtree + html), `WebEnv(api="browsergym")`
(translation + BrowserGym dict, `noop(0)`, axtree + html), the OpenEnv server over its WebSocket (openenv-core's
client; axtree + html), the MCP server over stdio (the official client; `scroll` by 0, axtree), and the TRL
environment's `scroll(0)` tool (axtree). Prints p50 and mean milliseconds per step.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import tempfile
import time

import grpc
from webenv.client import EnvironmentClient, observation_spec
from webenv.client.gym import WebEnv
from webenv.runtime.ports import free_port
from webenv.runtime.stack import Stack, wait_serving
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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=30)
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
            with grpc.insecure_channel(s.address("sites")) as ch:
                task = task_pb2_grpc.TaskServiceStub(ch).GetTask(task_pb2.GetTaskRequest(task_id="miniwob/click-test")).task
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

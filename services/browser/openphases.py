"""Where a plain-URL OpenSession's time goes: the farm in this process, its open path timed phase by phase.

The farm (`webenv.browser.__main__.serving`, the same server the service runs) is started in this process with the
bench's settings, and the calls its ``Farm.open`` makes are wrapped with timers: the URL guard (``acheck``), the
session's context from the warm pool (``registry.create``: ``pool.acquire`` of a warm context), the start page's
navigation (``TaskAdapter.setup``: ``goto`` and its DOMContentLoaded), the settle rule after it (``settle_start``:
network idle and what still loads) and the first observation (``first_observation``: the AXTREE pass and the
tabs). OpenSession is called over gRPC on loopback from this process, after the warm pool had time to refill,
as ``bench.open_latency`` does. Reported per phase: p50 ms and its share of the server's open; the rest of the
server's time (admission, the open queue's slot, building the answer) and what the client sees beyond the
server (gRPC, serialisation, the event loop). A raw Playwright loop doing the same page work on a warm context
of its own (a page made ahead, goto, the farm's observe pass with its DOM-quiet wait) is the floor beside it.

    .venv/bin/python services/browser/bench.py --open-only --out bench/results   # writes browser_open.md/.json
"""

from __future__ import annotations

import asyncio
import statistics
import time
from collections import defaultdict
from contextlib import asynccontextmanager
from typing import Any

PHASES = ("guard", "context", "navigate", "settle", "observe")


def _timed(times: dict[str, list[float]], name: str, fn):
    async def wrapper(*args, **kwargs):
        t = time.perf_counter()
        try:
            return await fn(*args, **kwargs)
        finally:
            times[name].append(time.perf_counter() - t)
    return wrapper


@asynccontextmanager
async def instrumented_farm(settings):
    """The farm served in this process with its open path's phases timed; yields (address, times)."""
    from webenv.browser import farm as farm_mod
    from webenv.browser.__main__ import serving

    times: dict[str, list[float]] = defaultdict(list)
    real_adapter_for = farm_mod.adapter_for

    def adapter_for(*args, **kwargs):
        adapter = real_adapter_for(*args, **kwargs)
        adapter.setup = _timed(times, "navigate", adapter.setup)
        return adapter

    farm_mod.adapter_for = adapter_for
    try:
        async with serving(settings) as (server, farm):
            farm.guard.acheck = _timed(times, "guard", farm.guard.acheck)
            farm.registry.create = _timed(times, "context", farm.registry.create)
            farm.driver.settle_start = _timed(times, "settle", farm.driver.settle_start)
            farm.driver.first_observation = _timed(times, "observe", farm.driver.first_observation)
            yield f"127.0.0.1:{server.port}", times
    finally:
        farm_mod.adapter_for = real_adapter_for


async def raw_open_floor(browser, url: str, observe_js: str, n: int, quiet_ms: int = 15,
                         max_ms: int = 1000) -> dict[str, float]:
    """The same page work without the service, on what the warm pool holds (a context with its page, made 0.4 s
    before): goto to DOMContentLoaded, then the farm's observe pass with the farm's DOM-quiet wait (WEBENV_FARM_
    SETTLE_QUIET_MS, 15 ms; a first observation counts it from the pass's start)."""
    nav, obs, total = [], [], []
    opts = {"formats": {"axtree": True}, "maxChars": 200000, "quietMs": quiet_ms, "maxMs": max_ms}
    for _ in range(n):
        ctx = await browser.new_context(viewport={"width": 1280, "height": 720})
        page = await ctx.new_page()
        await asyncio.sleep(0.4)
        t0 = time.perf_counter()
        await page.goto(url, wait_until="domcontentloaded")
        t1 = time.perf_counter()
        await page.evaluate(observe_js, opts)
        t2 = time.perf_counter()
        nav.append(t1 - t0)
        obs.append(t2 - t1)
        total.append(t2 - t0)
        await ctx.close()
    return {"goto_p50_ms": statistics.median(nav) * 1e3, "observe_p50_ms": statistics.median(obs) * 1e3,
            "total_p50_ms": statistics.median(total) * 1e3, "quiet_ms": quiet_ms}


async def breakdown(settings, url: str, spec, n: int = 25) -> dict[str, Any]:
    """p50 per phase of ``n`` sequential OpenSession calls of ``url``, and the client's and server's totals."""
    from webenv.client import make_channel
    from webenv.v1 import environment_pb2, environment_pb2_grpc

    client, server = [], []
    async with instrumented_farm(settings) as (address, times):
        channel = make_channel(address, timeout=120)
        stub = environment_pb2_grpc.EnvironmentServiceStub(channel)
        for i in range(n + 3):  # the first three warm the path up and are not counted
            await asyncio.sleep(0.4)
            if i == 3:
                times.clear()
            t = time.perf_counter()
            r = await stub.OpenSession(environment_pb2.OpenSessionRequest(start_url=url, observation_spec=spec))
            if i >= 3:
                client.append(time.perf_counter() - t)
                server.append(r.open_seconds)
            await stub.CloseSession(environment_pb2.CloseSessionRequest(session_id=r.session.session_id))
        await channel.close()
    p50 = {name: statistics.median(times[name]) * 1e3 for name in PHASES if times.get(name)}
    server_ms, client_ms = statistics.median(server) * 1e3, statistics.median(client) * 1e3
    return {"opens": n, "client_p50_ms": client_ms, "server_p50_ms": server_ms, "phases_p50_ms": p50,
            "server_rest_ms": server_ms - sum(p50.values()), "client_beyond_server_ms": client_ms - server_ms}

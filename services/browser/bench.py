"""Browser farm benchmark: raw Playwright loop vs the farm over gRPC, side by side, same page, same run.

    .venv/bin/python services/browser/bench.py --out bench/results [--seconds 6] [--ks 1,4,16,32] [--max-sessions 128]

(a) raw: one Chromium (same launch flags as the farm), K contexts, each looping `page.click()` + a full
    accessibility tree via CDP `Accessibility.getFullAXTree` (what a naive harness does);
(b) farm: `python -m webenv.browser` as a subprocess, K sessions, each looping Step(click) with an AXTREE
    observation over a real gRPC channel.
Both on a ~300-element product page served locally. Also: warm-pool OpenSession latency, a11y extraction
time (the farm's JS pass vs CDP getFullAXTree on the same page), PSS per session, and K=max-sessions
concurrent sessions stepping once each. Writes <out>/browser.json and <out>/browser.md.

Then the network guard's cost (`--guard-only` runs just this part): two farms identical but for
WEBENV_FARM_EGRESS_PROXY, interleaved, clicks (no network) and navigations (a new document every step) at
K = --guard-ks. Writes <out>/browser_guard.json and <out>/browser_guard.md.

MiniWoB++ click-test also runs BrowserGym 0.14.3 (bgym.py, its own venv, built on first use) on the same pages, for
its reset and step beside the farm's (`--browsergym-only` runs just that and writes <out>/browser_browsergym.json).

Then session fork (`--fork-only` runs just this part, ~1 minute): the real sites service (subprocess) and a farm
wired to it; a synthetic transaction task after --fork-prefix oracle steps; ForkSession(count=N) against its
baseline, N concurrent chains of OpenSession + replaying the prefix, interleaved, for N in --fork-ns. Writes
<out>/browser_fork.json and the "Session fork" section of <out>/browser.md.

Then scale (`--scale-only` runs just this part, ~5 minutes; scale.py): PSS per session with K = --scale-ks sessions
open on one farm, and the same collector run over one farm node vs two. Writes <out>/browser_scale.json and .md.
"""

from __future__ import annotations

import argparse
import asyncio
import http.server
import json
import os
import statistics
import subprocess
import sys
import threading
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import bgym  # services/browser/bgym.py (this script's folder is on sys.path)
import fidelity  # services/browser/fidelity.py
import grpc
import psutil
import scale  # services/browser/scale.py
import speed  # services/browser/speed.py
from grpc_health.v1 import health_pb2, health_pb2_grpc
from playwright.async_api import async_playwright
from speed import pct
from webenv.browser.egress import EgressPolicy, EgressProxy
from webenv.browser.guard import UrlGuard
from webenv.browser.observe import OBSERVE_JS
from webenv.browser.pool import chromium_args
from webenv.client import make_channel
from webenv.errors import WebenvError
from webenv.streams import Multiplexer
from webenv.testing import free_port
from webenv.v1 import common_pb2, environment_pb2, environment_pb2_grpc, task_pb2, task_pb2_grpc

MINIWOB_HTML = (fidelity.miniwob_html() or Path("/nonexistent")).resolve()
CHROMIUM = os.environ.get("WEBENV_FARM_CHROMIUM_PATH", "/usr/lib/chromium/chromium")
N_PRODUCTS = 100  # 100 x (link, price, button) + headings: ~300 elements

PAGE = "".join(
    ["<!doctype html><html><head><title>Products</title></head><body><h1>Products</h1>"
     "<nav><a href='#'>Home</a> <a href='#'>Cart</a></nav><ul>"]
    + [f'<li><a href="#p{i}">Product {i}</a> <span class="price">${i}.99</span> '
       f'<button id="b{i}" onclick="this.textContent=\'Added \' + (++this.dataset.n || (this.dataset.n=1))">Add</button></li>'
       for i in range(N_PRODUCTS)]
    + ["</ul></body></html>"]
).encode()


class _Handler(http.server.BaseHTTPRequestHandler):
    """Keep-alive like the sites service (uvicorn); `close=1` in the query closes the connection after the answer."""

    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # headers and body are two writes: without it, 40 ms of delayed ACK each

    def do_GET(self) -> None:
        ctype = "text/html"
        body = PAGE if self.path.startswith("/products") else b"not found"
        path = self.path.split("?", 1)[0]
        if path.split("/")[1:2] in (["miniwob"], ["core"], ["common"]):  # MiniWoB++ pages and their assets
            f = (MINIWOB_HTML / path.lstrip("/")).resolve()
            if MINIWOB_HTML in f.parents and f.is_file():
                body = f.read_bytes()
                ctype = {".js": "application/javascript", ".css": "text/css", ".png": "image/png"}.get(f.suffix, ctype)
        self.send_response(404 if body == b"not found" else 200)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        if "close=1" in self.path:
            self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        return


def pss_mb(pids: list[int]) -> float:
    total = 0
    for pid in pids:
        try:
            total += psutil.Process(pid).memory_full_info().pss
        except psutil.Error:
            pass
    return total / 2**20


def chromium_pids(root: int) -> list[int]:
    try:
        kids = psutil.Process(root).children(recursive=True)
    except psutil.Error:
        return []
    return [k.pid for k in kids if "chrom" in (k.name() or "").lower()]


# -- (a) raw Playwright loop ------------------------------------------------------------------------
async def raw_run(pw: Any, url: str, sites_addr: str, k: int, seconds: float) -> dict[str, Any]:
    browser = await pw.chromium.launch(executable_path=CHROMIUM, args=chromium_args(sites_addr, "bench-raw"))
    pages = []
    for _ in range(k):
        ctx = await browser.new_context(viewport={"width": 1280, "height": 720})
        page = await ctx.new_page()
        await page.goto(url)
        cdp = await ctx.new_cdp_session(page)
        await cdp.send("Accessibility.enable")
        pages.append((page, cdp))
    pids = chromium_pids(os.getpid())
    lat: list[float] = []
    stop = time.perf_counter() + seconds

    async def worker(i: int) -> None:
        page, cdp = pages[i]
        j = 0
        while time.perf_counter() < stop:
            t = time.perf_counter()
            await page.click(f"#b{j % N_PRODUCTS}")
            tree = await cdp.send("Accessibility.getFullAXTree")
            assert tree["nodes"]
            lat.append(time.perf_counter() - t)
            j += 1

    t0 = time.perf_counter()
    await asyncio.gather(*(worker(i) for i in range(k)))
    wall = time.perf_counter() - t0
    mem = pss_mb(pids)
    await browser.close()
    return {"k": k, "steps": len(lat), "steps_per_s": len(lat) / wall, "p50_ms": pct(lat, 50) * 1e3,
            "p95_ms": pct(lat, 95) * 1e3, "pss_per_session_mb": mem / k}


async def a11y_extraction(pw: Any, url: str, sites_addr: str, reps: int = 30) -> dict[str, Any]:
    """The farm's JS pass (AXTREE only, no settle) vs CDP getFullAXTree on the same page, each in its own
    context (the Accessibility domain is never enabled in farm pages), run one after the other."""
    browser = await pw.chromium.launch(executable_path=CHROMIUM, args=chromium_args(sites_addr, "bench-a11y"))
    js_page = await (await browser.new_context()).new_page()
    await js_page.goto(url)
    cdp_ctx = await browser.new_context()
    cdp_page = await cdp_ctx.new_page()
    await cdp_page.goto(url)
    cdp = await cdp_ctx.new_cdp_session(cdp_page)
    await cdp.send("Accessibility.enable")
    opts = {"formats": {"axtree": True}, "maxChars": 200000, "quietMs": 0, "maxMs": 0}
    js, cd = [], []
    lines = 0
    for _ in range(reps):
        t = time.perf_counter()
        out = json.loads(await js_page.evaluate(OBSERVE_JS, opts))
        js.append(time.perf_counter() - t)
        lines = out["axtree"].count("\n") + 1
    for _ in range(reps):
        t = time.perf_counter()
        await cdp.send("Accessibility.getFullAXTree")
        cd.append(time.perf_counter() - t)
    await browser.close()
    return {"farm_js_axtree_p50_ms": statistics.median(js) * 1e3, "cdp_full_axtree_p50_ms": statistics.median(cd) * 1e3,
            "axtree_lines": lines}


# -- (b) the farm over gRPC -------------------------------------------------------------------------
class FarmProc:
    def __init__(self, sites_addr: str, max_sessions: int, env_over: dict[str, str] | None = None) -> None:
        self.port = free_port()
        env = dict(os.environ, WEBENV_GRPC_PORT=str(self.port), WEBENV_METRICS_PORT="0", WEBENV_HOST="127.0.0.1",
                   WEBENV_FARM_SITES_HTTP_ADDR=sites_addr, WEBENV_FARM_MAX_SESSIONS=str(max_sessions),
                   WEBENV_FARM_WARM_CONTEXTS="4", WEBENV_LOG_LEVEL="WARNING", WEBENV_FARM_QUEUE_OPEN="4",
                   WEBENV_FARM_CHROMIUM_PATH=CHROMIUM, **(env_over or {}))
        self.proc = subprocess.Popen([sys.executable, "-m", "webenv.browser"], env=env,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        self.address = f"127.0.0.1:{self.port}"

    async def ready(self, wait_s: float = 60) -> None:
        deadline = time.monotonic() + wait_s
        async with make_channel(self.address, timeout=None) as ch:
            stub = health_pb2_grpc.HealthStub(ch)
            while time.monotonic() < deadline:
                try:
                    r = await stub.Check(health_pb2.HealthCheckRequest(), timeout=2)
                    if r.status == health_pb2.HealthCheckResponse.SERVING:
                        return
                except grpc.aio.AioRpcError:
                    pass
                if self.proc.poll() is not None:
                    raise RuntimeError(f"farm exited: {self.proc.stderr.read().decode()[-2000:] if self.proc.stderr else ''}")
                await asyncio.sleep(0.2)
        raise TimeoutError("farm did not become SERVING")

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(20)
        except subprocess.TimeoutExpired:
            self.proc.kill()


SPEC = common_pb2.ObservationSpec(formats=[common_pb2.OBSERVATION_FORMAT_AXTREE])


def click(j: int) -> common_pb2.Action:
    return common_pb2.Action(click=common_pb2.ClickAction(target=common_pb2.ElementTarget(selector=f"#b{j % N_PRODUCTS}")))


def cpu_seconds(root: psutil.Process) -> tuple[float, float]:
    """CPU seconds (user + system) used so far by `root` itself and by its descendants (the browsers)."""
    own = root.cpu_times()
    kids = 0.0
    for k in root.children(recursive=True):
        try:
            t = k.cpu_times()
            kids += t.user + t.system
        except psutil.Error:
            pass
    return own.user + own.system, kids


async def step_loop(stub: Any, sids: list[str], seconds: float, action: Callable[[int], common_pb2.Action],
                    farm: FarmProc | None = None, stream: bool = False) -> dict[str, Any]:
    """Each session steps `action(j)` back to back for `seconds`; steps/s, client-side latency and, with `farm`,
    CPU seconds of the farm process and of its browsers (steadier than wall time on a loaded machine).
    `stream`: the steps go over one shared StepStream (as the collector sends them), else unary Step calls."""
    root = psutil.Process(farm.proc.pid) if farm else None
    mux = Multiplexer("StepStream", stub.StepStream,
                      lambda tag, step: environment_pb2.StepStreamRequest(tag=tag, step=step)) if stream else None
    send = mux.request if mux else stub.Step
    cpu0 = cpu_seconds(root) if root else (0.0, 0.0)
    lat: list[float] = []
    errors: list[str] = []
    srv: list[float] = []
    stop = time.perf_counter() + seconds

    async def worker(sid: str) -> None:
        j = 0
        while time.perf_counter() < stop:
            t = time.perf_counter()
            try:
                r = await send(environment_pb2.StepRequest(session_id=sid, action=action(j)))
                assert r.observation.axtree
                srv.append(r.timings.observe_seconds)
                if r.observation.last_action_error:
                    errors.append(r.observation.last_action_error[:200])
            except grpc.aio.AioRpcError as exc:
                errors.append(f"{exc.code().name}: {(exc.details() or '')[:200]}")
            except WebenvError as exc:  # an error answer on the stream
                errors.append(f"{type(exc).__name__}: {str(exc)[:200]}")
            lat.append(time.perf_counter() - t)
            j += 1

    t0 = time.perf_counter()
    await asyncio.gather(*(worker(s) for s in sids))
    wall = time.perf_counter() - t0
    cpu1 = cpu_seconds(root) if root else (0.0, 0.0)
    if mux:
        await mux.close(grace=10)
    return {"k": len(sids), "steps": len(lat), "errors": len(errors), "error_kinds": sorted(set(errors))[:5],
            "steps_per_s": len(lat) / wall, "wall_s": wall,
            "p50_ms": pct(lat, 50) * 1e3, "p95_ms": pct(lat, 95) * 1e3, "observe_p50_ms": pct(srv, 50) * 1e3,
            "farm_cpu_s": cpu1[0] - cpu0[0], "browser_cpu_s": cpu1[1] - cpu0[1], "lat": lat}


async def farm_run(stub: Any, farm: FarmProc, url: str, k: int, seconds: float) -> dict[str, Any]:
    """K sessions clicking for `seconds` with unary Step calls, then as long over one StepStream (the collector's
    way); the farm process's own CPU per step of each."""
    sids = [(await stub.OpenSession(environment_pb2.OpenSessionRequest(start_url=url, observation_spec=SPEC))).session.session_id
            for _ in range(k)]
    out = await step_loop(stub, sids, seconds, click, farm)
    st = await step_loop(stub, sids, seconds, click, farm, stream=True)
    out.update(stream_steps_per_s=st["steps_per_s"], stream_p50_ms=st["p50_ms"], stream_errors=st["errors"],
               farm_cpu_ms_per_step=out["farm_cpu_s"] / max(1, out["steps"]) * 1e3,
               stream_farm_cpu_ms_per_step=st["farm_cpu_s"] / max(1, st["steps"]) * 1e3)
    for key in ("lat", "wall_s", "farm_cpu_s", "browser_cpu_s", "error_kinds"):
        out.pop(key)
    out["pss_per_session_mb"] = pss_mb(chromium_pids(farm.proc.pid)) / k
    for s in sids:
        await stub.CloseSession(environment_pb2.CloseSessionRequest(session_id=s))
    return out


def goto(j: int) -> common_pb2.Action:
    """A navigation to a new document each step (a fresh URL: nothing comes from the cache), on a kept-alive
    connection."""
    return common_pb2.Action(navigate=common_pb2.NavigateAction(url=f"http://bench.web.test/products?n={j}"))


def goto_new_connection(j: int) -> common_pb2.Action:
    """As `goto`, but the server closes each connection: every document needs a new one (the proxy's worst case)."""
    return common_pb2.Action(navigate=common_pb2.NavigateAction(url=f"http://bench.web.test/products?close=1&n={j}"))


def combine(parts: list[dict[str, Any]]) -> dict[str, Any]:
    """One figure from several step_loop runs of the same mode: totals over totals, percentiles over all steps."""
    lat = sorted(x for p in parts for x in p["lat"])
    steps, wall = sum(p["steps"] for p in parts), sum(p["wall_s"] for p in parts)
    return {"k": parts[0]["k"], "steps": steps, "errors": sum(p["errors"] for p in parts),
            "error_kinds": sorted({e for p in parts for e in p["error_kinds"]})[:5], "steps_per_s": steps / wall,
            "p50_ms": pct(lat, 50) * 1e3, "p95_ms": pct(lat, 95) * 1e3,
            "farm_cpu_ms_per_step": sum(p["farm_cpu_s"] for p in parts) * 1e3 / steps,
            "browser_cpu_ms_per_step": sum(p["browser_cpu_s"] for p in parts) * 1e3 / steps}


async def guard_overhead(sites_addr: str, url: str, ks: list[int], seconds: float) -> dict[str, Any]:
    """The network guard's cost: two farms, identical but for WEBENV_FARM_EGRESS_PROXY (all browser traffic through
    the egress proxy, or direct with URL checks only), on three workloads: clicks on a loaded page (no network), a
    navigation to a new document every step, and the same with a new connection for every document. Each point runs proxy, direct, direct, proxy for seconds/2 each (so a
    drift of the machine's load hits both alike) and reports totals; CPU per step is the steadier figure on a
    shared machine."""
    farms = {mode: FarmProc(sites_addr, max(ks) + 8, {"WEBENV_FARM_EGRESS_PROXY": str(mode == "proxy").lower()})
             for mode in ("proxy", "direct")}
    summary: list[dict[str, Any]] = []
    try:
        for f in farms.values():
            await f.ready()
        channels = {m: make_channel(f.address, timeout=120) for m, f in farms.items()}
        stubs = {m: environment_pb2_grpc.EnvironmentServiceStub(c) for m, c in channels.items()}
        for k in ks:
            sids = {m: [(await stubs[m].OpenSession(environment_pb2.OpenSessionRequest(
                start_url=url, observation_spec=SPEC))).session.session_id for _ in range(k)] for m in farms}
            for workload, action in (("click", click), ("goto", goto), ("goto, new connection", goto_new_connection)):
                parts: dict[str, list[dict[str, Any]]] = {"proxy": [], "direct": []}
                for mode in ("proxy", "direct", "direct", "proxy"):
                    parts[mode].append(await step_loop(stubs[mode], sids[mode], seconds / 2, action, farms[mode]))
                on, off = combine(parts["proxy"]), combine(parts["direct"])
                summary.append({"k": k, "workload": workload, "proxy": on, "direct": off,
                                "throughput_ratio": on["steps_per_s"] / off["steps_per_s"]})
                print("guard", summary[-1], flush=True)
            for m in farms:
                for s in sids[m]:
                    await stubs[m].CloseSession(environment_pb2.CloseSessionRequest(session_id=s))
        for c in channels.values():
            await c.close()
    finally:
        for f in farms.values():
            f.stop()
    return {"summary": summary, "seconds_per_point": seconds}


async def open_latency(stub: Any, url: str, n: int = 15) -> dict[str, Any]:
    """Sequential opens, each after the warm pool had time to refill (what a client sees at low load)."""
    client, server = [], []
    for _ in range(n):
        await asyncio.sleep(0.4)
        t = time.perf_counter()
        r = await stub.OpenSession(environment_pb2.OpenSessionRequest(start_url=url, observation_spec=SPEC))
        client.append(time.perf_counter() - t)
        server.append(r.open_seconds)
        await stub.CloseSession(environment_pb2.CloseSessionRequest(session_id=r.session.session_id))
    return {"open_p50_ms": statistics.median(client) * 1e3, "open_p95_ms": pct(client, 95) * 1e3,
            "open_server_p50_ms": statistics.median(server) * 1e3}


async def many_sessions(stub: Any, url: str, n: int, while_open: Callable[[], dict[str, Any]] | None = None
                        ) -> dict[str, Any]:
    """n concurrent sessions, opened 8 at a time, then one StepStream step each; errors counted. `while_open()`, run
    after the step while all are still open, adds its figures to the result."""
    sem = asyncio.Semaphore(8)
    errors: list[str] = []

    async def open_one() -> str:
        async with sem:
            try:
                r = await stub.OpenSession(environment_pb2.OpenSessionRequest(start_url=url, observation_spec=SPEC),
                                           timeout=120)
                return r.session.session_id
            except grpc.aio.AioRpcError as exc:
                errors.append(f"open: {exc.code().name}")
                return ""

    t0 = time.perf_counter()
    sids = [s for s in await asyncio.gather(*(open_one() for _ in range(n))) if s]
    open_s = time.perf_counter() - t0

    async def reqs() -> Any:
        for i, s in enumerate(sids):
            yield environment_pb2.StepStreamRequest(tag=str(i), step=environment_pb2.StepRequest(
                session_id=s, action=click(i), step_index=0, timeout_seconds=120))

    t1 = time.perf_counter()
    answered = 0
    async for msg in stub.StepStream(reqs()):
        answered += 1
        if msg.WhichOneof("result") == "error":
            errors.append(f"step: {msg.error.reason}")
    step_s = time.perf_counter() - t1
    extra = while_open() if while_open is not None else {}
    for s in sids:
        await stub.CloseSession(environment_pb2.CloseSessionRequest(session_id=s))
    return {"sessions": n, "opened": len(sids), "answered": answered, "errors": len(errors),
            "error_kinds": sorted(set(errors)), "open_all_s": open_s, "step_all_s": step_s, **extra}


# -- the egress proxy alone ------------------------------------------------------------------------
async def proxy_child(variant: str, upstream_port: int) -> None:
    """Child process of `proxy_alone`: the egress proxy on this process's own loop (`loop`) or on a thread of its own
    (`thread`, as the farm runs it) while this loop is kept busy in 2 ms slices, the way a loaded farm's loop is
    (`idle-thread`: not busy). Prints the proxy's port and thread id, then serves until killed."""
    proxy = EgressProxy(EgressPolicy(UrlGuard(), ("127.0.0.1", upstream_port)))
    port = await (proxy.start() if variant == "loop" else proxy.start_thread())
    tid = proxy._thread.native_id if proxy._thread is not None else 0
    print(port, tid, flush=True)
    while True:
        t = time.perf_counter()
        while variant != "idle-thread" and time.perf_counter() - t < 0.002:
            pass
        await asyncio.sleep(0 if variant != "idle-thread" else 1)


async def _http_get(port: int, path: str, socks: bool, reader_writer: Any = None) -> Any:
    """One GET of the bench page on a new connection (through the proxy when `socks`), or on `reader_writer`."""
    if reader_writer is None:
        r, w = await asyncio.open_connection("127.0.0.1", port)
        if socks:
            w.write(b"\x05\x01\x00")
            await r.readexactly(2)
            w.write(b"\x05\x01\x00\x03\x0ebench.web.test\x00\x50")
            await r.readexactly(10)
    else:
        r, w = reader_writer
    w.write(f"GET {path} HTTP/1.1\r\nHost: bench.web.test\r\n\r\n".encode())
    head = await r.readuntil(b"\r\n\r\n")
    n = int(head.lower().split(b"content-length:")[1].split(b"\r\n")[0])
    await r.readexactly(n)
    return r, w


async def proxy_alone(sites_addr: str, n_conn: int = 100, n_req: int = 500) -> dict[str, Any]:
    """The proxy without browsers: GETs of the ~25 KB bench page direct and through the proxy, on kept-alive and new
    connections; wall time per request at the client, CPU of the proxy's thread per request (when it has one)."""
    up_port = int(sites_addr.rsplit(":", 1)[1])
    out: dict[str, Any] = {}
    for variant in ("direct", "idle-thread", "thread", "loop"):
        child = None
        port, socks = up_port, False
        if variant != "direct":
            child = await asyncio.create_subprocess_exec(sys.executable, __file__, "--proxy-child", variant,
                                                         str(up_port), stdout=subprocess.PIPE)
            assert child.stdout is not None
            port_s, tid_s = (await child.stdout.readline()).split()
            port, socks = int(port_s), True
        proc = psutil.Process(child.pid) if child else None
        tid = int(tid_s) if child else 0

        def proxy_cpu(proc: psutil.Process | None = proc, tid: int = tid) -> float:
            """CPU seconds of the proxy's own thread (the busy loop's slices are not the proxy's)."""
            return next((t.user_time + t.system_time for t in proc.threads() if t.id == tid), 0.0) if proc else 0.0

        try:
            row: dict[str, Any] = await asyncio.wait_for(
                _proxy_rows(port, socks, n_req, n_conn, proxy_cpu, tid), 120)
        except (TimeoutError, OSError) as exc:  # seen 2026-11-30: the busy-loop child's proxy thread starved
            row = {"error": f"{type(exc).__name__}: {exc}"[:120] if str(exc) else "no answer within 120 s"}
        finally:
            if child:
                child.kill()
                await child.wait()
        out[variant] = row
        print("proxy alone", variant, row, flush=True)
    return out


async def _proxy_rows(port: int, socks: bool, n_req: int, n_conn: int, proxy_cpu: Callable[[], float],
                      tid: int) -> dict[str, Any]:
    """Wall time per request and per new connection through `port`, and the proxy thread's CPU for each."""
    rw = await _http_get(port, "/products", socks)
    row: dict[str, float] = {}
    for label, n in (("request", n_req), ("connection", n_conn)):
        cpu0 = proxy_cpu()
        t0 = time.perf_counter()
        for _ in range(n):
            if label == "request":
                await _http_get(port, "/products", socks, rw)
            else:
                _, w = await _http_get(port, "/products?close=1", socks)
                w.close()
        row[f"us_per_{label}"] = (time.perf_counter() - t0) / n * 1e6
        if tid:
            row[f"proxy_cpu_us_per_{label}"] = (proxy_cpu() - cpu0) / n * 1e6
    rw[1].close()
    return row


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default="bench/results")
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--ks", default="1,4,16,32")
    ap.add_argument("--max-sessions", type=int, default=128)
    ap.add_argument("--guard-ks", default="1,16", help="K values of the network-guard comparison")
    ap.add_argument("--guard-only", action="store_true", help="run only the network-guard comparison")
    ap.add_argument("--fork-only", action="store_true", help="run only the session-fork comparison")
    ap.add_argument("--browsergym-only", action="store_true",
                    help="run only BrowserGym on MiniWoB click-test (its own venv, built on first use)")
    ap.add_argument("--speed-only", action="store_true",
                    help="run only the step-speed comparisons (K loop, MiniWoB, open) and fidelity; no guard or fork")
    ap.add_argument("--miniwob-reps", type=int, default=20, help="MiniWoB click-test episodes per way")
    ap.add_argument("--fork-ns", default="1,4", help="copies per ForkSession")
    ap.add_argument("--fork-prefix", type=int, default=5, help="oracle steps taken before the fork")
    ap.add_argument("--fork-reps", type=int, default=7, help="repetitions per N")
    ap.add_argument("--scale-only", action="store_true", help="run only the scale part (scale.py: 1 vs 2 nodes, PSS)")
    ap.add_argument("--loop-only", action="store_true",
                    help="run only the farm vs the raw farm-work loop at --ks (interleaved, machine CPU per step)")
    ap.add_argument("--open-only", action="store_true",
                    help="run only the plain-URL OpenSession breakdown (openphases.py: its time by phase, and the floor)")
    ap.add_argument("--scale-episodes", type=int, default=60, help="episodes per run of the 1-vs-2-node comparison")
    ap.add_argument("--scale-concurrency", type=int, default=8, help="episodes in flight in that comparison")
    ap.add_argument("--scale-ks", default="1,16,128", help="concurrent sessions at which PSS is measured")
    args = ap.parse_args()
    fork_args = ([int(x) for x in args.fork_ns.split(",")], args.fork_prefix, args.fork_reps)
    if args.fork_only:
        write_fork_results(Path(args.out), await fork_bench(*fork_args))
        return
    ks = [int(x) for x in args.ks.split(",")]
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    srv.daemon_threads = True
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    sites_addr = f"127.0.0.1:{srv.server_address[1]}"
    url = "http://bench.web.test/products"
    guard_ks = [int(x) for x in args.guard_ks.split(",")]
    if args.browsergym_only:
        try:
            bg = await browsergym_click_test(sites_addr, args.miniwob_reps)
        finally:
            srv.shutdown()
        write_browsergym_results(Path(args.out), bg)
        if "error" in bg:
            raise SystemExit(f"BrowserGym: {bg['error']}")
        return
    if args.scale_only:
        try:
            await run_scale(args, sites_addr, url)
        finally:
            srv.shutdown()
        return
    if args.loop_only:
        try:
            write_loop_results(Path(args.out), await run_loop_only(sites_addr, url, ks, args.seconds))
        finally:
            srv.shutdown()
        return
    if args.open_only:
        try:
            write_open_results(Path(args.out), await run_open_breakdown(sites_addr, url))
        finally:
            srv.shutdown()
        return
    if args.guard_only:
        try:
            write_guard_results(Path(args.out), await run_guard(sites_addr, url, guard_ks, args.seconds))
        finally:
            srv.shutdown()
        return
    started = time.time()
    result: dict[str, Any] = {"machine": {"cpus": os.cpu_count(), "load_avg_1m_at_start": os.getloadavg()[0]},
                              "page_elements": N_PRODUCTS * 3 + 3, "seconds_per_point": args.seconds}
    farm = FarmProc(sites_addr, max(args.max_sessions, max(ks)) + 8)
    try:
        async with async_playwright() as pw:
            result["a11y"] = await a11y_extraction(pw, url, sites_addr)
            print("a11y", result["a11y"], flush=True)
            await farm.ready()
            channel = make_channel(farm.address, timeout=120)
            stub = environment_pb2_grpc.EnvironmentServiceStub(channel)
            result["open"] = await open_latency(stub, url)
            print("open", result["open"], flush=True)
            raw, work, fr = [], [], []
            work_browser = await pw.chromium.launch(executable_path=CHROMIUM,
                                                    args=chromium_args(sites_addr, "bench-work"))
            for k in ks:  # interleaved so machine-load drift hits all three alike
                raw.append(await raw_run(pw, url, sites_addr, k, args.seconds))
                print("raw", raw[-1], flush=True)
                work.append(await speed.raw_farm_work_run(work_browser, url, k, args.seconds, N_PRODUCTS))
                print("raw farm-work", work[-1], flush=True)
                fr.append(await farm_run(stub, farm, url, k, args.seconds))
                print("farm", fr[-1], flush=True)
            result["raw"], result["raw_farm_work"], result["farm"] = raw, work, fr
            result["miniwob"] = await speed.miniwob_click_test(
                work_browser, stub, "http://miniwob.web.test/miniwob/click-test.html", args.miniwob_reps)
            print("miniwob", result["miniwob"], flush=True)
            await work_browser.close()
            result["browsergym"] = await browsergym_click_test(sites_addr, args.miniwob_reps)
            result["miniwob"].update(farm_vs_browsergym(result["miniwob"], result["browsergym"]))
            best_raw = max(r["steps_per_s"] for r in raw)
            best_farm = max(r["stream_steps_per_s"] for r in fr)  # StepStream: the collector's way
            result["best_raw_steps_per_s"], result["best_farm_steps_per_s"] = best_raw, best_farm
            result["speedup_best"] = best_farm / best_raw
            if args.max_sessions and not args.speed_only:
                result["many"] = await many_sessions(stub, url, args.max_sessions)
                print("many", result["many"], flush=True)
            await channel.close()
        farm.stop()
        result["fidelity"] = (await fidelity.run(None, 7))["groups"]
        print("fidelity", result["fidelity"], flush=True)
        if not args.speed_only:
            result["guard"] = await run_guard(sites_addr, url, guard_ks, args.seconds)
            result["fork"] = await fork_bench(*fork_args)
            await run_scale(args, sites_addr, url)
    finally:
        farm.stop()
        srv.shutdown()
    result["machine"]["load_avg_1m_at_end"] = os.getloadavg()[0]
    result["wall_seconds"] = time.time() - started
    result["targets"] = {
        "farm_vs_raw_best_ge_1.5x": result["speedup_best"] >= 1.5,
        "open_p50_le_50ms": result["open"]["open_p50_ms"] <= 50,
        "a11y_p50_le_15ms": result["a11y"]["farm_js_axtree_p50_ms"] <= 15,
        "many_sessions_without_errors": bool(result.get("many")) and result["many"]["errors"] == 0,
        "farm_within_5pct_of_raw_farm_work_every_k": all(  # over StepStream, the collector's way
            f["stream_steps_per_s"] >= 0.95 * w["steps_per_s"] for f, w in zip(result["farm"], result["raw_farm_work"],
                                                                                strict=True)),
        "miniwob_step_le_raw_naive": result["miniwob"]["farm_step_p50_ms"] <= result["miniwob"]["naive_step_p50_ms"],
        "miniwob_step_le_quarter_of_browsergym": result["miniwob"].get("farm_step_vs_browsergym", 1.0) <= 0.25,
        "miniwob_reset_ge_30x_faster_than_browsergym": result["miniwob"].get("browsergym_reset_vs_farm", 0.0) >= 30,
        "fidelity_recall_precision_ge_0.98": all(g["recall"] >= 0.98 and g["precision"] >= 0.98
                                                 for g in result["fidelity"].values()),
    }
    guard, fork = result.pop("guard", None), result.pop("fork", None)
    write_results(Path(args.out), result)
    if guard is not None and fork is not None:
        write_guard_results(Path(args.out), guard)
        write_fork_results(Path(args.out), fork)  # its section goes into browser.md, written just above


async def run_loop_only(sites_addr: str, url: str, ks: list[int], seconds: float) -> dict[str, Any]:
    """The farm (Step, StepStream) against the raw farm-work loop (speed.py) doing the same page work, per K in the
    order work, farm, farm, work (seconds/2 each), with the whole machine's CPU per step beside each way's own: on
    a CPU-bound 2-core machine steps/s is what the CPU per step allows, so the gap is read there."""
    result: dict[str, Any] = {"machine": {"cpus": os.cpu_count(), "load_avg_1m_at_start": os.getloadavg()[0]},
                              "seconds_per_point": seconds, "points": []}
    farm = FarmProc(sites_addr, max(ks) + 8)
    me = psutil.Process()
    try:
        async with async_playwright() as pw:
            await farm.ready()
            channel = make_channel(farm.address, timeout=120)
            stub = environment_pb2_grpc.EnvironmentServiceStub(channel)
            work_browser = await pw.chromium.launch(executable_path=CHROMIUM, args=chromium_args(sites_addr, "bench-work"))
            for k in ks:
                sids = [(await stub.OpenSession(environment_pb2.OpenSessionRequest(
                    start_url=url, observation_spec=SPEC))).session.session_id for _ in range(k)]
                tot: dict[str, dict[str, float]] = {w: defaultdict(float) for w in ("work", "step", "stream")}
                for way in ("work", "farm", "farm", "work"):
                    for mode in ("work",) if way == "work" else ("step", "stream"):
                        t = tot[mode]
                        if mode == "work":  # its own window: the K pages' set-up is not counted
                            r = await speed.raw_farm_work_run(work_browser, url, k, seconds / 2, N_PRODUCTS)
                            t["machine_cpu_s"] += r["machine_cpu_s"]
                            t["client_cpu_s"] += r["client_cpu_ms_per_step"] * r["steps"] / 1e3
                        else:
                            busy0, me0 = speed.machine_busy_seconds(), sum(me.cpu_times()[:2])
                            r = await step_loop(stub, sids, seconds / 2, click, farm, stream=mode == "stream")
                            t["machine_cpu_s"] += speed.machine_busy_seconds() - busy0
                            t["client_cpu_s"] += sum(me.cpu_times()[:2]) - me0
                            t["farm_cpu_s"] += r["farm_cpu_s"]
                        t["steps"] += r["steps"]
                        t["wall_s"] += r["wall_s"]
                for s_id in sids:
                    await stub.CloseSession(environment_pb2.CloseSessionRequest(session_id=s_id))
                point: dict[str, Any] = {"k": k}
                for mode, t in tot.items():
                    n = max(1.0, t["steps"])
                    point[mode] = {"steps_per_s": t["steps"] / t["wall_s"], "machine_cpu_ms_per_step": t["machine_cpu_s"] / n * 1e3,
                                   "client_cpu_ms_per_step": t["client_cpu_s"] / n * 1e3,
                                   "farm_cpu_ms_per_step": t.get("farm_cpu_s", 0.0) / n * 1e3,
                                   "machine_busy_cores": t["machine_cpu_s"] / t["wall_s"]}
                print("loop", point, flush=True)
                result["points"].append(point)
            await work_browser.close()
            await channel.close()
    finally:
        farm.stop()
    return result


def write_loop_results(out: Path, r: dict[str, Any]) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "browser_loop.json").write_text(json.dumps(r, indent=1))
    lines = ["# The farm against the raw loop doing the same page work", "",
             f"`.venv/bin/python services/browser/bench.py --loop-only --ks {','.join(str(p['k']) for p in r['points'])} "
             f"--seconds {r['seconds_per_point']:g} --out bench/results`: per K, raw farm-work (speed.py: the farm's own "
             "page work in a Playwright loop, no service), farm Step and farm StepStream, in the order work, farm, farm, "
             f"work; {r['machine']['cpus']} CPUs, load average at start {r['machine']['load_avg_1m_at_start']:.1f}. "
             "Machine CPU per step is every process's (Chromium included) over the steps taken.", "",
             "| K | farm-work steps/s | Step | StepStream | Step / work | StepStream / work | machine CPU ms/step: work | "
             "Step | StepStream | busy cores: work / StepStream | farm process CPU ms/step (StepStream) | "
             "client CPU ms/step: work / StepStream |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for p in r["points"]:
        w, st, ss = p["work"], p["step"], p["stream"]
        lines.append(f"| {p['k']} | {w['steps_per_s']:.1f} | {st['steps_per_s']:.1f} | {ss['steps_per_s']:.1f} | "
                     f"{st['steps_per_s'] / w['steps_per_s']:.2f}x | {ss['steps_per_s'] / w['steps_per_s']:.2f}x | "
                     f"{w['machine_cpu_ms_per_step']:.1f} | {st['machine_cpu_ms_per_step']:.1f} | "
                     f"{ss['machine_cpu_ms_per_step']:.1f} | {w['machine_busy_cores']:.2f} / {ss['machine_busy_cores']:.2f} | "
                     f"{ss['farm_cpu_ms_per_step']:.2f} | {w['client_cpu_ms_per_step']:.2f} / {ss['client_cpu_ms_per_step']:.2f} |")
    (out / "browser_loop.md").write_text("\n".join(lines) + "\n")
    print((out / "browser_loop.md").read_text())


async def run_open_breakdown(sites_addr: str, url: str, n: int = 25) -> dict[str, Any]:
    """openphases.py: a plain-URL OpenSession by phase (farm in process, same settings as FarmProc), and the raw
    floor of the same page work, one after the other."""
    import openphases
    from webenv.browser.config import Settings

    settings = Settings(grpc_port=0, metrics_port=0, host="127.0.0.1", farm_sites_http_addr=sites_addr,
                        farm_max_sessions=16, farm_warm_contexts=4, farm_queue_open=4, log_level="WARNING",
                        farm_chromium_path=CHROMIUM)
    result: dict[str, Any] = {"machine": {"cpus": os.cpu_count(), "load_avg_1m_at_start": os.getloadavg()[0]}}
    result["farm"] = await openphases.breakdown(settings, url, SPEC, n)
    print("open breakdown", result["farm"], flush=True)
    async with async_playwright() as pw:
        browser = await pw.chromium.launch(executable_path=CHROMIUM, args=chromium_args(sites_addr, "bench-open"))
        result["raw"] = await openphases.raw_open_floor(browser, url, OBSERVE_JS, n)
        await browser.close()
    print("raw open floor", result["raw"], flush=True)
    return result


def write_open_results(out: Path, r: dict[str, Any]) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "browser_open.json").write_text(json.dumps(r, indent=1))
    f, raw = r["farm"], r["raw"]
    names = {"guard": "URL guard (acheck)", "context": "context from the warm pool (registry.create)",
             "navigate": "start page: goto to DOMContentLoaded (adapter.setup)",
             "settle": "settle after it (settle_start)", "observe": "first observation + tabs (first_observation)"}
    lines = ["# Where a plain-URL OpenSession's time goes", "",
             "`.venv/bin/python services/browser/bench.py --open-only --out bench/results` (openphases.py): "
             f"{f['opens']} sequential opens of the farm bench's page (~300 elements), each after the warm pool had "
             f"0.4 s to refill; {r['machine']['cpus']} CPUs, load average at start "
             f"{r['machine']['load_avg_1m_at_start']:.1f}. p50 of each phase, timed inside the farm's open path.", "",
             "| part | p50 ms | share of the server's open |", "| --- | --- | --- |"]
    for k, v in f["phases_p50_ms"].items():
        lines.append(f"| {names.get(k, k)} | {v:.1f} | {v / f['server_p50_ms']:.0%} |")
    lines += [f"| the rest of the server's open (admission, open-queue slot, the answer) | {f['server_rest_ms']:.1f} | "
              f"{f['server_rest_ms'] / f['server_p50_ms']:.0%} |",
              f"| **server, OpenSession.open_seconds** | **{f['server_p50_ms']:.1f}** | |",
              f"| client beyond the server (gRPC on loopback, serialisation) | {f['client_beyond_server_ms']:.1f} | |",
              f"| **client** | **{f['client_p50_ms']:.1f}** | |", "",
              "The floor, the same page work in a raw Playwright loop on a context and page made 0.4 s before, as "
              f"the warm pool holds them (no service): goto to DOMContentLoaded {raw['goto_p50_ms']:.1f} ms, the observe "
              f"pass with the farm's {raw['quiet_ms']} ms DOM-quiet wait {raw['observe_p50_ms']:.1f} ms, "
              f"{raw['total_p50_ms']:.1f} ms in all."]
    (out / "browser_open.md").write_text("\n".join(lines) + "\n")
    print((out / "browser_open.md").read_text())


async def browsergym_click_test(sites_addr: str, reps: int) -> dict[str, Any]:
    """BrowserGym on the same MiniWoB pages (this script's server, on loopback), from its own venv (bgym.py);
    {"error": why} when it cannot run."""
    print("browsergym: click-test in its own venv (built on first use)", flush=True)
    r = await asyncio.to_thread(bgym.measure, f"http://{sites_addr}/miniwob/", reps, CHROMIUM)
    print("browsergym", r, flush=True)
    return r


def write_browsergym_results(out: Path, bg: dict[str, Any]) -> None:
    """<out>/browser_browsergym.json (`--browsergym-only`; the full run puts it in browser.json)."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "browser_browsergym.json").write_text(json.dumps(bg, indent=2))


def farm_vs_browsergym(m: dict[str, Any], bg: dict[str, Any]) -> dict[str, float]:
    """The farm's step as a fraction of BrowserGym's, and how many times faster its reset is (none without
    BrowserGym's figures)."""
    if "error" in bg:
        return {}
    return {"farm_step_vs_browsergym": m["farm_step_p50_ms"] / bg["step_p50_ms"],
            "browsergym_reset_vs_farm": bg["reset_p50_ms"] / m["farm_reset_p50_ms"]}


async def run_guard(sites_addr: str, url: str, ks: list[int], seconds: float) -> dict[str, Any]:
    """The network-guard comparison with the machine's load around it."""
    load0 = os.getloadavg()[0]
    r = await guard_overhead(sites_addr, url, ks, seconds)
    r["proxy_alone"] = await proxy_alone(sites_addr)
    r["machine"] = {"cpus": os.cpu_count(), "load_avg_1m_at_start": load0, "load_avg_1m_at_end": os.getloadavg()[0]}
    return r


async def run_scale(args: argparse.Namespace, sites_addr: str, url: str) -> None:
    """scale.py's two parts (1 vs 2 farm nodes behind a collector; PSS per session) -> <out>/browser_scale.*"""
    r: dict[str, Any] = {"machine_at_start": scale.machine()}
    r["memory"] = await scale_memory(sites_addr, url, [int(x) for x in args.scale_ks.split(",")])
    r["nodes"] = await scale.nodes_bench(args.scale_episodes, args.scale_concurrency, cpu_seconds)
    r["machine_at_end"] = scale.machine()
    scale.write_results(Path(args.out), r)


async def scale_memory(sites_addr: str, url: str, ks: list[int]) -> dict[str, Any]:
    """PSS of one farm (its process + all its Chromium) with K sessions open (many_sessions), K in `ks` ascending;
    K=0 first: the idle node with its warm pool."""
    farm = FarmProc(sites_addr, max(ks) + 8)
    try:
        await farm.ready()
        channel = make_channel(farm.address, timeout=120)
        stub = environment_pb2_grpc.EnvironmentServiceStub(channel)

        def pss() -> dict[str, Any]:
            kids = chromium_pids(farm.proc.pid)
            own, browsers = pss_mb([farm.proc.pid]), pss_mb(kids)
            return {"farm_mb": own, "chromium_mb": browsers, "total_mb": own + browsers, "chromium_processes": len(kids)}

        await many_sessions(stub, url, 4)  # the first pages (fonts, caches), not measured
        await asyncio.sleep(2)  # the warm pool refilled
        points = [{"k": 0, "opened": 0, "errors": 0, **pss()}]
        avail = psutil.virtual_memory().available / 2**20
        for k in ks:
            r = await many_sessions(stub, url, k, while_open=pss)
            points.append({key: r[key] for key in ("opened", "errors", "error_kinds", "open_all_s", "farm_mb",
                                                    "chromium_mb", "total_mb", "chromium_processes")} | {"k": k})
            print("scale memory", points[-1], flush=True)
        await channel.close()
    finally:
        farm.stop()
    a, b = points[-2], points[-1]
    slope = (b["total_mb"] - a["total_mb"]) / (b["k"] - a["k"])
    return {"max_sessions": max(ks) + 8, "open_concurrency": 8, "points": points, "slope_from_k": a["k"],
            "slope_to_k": b["k"], "slope_mb_per_session": slope, "per_session_at_max_mb": b["total_mb"] / b["k"],
            "ram_available_mb_at_k0": avail,
            "sessions_fit_in_total_ram": int((psutil.virtual_memory().total / 2**20 - points[0]["total_mb"]) / slope),
            "sessions_fit_in_available_ram": int(avail / slope)}


def write_guard_results(out: Path, r: dict[str, Any]) -> None:
    """<out>/browser_guard.json and .md."""
    seconds, load0 = r["seconds_per_point"], r["machine"]["load_avg_1m_at_start"]
    out.mkdir(parents=True, exist_ok=True)
    (out / "browser_guard.json").write_text(json.dumps(r, indent=2))
    lines = ["# Browser farm: cost of the network guard (egress proxy)", "",
             f"Machine: {r['machine']['cpus']} CPUs, 1-min load {load0:.1f} at start, "
             f"{r['machine']['load_avg_1m_at_end']:.1f} at end. Two farms, identical but for "
             "`WEBENV_FARM_EGRESS_PROXY` (proxy: every browser connection through the egress proxy; direct: URL "
             f"checks only), each point run proxy, direct, direct, proxy for {seconds / 2} s each. click = Step(click) on a loaded "
             "~300-element page (no network); goto = Step(navigate) to a new document every step over a kept-alive "
             "connection (as the sites service keeps them); new connection = the server closes each one (the proxy's "
             "worst case: a SOCKS handshake and an upstream connect per document).", "",
             "| K | workload | steps/s proxy | steps/s direct | ratio | p50 ms proxy / direct | p95 ms proxy / direct "
             "| farm CPU ms/step proxy / direct | browser CPU ms/step proxy / direct | errors |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for x in r["summary"]:
        on, off = x["proxy"], x["direct"]
        lines.append(f"| {x['k']} | {x['workload']} | {on['steps_per_s']:.1f} | {off['steps_per_s']:.1f} | "
                     f"{x['throughput_ratio']:.2f} | {on['p50_ms']:.0f} / {off['p50_ms']:.0f} | "
                     f"{on['p95_ms']:.0f} / {off['p95_ms']:.0f} | "
                     f"{on['farm_cpu_ms_per_step']:.1f} / {off['farm_cpu_ms_per_step']:.1f} | "
                     f"{on['browser_cpu_ms_per_step']:.1f} / {off['browser_cpu_ms_per_step']:.1f} | "
                     f"{on['errors']} / {off['errors']} |")
    pa = r["proxy_alone"]
    lines += ["", "The proxy alone (no browser): GETs of the same page, client wall time per request on a kept-alive "
              "connection and per new connection, and CPU of the proxy's own thread. *loop*: the proxy on the loop of a "
              "process kept busy in 2 ms slices (a loaded farm's loop); *thread*: on its own thread and uvloop loop "
              "(as the farm runs it) beside that busy loop; *idle-thread*: the same, loop not busy.", "",
              "| path | µs per request | µs per new connection | proxy CPU µs per request | proxy CPU µs per connection |",
              "| --- | --- | --- | --- | --- |"]
    for variant, row in pa.items():
        if "error" in row:
            lines.append(f"| {variant} | {row['error']} | | | |")
            continue
        cpu = [f"{row[k]:.0f}" if k in row else "-" for k in ("proxy_cpu_us_per_request", "proxy_cpu_us_per_connection")]
        lines.append(f"| {variant} | {row['us_per_request']:.0f} | {row['us_per_connection']:.0f} | {cpu[0]} | {cpu[1]} |")
    kinds = sorted({e for x in r["summary"] for m in ("proxy", "direct") for e in x[m].get("error_kinds", [])})
    if kinds:
        lines += ["", "Errors seen (`last_action_error` or RPC status, both farms): " + "; ".join(kinds)]
    (out / "browser_guard.md").write_text("\n".join(lines) + "\n")
    print((out / "browser_guard.md").read_text())


def write_results(out: Path, result: dict[str, Any]) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "browser.json").write_text(json.dumps(result, indent=2))
    (out / "browser.md").write_text(render_md(result))
    print((out / "browser.md").read_text())


def browsergym_md(bg: dict[str, Any] | None, m: dict[str, Any]) -> list[str]:
    """BrowserGym's row of the MiniWoB table and the farm-vs-BrowserGym line (an error row when it did not run)."""
    if bg is None:
        return []
    if "error" in bg:
        return [f"| BrowserGym {bgym.VERSION} | did not run: {bg['error'][:300]} | |"]
    v = bg["versions"]
    return [f"| BrowserGym {v['browsergym']} (Playwright {v['playwright']}, headless, slow_mo 0, no pre-observation "
            f"delay) | {bg['reset_p50_ms']:,.0f} (relaunches its 2 browsers: {bg['reset_launch_p50_ms']:.0f}) | "
            f"{bg['step_p50_ms']:.0f} (observation {bg['step_observe_p50_ms']:.0f}: DOM, AXTree, screenshot) |", "",
            f"Farm vs BrowserGym: step {m['farm_step_vs_browsergym']:.2f}x of BrowserGym's (target <= 0.25), "
            f"reset {m['browsergym_reset_vs_farm']:.1f}x faster (target >= 30); back to back (no time between "
            f"episodes for the pool to refill) a whole farm episode (OpenSession + Step + CloseSession) takes "
            f"{m['farm_episode_b2b_p50_ms']:.0f} ms vs BrowserGym's reset + step "
            f"{bg['reset_p50_ms'] + bg['step_p50_ms']:,.0f} ms ({(bg['reset_p50_ms'] + bg['step_p50_ms']) / m['farm_episode_b2b_p50_ms']:.1f}x)."]


def render_md(r: dict[str, Any]) -> str:
    lines = ["# Browser farm benchmark", "",
             f"Machine: {r['machine']['cpus']} CPUs, 1-min load {r['machine']['load_avg_1m_at_start']:.1f} at start, "
             f"{r['machine']['load_avg_1m_at_end']:.1f} at end (other work shares the machine). "
             f"Page: ~{r['page_elements']} elements; {r['seconds_per_point']} s per point. Click + AXTREE observation: "
             "raw naive = Playwright `page.click()` + CDP getFullAXTree; raw farm-work = the farm's own work in a "
             "Playwright loop, no service (speed.py); farm = `python -m webenv.browser` over gRPC.", "",
             "| K | raw naive steps/s | raw farm-work steps/s | farm Step steps/s | farm StepStream steps/s "
             "| Step / farm-work | StepStream / farm-work | StepStream / naive | farm-work p50 ms | farm Step p50 ms "
             "| farm StepStream p50 ms | farm-work client CPU ms/step | farm process CPU ms/step (Step / StepStream) "
             "| raw PSS/session MB | farm PSS/session MB |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for a, w, b in zip(r["raw"], r["raw_farm_work"], r["farm"], strict=True):
        lines.append(f"| {a['k']} | {a['steps_per_s']:.1f} | {w['steps_per_s']:.1f} | {b['steps_per_s']:.1f} | "
                     f"{b['stream_steps_per_s']:.1f} | {b['steps_per_s'] / w['steps_per_s']:.2f}x | "
                     f"{b['stream_steps_per_s'] / w['steps_per_s']:.2f}x | {b['stream_steps_per_s'] / a['steps_per_s']:.2f}x | "
                     f"{w['p50_ms']:.0f} | {b['p50_ms']:.0f} | {b['stream_p50_ms']:.0f} | {w['client_cpu_ms_per_step']:.2f} | "
                     f"{b['farm_cpu_ms_per_step']:.2f} / {b['stream_farm_cpu_ms_per_step']:.2f} | "
                     f"{a['pss_per_session_mb']:.0f} | {b['pss_per_session_mb']:.0f} |")
    m = r["miniwob"]
    lines += ["", f"Best: farm {r['best_farm_steps_per_s']:.1f} steps/s vs raw naive {r['best_raw_steps_per_s']:.1f} "
              f"= **{r['speedup_best']:.2f}x** (target >= 1.5x).", "",
              f"MiniWoB++ click-test, one session, {m['reps']} episodes each way (p50 ms):", "",
              "| | reset (new episode) | step (click + observation) |", "| --- | --- | --- |",
              f"| raw naive | {m['naive_reset_p50_ms']:.0f} | {m['naive_step_p50_ms']:.0f} |",
              f"| raw farm-work | {m['work_reset_p50_ms']:.0f} | {m['work_step_p50_ms']:.0f} |",
              f"| farm | {m['farm_reset_p50_ms']:.0f} (OpenSession 0.4 s after the last episode: a context primed with "
              "the page, the episode, the observation) | "
              f"{m['farm_step_p50_ms']:.0f} (action {m['farm_action_p50_ms']:.0f}, settle {m['farm_settle_p50_ms']:.0f}, "
              f"observe {m['farm_observe_p50_ms']:.0f}) |", *browsergym_md(r.get("browsergym"), m), "",
              f"Warm-pool OpenSession: p50 {r['open']['open_p50_ms']:.0f} ms client-side "
              f"(server {r['open']['open_server_p50_ms']:.0f} ms), p95 {r['open']['open_p95_ms']:.0f} ms (target <= 50 ms p50).",
              f"A11y tree: farm JS pass p50 {r['a11y']['farm_js_axtree_p50_ms']:.1f} ms "
              f"({r['a11y']['axtree_lines']} lines) vs CDP getFullAXTree {r['a11y']['cdp_full_axtree_p50_ms']:.1f} ms (target <= 15 ms)."]
    if r.get("many"):
        mm = r["many"]
        lines.append(f"{mm['sessions']} concurrent sessions: opened {mm['opened']} in {mm['open_all_s']:.1f} s, "
                     f"one StepStream step each answered {mm['answered']} in {mm['step_all_s']:.1f} s, errors {mm['errors']} "
                     f"{mm['error_kinds'] or ''}.")
    if r.get("fidelity"):
        lines += ["", "Observation fidelity vs Chromium's own tree (fidelity.py; details in fidelity.md):", "",
                  "| pages | n | recall | precision | reachable by id |", "| --- | --- | --- | --- | --- |"]
        for g, v in r["fidelity"].items():
            lines.append(f"| {g} | {v['pages']} | {v['recall']:.3f} | {v['precision']:.3f} | {v['reachable']:.3f} |")
    lines += ["", "Targets: " + ", ".join(f"{k}={'yes' if v else 'NO'}" for k, v in r["targets"].items()),
              "", "The network guard's cost (egress proxy on vs off): browser_guard.md. Session fork: browser_fork.md.", ""]
    return "\n".join(lines)


# -- session fork ------------------------------------------------------------------------------------
def _sites_proc(http_port: int, grpc_port: int) -> subprocess.Popen[bytes]:
    env = dict(os.environ, WEBENV_HTTP_PORT=str(http_port), WEBENV_GRPC_PORT=str(grpc_port), WEBENV_METRICS_PORT="0",
               WEBENV_HOST="127.0.0.1", WEBENV_HTTP_HOST="127.0.0.1", WEBENV_SITES_COUNT="16", WEBENV_LOG_LEVEL="WARNING")
    return subprocess.Popen([sys.executable, "-m", "webenv.sites"], env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)


async def _prefix_task(sites_grpc: str, prefix: int) -> common_pb2.Task:
    """A synthetic transaction task with more oracle steps than the prefix (the longest such)."""
    async with make_channel(sites_grpc, timeout=30) as ch:
        resp = await task_pb2_grpc.TaskServiceStub(ch).ListTasks(task_pb2.ListTasksRequest(
            filter=task_pb2.TaskFilter(sources=[common_pb2.TASK_SOURCE_SYNTHETIC], kinds=[common_pb2.TASK_KIND_TRANSACTION]),
            page_size=1000))
    fit = [t for t in resp.tasks if len(t.oracle) > prefix]
    if not fit:
        raise RuntimeError(f"no synthetic transaction task has more than {prefix} oracle steps")
    return max(fit, key=lambda t: (len(t.oracle), t.task_id))


async def _replay(stub: Any, task: common_pb2.Task, prefix: int) -> tuple[str, str]:  # prefix 0: open alone
    """The baseline: a new session and the prefix replayed; returns (session id, URL)."""
    opened = await stub.OpenSession(environment_pb2.OpenSessionRequest(task=task, observation_spec=SPEC))
    sid, url = opened.session.session_id, opened.observation.url
    for i, act in enumerate(task.oracle[:prefix]):
        r = await stub.Step(environment_pb2.StepRequest(session_id=sid, action=act, step_index=i))
        if r.observation.last_action_error:
            raise RuntimeError(f"replay step {i}: {r.observation.last_action_error}")
        url = r.observation.url
    return sid, url


async def fork_bench(ns: list[int], prefix: int, reps: int) -> dict[str, Any]:
    """ForkSession(count=N) vs N concurrent (OpenSession + replay of the prefix), interleaved, same farm, same task."""
    load0 = os.getloadavg()[0]
    http_port, grpc_port = free_port(), free_port()
    out: dict[str, Any] = {"prefix_steps": prefix, "reps": reps, "points": []}
    sites = _sites_proc(http_port, grpc_port)
    farm: FarmProc | None = None
    try:
        farm = FarmProc(f"127.0.0.1:{http_port}", 64, {"WEBENV_SITES_ADDR": f"127.0.0.1:{grpc_port}"})
        await farm.ready()
        task = await _prefix_task(f"127.0.0.1:{grpc_port}", prefix)
        out["task_id"], out["oracle_steps"] = task.task_id, len(task.oracle)
        async with make_channel(farm.address, timeout=120) as ch:
            stub = environment_pb2_grpc.EnvironmentServiceStub(ch)

            async def close(sids: list[str]) -> None:
                await asyncio.gather(*(stub.CloseSession(environment_pb2.CloseSessionRequest(session_id=x)) for x in sids))
                await asyncio.sleep(0.5)  # the warm pool refills between measurements, for both sides alike

            parent, parent_url = await _replay(stub, task, prefix)
            await _replay(stub, task, prefix)  # warm-up
            for n in ns:
                fork_s, replay_s, fork_server_s, open_s = [], [], [], []
                for _ in range(reps):
                    t0 = time.perf_counter()
                    forked = await stub.ForkSession(environment_pb2.ForkSessionRequest(session_id=parent, count=n))
                    fork_s.append(time.perf_counter() - t0)
                    fork_server_s.append(forked.fork_seconds)
                    assert all(f.observation.url == parent_url for f in forked.sessions)
                    await close([f.session.session_id for f in forked.sessions])
                    t0 = time.perf_counter()
                    chains = await asyncio.gather(*(_replay(stub, task, prefix) for _ in range(n)))
                    replay_s.append(time.perf_counter() - t0)
                    assert all(u == parent_url for _, u in chains), (parent_url, chains)
                    await close([sid for sid, _ in chains])
                    t0 = time.perf_counter()
                    opened = await asyncio.gather(*(_replay(stub, task, 0) for _ in range(n)))
                    open_s.append(time.perf_counter() - t0)
                    await close([sid for sid, _ in opened])
                point = {"n": n, "fork_p50_ms": 1000 * statistics.median(fork_s),
                         "fork_server_p50_ms": 1000 * statistics.median(fork_server_s),
                         "replay_p50_ms": 1000 * statistics.median(replay_s),
                         "open_only_p50_ms": 1000 * statistics.median(open_s),
                         "fork_ms": [round(1000 * x) for x in fork_s], "replay_ms": [round(1000 * x) for x in replay_s]}
                point["speedup"] = point["replay_p50_ms"] / point["fork_p50_ms"]
                out["points"].append(point)
                print("fork", point, flush=True)
    finally:
        if farm is not None:
            farm.stop()
        sites.terminate()
        try:
            sites.wait(20)
        except subprocess.TimeoutExpired:
            sites.kill()
    out["machine"] = {"cpus": os.cpu_count(), "load_avg_1m_at_start": load0, "load_avg_1m_at_end": os.getloadavg()[0]}
    return out


FORK_HEADING = "## Session fork"


def render_fork_md(r: dict[str, Any]) -> str:
    lines = [FORK_HEADING, "",
             f"`.venv/bin/python services/browser/bench.py --fork-only` (also part of the full run). Task "
             f"`{r['task_id']}` ({r['oracle_steps']} oracle steps) after {r['prefix_steps']} steps; ForkSession(count=N) "
             f"vs its baseline, N concurrent chains of OpenSession + the {r['prefix_steps']} steps replayed, interleaved, "
             f"{r['reps']} repetitions each, wall time client-side (open alone: N concurrent OpenSession of the task, "
             f"for scale). Machine: {r['machine']['cpus']} CPUs, 1-min load "
             f"{r['machine']['load_avg_1m_at_start']:.1f} at start, {r['machine']['load_avg_1m_at_end']:.1f} at end.", "",
             "| N | fork p50 ms | fork (server) p50 ms | open + replay p50 ms | fork speedup | open alone p50 ms |",
             "| --- | --- | --- | --- | --- | --- |"]
    for p in r["points"]:
        lines.append(f"| {p['n']} | {p['fork_p50_ms']:.0f} | {p['fork_server_p50_ms']:.0f} | {p['replay_p50_ms']:.0f} | "
                     f"{p['speedup']:.2f}x | {p['open_only_p50_ms']:.0f} |")
    return "\n".join(lines) + "\n"


def write_fork_results(out: Path, r: dict[str, Any]) -> None:
    """browser_fork.json, and the fork section of browser.md (replaced, the rest of the file kept)."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "browser_fork.json").write_text(json.dumps(r, indent=2))
    md = out / "browser.md"
    text = md.read_text() if md.exists() else ""
    head, _, rest = text.partition(FORK_HEADING)
    tail = rest[rest.find("\n## "):] if "\n## " in rest else ""
    md.write_text(head.rstrip("\n") + "\n\n" + render_fork_md(r) + tail)
    print(render_fork_md(r))


if __name__ == "__main__":
    if sys.argv[1:2] == ["--proxy-child"]:
        asyncio.run(proxy_child(sys.argv[2], int(sys.argv[3])))
    else:
        asyncio.run(main())

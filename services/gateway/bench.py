"""Gateway benchmark: what REST costs per Step against direct gRPC, and how many live viewers one gateway serves
while a run goes on, against the same run with nobody watching.

1. Step overhead, side by side in one run, alternating call by call (median of each):
   a. against a trivial EnvironmentService (canned 10 KB observation, served by the sdk runtime in this
      process): the gateway's own cost, JSON <-> protobuf and one more hop, with nothing to hide it;
   b. against the real browser farm (a scroll step on a synthetic page, a11y tree observation): what a REST
      client pays on a real step. Two sessions opened the same way, one stepped over gRPC, one over REST.
2. Viewers, on the real stack (`webenv up`'s launcher: sites, farm, policy, judge, collector, trainer, gateway):
   a. an agent stepping one session through REST with a full-size screenshot per step, with 0 and with N viewers
      of that session (frames on, a quarter stalled: a 4 KB receive window, never read), rounds alternating: the
      agent's step latency says whether viewers slow it; frames sent and dropped, and the gateway's CPU time, what
      serving them cost;
   b. the same random-policy run (same seed, same steps) with nobody watching, with N viewers of its progress (a
      quarter stalled), and with viewers of its live sessions (farm previews): its steps/s against the no-viewer
      round before.
   Viewer clients run in this process (their CPU counts against the agents too: conservative on 2 cores).

    .venv/bin/python services/gateway/bench.py --out bench/results
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import re
import secrets
import socket
import statistics
import tempfile
import time
import urllib.request
from pathlib import Path

import httpx
from webenv.cli.stack import Stack
from webenv.client import make_channel
from webenv.gateway.app import Gateway
from webenv.gateway.config import Settings
from webenv.runtime import Server, ServiceSettings
from webenv.v1 import common_pb2, environment_pb2, environment_pb2_grpc
from websockets.asyncio.client import connect

AXTREE = "\n".join(f'[{i}] link "Product {i}" href="/p/{i}"' for i in range(300))  # ~10 KB


class CannedEnv(environment_pb2_grpc.EnvironmentServiceServicer):
    """Answers every Step at once with the same 10 KB observation."""

    def __init__(self) -> None:
        obs = common_pb2.Observation(url="http://shop-0000.web.test/", title="Shop", axtree=AXTREE,
                                     formats=[common_pb2.OBSERVATION_FORMAT_AXTREE])
        self.resp = environment_pb2.StepResponse(session_id="s", observation=obs,
                                                 timings=common_pb2.StepTimings(total_seconds=0.001))

    async def Step(self, request, context):
        return self.resp


def _stats(xs: list[float]) -> dict[str, float]:
    xs = sorted(xs)
    return {"p50_ms": statistics.median(xs) * 1e3, "p95_ms": xs[int(len(xs) * 0.95)] * 1e3, "n": len(xs)}


async def _alternate(direct, rest, n: int) -> tuple[list[float], list[float]]:
    """n calls each, alternating direct / REST so that machine noise falls on both alike."""
    d, r = [], []
    for i in range(n):
        for fn, out in ((direct, d), (rest, r)) if i % 2 == 0 else ((rest, r), (direct, d)):
            t = time.perf_counter()
            await fn(i)
            out.append(time.perf_counter() - t)
    return d, r


async def step_overhead_canned(n: int) -> dict:
    env_server = Server("canned-env", ServiceSettings(host="127.0.0.1", grpc_port=0, metrics_port=0, metrics_enabled=False))
    env_server.add_service(environment_pb2_grpc.add_EnvironmentServiceServicer_to_server, CannedEnv(),
                           "webenv.v1.EnvironmentService")
    async with env_server:
        await env_server.set_serving()
        addr = f"127.0.0.1:{env_server.port}"
        settings = Settings(host="127.0.0.1", http_host="127.0.0.1", grpc_port=0, metrics_port=0, http_port=0,
                            metrics_enabled=False, log_json=False, browser_addr=addr)
        async with Gateway(settings) as gw, make_channel(addr) as ch, \
                httpx.AsyncClient(base_url=f"http://127.0.0.1:{gw.http_port}") as http:
            stub = environment_pb2_grpc.EnvironmentServiceStub(ch)
            req = environment_pb2.StepRequest(session_id="s", action=common_pb2.Action(
                click=common_pb2.ClickAction(target=common_pb2.ElementTarget(element_id="12"))))
            body = {"action": {"click": {"target": {"elementId": "12"}}}}

            async def direct(i: int) -> None:
                await stub.Step(req)

            async def rest(i: int) -> None:
                r = await http.post("/v1/sessions/s:step", json=body)
                assert r.status_code == 200

            await _alternate(direct, rest, 50)
            d, r = await _alternate(direct, rest, n)
    return {"direct": _stats(d), "rest": _stats(r)}


async def step_overhead_farm(stack: Stack, token: str, n: int) -> dict:
    gw = f"http://127.0.0.1:{stack.gateway_http_port}"
    async with make_channel(stack.address("browser"), token=token) as ch, \
            httpx.AsyncClient(base_url=gw, headers={"Authorization": f"Bearer {token}"}, timeout=60) as http:
        stub = environment_pb2_grpc.EnvironmentServiceStub(ch)
        url = "http://shop-0000.web.test/"
        a = (await stub.OpenSession(environment_pb2.OpenSessionRequest(start_url=url))).session.session_id
        r = await http.post("/v1/sessions", json={"startUrl": url})
        b = r.json()["session"]["sessionId"]

        def scroll(i: int) -> int:
            return 300 if i % 2 == 0 else -300

        async def direct(i: int) -> None:
            await stub.Step(environment_pb2.StepRequest(session_id=a, action=common_pb2.Action(
                scroll=common_pb2.ScrollAction(dy=scroll(i)))))

        async def rest(i: int) -> None:
            resp = await http.post(f"/v1/sessions/{b}:step", json={"action": {"scroll": {"dy": scroll(i)}}})
            assert resp.status_code == 200, resp.text

        await _alternate(direct, rest, 6)
        d, rr = await _alternate(direct, rest, n)
        await stub.CloseSession(environment_pb2.CloseSessionRequest(session_id=a))
        await http.post(f"/v1/sessions/{b}:close", json={})
    return {"direct": _stats(d), "rest": _stats(rr)}


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _metric(port: int, name: str) -> float:
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    return sum(float(v) for v in re.findall(rf"^{name}(?:{{[^}}]*}})? ([0-9.e+-]+)$", text, re.M))


class Viewers:
    """N WebSocket viewers of one path, a share of them stalled (connected on a 4 KB receive window, never reading:
    a viewer on a slow link); counts what the reading ones received."""

    def __init__(self, stack: Stack, token: str) -> None:
        self.stack = stack
        self.headers = {"Authorization": f"Bearer {token}"}
        self.tasks: list[asyncio.Task] = []
        self.received: list[int] = []

    def add(self, path: str, n: int, stalled_share: float) -> None:
        for i in range(n):
            self.tasks.append(asyncio.create_task(self._viewer(path, i < n * stalled_share)))

    async def _viewer(self, path: str, stalled: bool) -> None:
        n = 0
        kw = {}
        if stalled:
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            sock.setblocking(False)
            await asyncio.get_running_loop().sock_connect(sock, ("127.0.0.1", self.stack.gateway_http_port))
            kw["sock"] = sock
        url = f"ws://127.0.0.1:{self.stack.gateway_http_port}{path}"
        try:
            async with connect(url, additional_headers=self.headers, max_size=None, max_queue=4, **kw) as conn:
                if stalled:
                    await asyncio.sleep(3600)
                async for _ in conn:
                    n += 1
        except Exception:
            pass
        finally:
            if not stalled:
                self.received.append(n)

    async def close(self) -> None:
        for t in self.tasks:
            t.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)


class GatewayUsage:
    """The gateway process's CPU time and frame counters between start and stop."""

    def __init__(self, stack: Stack) -> None:
        self.pid = stack.procs["gateway"].pid
        self.port = stack.ports["gateway"][1]

    def __enter__(self) -> GatewayUsage:
        self.cpu0 = _cpu_seconds(self.pid)
        self.sent0 = _metric(self.port, "webenv_gateway_frames_sent_total")
        self.dropped0 = _metric(self.port, "webenv_gateway_frames_dropped_total")
        return self

    def __exit__(self, *exc: object) -> None:
        self.cpu = _cpu_seconds(self.pid) - self.cpu0
        self.sent = _metric(self.port, "webenv_gateway_frames_sent_total") - self.sent0
        self.dropped = _metric(self.port, "webenv_gateway_frames_dropped_total") - self.dropped0


async def stepped_session_with_viewers(stack: Stack, token: str, viewers: int, steps: int, rounds: int) -> list[dict]:
    """An agent stepping one session through REST (full-size JPEG screenshot each step), with 0 or `viewers` viewers
    of that session (frames on, a quarter stalled), rounds alternating: the agent's step latency is the measure."""
    gw = f"http://127.0.0.1:{stack.gateway_http_port}"
    spec = {"formats": ["OBSERVATION_FORMAT_AXTREE", "OBSERVATION_FORMAT_SCREENSHOT"],
            "screenshot": {"codec": "IMAGE_CODEC_JPEG", "quality": 75}}
    rows = []
    async with httpx.AsyncClient(base_url=gw, headers={"Authorization": f"Bearer {token}"}, timeout=60) as http:
        sid = (await http.post("/v1/sessions", json={"startUrl": "http://shop-0000.web.test/",
                                                     "observationSpec": spec})).json()["session"]["sessionId"]
        for i in range(rounds * 2):
            n = viewers if i % 2 else 0
            group = Viewers(stack, token)
            group.add(f"/v1/sessions/{sid}/live?frames=1", n, 0.25)
            await asyncio.sleep(1.0 if n else 0.0)  # connected and joined
            lat = []
            with GatewayUsage(stack) as use:
                for k in range(steps):
                    t = time.perf_counter()
                    r = await http.post(f"/v1/sessions/{sid}:step",
                                        json={"action": {"scroll": {"dy": 300 if k % 2 == 0 else -300}}})
                    assert r.status_code == 200, r.text
                    lat.append(time.perf_counter() - t)
                await asyncio.sleep(0.5)
            await group.close()
            reading = [x for x in group.received if x]
            rows.append({"viewers": n, **_stats(lat), "gateway_cpu_s": use.cpu, "frames_sent": use.sent,
                         "frames_dropped": use.dropped,
                         "frames_per_reading_viewer": statistics.mean(reading) if reading else 0.0})
        await http.post(f"/v1/sessions/{sid}:close", json={})
    return rows


async def run_with_viewers(stack: Stack, token: str, spec: dict, run_viewers: int, session_viewers: int) -> dict:
    """One run with viewers attached as it starts (run progress, and/or its live sessions with farm previews)."""
    gw = f"http://127.0.0.1:{stack.gateway_http_port}"
    group = Viewers(stack, token)
    async with httpx.AsyncClient(base_url=gw, headers={"Authorization": f"Bearer {token}"}, timeout=120) as http:
        with GatewayUsage(stack) as use:
            run = (await http.post("/v1/runs", json={"requestId": secrets.token_hex(8), "spec": spec})).json()["run"]
            run_id = run["runId"]
            group.add(f"/v1/runs/{run_id}/live", run_viewers, 0.25)
            t0 = time.monotonic()
            watched: set[str] = set()
            while True:
                if len(watched) < session_viewers:
                    for s in (await http.get("/v1/sessions", params={"page_size": 200})).json()["sessions"]:
                        if s.get("labels", {}).get("run_id") == run_id and s["sessionId"] not in watched \
                                and len(watched) < session_viewers:
                            watched.add(s["sessionId"])
                            group.add(f"/v1/sessions/{s['sessionId']}/live?frames=1", 1, 0.0)
                got = (await http.get(f"/v1/runs/{run_id}")).json()["run"]
                if got["state"] in ("RUN_STATE_SUCCEEDED", "RUN_STATE_FAILED", "RUN_STATE_STOPPED"):
                    break
                await asyncio.sleep(0.2)
            wall = time.monotonic() - t0
        await group.close()
    c = got["counts"]
    return {"run_viewers": run_viewers, "session_viewers": len(watched), "steps": int(c["steps"]),
            "errored": c["errored"], "wall_s": wall, "steps_per_s": int(c["steps"]) / wall,
            "gateway_cpu_s": use.cpu, "frames_sent": use.sent, "frames_dropped": use.dropped}


async def viewers_bench(stack: Stack, token: str, run_viewers: int, session_viewers: int, episodes: int,
                        steps: int, step_viewers: int) -> dict:
    spec = {"name": "bench-viewers", "policy": "random", "episodes": episodes, "concurrency": 4, "seed": 11,
            "tasks": {"sources": ["TASK_SOURCE_SYNTHETIC"]}, "taskLimit": episodes,
            "horizons": {"easy": 6, "medium": 6, "hard": 6}}
    stepped = await stepped_session_with_viewers(stack, token, step_viewers, steps, rounds=2)
    await run_with_viewers(stack, token, {**spec, "episodes": 2}, 0, 0)  # warm-up: pools, caches
    runs = [await run_with_viewers(stack, token, spec, 0, 0),
            await run_with_viewers(stack, token, spec, run_viewers, 0),
            await run_with_viewers(stack, token, spec, 0, 0),
            await run_with_viewers(stack, token, spec, 0, session_viewers)]
    return {"stepped_session": stepped, "runs": runs}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default="bench/results")
    parser.add_argument("--canned-steps", type=int, default=1000)
    parser.add_argument("--farm-steps", type=int, default=40)
    parser.add_argument("--run-viewers", type=int, default=500, help="viewers of a run's progress")
    parser.add_argument("--session-viewers", type=int, default=6, help="viewers of a run's live sessions (previews)")
    parser.add_argument("--step-viewers", type=int, default=40, help="viewers of the session stepped through REST")
    parser.add_argument("--steps", type=int, default=30, help="REST steps per round of the stepped session")
    parser.add_argument("--episodes", type=int, default=8)
    args = parser.parse_args()
    t0 = time.monotonic()
    canned = asyncio.run(step_overhead_canned(args.canned_steps))
    token = "bench-" + secrets.token_hex(6)
    data = Path(tempfile.mkdtemp(prefix="webenv-gateway-bench-"))
    stack = Stack(data, free_ports=True, sites_count=16, extra_env={"WEBENV_AUTH_TOKEN": token, "WEBENV_LOG_JSON": "false"})
    try:
        stack.start(timeout=240)
        farm = asyncio.run(step_overhead_farm(stack, token, args.farm_steps))
        viewers = asyncio.run(viewers_bench(stack, token, args.run_viewers, args.session_viewers, args.episodes,
                                            args.steps, args.step_viewers))
    finally:
        stack.stop()
    res = {"step_canned": canned, "step_farm": farm, **viewers, "seconds": time.monotonic() - t0,
           "load_average": os.getloadavg()}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "gateway.json").write_text(json.dumps(res, indent=2))
    lines = ["# gateway", "",
             f"`.venv/bin/python services/gateway/bench.py` (one run, {res['seconds']:.0f} s, on this 2-core machine; "
             f"1-min load average at the end {res['load_average'][0]:.0f}: other work ran beside it).", "",
             "## Step: REST through the gateway vs direct gRPC (same run, alternating call by call)", "",
             "| environment | direct gRPC p50 | REST p50 | ratio | added p50 | direct p95 | REST p95 | calls each |",
             "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for name, r in (("trivial (canned 10 KB observation)", canned), ("real browser farm (scroll step)", farm)):
        d, g = r["direct"], r["rest"]
        lines.append(f"| {name} | {d['p50_ms']:.2f} ms | {g['p50_ms']:.2f} ms | {g['p50_ms'] / d['p50_ms']:.2f}x | "
                     f"{g['p50_ms'] - d['p50_ms']:.2f} ms | {d['p95_ms']:.2f} ms | {g['p95_ms']:.2f} ms | {d['n']} |")
    lines += ["", "## Viewers of a session an agent steps through REST (full-size JPEG screenshot per step)", "",
              "Rounds alternate 0 and N viewers of the session with frames; a quarter of them stalled (4 KB receive "
              "window, never reading). The measure is the agent's step latency.", "",
              "| viewers | step p50 | step p95 | steps | gateway CPU s | frames sent | frames dropped | frames per reading viewer |",
              "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for row in viewers["stepped_session"]:
        lines.append(f"| {row['viewers']} | {row['p50_ms']:.1f} ms | {row['p95_ms']:.1f} ms | {row['n']} | "
                     f"{row['gateway_cpu_s']:.2f} | {row['frames_sent']:.0f} | {row['frames_dropped']:.0f} | "
                     f"{row['frames_per_reading_viewer']:.1f} |")
    lines += ["", "## Viewers while a run goes on (random policy, same seed and steps each round)", "",
              "Run viewers watch its progress (a quarter stalled); session viewers watch its live sessions with farm "
              "previews (CaptureScreenshot, at most one per second per session). Each loaded round follows a "
              "no-viewer round.", "",
              "| run viewers | session viewers | steps | steps/s | vs the no-viewer round before | gateway CPU s | "
              "frames sent | frames dropped |", "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    base = None
    for row in viewers["runs"]:
        if row["run_viewers"] == 0 and row["session_viewers"] == 0:
            base = row
        ratio = row["steps_per_s"] / base["steps_per_s"] if base else 1.0
        lines.append(f"| {row['run_viewers']} | {row['session_viewers']} | {row['steps']} | {row['steps_per_s']:.2f} | "
                     f"{ratio:.2f} | {row['gateway_cpu_s']:.2f} | {row['frames_sent']:.0f} | {row['frames_dropped']:.0f} |")
    (out / "gateway.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        main()

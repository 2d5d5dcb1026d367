"""Gateway benchmark: what REST costs per Step against direct gRPC, and how many live viewers one gateway serves
while a run goes on, against the same run with nobody watching.

1. Step overhead, side by side in one run, alternating call by call (median of each):
   a. against a trivial EnvironmentService (canned 10 KB observation, served by the sdk runtime in this
      process): the gateway's own cost, JSON <-> protobuf and one more hop, with nothing to hide it;
   b. against the real browser farm (a scroll step on a synthetic page, a11y tree observation): what a REST
      client pays on a real step. Two sessions opened the same way, one stepped over gRPC, one over REST.
2. Viewers: the real stack (`webenv up`'s launcher: sites, farm, policy, judge, collector, gateway) runs the same
   random-policy run (same seed, same steps) with 0 viewers and with N WebSocket viewers of the run's progress,
   plus viewers of its live sessions with screenshot frames, some of which never read (stalled). The run's
   steps/s against the no-viewer rounds says whether watching slows the agents; the gateway's CPU time, frames
   sent and frames dropped say what serving them cost. Viewer clients run in this process (their CPU counts
   against the run too: the measure is conservative on this 2-core machine).

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
from webenv.client import make_channel
from webenv.collector.stack import Stack
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

    async def Step(self, request, context):  # noqa: N802
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
                click=common_pb2.ClickAction(target=common_pb2.ElementTarget(element_id="12"))), step_index=-1)
            body = {"action": {"click": {"target": {"elementId": "12"}}}, "stepIndex": -1}

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
            await stub.Step(environment_pb2.StepRequest(session_id=a, step_index=-1, action=common_pb2.Action(
                scroll=common_pb2.ScrollAction(dy=scroll(i)))))

        async def rest(i: int) -> None:
            resp = await http.post(f"/v1/sessions/{b}:step", json={"action": {"scroll": {"dy": scroll(i)}},
                                                                   "stepIndex": -1})
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


async def run_with_viewers(stack: Stack, token: str, spec: dict, run_viewers: int, session_viewers: int,
                           stalled_share: float) -> dict:
    """One run with viewers attached as it starts; returns its throughput and what the viewers got."""
    gw = f"http://127.0.0.1:{stack.gateway_http_port}"
    ws = gw.replace("http://", "ws://")
    headers = {"Authorization": f"Bearer {token}"}
    received: list[int] = []
    gw_pid = stack.procs["gateway"].pid
    metrics_port = stack.ports["gateway"][1]
    sent0 = _metric(metrics_port, "webenv_gateway_frames_sent_total")
    dropped0 = _metric(metrics_port, "webenv_gateway_frames_dropped_total")
    cpu0 = _cpu_seconds(gw_pid)

    async def viewer(path: str, stalled: bool) -> None:
        n = 0
        kw = {}
        if stalled:  # a viewer on a slow link: a small receive window that fills at once, and nobody reading it
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            sock.setblocking(False)
            await asyncio.get_running_loop().sock_connect(sock, ("127.0.0.1", stack.gateway_http_port))
            kw["sock"] = sock
        try:
            async with connect(ws + path, additional_headers=headers, max_size=None, max_queue=4, **kw) as conn:
                if stalled:
                    await asyncio.sleep(3600)  # connected, never reads
                async for _ in conn:
                    n += 1
        except Exception:  # noqa: BLE001 - a viewer ending with the run or the session is expected
            pass
        received.append(n)

    async with httpx.AsyncClient(base_url=gw, headers=headers, timeout=120) as http:
        run = (await http.post("/v1/runs", json={"requestId": secrets.token_hex(8), "spec": spec})).json()["run"]
        run_id = run["runId"]
        tasks = [asyncio.create_task(viewer(f"/v1/runs/{run_id}/live", i < run_viewers * stalled_share))
                 for i in range(run_viewers)]
        t0 = time.monotonic()
        watched: set[str] = set()
        done = False
        while not done:
            if session_viewers and len(watched) < session_viewers:
                sessions = (await http.get("/v1/sessions", params={"page_size": 200})).json()["sessions"]
                for s in sessions:
                    if s.get("labels", {}).get("run_id") == run_id and s["sessionId"] not in watched:
                        if len(watched) >= session_viewers:
                            break
                        watched.add(s["sessionId"])
                        stalled = len(watched) <= session_viewers * stalled_share
                        tasks.append(asyncio.create_task(viewer(f"/v1/sessions/{s['sessionId']}/live?frames=1", stalled)))
            got = (await http.get(f"/v1/runs/{run_id}")).json()["run"]
            done = got["state"] in ("RUN_STATE_SUCCEEDED", "RUN_STATE_FAILED", "RUN_STATE_STOPPED")
            await asyncio.sleep(0.2)
        wall = time.monotonic() - t0
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    c = got["counts"]
    return {
        "run_viewers": run_viewers, "session_viewers": len(watched), "stalled_share": stalled_share,
        "steps": int(c["steps"]), "episodes": c["finished"], "errored": c["errored"], "wall_s": wall,
        "steps_per_s": int(c["steps"]) / wall, "gateway_cpu_s": _cpu_seconds(gw_pid) - cpu0,
        "frames_sent": _metric(metrics_port, "webenv_gateway_frames_sent_total") - sent0,
        "frames_dropped": _metric(metrics_port, "webenv_gateway_frames_dropped_total") - dropped0,
    }


async def viewers_bench(stack: Stack, token: str, counts: list[int], episodes: int) -> list[dict]:
    spec = {"name": "bench-viewers", "policy": "random", "episodes": episodes, "concurrency": 6, "seed": 11,
            "tasks": {"sources": ["TASK_SOURCE_SYNTHETIC"]}, "taskLimit": episodes,
            "horizons": {"easy": 6, "medium": 6, "hard": 6}}
    rows = []
    await run_with_viewers(stack, token, {**spec, "episodes": 4}, 0, 0, 0.0)  # warm-up: pools, caches
    for n in counts:  # rounds alternate with no-viewer rounds, so each loaded round has a baseline beside it
        rows.append(await run_with_viewers(stack, token, spec, 0, 0, 0.0))
        rows.append(await run_with_viewers(stack, token, spec, n, min(6, n), 0.25))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default="bench/results")
    parser.add_argument("--canned-steps", type=int, default=1000)
    parser.add_argument("--farm-steps", type=int, default=40)
    parser.add_argument("--viewers", default="100,500", help="viewer counts, comma separated")
    parser.add_argument("--episodes", type=int, default=12)
    args = parser.parse_args()
    t0 = time.monotonic()
    canned = asyncio.run(step_overhead_canned(args.canned_steps))
    token = "bench-" + secrets.token_hex(6)
    data = Path(tempfile.mkdtemp(prefix="webenv-gateway-bench-"))
    stack = Stack(data, free_ports=True, sites_count=16, extra_env={"WEBENV_AUTH_TOKEN": token, "WEBENV_LOG_JSON": "false"})
    try:
        stack.start(timeout=180)
        farm = asyncio.run(step_overhead_farm(stack, token, args.farm_steps))
        viewers = asyncio.run(viewers_bench(stack, token, [int(x) for x in args.viewers.split(",")], args.episodes))
    finally:
        stack.stop()
    res = {"step_canned": canned, "step_farm": farm, "viewers": viewers, "seconds": time.monotonic() - t0}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "gateway.json").write_text(json.dumps(res, indent=2))
    lines = ["# gateway", "", "`.venv/bin/python services/gateway/bench.py` (all in one run on this 2-core machine).", "",
             "## Step: REST through the gateway vs direct gRPC (same run, alternating call by call)", "",
             "| environment | direct gRPC p50 | REST p50 | ratio | added p50 | direct p95 | REST p95 | calls each |",
             "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for name, r in (("trivial (canned 10 KB observation)", canned), ("real browser farm (scroll step)", farm)):
        d, g = r["direct"], r["rest"]
        lines.append(f"| {name} | {d['p50_ms']:.2f} ms | {g['p50_ms']:.2f} ms | {g['p50_ms'] / d['p50_ms']:.2f}x | "
                     f"{g['p50_ms'] - d['p50_ms']:.2f} ms | {d['p95_ms']:.2f} ms | {g['p95_ms']:.2f} ms | {d['n']} |")
    lines += ["", "## Live viewers while a run goes on (random policy, same seed and steps each round)", "",
              "Each loaded round follows its own no-viewer round. Viewers: N on the run's progress plus up to 6 on its "
              "live sessions with screenshot frames; a quarter of each never read.", "",
              "| run viewers | session viewers | steps | steps/s | vs no-viewer round | gateway CPU s | frames sent | "
              "frames dropped |", "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    base = None
    for row in viewers:
        if row["run_viewers"] == 0:
            base = row
        ratio = row["steps_per_s"] / base["steps_per_s"] if base else 1.0
        lines.append(f"| {row['run_viewers']} | {row['session_viewers']} | {row['steps']} | {row['steps_per_s']:.1f} | "
                     f"{ratio:.2f} | {row['gateway_cpu_s']:.1f} | {row['frames_sent']:.0f} | {row['frames_dropped']:.0f} |")
    (out / "gateway.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        main()

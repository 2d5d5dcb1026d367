"""Benchmark of the sites service: catalog build time, pages/s on loopback, TaskService latency, task mix.

Run: .venv/bin/python services/sites/bench.py --out bench/results   (about 1 minute)
Writes bench/results/sites.json and bench/results/sites.md.

Pages/s is measured with `wrk` (Debian package) when installed, else an httpx loop, against the real service
started as a subprocess (`python -m webenv.sites`, default 1000 sites), on a mix of home, listing, sorted /
paginated listing, search and detail pages of 200 sites (each through its site's builder, with that builder's
URLs), then the same mix per builder (its sites' pages only: pages/s per builder). Side by side, same load tool and
settings: (1) the same service on the default asyncio loop instead of uvloop; (2) the baseline: the same
pages pre-rendered and served from memory by a bare ASGI app on uvicorn, the ceiling of this HTTP stack,
so the ratio says what generating pages, routing by host and keeping session state cost.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
from webenv.client import make_sync_channel

ROOT = Path(__file__).resolve().parents[2]
PY = sys.executable


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_port(port: int, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.1)
    raise TimeoutError(f"port {port} not open")


def bench_catalog() -> dict:
    from webenv.sites.world import build_world

    t0 = time.perf_counter()
    world = build_world()
    took = time.perf_counter() - t0
    return {"sites": len(world.sites.sites), "tasks": len(world.tasks), "build_seconds": round(took, 2),
            "distribution": world.tasks.stats(), "_world": world}


def page_mix(world, n_sites: int = 200, seed: int = 1, builder: str = "") -> list[tuple[str, str]]:  # type: ignore[no-untyped-def]
    """(host, path) of home, listing, sorted page 2, a search and a detail page (twice) of n_sites open sites (of
    one builder's sites when `builder` is given), each URL as the site's builder spells it."""
    from webenv.sites import builders

    rng = random.Random(seed)
    open_sites = [s for s in world.sites.sites if not s.family.login_required and builder in ("", s.builder_name)]
    out = []
    for site in rng.sample(open_sites, min(n_sites, len(open_sites))):
        it = rng.choice(site.items)
        b = builders.get(site.builder_name)
        for path in ("/", b.url_listing(site), b.url_listing(site, sort="value_desc", page=2),
                     b.url_listing(site, q=it.title.split()[0]), b.url_record(site, it), b.url_record(site, it)):
            out.append((site.host, path))
    return out


def render_rates(world, rounds: int = 6, per_builder: int = 120) -> dict[str, float]:  # type: ignore[no-untyped-def]
    """Pages/s of each builder rendered in this process (the ASGI app called directly: no sockets, no load tool),
    its mix of 20 open sites, the builders interleaved round by round so background load hits them alike."""
    async def run() -> dict[str, float]:
        async def receive() -> dict:
            return {"type": "http.request", "body": b"", "more_body": False}

        async def send(msg: dict) -> None:
            if msg["type"] == "http.response.start":
                assert msg["status"] < 400, msg

        mixes = {name: page_mix(world, 20, builder=name)[:per_builder] for name in world.sites.builders}
        spent = dict.fromkeys(mixes, 0.0)
        for r in range(rounds + 1):  # round 0 warms the caches and is not counted
            for name, reqs in mixes.items():
                t0 = time.perf_counter()
                for host, path in reqs:
                    p, _, q = path.partition("?")
                    scope = {"type": "http", "method": "GET", "path": p, "raw_path": p.encode(), "query_string": q.encode(),
                             "headers": [(b"host", host.encode()), (b"cookie", b"site_session=bench")]}
                    await world.app(scope, receive, send)
                spent[name] += (time.perf_counter() - t0) if r else 0.0
        return {name: round(rounds * len(mixes[name]) / spent[name], 1) for name in mixes}
    return asyncio.run(run())


def lua_script(reqs: list[tuple[str, str]], path: Path) -> None:
    entries = ",\n".join(f'{{"{h}", "{p.replace(chr(34), "")}"}}' for h, p in reqs)
    path.write_text(
        "local reqs = {\n" + entries + "\n}\n"
        "local n = 0\n"
        "request = function()\n"
        "  n = n + 1\n"
        "  local r = reqs[(n % #reqs) + 1]\n"
        "  return wrk.format('GET', r[2], {['Host'] = r[1], ['Cookie'] = 'site_session=bench' .. (n % 64)})\n"
        "end\n"
    )


def run_wrk(port: int, script: Path, seconds: int, conns: int) -> dict:
    out = subprocess.run(["wrk", "-t2", f"-c{conns}", f"-d{seconds}s", "--latency", "-s", str(script),
                          f"http://127.0.0.1:{port}/"], capture_output=True, text=True, check=True).stdout
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))  # type: ignore[union-attr]
    p50 = re.search(r"50%\s+([\d.]+)(us|ms|s)", out)
    p99 = re.search(r"99%\s+([\d.]+)(us|ms|s)", out)
    bad = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    errs = re.search(r"Socket errors: (.*)", out)

    def ms(m: re.Match | None) -> float | None:
        if not m:
            return None
        v, unit = float(m.group(1)), m.group(2)
        return round(v / 1000 if unit == "us" else v * 1000 if unit == "s" else v, 2)

    return {"tool": "wrk", "pages_per_second": round(rps, 1), "p50_ms": ms(p50), "p99_ms": ms(p99),
            "non_2xx_3xx": int(bad.group(1)) if bad else 0, "socket_errors": errs.group(1) if errs else "",
            "connections": conns, "seconds": seconds}


async def _httpx_load(port: int, reqs: list[tuple[str, str]], seconds: int, conns: int) -> dict:
    lat: list[float] = []
    bad = 0
    stop = time.perf_counter() + seconds

    async def worker(k: int, client: httpx.AsyncClient) -> None:
        nonlocal bad
        i = k
        while time.perf_counter() < stop:
            host, path = reqs[i % len(reqs)]
            i += conns
            t0 = time.perf_counter()
            r = await client.get(f"http://127.0.0.1:{port}{path}", headers={"host": host, "cookie": f"site_session=bench{i % 64}"})
            lat.append(time.perf_counter() - t0)
            bad += r.status_code >= 400

    limits = httpx.Limits(max_connections=conns, max_keepalive_connections=conns)
    async with httpx.AsyncClient(limits=limits) as client:
        t0 = time.perf_counter()
        await asyncio.gather(*(worker(k, client) for k in range(conns)))
        took = time.perf_counter() - t0
    lat.sort()
    return {"tool": "httpx", "pages_per_second": round(len(lat) / took, 1), "p50_ms": round(lat[len(lat) // 2] * 1000, 2),
            "p99_ms": round(lat[int(len(lat) * 0.99)] * 1000, 2), "non_2xx_3xx": bad, "connections": conns, "seconds": seconds}


def load(port: int, reqs: list[tuple[str, str]], seconds: int, conns: int, tmp: Path, name: str) -> dict:
    if shutil.which("wrk"):
        script = tmp / f"{name}.lua"
        lua_script(reqs, script)
        return run_wrk(port, script, seconds, conns)
    return asyncio.run(_httpx_load(port, reqs, seconds, conns))


def start_service(http_port: int, grpc_port: int, uvloop: bool = True) -> subprocess.Popen:
    env = {**os.environ, "WEBENV_HTTP_PORT": str(http_port), "WEBENV_GRPC_PORT": str(grpc_port), "WEBENV_METRICS_PORT": "0",
           "WEBENV_SITES_UVLOOP": str(uvloop).lower(),
           "WEBENV_HOST": "127.0.0.1", "WEBENV_HTTP_HOST": "127.0.0.1", "WEBENV_LOG_LEVEL": "WARNING"}
    return subprocess.Popen([PY, "-m", "webenv.sites"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


BASELINE = """
import pathlib, sys, uvicorn
PAGES = {("/" + p.name).encode(): p.read_bytes() for p in pathlib.Path(sys.argv[1]).iterdir()}

async def app(scope, receive, send):
    body = PAGES.get(scope["raw_path"], b"not found")
    await send({"type": "http.response.start", "status": 200,
                "headers": [(b"content-type", b"text/html; charset=utf-8"), (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})

uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[2]), log_level="warning", access_log=False, lifespan="off")
"""


def bench_grpc(port: int, task_ids: list[str]) -> dict:
    from webenv.v1 import common_pb2 as pb
    from webenv.v1 import task_pb2, task_pb2_grpc

    with make_sync_channel(f"127.0.0.1:{port}", timeout=None) as ch:
        stub = task_pb2_grpc.TaskServiceStub(ch)
        stub.GetTask(task_pb2.GetTaskRequest(task_id=task_ids[0]), timeout=30)
        get, lst = [], []
        for tid in task_ids[:300]:
            t0 = time.perf_counter()
            stub.GetTask(task_pb2.GetTaskRequest(task_id=tid), timeout=10)
            get.append(time.perf_counter() - t0)
        f = task_pb2.TaskFilter(families=["shop"], split=pb.SPLIT_TEST, difficulties=[pb.DIFFICULTY_HARD])
        for _ in range(50):
            t0 = time.perf_counter()
            stub.ListTasks(task_pb2.ListTasksRequest(filter=f, page_size=100), timeout=10)
            lst.append(time.perf_counter() - t0)
    return {"get_task_p50_ms": round(statistics.median(get) * 1000, 3),
            "list_tasks_filtered_p50_ms": round(statistics.median(lst) * 1000, 3)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="bench/results")
    ap.add_argument("--seconds", type=int, default=10)
    ap.add_argument("--connections", type=int, default=32)
    ap.add_argument("--builder-seconds", type=int, default=3, help="load seconds per builder")
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)

    cat = bench_catalog()
    world = cat.pop("_world")
    reqs = page_mix(world)
    rendered = render_rates(world)
    tmp = Path(tempfile.mkdtemp(prefix="sites-bench-"))
    http_port, grpc_port, base_port = free_port(), free_port(), free_port()
    svc = start_service(http_port, grpc_port)
    base = None
    try:
        wait_port(http_port)
        # pre-render the same pages for the baseline (one file per page, same bytes as served)
        static = tmp / "static"
        static.mkdir()
        base_reqs = []
        with httpx.Client() as c:
            for i, (host, path) in enumerate(reqs):
                r = c.get(f"http://127.0.0.1:{http_port}{path}", headers={"host": host, "cookie": "site_session=prerender"})
                (static / f"p{i}.html").write_bytes(r.content)
                base_reqs.append(("static.test", f"/p{i}.html"))
        avg_bytes = sum(len((static / f"p{i}.html").read_bytes()) for i in range(len(reqs))) / len(reqs)
        base = subprocess.Popen([PY, "-c", BASELINE, str(static), str(base_port)], stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL)
        wait_port(base_port)
        load(http_port, reqs[:50], 2, args.connections, tmp, "warm")  # warm-up
        ours = load(http_port, reqs, args.seconds, args.connections, tmp, "sites")
        per_builder = {name: load(http_port, page_mix(world, 60, builder=name), args.builder_seconds, args.connections,
                                  tmp, f"b-{name}") for name in world.sites.builders}
        baseline = load(base_port, base_reqs, args.seconds, args.connections, tmp, "static")
        grpc_lat = bench_grpc(grpc_port, [t.task_id for t in world.tasks.tasks[::70]])
        svc.terminate()
        svc.wait(timeout=15)
        # the same service on the default asyncio loop (WEBENV_SITES_UVLOOP=false), side by side
        http2 = free_port()
        svc = start_service(http2, free_port(), uvloop=False)
        wait_port(http2)
        load(http2, reqs[:50], 2, args.connections, tmp, "warm2")
        default_loop = load(http2, reqs, args.seconds, args.connections, tmp, "sites_asyncio")
    finally:
        for p in (svc, base):
            if p is not None:
                p.terminate()
                p.wait(timeout=15)
        shutil.rmtree(tmp, ignore_errors=True)

    result = {
        "service": "sites",
        "machine": f"{os.cpu_count()} cpus",
        "catalog": cat,
        "http": {"sites": ours, "sites_default_asyncio_loop": default_loop, "baseline_prerendered_in_memory": baseline,
                 "distinct_pages": len(reqs), "avg_page_bytes": round(avg_bytes),
                 "ratio_vs_prerendered": round(ours["pages_per_second"] / baseline["pages_per_second"], 3),
                 "ratio_uvloop_vs_asyncio": round(ours["pages_per_second"] / default_loop["pages_per_second"], 2),
                 "target_pages_per_second": 500, "meets_target": ours["pages_per_second"] >= 500,
                 "per_builder": per_builder, "rendered_in_process_per_builder": rendered},
        "grpc": grpc_lat,
    }
    (out / "sites.json").write_text(json.dumps(result, indent=2) + "\n")
    d = cat["distribution"]
    lines = [
        "# sites benchmark", "",
        f"Machine: {result['machine']}. Service started as a subprocess with default settings.", "",
        "| measure | value |", "| --- | --- |",
        f"| catalog build ({cat['sites']} sites, {cat['tasks']} tasks) | {cat['build_seconds']} s (target < 60 s) |",
        f"| pages/s, generated pages ({ours['tool']}, {args.connections} conns) | {ours['pages_per_second']} "
        f"(p50 {ours['p50_ms']} ms, p99 {ours['p99_ms']} ms; target >= 500) |",
        f"| pages/s, same service on the default asyncio loop | {default_loop['pages_per_second']} "
        f"(p50 {default_loop['p50_ms']} ms; ratio uvloop/asyncio {result['http']['ratio_uvloop_vs_asyncio']}) |",
        f"| pages/s, baseline: the same pages pre-rendered, served from memory by a bare ASGI app on uvicorn | "
        f"{baseline['pages_per_second']} (p50 {baseline['p50_ms']} ms) |",
        f"| ratio generated / pre-rendered | {result['http']['ratio_vs_prerendered']} |",
        f"| average page size | {result['http']['avg_page_bytes']} bytes |",
        f"| GetTask p50 / filtered ListTasks(100) p50 | {grpc_lat['get_task_p50_ms']} ms / {grpc_lat['list_tasks_filtered_p50_ms']} ms |",
        "", f"## Pages/s per builder ({args.builder_seconds} s of {ours['tool']} each, the same mix on 60 of its open "
        "sites; and rendered in process, the ASGI app called directly, builders interleaved)", "",
        "| builder | pages/s (HTTP) | p50 ms | p99 ms | pages/s rendered in process |", "| --- | --- | --- | --- | --- |",
        *(f"| {n} | {r['pages_per_second']} | {r['p50_ms']} | {r['p99_ms']} | {rendered[n]} |"
          for n, r in per_builder.items()),
        "", "## Tasks by family, kind, difficulty, source, split, builder", "",
    ]
    for key in ("family", "kind", "difficulty", "source", "split", "builder"):
        lines.append(f"- **{key}**: " + ", ".join(f"{k}: {v}" for k, v in d[key].items()))
    (out / "sites.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    main()

"""The orchestrator's own ceiling: the collector, its scheduler, store writer and the real judge, driven by a
zero-cost environment and policy, at 1, 100, 1,000 and 10,000 concurrent episodes.

What is measured is the control plane alone. The environment, task catalog and policy are the collector tests'
deterministic page walk (services/collector/tests/conftest.py: no sleeps, a few hundred bytes per observation;
the oracle follows the task's solution), served over real gRPC on loopback in their own process. The judge is the
real judge (`webenv.judge`, deterministic criteria: final URL and answer) in a second process. The collector runs
in this process with the embedded chDB store, so its CPU figure includes the store writer. Each level runs one
or more runs at once (a run holds at most 4,096 episodes in flight, so 10,000 is three runs of 3,334 on one
collector) and reports:

- episodes/s and steps/s end to end (StartRun to the last WatchRun report),
- CPU seconds per step of the collector (with its store), of the judge and of the zero-cost peers,
- the collector's peak RSS (VmHWM) and RSS growth over the level,
- store rows written per second (episodes + steps rows, counted in the store afterwards with FINAL),

and, with ``--profile LEVEL``, a cProfile of the collector's event loop thread at that level (top functions by
own time), which names where it saturates. With ``--redis`` the episodes go through the Redis queue (a real
redis-server on loopback) instead of the in-process one.

Run at nice 19 on a shared 2-core machine: the figures are pessimistic (other work takes cores meanwhile).

    nice -n 19 .venv/bin/python bench/orchestrator.py --out bench/results
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import importlib.util
import io
import json
import os
import pstats
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path

import grpc
from webenv.client import make_channel
from webenv.v1 import collector_pb2, collector_pb2_grpc, common_pb2

ROOT = Path(__file__).resolve().parents[1]
OVERRIDE: dict[str, int] = {}  # --episodes / --clicks for every level
PEERS = ROOT / "services" / "collector" / "tests" / "conftest.py"
CLK = os.sysconf("SC_CLK_TCK")
# level: (concurrent episodes, episodes planned, solution clicks per task -> steps = clicks + 1 answer). A level is
# measured over a time window (--seconds) and then stopped: more episodes are planned than the window finishes,
# so the concurrency holds for the whole window and the figures are the steady state, not the run's tail.
LEVELS = {1: (1, 500, 6), 100: (100, 3000, 6), 1000: (1000, 4000, 6), 10000: (10000, 10000, 1)}


def load_peers():
    """The collector tests' page-walk peers (Sites, Env, Policy), the contract's zero-cost implementations."""
    spec = importlib.util.spec_from_file_location("collector_test_peers", PEERS)
    mod = sys.modules.setdefault(spec.name, importlib.util.module_from_spec(spec))
    if not hasattr(mod, "Env"):
        spec.loader.exec_module(mod)
    return mod


def make_tasks(n: int, clicks: int, runs: int = 1) -> list[common_pb2.Task]:
    """``n`` page-walk tasks of ``clicks`` clicks then an answer, each with a rubric the real judge grades; task i is
    in family ``walk-<i * runs // n>`` (one family per run)."""
    peers = load_peers()
    out = []
    for i in range(n):
        site = f"site-{i:05d}.web.test"
        url = f"http://{site}/page/{clicks}"
        rubric = common_pb2.Rubric(rubric_id=f"walk-{clicks}", version=1, groups=[common_pb2.FactGroup(
            group_id="g", facts=[
                common_pb2.Fact(fact_id="url", criterion=common_pb2.Criterion(url=common_pb2.UrlCriterion(
                    mode=common_pb2.MATCH_MODE_EXACT, value=url))),
                common_pb2.Fact(fact_id="answer", criterion=common_pb2.Criterion(answer=common_pb2.AnswerCriterion(
                    mode=common_pb2.MATCH_MODE_EXACT, expected=str(clicks)))),
            ])])
        out.append(common_pb2.Task(
            task_id=f"bench/{site}/walk", source=common_pb2.TASK_SOURCE_SYNTHETIC, kind=common_pb2.TASK_KIND_NAVIGATION,
            instruction=f"Go to page {clicks} and answer its number", start_url=peers.page_url(site, 0), site=site,
            family=f"walk-{i * runs // n}", split=common_pb2.SPLIT_TRAIN, difficulty=common_pb2.DIFFICULTY_HARD, rubric=rubric,
            oracle=[peers.click_next() for _ in range(clicks)] + [common_pb2.Action(answer=common_pb2.AnswerAction(
                text=str(clicks)))],
            seed=i, metadata={"goal": str(clicks)}))
    return out


async def serve_peers(what: str, tasks: int, clicks: int, runs: int) -> None:
    """Serve the zero-cost peers or the real judge (own process) and print the addresses as JSON."""
    from webenv.v1 import environment_pb2_grpc, policy_pb2_grpc, task_pb2_grpc

    servers, addr = [], {}
    if what == "judge":
        from webenv.judge.config import Settings as JudgeSettings
        from webenv.judge.engine import Judge
        from webenv.judge.servicer import JudgeServicer
        from webenv.runtime import Server
        from webenv.v1 import judge_pb2_grpc

        server = Server("judge", JudgeSettings(host="127.0.0.1", grpc_port=0, metrics_port=0, log_level="WARNING"))
        server.add_service(judge_pb2_grpc.add_JudgeServiceServicer_to_server, JudgeServicer(Judge()),
                           "webenv.v1.JudgeService")
        await server.start()
        await server.set_serving()
        addr["judge"] = f"127.0.0.1:{server.port}"
    else:
        peers = load_peers()
        for key, add, svc in (
            ("sites", task_pb2_grpc.add_TaskServiceServicer_to_server, peers.Sites(make_tasks(tasks, clicks, runs))),
            ("env", environment_pb2_grpc.add_EnvironmentServiceServicer_to_server, peers.Env("zero")),
            ("policy", policy_pb2_grpc.add_PolicyServiceServicer_to_server, peers.Policy()),
        ):
            s = grpc.aio.server(options=[("grpc.max_concurrent_streams", 1 << 20)])
            add(svc, s)
            port = s.add_insecure_port("127.0.0.1:0")
            await s.start()
            servers.append(s)
            addr[key] = f"127.0.0.1:{port}"
    print(json.dumps(addr), flush=True)
    await asyncio.Event().wait()


def spawn(what: str, tasks: int = 0, clicks: int = 0, runs: int = 1) -> tuple[subprocess.Popen, dict]:
    """The peers are this script's fixture (this tree's collector tests), so they run this tree's code and stubs
    even when PYTHONPATH points the measured parts, collector and judge, at another tree (bench/house.py)."""
    env = dict(os.environ)
    if what == "peers":
        env["PYTHONPATH"] = os.pathsep.join(str(p) for p in sorted((ROOT / "services").glob("*/src")))
    proc = subprocess.Popen([sys.executable, __file__, "--serve", what, "--tasks", str(tasks), "--clicks", str(clicks),
                             "--runs", str(runs)],
                            stdout=subprocess.PIPE, text=True, env=env)
    return proc, json.loads(proc.stdout.readline())


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK  # utime + stime


def rss_mb(key: str = "VmRSS") -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1]) / 1024
    return 0.0


class Profiler:
    """cProfile of the event loop thread between start() and stop() (the thread the collector's asyncio runs on)."""

    def __init__(self) -> None:
        self.prof = cProfile.Profile()

    def start(self) -> None:
        self.prof.enable()

    def stop(self, top: int = 18) -> list[dict]:
        self.prof.disable()
        st = pstats.Stats(self.prof, stream=io.StringIO())
        total = sum(v[2] for v in st.stats.values()) or 1.0
        rows = sorted(st.stats.items(), key=lambda kv: kv[1][2], reverse=True)[:top]
        return [{"function": f"{Path(f).name}:{line}({fn})", "calls": v[1], "own_seconds": round(v[2], 2),
                 "own_share": round(v[2] / total, 3), "cumulative_seconds": round(v[3], 2)}
                for (f, line, fn), v in rows]


async def run_level(level: int, tmp: Path, redis_url: str, window: float, profile: bool = False) -> dict:
    from webenv.collector.app import Collector
    from webenv.collector.config import Settings
    from webenv.collector.store import Store

    conc, episodes, clicks = LEVELS[level]
    episodes, clicks = OVERRIDE.get("episodes") or episodes, OVERRIDE.get("clicks") or clicks
    runs = max(1, -(-conc // 4096))
    per_run_conc, per_run_eps = -(-conc // runs), -(-episodes // runs)
    peers, addr = await asyncio.to_thread(spawn, "peers", per_run_eps * runs, clicks, runs)
    judge, jaddr = await asyncio.to_thread(spawn, "judge")
    db = f"orch_{level}_{uuid.uuid4().hex[:6]}"
    store_url = f"chdb://{tmp / 'chdb'}"
    col = await Collector.start(Settings(
        grpc_port=0, metrics_port=0, host="127.0.0.1", log_level="WARNING", data_dir=str(tmp / db), store_url=store_url,
        store_database=db, browser_addr=addr["env"], policy_addr=addr["policy"], judge_addr=jaddr["judge"],
        sites_addr=addr["sites"], redis_url=redis_url, queue_prefix=db, queue_workers=min(conc, 4096),
        max_run_episodes=max(10_000, per_run_eps), default_policy="oracle", max_spec_bytes=1 << 20))
    peak = {"rss": rss_mb()}
    stop = threading.Event()

    def sample() -> None:
        while not stop.wait(0.25):
            peak["rss"] = max(peak["rss"], rss_mb())

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    prof = Profiler() if profile else None
    try:
        async with make_channel(col.address, timeout=None) as ch:
            stub = collector_pb2_grpc.CollectorServiceStub(ch)
            rss0 = rss_mb()
            cpu0, p0, j0 = time.process_time(), cpu_seconds(peers.pid), cpu_seconds(judge.pid)
            t0 = time.perf_counter()
            if prof:
                prof.start()
            ids = []
            for r in range(runs):
                spec = collector_pb2.RunSpec(name=f"orch-{level}-{r}", policy="oracle", episodes=per_run_eps,
                                             concurrency=per_run_conc, seed=r + 1, max_retries=1,
                                             episode_timeout_seconds=600)
                spec.tasks.families.append(f"walk-{r}")
                ids.append((await stub.StartRun(collector_pb2.StartRunRequest(spec=spec))).run.run_id)

            async def follow(run_id: str, until: float = 0.0):
                last = None
                async for resp in stub.WatchRun(collector_pb2.WatchRunRequest(run_id=run_id)):
                    last = resp
                    if until and time.perf_counter() >= until:
                        break
                return last.run

            finals = await asyncio.gather(*(follow(i, t0 + window * (2 if conc > 1000 else 1)) for i in ids))
            wall = time.perf_counter() - t0
            hot = prof.stop() if prof else None
            cpu, pcpu, jcpu = time.process_time() - cpu0, cpu_seconds(peers.pid) - p0, cpu_seconds(judge.pid) - j0
            rss1 = rss_mb()
            first = [r.counts.finished for r in finals]
            for i in ids:
                await stub.StopRun(collector_pb2.StopRunRequest(run_id=i))
            await asyncio.gather(*(follow(i) for i in ids))
    finally:
        stop.set()
        await col.close()
        for p in (peers, judge):
            p.terminate()
            p.wait()
    store = Store(store_url, db)
    try:
        eps_rows = store.query("SELECT count() AS n, uniqExact(episode_id) AS u FROM {db}.episodes FINAL")[0]
        step_rows = store.query("SELECT count() AS n FROM {db}.steps FINAL")[0]["n"]
    finally:
        store.close()
    finished = sum(r.counts.finished for r in finals)
    steps = sum(r.counts.steps for r in finals)
    errored = sum(r.counts.errored for r in finals)
    passed = sum(r.counts.passed for r in finals)
    rows_per_episode = (eps_rows["n"] + step_rows) / max(eps_rows["n"], 1)
    res = {
        "window_seconds": window, "finished_in_window": sum(first),
        "concurrent_episodes": conc, "runs": runs, "episodes": finished, "steps": steps, "steps_per_episode": clicks + 1,
        "passed": passed, "errored": errored, "states": [collector_pb2.RunState.Name(r.state) for r in finals],
        "wall_seconds": round(wall, 2), "episodes_per_second": round(finished / wall, 1),
        "steps_per_second": round(steps / wall, 1),
        "collector_cpu_ms_per_step": round(1000 * cpu / max(steps, 1), 3),
        "collector_cpu_ms_per_episode": round(1000 * cpu / max(finished, 1), 2),
        "collector_cpu_cores": round(cpu / wall, 2),
        "judge_cpu_ms_per_episode": round(1000 * jcpu / max(finished, 1), 3),
        "peers_cpu_ms_per_step": round(1000 * pcpu / max(steps, 1), 3),
        "collector_rss_start_mb": round(rss0, 0), "collector_rss_end_mb": round(rss1, 0),
        "collector_rss_peak_mb": round(peak["rss"], 0),
        "store_episode_rows": eps_rows["n"], "store_unique_episodes": eps_rows["u"], "store_step_rows": step_rows,
        "store_rows_per_second": round(rows_per_episode * finished / wall, 0),  # the window's episodes' rows
        "redis_queue": bool(redis_url),
    }
    if hot:
        res["profile_top"] = hot
    print(f"  {conc:>5} concurrent: {finished} episodes ({errored} errored), {steps} steps in {wall:.1f}s -> "
          f"{res['episodes_per_second']} ep/s, {res['steps_per_second']} steps/s; collector {res['collector_cpu_ms_per_step']} "
          f"ms CPU/step ({res['collector_cpu_cores']} cores), judge {res['judge_cpu_ms_per_episode']} ms/episode, "
          f"RSS peak {res['collector_rss_peak_mb']:.0f} MB, store {res['store_rows_per_second']:.0f} rows/s", flush=True)
    return res


def start_redis(tmp: Path) -> tuple[subprocess.Popen, str]:
    from webenv.runtime.ports import free_port
    from webenv.testing import wait_for_port

    port = free_port()
    proc = subprocess.Popen([shutil.which("redis-server") or "redis-server", "--port", str(port), "--bind", "127.0.0.1",
                             "--save", "", "--appendonly", "no", "--dir", str(tmp)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_for_port(port)
    return proc, f"redis://127.0.0.1:{port}/0"


def write_report(out: Path, result: dict) -> None:
    lines = [f"# The orchestrator's ceiling ({result['when']})", "",
             "The collector (scheduler, StepStream/ActStream multiplexers, store writer with embedded chDB) and the real "
             "judge, driven by a zero-cost environment and policy over real gRPC on loopback (the collector tests' "
             "page walk, in their own process). Figures are pessimistic: run at `nice -n 19` on a 2-core machine "
             "shared with a running learning benchmark and other developers' work.", "",
             f"    {result['command']}", "",
             "| concurrent episodes | queue | episodes | steps/episode | wall s | episodes/s | steps/s | collector CPU ms/step "
             "| collector cores | judge CPU ms/episode | peers CPU ms/step | RSS start/peak MB | store rows/s | errored |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in result["levels"]:
        lines.append(
            f"| {r['concurrent_episodes']:,} | {'Redis' if r['redis_queue'] else 'in-process'} | {r['episodes']:,} | "
            f"{r['steps_per_episode']} | {r['wall_seconds']} | {r['episodes_per_second']} | {r['steps_per_second']} | "
            f"{r['collector_cpu_ms_per_step']} | {r['collector_cpu_cores']} | {r['judge_cpu_ms_per_episode']} | "
            f"{r['peers_cpu_ms_per_step']} | {r['collector_rss_start_mb']:.0f}/{r['collector_rss_peak_mb']:.0f} | "
            f"{r['store_rows_per_second']:,.0f} | {r['errored']} |")
    for r in result["profiles"]:
        lines += ["", f"## Profile at {r['concurrent_episodes']:,} concurrent episodes, {r['episodes']:,} episodes "
                  f"(collector event loop, own time; its own pass, slowed by cProfile: {r['steps_per_second']} steps/s)",
                  "", "| function | calls | own s | share | cumulative s |", "| --- | --- | --- | --- | --- |"]
        lines += [f"| `{p['function']}` | {p['calls']:,} | {p['own_seconds']} | {p['own_share']:.1%} | "
                  f"{p['cumulative_seconds']} |" for p in r["profile_top"]]
    lines += ["", result.get("notes", "")]
    (out / "orchestrator.md").write_text("\n".join(lines).rstrip() + "\n")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(ROOT / "bench" / "results"))
    ap.add_argument("--levels", type=int, nargs="*", default=list(LEVELS), choices=list(LEVELS))
    ap.add_argument("--profile", type=int, nargs="*", default=[], help="levels to run again under cProfile")
    ap.add_argument("--seconds", type=float, default=40.0, help="measurement window per level")
    ap.add_argument("--plan-episodes", type=int, default=0, help="episodes planned per level (default: the level's)")
    ap.add_argument("--plan-clicks", type=int, default=0, help="clicks per task, steps = clicks + 1 (default: the level's)")
    ap.add_argument("--redis", action="store_true", help="share runs through a real redis-server (the queue path)")
    ap.add_argument("--notes", default="", help="text appended to the report")
    ap.add_argument("--serve", choices=["peers", "judge"], help=argparse.SUPPRESS)
    ap.add_argument("--tasks", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--clicks", type=int, default=1, help=argparse.SUPPRESS)
    ap.add_argument("--runs", type=int, default=1, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.serve:
        asyncio.run(serve_peers(args.serve, args.tasks, args.clicks, args.runs))
        return
    OVERRIDE.update(episodes=args.plan_episodes, clicks=args.plan_clicks)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    name = "orchestrator_redis" if args.redis else "orchestrator"
    levels, profiles = [], []

    def save() -> dict:
        result = {"bench": name, "when": datetime.now(UTC).isoformat(timespec="seconds"),
                  "command": "nice -n 19 .venv/bin/python bench/orchestrator.py " + " ".join(sys.argv[1:]),
                  "machine": f"{os.cpu_count()} cores, shared, nice 19", "levels": levels, "profiles": profiles,
                  "notes": args.notes}
        (out / f"{name}.json").write_text(json.dumps(result, indent=2))  # after every level: a cut run keeps them
        return result

    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        redis, url = start_redis(tmp) if args.redis else (None, "")
        try:
            for level in args.levels:
                levels.append(asyncio.run(run_level(level, tmp, url, args.seconds)))
                save()
            for level in args.profile:
                print(f"  profiled pass at {level}:", flush=True)
                profiles.append(asyncio.run(run_level(level, tmp, url, args.seconds, profile=True)))
                save()
        finally:
            if redis:
                redis.terminate()
                redis.wait()
    result = save()
    if not args.redis:
        write_report(out, result)


if __name__ == "__main__":
    main()

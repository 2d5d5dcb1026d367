"""Several collectors share a run through a Redis Streams consumer group (real redis-server)."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
import uuid

import grpc
import pytest
import redis.asyncio as aioredis
from webenv.testing import free_port, wait_for_port
from webenv.v1 import collector_pb2, collector_pb2_grpc


def spec(**kw) -> collector_pb2.RunSpec:
    base = dict(name="shared", policy="oracle", seed=4, concurrency=8)
    base.update(kw)
    return collector_pb2.RunSpec(**base)


async def ran_by(collector, run_id: str) -> dict[str, str]:
    """Episode id -> the collector that ran it, as this collector's own store has them."""
    rows = await collector.store.query(
        "SELECT episode_id, collector_id FROM {db}.episodes FINAL WHERE run_id = {r:String}", {"r": run_id},
    )
    return {r["episode_id"]: r["collector_id"] for r in rows}


async def test_two_collectors_share_a_run(make_collector, redis_url, world, watch, tmp_path):
    prefix = f"q{uuid.uuid4().hex[:6]}"
    world.policy.delay = 0.02
    a = await make_collector(redis_url=redis_url, queue_prefix=prefix, queue_workers=4, collector_id="a")
    b = await make_collector(redis_url=redis_url, queue_prefix=prefix, queue_workers=4, collector_id="b")
    ch = grpc.aio.insecure_channel(a.address)
    stub = collector_pb2_grpc.CollectorServiceStub(ch)
    run = (await stub.StartRun(collector_pb2.StartRunRequest(spec=spec(repeats=3)))).run
    last = await watch(stub, run.run_id)
    assert last.run.state == collector_pb2.RUN_STATE_SUCCEEDED
    planned = run.counts.planned
    assert last.run.counts.finished == last.run.counts.passed == planned
    ch_b = grpc.aio.insecure_channel(b.address)
    stub_b = collector_pb2_grpc.CollectorServiceStub(ch_b)
    # Every collector sees the whole run: ListRuns and ExportRun on either one (embedded stores share their rows).
    for c, st in ((a, stub), (b, stub_b)):
        listed = {r.run_id: r for r in (await st.ListRuns(collector_pb2.ListRunsRequest())).runs}
        assert listed[run.run_id].state == collector_pb2.RUN_STATE_SUCCEEDED, c.settings.collector_id
        assert listed[run.run_id].counts.finished == planned
        exp = await st.ExportRun(collector_pb2.ExportRunRequest(
            run_id=run.run_id, format=collector_pb2.EXPORT_FORMAT_JSONL,
            destination=str(tmp_path / f"export-{c.settings.collector_id}")))
        assert exp.episodes == planned and exp.steps == last.run.counts.steps
    ra, rb = await ran_by(a, run.run_id), await ran_by(b, run.run_id)
    assert ra == rb and len(ra) == planned  # the same rows in both stores, each episode once
    assert set(ra.values()) == {"a", "b"}  # both worked
    got = await stub_b.GetRun(collector_pb2.GetRunRequest(run_id=run.run_id))
    assert got.run.counts.finished == planned and got.run.state == collector_pb2.RUN_STATE_SUCCEEDED
    watched = await watch(stub_b, run.run_id)
    assert watched.run.state == collector_pb2.RUN_STATE_SUCCEEDED and watched.pass_rate == 1.0
    # Redis keeps only rows some live collector has not copied yet.
    # (how many rows are still held at this moment depends on how far the collectors already copied: not asserted)
    r = aioredis.from_url(redis_url)
    await a.queue.catch_up()
    await b.queue.catch_up()
    await a.queue._heartbeat(time.time())
    assert await r.xlen(f"{prefix}:rows") <= 1  # the entry both cursors point at
    await r.aclose()
    await ch.close()
    await ch_b.close()


async def test_shared_run_outlives_its_owner(make_collector, redis_url, world, watch):
    prefix = f"q{uuid.uuid4().hex[:6]}"
    world.policy.delay = 0.05
    owner = await make_collector(redis_url=redis_url, queue_prefix=prefix, queue_workers=2, collector_id="owner",
                                 queue_claim_idle_seconds=0.5)
    other = await make_collector(redis_url=redis_url, queue_prefix=prefix, queue_workers=2, collector_id="other",
                                 queue_claim_idle_seconds=0.5)
    async with grpc.aio.insecure_channel(owner.address) as ch:
        run = (await collector_pb2_grpc.CollectorServiceStub(ch).StartRun(
            collector_pb2.StartRunRequest(spec=spec(repeats=2)))).run
    r = aioredis.from_url(redis_url, decode_responses=True)
    async with asyncio.timeout(60):
        while await r.scard(f"{prefix}:run:{run.run_id}:done") < 3:  # noqa: ASYNC110
            await asyncio.sleep(0.02)
    await owner.close()  # SIGTERM-like shutdown of the collector that started the run
    async with grpc.aio.insecure_channel(other.address) as ch:
        last = await watch(collector_pb2_grpc.CollectorServiceStub(ch), run.run_id)
    assert last.run.state == collector_pb2.RUN_STATE_SUCCEEDED
    assert last.run.counts.finished == run.counts.planned
    ids = await ran_by(other, run.run_id)
    assert len(ids) == run.counts.planned  # the owner's episodes too: it shared them before it went
    async with grpc.aio.insecure_channel(other.address) as ch:
        listed = (await collector_pb2_grpc.CollectorServiceStub(ch).ListRuns(collector_pb2.ListRunsRequest())).runs
    assert [x.state for x in listed if x.run_id == run.run_id] == [collector_pb2.RUN_STATE_SUCCEEDED]
    await r.aclose()


async def test_dead_letter_after_max_deliveries(make_collector, redis_url):
    """An entry that keeps being delivered (its collectors die) lands in the dead-letter stream."""
    prefix = f"q{uuid.uuid4().hex[:6]}"
    r = aioredis.from_url(redis_url, decode_responses=True)
    stream = f"{prefix}:episodes"
    await r.xgroup_create(stream, "collectors", id="0", mkstream=True)
    run_id = "run-dl"
    await r.hset(f"{prefix}:run:{run_id}:meta", mapping={
        "spec": '{"policy": "oracle"}', "planned": 1, "target": 1, "state": "running",
        "created_at": "2026-01-01T00:00:00Z", "owner": "x"})
    job = {"run_id": run_id, "episode_id": f"{run_id}-000000", "index": 0, "task": "", "seed": 1, "horizon": 1}
    await r.xadd(stream, {"run_id": run_id, "job": json.dumps(job)})
    for i in range(2):  # two consumers read it and "die" (never ack)
        await r.xreadgroup("collectors", f"dead-{i}", {stream: ">"}, count=1)
        await r.xclaim(stream, "collectors", f"dead-{i + 1}", 0, [(await r.xpending_range(stream, "collectors", "-", "+", 1))[0]["message_id"]])
    c = await make_collector(redis_url=redis_url, queue_prefix=prefix, queue_max_deliveries=2,
                             queue_claim_idle_seconds=0.1, collector_id="janitor")
    async with asyncio.timeout(30):
        while not await r.xlen(f"{prefix}:dead"):  # noqa: ASYNC110
            await asyncio.sleep(0.05)
    dead = await r.xrange(f"{prefix}:dead")
    assert dead[0][1]["reason"] == "max deliveries"
    async with asyncio.timeout(10):  # the run ends right after the entry moves
        while (await r.hget(f"{prefix}:run:{run_id}:meta", "state")) != "succeeded":  # noqa: ASYNC110
            await asyncio.sleep(0.05)
    assert not await r.xpending_range(stream, "collectors", "-", "+", 10)
    assert c.engine is not None
    await r.aclose()


async def test_an_episode_counts_once_and_its_run_ends_at_the_target(redis_url):
    """Recording an episode is one atomic step: a second record of it (a collector that took over an entry whose
    first runner died after recording) counts nothing, and the run ends when finished + dead reach the target."""
    from webenv.collector.queue import WorkQueue

    prefix = f"q{uuid.uuid4().hex[:6]}"
    q = WorkQueue(redis_url, consumer="a", prefix=prefix)
    r = aioredis.from_url(redis_url, decode_responses=True)
    meta, counts = f"{prefix}:run:r1:meta", f"{prefix}:run:r1:counts"
    await r.hset(meta, mapping={"state": "running", "target": 3})
    await q._record("r1", "r1-000000", 3, steps=4, outcome="passed", summary="{}")
    await q._record("r1", "r1-000000", 3, steps=4, outcome="passed", summary="{}")  # taken over: counted already
    await q._record("r1", "r1-000001", 3, steps=2, outcome="errored", summary="{}")
    assert await r.hgetall(counts) == {"finished": "2", "steps": "6", "passed": "1", "errored": "1"}
    assert await r.llen(f"{prefix}:run:r1:summaries") == 2
    assert await r.hget(meta, "state") == "running"
    await q._record("r1", "r1-000002", 3, dead=True)  # the last one went to the dead-letter stream
    assert (await r.hgetall(counts))["dead"] == "1"
    assert await r.hget(meta, "state") == "succeeded"
    await r.hset(f"{prefix}:run:r2:meta", mapping={"state": "stopped", "target": 1})
    await q._record("r2", "r2-000000", 1, steps=1, outcome="passed", summary="{}")
    assert await r.hget(f"{prefix}:run:r2:meta", "state") == "stopped"  # a stopped run stays stopped
    await q.close()
    await r.aclose()


READ_IDS = """
import json, sys
from webenv.collector.store import Store
s = Store(sys.argv[1], "webenv")
rows = s.query("SELECT episode_id, collector_id FROM {db}.episodes FINAL WHERE run_id = {r:String}", {"r": sys.argv[2]})
print(json.dumps({r["episode_id"]: r["collector_id"] for r in rows}))
"""


def store_ids(data_dir: str, run_id: str) -> dict[str, str]:
    """Episode id -> collector that ran it, in a collector's own chDB folder (read in a subprocess: chDB opens
    one folder per process)."""
    out = subprocess.run(
        [sys.executable, "-c", READ_IDS, f"chdb://{data_dir}/store", run_id],
        capture_output=True, text=True, timeout=120, check=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def spawn_collector(env: dict, log_path) -> subprocess.Popen:
    """``python -m webenv.collector`` with ``env``, stderr to ``log_path``."""
    with open(log_path, "w") as log:
        return subprocess.Popen([sys.executable, "-m", "webenv.collector"], env=env, stdout=subprocess.DEVNULL, stderr=log)


@pytest.mark.timeout(240)
async def test_sigkilled_collector_episodes_are_taken_over_exactly_once(world, redis_url, tmp_path):
    prefix = f"q{uuid.uuid4().hex[:6]}"
    world.policy.delay = 0.05
    procs, ports, dirs = {}, {}, {}
    for name in ("a", "b"):
        ports[name] = free_port()
        dirs[name] = str(tmp_path / name)
        env = {
            **os.environ,
            "WEBENV_GRPC_PORT": str(ports[name]), "WEBENV_METRICS_PORT": "0", "WEBENV_HOST": "127.0.0.1",
            "WEBENV_DATA_DIR": dirs[name], "WEBENV_REDIS_URL": redis_url, "WEBENV_QUEUE_PREFIX": prefix,
            "WEBENV_QUEUE_WORKERS": "4", "WEBENV_QUEUE_CLAIM_IDLE_SECONDS": "1", "WEBENV_COLLECTOR_ID": name,
            "WEBENV_BROWSER_ADDR": world.addr["env"], "WEBENV_POLICY_ADDR": world.addr["policy"],
            "WEBENV_JUDGE_ADDR": world.addr["judge"], "WEBENV_SITES_ADDR": world.addr["sites"],
            "WEBENV_FLUSH_INTERVAL_SECONDS": "0.05", "WEBENV_LOG_JSON": "false",
        }
        procs[name] = spawn_collector(env, tmp_path / f"{name}.log")
    try:
        for name in procs:
            await asyncio.to_thread(wait_for_port, ports[name], "127.0.0.1", 60)
        r = aioredis.from_url(redis_url, decode_responses=True)
        ch = grpc.aio.insecure_channel(f"127.0.0.1:{ports['b']}")
        stub = collector_pb2_grpc.CollectorServiceStub(ch)
        run = (await stub.StartRun(collector_pb2.StartRunRequest(spec=spec(repeats=3)), wait_for_ready=True)).run
        planned = run.counts.planned
        done_key = f"{prefix}:run:{run.run_id}:done"
        async with asyncio.timeout(60):
            while await r.scard(done_key) < planned // 4:  # noqa: ASYNC110
                await asyncio.sleep(0.02)
        procs["a"].send_signal(signal.SIGKILL)  # a dies with episodes in flight
        procs["a"].wait()
        deadline = time.monotonic() + 150
        while True:
            got = (await stub.GetRun(collector_pb2.GetRunRequest(run_id=run.run_id))).run
            if got.state == collector_pb2.RUN_STATE_SUCCEEDED:
                break
            if time.monotonic() > deadline:  # say why: the counts and what the survivor logged
                tail = (tmp_path / "b.log").read_text()[-4000:]
                pytest.fail(f"run not done 150 s after a died: {got.counts}\n--- b.log (tail) ---\n{tail}")
            await asyncio.sleep(0.1)
        assert got.counts.finished == planned and got.counts.passed == planned
        procs["b"].send_signal(signal.SIGTERM)
        await asyncio.to_thread(procs["b"].wait, 60)
        ids_a = await asyncio.to_thread(store_ids, dirs["a"], run.run_id)
        ids_b = await asyncio.to_thread(store_ids, dirs["b"], run.run_id)
        # The survivor's store has the whole run: its own episodes and those a shared before it died.
        assert set(ids_b) == {f"{run.run_id}-{i:06d}" for i in range(planned)}
        by_a = {e for e, who in ids_b.items() if who == "a"}
        assert by_a and len(by_a) < planned  # both worked
        # Each episode ran once: what b has as a's is what a stored itself (bar the crash window before SADD).
        assert by_a <= {e for e, who in ids_a.items() if who == "a"}
        await ch.close()
        await r.aclose()
    finally:
        for p in procs.values():
            if p.poll() is None:
                p.kill()
                p.wait()


async def test_commands_beyond_the_pool_wait_for_a_connection(redis_url):
    """More commands in flight than the client has connections (1,000 episodes through the queue are as many
    workers): each waits for a free connection. redis-py's default pool raised MaxConnectionsError past 100, and
    every episode of a 1,000-in-flight run failed so."""
    from webenv.collector.queue import REDIS_CONNECTIONS, redis_client

    client = redis_client(redis_url, decode_responses=True)
    try:
        n = REDIS_CONNECTIONS * 4 + 44  # 300: each holds its connection 0.1 s (BLPOP of a key nobody pushes)
        got = await asyncio.gather(*(client.blpop([f"test:nothing:{i}"], timeout=0.1) for i in range(n)))
        assert got == [None] * n
        assert await client.ping()
    finally:
        await client.aclose()

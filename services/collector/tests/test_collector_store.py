"""The store: migrations, idempotent batches, and the disk spool while the store is down."""

from __future__ import annotations

import asyncio
import socket
import uuid
from datetime import UTC, datetime

from webenv.collector.spool import Spool
from webenv.collector.store import Store, migrations
from webenv.v1 import collector_pb2


async def until(cond, limit: float = 60.0) -> None:
    """Poll ``cond`` (a plain predicate on files) until it holds."""
    async with asyncio.timeout(limit):
        while not cond():  # noqa: ASYNC110 - the condition is on disk, there is no event to wait on
            await asyncio.sleep(0.05)


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def batch(run: str, episodes: int = 3, steps: int = 4) -> dict:
    now = datetime.now(UTC)
    return {
        "steps": [
            {"run_id": run, "episode_id": f"{run}-{e}", "step_index": i, "url": f"u{i}", "version": 1}
            for e in range(episodes)
            for i in range(steps)
        ],
        "episodes": [
            {"run_id": run, "episode_id": f"{run}-{e}", "passed": e % 2, "started_at": now, "version": 1}
            for e in range(episodes)
        ],
    }


def test_migrations_are_versioned_and_idempotent(chdb_url):
    db = f"m_{uuid.uuid4().hex[:8]}"
    shipped = [v for v, _, _ in migrations()]
    assert shipped[:2] == [1, 2]
    s = Store(chdb_url, db)
    assert s.migrate() == shipped
    s.close()
    s2 = Store(chdb_url, db)  # a second open applies nothing again
    assert s2.migrate() == shipped
    rows = s2.query("SELECT version, name FROM {db}.schema_migrations ORDER BY version")
    assert rows[:2] == [{"version": 1, "name": "init"}, {"version": 2, "name": "task_proto"}]
    assert len(rows) == len(shipped)
    assert "task_pb" in {r["name"] for r in s2.query("DESCRIBE TABLE {db}.episodes")}
    s2.close()


def test_retried_batch_adds_no_duplicates(chdb_url):
    s = Store(chdb_url, f"d_{uuid.uuid4().hex[:8]}")
    b = batch("r1")
    s.insert(b)
    s.insert(b)  # the retry of a batch whose acknowledgement was lost
    s.insert({"steps": b["steps"][:5]})  # and a partial replay
    assert s.counts("r1") == {"episodes": 3, "passed": 1, "errored": 0, "steps": 12}
    # Raw rows were written more than once; FINAL reads count each key once.
    raw = s.query("SELECT count() AS n FROM {db}.steps WHERE run_id = 'r1'")[0]["n"]
    assert raw > 12
    s.close()


def test_spool_round_trip_keeps_types(tmp_path):
    sp = Spool(tmp_path / "spool")
    b = batch("r2", episodes=2, steps=2)
    seg = sp.append(b)
    assert sp.segments() == [seg] and sp.pending_rows() == 6
    back = sp.read(seg)
    assert back["episodes"][0]["started_at"] == b["episodes"][0]["started_at"]
    assert back == b
    sp.remove(seg)
    assert sp.segments() == []


async def test_store_down_mid_run_spools_and_flushes_exactly(stub, watch, collector, world):
    """Point the store at a dead URL mid-run, then restore it: every episode lands once, none is lost."""
    world.policy.delay = 0.01
    good = collector.store.url
    spool = collector.writer.spool
    run = (await stub.StartRun(collector_pb2.StartRunRequest(
        spec=collector_pb2.RunSpec(policy="oracle", repeats=4, concurrency=4, seed=5)))).run
    planned = run.counts.planned
    outage_started = False
    async for resp in stub.WatchRun(collector_pb2.WatchRunRequest(run_id=run.run_id)):
        if not outage_started and resp.run.counts.finished >= 5:
            await collector.store.retarget(f"http://127.0.0.1:{closed_port()}")
            outage_started = True
        if outage_started and resp.run.counts.finished >= planned // 2:
            break
    # While the store is down, finished episodes are durable in the spool.
    await until(lambda: bool(spool.segments()))
    assert not collector.writer.store_up
    last = await watch(stub, run.run_id)
    assert last.run.counts.finished == planned
    assert spool.segments()  # the store is still down: rows wait on disk
    assert collector.writer.spooled_batches > 0
    await collector.store.retarget(good)
    await until(lambda: not spool.segments())  # the background flusher empties the spool
    counts = await collector.store.counts(run.run_id)
    assert counts["episodes"] == planned
    assert counts["steps"] == last.run.counts.steps
    row = await collector.store.get_run(run.run_id)
    assert row["state"] == "succeeded" and row["finished"] == planned


async def test_writer_batches_but_urgent_rows_and_drain_do_not_wait(tmp_path):
    """Rows wait up to flush_interval for company; a run's last rows (urgent) and a drain of nothing do not."""
    import time

    from webenv.collector.writer import Writer

    class FakeStore:  # AsyncStore's insert and call, recording the batches
        def __init__(self) -> None:
            self.inserts: list[dict] = []

        async def insert(self, batch) -> None:
            self.inserts.append(batch)

        async def call(self, fn, *args, **kwargs):
            return fn(*args, **kwargs)

    store = FakeStore()
    writer = Writer(store, Spool(tmp_path / "spool"), flush_interval=0.5)
    await writer.start()
    try:
        row = {"steps": [{"run_id": "r", "episode_id": "e", "step_index": 0}]}
        t0 = time.monotonic()
        await writer.put(row)
        assert time.monotonic() - t0 >= 0.45  # batched: waited for company
        t0 = time.monotonic()
        await writer.drain()  # nothing queued: nothing to wait for
        await writer.put(row, urgent=True)
        assert time.monotonic() - t0 < 0.3
        t0 = time.monotonic()
        slow = asyncio.create_task(writer.put(row))
        await asyncio.sleep(0.05)
        await writer.put(row, urgent=True)  # writes the batch collected so far too
        await slow
        assert time.monotonic() - t0 < 0.3
        assert [len(b["steps"]) for b in store.inserts] == [1, 1, 2]
    finally:
        await writer.close()


def test_blob_puts_of_the_same_bytes_from_many_threads_all_succeed(tmp_path):
    """The engine puts blobs off the event loop: concurrent puts of one screenshot never fail or tear it."""
    from concurrent.futures import ThreadPoolExecutor

    from webenv.collector.blobs import BlobStore

    blobs = BlobStore(tmp_path / "blobs")
    data = b"\x89PNG" + bytes(range(256)) * 4096
    with ThreadPoolExecutor(8) as pool:
        keys = set(pool.map(lambda _: blobs.put(data, "png"), range(64)))
    assert len(keys) == 1
    assert blobs.get(keys.pop()) == data
    assert not list((tmp_path / "blobs").rglob("*.tmp"))

"""The collector under abusive requests: admission and quotas, ExportRun's checks, ListRuns' cost,
bounded memory for ended runs, and health that follows the dependencies it cannot work without."""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import tempfile

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from webenv import errors
from webenv.collector import engine as engine_module
from webenv.testing import free_port, wait_for_port
from webenv.v1 import collector_pb2, collector_pb2_grpc


def spec(**kw) -> collector_pb2.RunSpec:
    base = dict(name="limits", policy="oracle", seed=3, concurrency=2)
    base.update(kw)
    return collector_pb2.RunSpec(**base)


async def refused(call) -> errors.WebenvError:
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await call
    return errors.from_rpc_error(info.value)


async def until(cond, limit: float = 30.0) -> None:
    async with asyncio.timeout(limit):
        while not cond():  # noqa: ASYNC110 - polling state that has no event
            await asyncio.sleep(0.05)


async def health(address: str) -> int:
    async with grpc.aio.insecure_channel(address) as ch:
        return (await health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(), timeout=5)).status


# -- admission ----------------------------------------------------------------------------------------------------
async def test_runs_beyond_the_active_limit_wait_and_beyond_the_queue_are_refused_with_retry_info(
        make_collector, world, watch):
    world.policy.delay = 0.1
    c = await make_collector(max_active_runs=1, max_pending_runs=1, admission_retry_seconds=2.5)
    async with grpc.aio.insecure_channel(c.address) as ch:
        stub = collector_pb2_grpc.CollectorServiceStub(ch)
        first = (await stub.StartRun(collector_pb2.StartRunRequest(spec=spec(episodes=4)))).run
        second = (await stub.StartRun(collector_pb2.StartRunRequest(spec=spec(episodes=2)))).run
        await asyncio.sleep(0.3)
        got = (await stub.GetRun(collector_pb2.GetRunRequest(run_id=second.run_id))).run
        assert got.state == collector_pb2.RUN_STATE_PENDING and got.counts.started == 0  # waits for the slot
        err = await refused(stub.StartRun(collector_pb2.StartRunRequest(spec=spec(episodes=1))))
        assert isinstance(err, errors.ResourceExhausted) and err.reason == "TOO_MANY_RUNS"
        assert err.retry_after_seconds == pytest.approx(2.5) and "WEBENV_MAX_PENDING_RUNS=1" in err.message
        assert (await watch(stub, first.run_id)).run.state == collector_pb2.RUN_STATE_SUCCEEDED
        assert (await watch(stub, second.run_id)).run.state == collector_pb2.RUN_STATE_SUCCEEDED
        # A pending run can be stopped before it ever runs.
        third = (await stub.StartRun(collector_pb2.StartRunRequest(spec=spec(episodes=6)))).run
        fourth = (await stub.StartRun(collector_pb2.StartRunRequest(spec=spec(episodes=1)))).run
        stopped = (await stub.StopRun(collector_pb2.StopRunRequest(run_id=fourth.run_id))).run
        assert stopped.state == collector_pb2.RUN_STATE_STOPPED and stopped.counts.finished == 0
        assert (await watch(stub, third.run_id)).run.state == collector_pb2.RUN_STATE_SUCCEEDED


async def test_run_size_and_spec_size_are_bounded(make_collector, world):
    c = await make_collector(max_run_episodes=10, max_spec_bytes=4096)
    async with grpc.aio.insecure_channel(c.address) as ch:
        stub = collector_pb2_grpc.CollectorServiceStub(ch)
        # An empty spec would run every task of the catalog (18 here, 21,000 in the real one).
        err = await refused(stub.StartRun(collector_pb2.StartRunRequest(spec=collector_pb2.RunSpec())))
        assert isinstance(err, errors.InvalidArgument) and err.reason == "RUN_TOO_LARGE"
        assert err.metadata["field"] == "spec.tasks" and "18 episodes" in err.message
        assert "WEBENV_MAX_RUN_EPISODES" in err.message
        for kw, field in ((dict(episodes=11), "spec.episodes"), (dict(repeats=2**31 - 1), "spec.repeats"),
                          (dict(repeats=2), "spec.repeats")):
            err = await refused(stub.StartRun(collector_pb2.StartRunRequest(spec=spec(**kw))))
            assert err.reason == "RUN_TOO_LARGE" and err.metadata["field"] == field, (kw, err)
        big = spec(start_urls=[f"http://shop-0000.web.test/page/{i}" for i in range(200)], episodes=1)
        err = await refused(stub.StartRun(collector_pb2.StartRunRequest(spec=big)))
        assert err.reason == "SPEC_TOO_LARGE" and err.metadata["field"] == "spec"
        ok = (await stub.StartRun(collector_pb2.StartRunRequest(spec=spec(task_limit=5, repeats=2)))).run
        assert ok.counts.planned == 10


async def test_a_plan_reads_the_catalog_no_further_than_its_size_allows(make_collector, world):
    """One pass (webenv.collector.plan): a run whose spec alone is too large is refused before the catalog is read; an
    empty spec stops reading pages once its tasks exceed the limit, and still says how many the catalog holds."""
    c = await make_collector(max_run_episodes=10)
    c.engine.planner.task_page_size = 4  # the 18 tasks on 5 pages
    async with grpc.aio.insecure_channel(c.address) as ch:
        stub = collector_pb2_grpc.CollectorServiceStub(ch)
        before = world.sites.pages_read
        err = await refused(stub.StartRun(collector_pb2.StartRunRequest(spec=spec(episodes=11))))
        assert (err.reason, err.metadata["field"]) == ("RUN_TOO_LARGE", "spec.episodes")
        assert world.sites.pages_read == before
        err = await refused(stub.StartRun(collector_pb2.StartRunRequest(spec=collector_pb2.RunSpec())))
        assert (err.reason, err.metadata["field"]) == ("RUN_TOO_LARGE", "spec.tasks") and "18 episodes" in err.message
        assert world.sites.pages_read - before == 3  # 12 tasks read, more than 10: the last two pages are not


# -- memory ---------------------------------------------------------------------------------------------------------
async def test_ended_runs_free_their_jobs_and_only_the_last_few_stay_in_memory(
        make_collector, world, watch, monkeypatch):
    monkeypatch.setattr(engine_module, "ENDED_RUNS_KEPT", 2)
    c = await make_collector()
    async with grpc.aio.insecure_channel(c.address) as ch:
        stub = collector_pb2_grpc.CollectorServiceStub(ch)
        ids = []
        for i in range(4):
            run = (await stub.StartRun(collector_pb2.StartRunRequest(request_id=f"r{i}", spec=spec(episodes=1)))).run
            await watch(stub, run.run_id)
            ids.append(run.run_id)
        await until(lambda: len(c.engine.runs) == 2)
        assert set(c.engine.runs) == set(ids[2:]) and all(not rc.jobs for rc in c.engine.runs.values())
        # A forgotten run is still answered, from the store, and a retried StartRun still returns it.
        old = (await stub.GetRun(collector_pb2.GetRunRequest(run_id=ids[0]))).run
        assert old.state == collector_pb2.RUN_STATE_SUCCEEDED and old.counts.finished == 1
        again = (await stub.StartRun(collector_pb2.StartRunRequest(request_id="r0", spec=spec(episodes=1)))).run
        assert again.run_id == ids[0]
        last = await watch(stub, ids[0])  # watching a forgotten run reports how it ended
        assert last.run.state == collector_pb2.RUN_STATE_SUCCEEDED


async def test_list_runs_writes_no_rows_for_ended_runs(make_collector, world, watch, monkeypatch):
    """ListRuns' cost no longer grows with the runs a collector has owned: it used to persist every one of them,
    one batch interval each (0.28 s per run). Now one query per page, and one batch only for live runs."""
    c = await make_collector(flush_interval_seconds=0.25)
    async with grpc.aio.insecure_channel(c.address) as ch:
        stub = collector_pb2_grpc.CollectorServiceStub(ch)
        for _ in range(6):
            await watch(stub, (await stub.StartRun(collector_pb2.StartRunRequest(spec=spec(episodes=1)))).run.run_id)
        inserts = []
        real = c.store.insert

        async def insert(batch):
            inserts.append(batch)
            await real(batch)

        monkeypatch.setattr(c.store, "insert", insert)
        page = await stub.ListRuns(collector_pb2.ListRunsRequest(page_size=5))
        assert len(page.runs) == 5 and page.next_page_token and inserts == []
        world.policy.delay = 0.5
        live = (await stub.StartRun(collector_pb2.StartRunRequest(spec=spec(episodes=2)))).run
        await asyncio.sleep(0.1)
        inserts.clear()
        page = await stub.ListRuns(collector_pb2.ListRunsRequest(page_size=5))
        assert page.runs[0].run_id == live.run_id and page.runs[0].state == collector_pb2.RUN_STATE_RUNNING
        assert [[r["run_id"] for r in b["runs"]] for b in inserts if "runs" in b] == [[live.run_id]]


# -- ExportRun --------------------------------------------------------------------------------------------------------
async def test_export_refuses_bad_filters_and_destinations_naming_the_field(stub, tmp_path):
    def req(**kw):
        base = dict(format=collector_pb2.EXPORT_FORMAT_JSONL, destination=str(tmp_path / "out"))
        base.update(kw)
        return collector_pb2.ExportRunRequest(**base)

    cases = [
        (req(filter=collector_pb2.ExportFilter(split=7)), "filter.split"),
        (req(filter=collector_pb2.ExportFilter(level=42)), "filter.level"),
        (req(destination=str(tmp_path / "a\x00b")), "destination"),
        (req(destination=str(tmp_path / ("n" * 300))), "destination"),
        (req(destination="/" + "d/" * 3000), "destination"),
        (req(format=99), "format"),
        (req(format=collector_pb2.EXPORT_FORMAT_TRANSITIONS, transition_format=5), "transition_format"),
    ]
    for request, field in cases:
        err = await refused(stub.ExportRun(request))
        assert isinstance(err, errors.InvalidArgument), (field, err)
        assert err.metadata["field"] == field and err.message.startswith(field), err
    # A destination under a file cannot be created: a clean error naming it, not INTERNAL.
    (tmp_path / "file").write_text("x")
    err = await refused(stub.ExportRun(req(destination=str(tmp_path / "file" / "sub"))))
    assert isinstance(err, errors.InvalidArgument) and err.metadata["field"] == "destination"


async def test_an_empty_run_exports_cleanly_in_every_format(stub, world, tmp_path):
    world.policy.delay = 5.0
    run = (await stub.StartRun(collector_pb2.StartRunRequest(spec=spec(episodes=2)))).run
    stopped = (await stub.StopRun(collector_pb2.StopRunRequest(run_id=run.run_id))).run
    assert stopped.counts.finished == 0
    for fmt in (f for f in collector_pb2.ExportFormat.values() if f):
        resp = await stub.ExportRun(collector_pb2.ExportRunRequest(
            run_id=run.run_id, format=fmt, destination=str(tmp_path / f"f{fmt}")))
        assert resp.episodes == 0 and resp.steps == 0, fmt


# -- health ----------------------------------------------------------------------------------------------------------
def start_redis(port: int, workdir: str) -> subprocess.Popen:
    proc = subprocess.Popen(
        [shutil.which("redis-server"), "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
         "--dir", workdir], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_for_port(port)
    return proc


async def test_health_is_not_serving_while_redis_is_down(make_collector, world):
    port, workdir = free_port(), tempfile.mkdtemp(prefix="webenv-redis-")
    redis = start_redis(port, workdir)
    try:
        c = await make_collector(redis_url=f"redis://127.0.0.1:{port}/0", health_interval_seconds=0.2,
                                 queue_prefix="health")
        assert await health(c.address) == health_pb2.HealthCheckResponse.SERVING
        redis.kill()
        redis.wait()
        await until(lambda: bool(c.engine.unavailable))
        assert await health(c.address) == health_pb2.HealthCheckResponse.NOT_SERVING
        async with grpc.aio.insecure_channel(c.address) as ch:
            err = await refused(collector_pb2_grpc.CollectorServiceStub(ch).StartRun(
                collector_pb2.StartRunRequest(spec=spec(episodes=1))))
        assert isinstance(err, errors.Unavailable) and "Redis" in err.message
        redis = start_redis(port, workdir)
        await until(lambda: not c.engine.unavailable)
        assert await health(c.address) == health_pb2.HealthCheckResponse.SERVING
    finally:
        redis.kill()
        redis.wait()
        shutil.rmtree(workdir, ignore_errors=True)


async def test_health_is_not_serving_while_the_store_is_down_and_the_spool_full(make_collector, world):
    c = await make_collector(health_interval_seconds=0.2, spool_max_mb=1, spool_retry_seconds=0.2)
    writer, store = c.writer, c.store
    good = store.url
    await store.retarget(f"http://127.0.0.1:{free_port()}")
    rows = [{"run_id": "spool-test", "episode_id": f"e{i}", "step_index": 0, "axtree": "x" * 4000, "version": 1}
            for i in range(300)]  # ~1.2 MB of JSON: more than the 1 MB cap
    await writer.put({"steps": rows}, urgent=True)  # the store is down: these go to the spool
    assert writer.spool.full() and not writer.store_up
    await until(lambda: bool(c.engine.unavailable))
    assert "spool full" in c.engine.unavailable
    assert await health(c.address) == health_pb2.HealthCheckResponse.NOT_SERVING
    # More rows now wait (nothing is dropped, the disk does not fill) ...
    waiting = asyncio.create_task(writer.put({"steps": [dict(rows[0], episode_id="late")]}, urgent=True))
    await asyncio.sleep(0.6)
    assert not waiting.done() and len(writer.spool.segments()) == 1
    # ... until the store is back: the spool drains, the waiting rows land, health is SERVING again.
    await store.retarget(good)
    await asyncio.wait_for(waiting, 30)
    await until(lambda: not c.engine.unavailable)
    assert await health(c.address) == health_pb2.HealthCheckResponse.SERVING
    await until(lambda: not writer.spool.segments())
    n = await store.query("SELECT count() AS n FROM {db}.steps FINAL WHERE run_id = 'spool-test'")
    assert n[0]["n"] == 301

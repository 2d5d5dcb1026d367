"""Every CollectorService RPC over a real channel, and INVALID_ARGUMENT naming the field for bad specs."""

from __future__ import annotations

import grpc
import pytest
from webenv import errors
from webenv.v1 import collector_pb2, common_pb2


def spec(**kw) -> collector_pb2.RunSpec:
    base = dict(name="t", policy="oracle", repeats=1, seed=7, concurrency=4)
    base.update(kw)
    return collector_pb2.RunSpec(**base)


async def test_start_watch_get_list_export(stub, watch, world, tmp_path):
    resp = await stub.StartRun(collector_pb2.StartRunRequest(request_id="req-1", spec=spec()))
    run = resp.run
    assert run.run_id.startswith("run-")
    assert run.counts.planned == len(world.tasks)
    # Idempotent: the same request id returns the same run.
    again = await stub.StartRun(collector_pb2.StartRunRequest(request_id="req-1", spec=spec()))
    assert again.run.run_id == run.run_id

    last = await watch(stub, run.run_id)
    assert last.run.state == collector_pb2.RUN_STATE_SUCCEEDED
    assert last.run.counts.finished == len(world.tasks)
    assert last.run.counts.passed == len(world.tasks)  # the oracle solves every task
    assert last.pass_rate == 1.0

    got = (await stub.GetRun(collector_pb2.GetRunRequest(run_id=run.run_id))).run
    assert got.state == collector_pb2.RUN_STATE_SUCCEEDED
    assert got.spec.horizons.easy == 10 and got.spec.env_address  # stored spec has defaults filled in
    assert got.HasField("finished_at")

    listed = await stub.ListRuns(collector_pb2.ListRunsRequest())
    assert [r.run_id for r in listed.runs] == [run.run_id]

    exp = await stub.ExportRun(
        collector_pb2.ExportRunRequest(
            run_id=run.run_id, format=collector_pb2.EXPORT_FORMAT_PARQUET, destination=str(tmp_path / "x")
        )
    )
    assert exp.episodes == len(world.tasks)
    assert exp.steps == sum(len(t.oracle) for t in world.tasks)
    assert len(exp.paths) == 2


async def test_watch_reports_every_finished_episode_once(stub, watch, world):
    run = (await stub.StartRun(collector_pb2.StartRunRequest(spec=spec(repeats=2)))).run
    seen = []
    async for resp in stub.WatchRun(collector_pb2.WatchRunRequest(run_id=run.run_id)):
        seen.extend(s.episode_id for s in resp.finished)
    assert len(seen) == len(set(seen)) == 2 * len(world.tasks)


async def test_stop_run_keeps_finished_episodes(stub, world, collector):
    world.policy.delay = 0.2
    run = (await stub.StartRun(collector_pb2.StartRunRequest(spec=spec(repeats=5, concurrency=2)))).run
    async for resp in stub.WatchRun(collector_pb2.WatchRunRequest(run_id=run.run_id)):
        if resp.run.counts.finished >= 2:
            break
    stopped = (await stub.StopRun(collector_pb2.StopRunRequest(run_id=run.run_id))).run
    assert stopped.state == collector_pb2.RUN_STATE_STOPPED
    assert 2 <= stopped.counts.finished < stopped.counts.planned
    counts = await collector.store.counts(run.run_id)
    assert counts["episodes"] == stopped.counts.finished
    # Stopping again is harmless and returns the same state.
    again = (await stub.StopRun(collector_pb2.StopRunRequest(run_id=run.run_id))).run
    assert again.state == collector_pb2.RUN_STATE_STOPPED


async def test_list_runs_pages_and_filters(stub, watch):
    ids = []
    for i in range(3):
        r = (await stub.StartRun(collector_pb2.StartRunRequest(spec=spec(name=f"r{i}", episodes=2)))).run
        await watch(stub, r.run_id)
        ids.append(r.run_id)
    page1 = await stub.ListRuns(collector_pb2.ListRunsRequest(page_size=2))
    assert len(page1.runs) == 2 and page1.next_page_token
    page2 = await stub.ListRuns(collector_pb2.ListRunsRequest(page_size=2, page_token=page1.next_page_token))
    assert len(page2.runs) == 1 and not page2.next_page_token
    assert {r.run_id for r in [*page1.runs, *page2.runs]} == set(ids)
    assert [r.run_id for r in page1.runs] == list(reversed(ids))[:2]  # newest first
    failed = await stub.ListRuns(collector_pb2.ListRunsRequest(state=collector_pb2.RUN_STATE_FAILED))
    assert not failed.runs


@pytest.mark.parametrize(
    ("bad", "field"),
    [
        (dict(repeats=-1), "spec.repeats"),
        (dict(episodes=-3), "spec.episodes"),
        (dict(concurrency=-1), "spec.concurrency"),
        (dict(finish_fraction=1.5), "spec.finish_fraction"),
        (dict(episode_timeout_seconds=-1.0), "spec.episode_timeout_seconds"),
        (dict(policy="Nope!"), "spec.policy"),
        (dict(horizons=collector_pb2.Horizons(hard=-2)), "spec.horizons.hard"),
        (dict(start_urls=["ftp://x"]), "spec.start_urls[0]"),
        (dict(start_urls=["http://127.0.0.1:PORT/"]), "spec.start_urls[0]"),
        (dict(inline_tasks=[common_pb2.Task(task_id="rubric/mine", start_url="http://127.0.0.1:PORT/")]),
         "spec.inline_tasks[0].start_url"),
        (dict(env_address="no-port"), "spec.env_address"),
        (dict(keep_formats=[common_pb2.OBSERVATION_FORMAT_MARKDOWN]), "spec.keep_formats[0]"),
        (dict(max_retries=-1), "spec.max_retries"),
        (dict(sampling=99), "spec.sampling"),
    ],
)
async def test_bad_specs_are_invalid_argument_naming_the_field(stub, bad, field):
    with pytest.raises(grpc.aio.AioRpcError) as ei:
        await stub.StartRun(collector_pb2.StartRunRequest(spec=spec(**bad)))
    assert ei.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert field in ei.value.details()
    err = errors.from_rpc_error(ei.value)
    assert err.metadata.get("field") == field


async def test_unknown_run_and_empty_selection(stub):
    for call, req in (
        (stub.GetRun, collector_pb2.GetRunRequest(run_id="run-nope")),
        (stub.StopRun, collector_pb2.StopRunRequest(run_id="run-nope")),
        (stub.ExportRun, collector_pb2.ExportRunRequest(run_id="run-nope", format=1, destination="/tmp/x")),
    ):
        with pytest.raises(grpc.aio.AioRpcError) as ei:
            await call(req)
        assert ei.value.code() == grpc.StatusCode.NOT_FOUND
    with pytest.raises(grpc.aio.AioRpcError) as ei:
        await stub.GetRun(collector_pb2.GetRunRequest())
    assert ei.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    with pytest.raises(grpc.aio.AioRpcError) as ei:
        await stub.StartRun(collector_pb2.StartRunRequest(spec=spec(tasks=collector_pb2.RunSpec().tasks.__class__(task_ids=["none"]))))
    assert ei.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    with pytest.raises(grpc.aio.AioRpcError) as ei:
        await stub.ExportRun(collector_pb2.ExportRunRequest(format=0, destination="/tmp/x"))
    assert ei.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "format" in ei.value.details()

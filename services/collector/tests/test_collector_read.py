"""CollectorService.ReadEpisodes over a real channel: stored episodes back as messages, with steps, verdicts,
replay data (target element, element boxes) and provenance, trimmed by a read mask, and bad requests refused."""

from __future__ import annotations

import grpc
import pytest
from google.protobuf import field_mask_pb2
from webenv import errors
from webenv.v1 import collector_pb2, common_pb2

F = common_pb2.ObservationFormat


async def read(stub, **kw) -> list[collector_pb2.StoredEpisode]:
    return [r.episode async for r in stub.ReadEpisodes(collector_pb2.ReadEpisodesRequest(**kw))]


@pytest.fixture
async def finished_run(stub, watch, world):
    kept = [F.OBSERVATION_FORMAT_AXTREE, F.OBSERVATION_FORMAT_ELEMENTS]
    spec = collector_pb2.RunSpec(policy="oracle", repeats=1, seed=5, concurrency=4, keep_formats=kept,
                                 observation_spec=common_pb2.ObservationSpec(formats=kept))
    run = (await stub.StartRun(collector_pb2.StartRunRequest(spec=spec))).run
    await watch(stub, run.run_id)
    return run


async def test_read_episodes_with_steps_verdicts_and_replay_data(stub, world, finished_run):
    eps = await read(stub, run_ids=[finished_run.run_id])
    assert len(eps) == len(world.tasks)
    assert [e.episode_id for e in eps] == sorted(e.episode_id for e in eps)
    by_task = {t.task_id: t for t in world.tasks}
    for ep in eps:
        task = by_task[ep.task.task_id]
        assert ep.task == task  # the full task as run (oracle, rubric, metadata)
        assert ep.passed and ep.verdict.passed and ep.verdict.judge_version == "test-judge-1"
        assert ep.policy == "oracle" and ep.policy_version == "oracle@1"
        assert ep.step_count == len(ep.trajectory.steps) == len(task.oracle)
        assert ep.duration_seconds > 0 and ep.finished_at.seconds > 0
        first = ep.trajectory.steps[0]
        assert first.step_index == 0 and first.observation.url.endswith("/page/0")
        assert first.observation.axtree and not first.observation.html  # only the kept formats
        assert first.observation.elements[0].bbox.width == 40
        if first.action.WhichOneof("kind") == "click":
            assert first.target_element_id == "2" and first.action.click.target.selector == "#next"
        assert ep.trajectory.final_observation.url.endswith(f"/page/{task.metadata['goal']}")
        assert ep.trajectory.final_answer == task.metadata["goal"]
        for step in ep.trajectory.steps:  # what the policy's model read and generated, stored per step
            assert step.prompt_tokens == 40 + step.step_index and step.policy_version == "oracle@1"
            assert list(step.completion_token_ids) == [5, 6, step.step_index]
            assert list(step.completion_logprobs) == [-0.5, -1.25, -0.125]  # exact in float32


async def test_read_mask_ids_filters_and_limit(stub, world, finished_run):
    mask = field_mask_pb2.FieldMask(paths=["episode_id", "passed", "step_count", "task.task_id"])
    light = await read(stub, run_ids=[finished_run.run_id], read_mask=mask)
    assert len(light) == len(world.tasks)
    assert all(not e.HasField("trajectory") and not e.task.oracle and e.step_count > 0 for e in light)
    one = await read(stub, run_ids=[finished_run.run_id], episode_ids=[light[2].episode_id])
    assert [e.episode_id for e in one] == [light[2].episode_id] and one[0].trajectory.steps
    assert await read(stub, run_ids=[finished_run.run_id], filter=collector_pb2.ExportFilter(passed=False)) == []
    assert len(await read(stub, run_ids=[finished_run.run_id], limit=3)) == 3


async def test_drop_repeated_keeps_the_answer_that_ends_each_episode(stub, world, finished_run):
    """An answer leaves the page as it was, but it is the step that ends the episode and the one a ranker learns to
    take: it is never a repeated step, so the trainer's drop_repeated read keeps it (it once dropped every one)."""
    eps = await read(stub, run_ids=[finished_run.run_id], filter=collector_pb2.ExportFilter(drop_repeated=True))
    assert len(eps) == len(world.tasks)
    for ep in eps:
        last = ep.trajectory.steps[-1]
        assert last.action.WhichOneof("kind") == "answer" and not last.repeated_state
        assert last.action.answer.text == ep.trajectory.final_answer


@pytest.mark.parametrize("request_kw, field", [
    ({}, "run_ids"),
    ({"run_ids": ["x"], "limit": -1}, "limit"),
    ({"run_ids": ["x"], "read_mask": field_mask_pb2.FieldMask(paths=["no_such_field"])}, "read_mask"),
    ({"run_ids": ["x"], "filter": collector_pb2.ExportFilter(max_steps=-2)}, "filter.max_steps"),
])
async def test_bad_requests_are_invalid_argument_naming_the_field(stub, request_kw, field):
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await read(stub, **request_kw)
    err = errors.from_rpc_error(info.value)
    assert err.code == grpc.StatusCode.INVALID_ARGUMENT and err.metadata["field"] == field


async def test_unknown_run_is_not_found(stub):
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await read(stub, run_ids=["run-does-not-exist"])
    assert info.value.code() == grpc.StatusCode.NOT_FOUND

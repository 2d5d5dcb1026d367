"""TrainerService.WatchJob over real gRPC on loopback, without training: the job's state now first, then each
change, the stream ending with the terminal state; a job already ended gets one message; an unknown id is
NOT_FOUND. Jobs are put into the manager by hand and moved by its own state setter (what a running job calls)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import grpc
import pytest
from webenv.runtime.interceptors import ServerInterceptor
from webenv.trainer.config import Settings
from webenv.trainer.jobs import JobManager
from webenv.trainer.servicer import TrainerServicer
from webenv.v1 import trainer_pb2, trainer_pb2_grpc

LIMIT = 10.0  # every wait below ends on its own well before this


@pytest.fixture
async def served(tmp_path) -> AsyncIterator[tuple[JobManager, trainer_pb2_grpc.TrainerServiceStub]]:
    jobs = JobManager(Settings(trainer_checkpoint_dir=tmp_path / "ckpt", trainer_data_dir=tmp_path / "data"))
    server = grpc.aio.server(interceptors=[ServerInterceptor()])
    trainer_pb2_grpc.add_TrainerServiceServicer_to_server(TrainerServicer(jobs, watch_interval=0.2), server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{port}")
    try:
        yield jobs, trainer_pb2_grpc.TrainerServiceStub(channel)
    finally:
        await channel.close()
        await server.stop(0)


def _job(jobs: JobManager, job_id: str, state: int) -> trainer_pb2.Job:
    job = trainer_pb2.Job(job_id=job_id, state=state)
    job.spec.name = "watched"
    jobs.jobs[job_id] = job
    return job


async def test_watch_job_sends_the_state_now_then_each_change_and_ends_on_the_terminal_state(served) -> None:
    jobs, stub = served
    job = _job(jobs, "j1", trainer_pb2.JOB_STATE_PENDING)
    seen: list[trainer_pb2.Job] = []
    first = asyncio.Event()

    async def follow() -> None:
        async for resp in stub.WatchJob(trainer_pb2.WatchJobRequest(job_id="j1")):
            seen.append(resp.job)
            first.set()

    async def drive() -> None:
        for state in (trainer_pb2.JOB_STATE_LOADING, trainer_pb2.JOB_STATE_TRAINING):
            await asyncio.sleep(0.1)
            await jobs._set(job, state)
        await asyncio.sleep(0.1)
        job.progress.step = 7
        await jobs._notify("j1")
        await asyncio.sleep(0.1)
        await jobs._set(job, trainer_pb2.JOB_STATE_SUCCEEDED)

    watcher = asyncio.create_task(follow())
    async with asyncio.timeout(LIMIT):
        await first.wait()
        assert seen[0].state == trainer_pb2.JOB_STATE_PENDING  # the state at the call, before anything changed
        await drive()
        await watcher  # the stream ends by itself after the terminal state
    states = [j.state for j in seen]
    distinct = [s for i, s in enumerate(states) if i == 0 or s != states[i - 1]]  # timeouts repeat a state
    assert distinct == [trainer_pb2.JOB_STATE_PENDING, trainer_pb2.JOB_STATE_LOADING,
                        trainer_pb2.JOB_STATE_TRAINING, trainer_pb2.JOB_STATE_SUCCEEDED]
    assert seen[-1].state == trainer_pb2.JOB_STATE_SUCCEEDED and seen[-1].progress.step == 7
    assert sum(j.state == trainer_pb2.JOB_STATE_SUCCEEDED for j in seen) == 1


async def test_watch_job_of_an_ended_job_is_one_message_and_an_unknown_one_not_found(served) -> None:
    jobs, stub = served
    _job(jobs, "done", trainer_pb2.JOB_STATE_FAILED)
    async with asyncio.timeout(LIMIT):
        got = [r async for r in stub.WatchJob(trainer_pb2.WatchJobRequest(job_id="done"))]
        assert [r.job.state for r in got] == [trainer_pb2.JOB_STATE_FAILED]
        with pytest.raises(grpc.aio.AioRpcError) as err:
            async for _ in stub.WatchJob(trainer_pb2.WatchJobRequest(job_id="nope")):
                pytest.fail("no message for an unknown job")
    assert err.value.code() == grpc.StatusCode.NOT_FOUND
    assert "nope" in err.value.details()

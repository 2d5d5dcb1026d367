"""The server side of a watch (`webenv.streams.serve_watch`) over real gRPC on loopback: the report at the call
first, one report per wait, the stream ending after the last; an error of the first report is the call's status
with no message sent; a client that goes away cancels the wait in progress and nothing is reported after it.
The watch is a TrainerService.WatchJob whose job is a list of states the test steps through."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

import grpc
import pytest
from webenv import errors
from webenv.runtime.interceptors import ServerInterceptor
from webenv.streams import serve_watch, wait_at_most
from webenv.v1 import trainer_pb2, trainer_pb2_grpc

LIMIT = 10.0  # generous: every wait below polls for a condition or ends on its own

Watch = Callable[[trainer_pb2.WatchJobRequest], AsyncIterator[trainer_pb2.WatchJobResponse]]


class _Trainer(trainer_pb2_grpc.TrainerServiceServicer):
    """WatchJob only: `watch` is the servicer's body, chosen per test."""

    def __init__(self, watch: Watch) -> None:
        self._watch = watch

    async def WatchJob(self, request: trainer_pb2.WatchJobRequest, context: grpc.aio.ServicerContext
                       ) -> AsyncIterator[trainer_pb2.WatchJobResponse]:
        async for resp in self._watch(request):
            yield resp


@asynccontextmanager
async def _served(watch: Watch) -> AsyncIterator[trainer_pb2_grpc.TrainerServiceStub]:
    server = grpc.aio.server(interceptors=[ServerInterceptor()])  # the runtime's: WebenvError -> status
    trainer_pb2_grpc.add_TrainerServiceServicer_to_server(_Trainer(watch), server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{port}")
    try:
        yield trainer_pb2_grpc.TrainerServiceStub(channel)
    finally:
        await channel.close()
        await server.stop(0)


def _report(states: list[int], log: list[str]) -> Callable[[], Awaitable[tuple[trainer_pb2.WatchJobResponse, bool]]]:
    """Reports the states one by one; the last is the end."""
    async def report() -> tuple[trainer_pb2.WatchJobResponse, bool]:
        state = states.pop(0)
        log.append(f"report {state}")
        return trainer_pb2.WatchJobResponse(job=trainer_pb2.Job(job_id="j", state=state)), not states
    return report


async def test_the_state_now_first_then_one_report_per_wait_and_the_stream_ends_after_the_last() -> None:
    log: list[str] = []
    states = [trainer_pb2.JOB_STATE_PENDING, trainer_pb2.JOB_STATE_TRAINING, trainer_pb2.JOB_STATE_SUCCEEDED]

    async def wait() -> None:
        log.append("wait")

    async with _served(lambda req: serve_watch(_report(list(states), log), wait)) as stub:
        async with asyncio.timeout(LIMIT):
            got = [r.job.state async for r in stub.WatchJob(trainer_pb2.WatchJobRequest(job_id="j"))]
    assert got == states
    assert log == [f"report {states[0]}", "wait", f"report {states[1]}", "wait", f"report {states[2]}"]  # no wait after the end


async def test_an_error_of_the_first_report_is_the_status_and_no_message_is_sent() -> None:
    async def report() -> tuple[trainer_pb2.WatchJobResponse, bool]:
        raise errors.NotFound("job_id: no job 'x'", reason="JOB_NOT_FOUND")

    async def wait() -> None:
        pytest.fail("no wait without a report")

    async with _served(lambda req: serve_watch(report, wait)) as stub:
        got = []
        async with asyncio.timeout(LIMIT):
            with pytest.raises(grpc.aio.AioRpcError) as err:
                async for resp in stub.WatchJob(trainer_pb2.WatchJobRequest(job_id="x")):
                    got.append(resp)
    assert got == [] and err.value.code() == grpc.StatusCode.NOT_FOUND
    assert err.value.details() == "job_id: no job 'x'"


async def test_a_client_that_goes_away_cancels_the_wait_and_nothing_is_reported_after() -> None:
    log: list[str] = []
    waiting, cancelled = asyncio.Event(), asyncio.Event()

    async def wait() -> None:
        waiting.set()
        try:
            await asyncio.Event().wait()  # no change ever comes
        except asyncio.CancelledError:
            cancelled.set()
            raise

    states = [trainer_pb2.JOB_STATE_TRAINING, trainer_pb2.JOB_STATE_SUCCEEDED]
    async with _served(lambda req: serve_watch(_report(states, log), wait)) as stub:
        call = stub.WatchJob(trainer_pb2.WatchJobRequest(job_id="j"))
        async with asyncio.timeout(LIMIT):
            first = await call.read()
            assert first.job.state == trainer_pb2.JOB_STATE_TRAINING
            await waiting.wait()
            call.cancel()
            await cancelled.wait()
        await asyncio.sleep(0.1)
    assert log == [f"report {trainer_pb2.JOB_STATE_TRAINING}"]


async def test_wait_at_most_says_whether_the_change_came_in_time_and_cancels_it_when_not() -> None:
    changed = asyncio.Event()
    changed.set()
    assert await wait_at_most(changed.wait(), 1.0) is True
    gave_up = asyncio.Event()

    async def never() -> None:
        try:
            await asyncio.Event().wait()
        finally:
            gave_up.set()

    assert await wait_at_most(never(), 0.05) is False
    assert gave_up.is_set()

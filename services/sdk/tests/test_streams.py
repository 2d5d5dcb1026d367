"""The streaming layer (`webenv.streams`) over real gRPC on loopback: completion order, the in-flight limit, one
failed item not ending the stream, and a client whose waiting requests are always answered."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

import grpc
import pytest
from webenv import errors
from webenv.client import EnvironmentClient
from webenv.envcontract import step_stream
from webenv.streams import Multiplexer, StreamBroken
from webenv.v1 import environment_pb2, environment_pb2_grpc

LIMIT = 10.0  # generous: every wait below polls for a condition or ends on its own


class _Env(environment_pb2_grpc.EnvironmentServiceServicer):
    """StepStream only: `stream` is the servicer's body, chosen per test."""

    def __init__(self, stream: Callable[[AsyncIterator[environment_pb2.StepStreamRequest]], AsyncIterator]) -> None:
        self._stream = stream

    async def StepStream(self, request_iterator, context):
        async for msg in self._stream(request_iterator):
            yield msg


@asynccontextmanager
async def _served(stream) -> AsyncIterator[str]:
    server = grpc.aio.server()
    environment_pb2_grpc.add_EnvironmentServiceServicer_to_server(_Env(stream), server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        yield f"127.0.0.1:{port}"
    finally:
        await server.stop(0)


async def test_server_answers_in_completion_order_within_the_inflight_limit() -> None:
    started: list[str] = []
    release, two_started = asyncio.Event(), asyncio.Event()

    async def step(req: environment_pb2.StepRequest) -> environment_pb2.StepResponse:
        started.append(req.session_id)
        if len(started) == 2:
            two_started.set()
        if req.session_id == "bug":
            raise RuntimeError("boom")
        if req.session_id == "bad":
            raise errors.InvalidArgument("session_id: bad", reason="BAD_SESSION_ID")
        if req.session_id != "fast":
            await release.wait()
        return environment_pb2.StepResponse(session_id=req.session_id)

    async with _served(lambda reqs: step_stream(reqs, step, max_inflight=2)) as addr:
        ch = grpc.aio.insecure_channel(addr)
        try:
            stub = environment_pb2_grpc.EnvironmentServiceStub(ch)
            order = ["slow1", "slow2", "fast", "bug", "bad"]
            sent = asyncio.Queue()
            for i, sid in enumerate(order):
                sent.put_nowait(environment_pb2.StepStreamRequest(
                    tag=str(i), step=environment_pb2.StepRequest(session_id=sid)))
            sent.put_nowait(None)

            async def requests():
                while (item := await sent.get()) is not None:
                    yield item

            call = stub.StepStream(requests())
            async with asyncio.timeout(LIMIT):
                await two_started.wait()
            await asyncio.sleep(0.2)  # room for a third to start, were the limit not kept
            assert started == ["slow1", "slow2"]  # two unanswered: the third item waits unread
            release.set()
            async with asyncio.timeout(LIMIT):
                got = [msg async for msg in call]  # ends: the end marker follows the last answer
        finally:
            await ch.close()
    assert sorted(m.tag for m in got) == ["0", "1", "2", "3", "4"]
    by_tag = {m.tag: m for m in got}
    assert by_tag["3"].error.code == grpc.StatusCode.INTERNAL.value[0] and by_tag["3"].error.reason == "STEP_FAILED"
    assert "RuntimeError: boom" in by_tag["3"].error.message
    assert by_tag["4"].error.reason == "BAD_SESSION_ID"
    assert by_tag["2"].response.session_id == "fast"


async def test_client_steps_are_answered_when_the_stream_ends_normally() -> None:
    async def ends_after_one(reqs):
        async for _ in reqs:
            return  # the server ends the call without answering
        yield  # pragma: no cover - makes this an async generator

    async with _served(ends_after_one) as addr, EnvironmentClient(addr) as env, env.stream() as stream:
        async with asyncio.timeout(LIMIT):
            with pytest.raises(StreamBroken) as info:
                await stream.step("s1", "noop()")
    assert "stream ended" in info.value.message and isinstance(info.value, errors.WebenvError)
    assert info.value.code == grpc.StatusCode.UNAVAILABLE


class _FailingCall:
    """A call whose reading fails with an error that is not gRPC's (a client-side fault) after one request."""

    def __init__(self, requests: AsyncIterator) -> None:
        self.requests = requests
        self.cancelled = False

    def __aiter__(self):
        return self._responses()

    async def _responses(self):
        await self.requests.__anext__()
        raise ValueError("cannot decode")
        yield  # pragma: no cover

    def cancel(self) -> None:
        self.cancelled = True


async def test_client_requests_are_answered_when_reading_fails_with_a_non_grpc_error() -> None:
    calls: list[_FailingCall] = []

    def open_call(requests):
        calls.append(_FailingCall(requests))
        return calls[-1]

    mux = Multiplexer("test", open_call, lambda tag, payload: environment_pb2.StepStreamRequest(tag=tag, step=payload))
    try:
        async with asyncio.timeout(LIMIT):
            with pytest.raises(StreamBroken) as info:
                await mux.request(environment_pb2.StepRequest(session_id="s1"))
            assert "ValueError: cannot decode" in info.value.message
            with pytest.raises(StreamBroken):  # the next request opens a fresh stream
                await mux.request(environment_pb2.StepRequest(session_id="s1"))
        assert len(calls) == 2
    finally:
        await mux.close()

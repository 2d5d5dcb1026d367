"""gRPC servicers: thin adapters from the contract to the Farm."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import grpc
from webenv import errors
from webenv.browser.farm import Farm
from webenv.v1 import browser_pb2, browser_pb2_grpc, environment_pb2, environment_pb2_grpc


def _remaining(context: grpc.aio.ServicerContext) -> float | None:
    t = context.time_remaining()
    return None if t is None else max(0.0, t - 0.05)


class EnvironmentServicer(environment_pb2_grpc.EnvironmentServiceServicer):
    """EnvironmentService over the farm."""

    def __init__(self, farm: Farm) -> None:
        self.farm = farm

    async def OpenSession(self, request: environment_pb2.OpenSessionRequest, context: grpc.aio.ServicerContext
                          ) -> environment_pb2.OpenSessionResponse:
        return await self.farm.open(request)

    async def Step(self, request: environment_pb2.StepRequest, context: grpc.aio.ServicerContext
                   ) -> environment_pb2.StepResponse:
        return await self.farm.step(request, deadline=_remaining(context))

    async def StepStream(self, request_iterator: AsyncIterator[environment_pb2.StepStreamRequest],
                         context: grpc.aio.ServicerContext) -> AsyncIterator[environment_pb2.StepStreamResponse]:
        """Each request runs as its own task; answers leave in completion order. A failed item
        becomes a StreamError for its tag and the stream goes on."""
        out: asyncio.Queue[environment_pb2.StepStreamResponse | None] = asyncio.Queue()
        tasks: set[asyncio.Task[None]] = set()

        async def run_one(item: environment_pb2.StepStreamRequest) -> None:
            try:
                resp = await self.farm.step(item.step)
                await out.put(environment_pb2.StepStreamResponse(tag=item.tag, response=resp))
            except errors.WebenvError as exc:
                await out.put(environment_pb2.StepStreamResponse(tag=item.tag, error=exc.to_stream_error()))
            except Exception as exc:  # an unexpected failure of one item must not end the stream
                err = errors.Internal(f"step failed: {type(exc).__name__}: {exc}", reason="STEP_FAILED")
                await out.put(environment_pb2.StepStreamResponse(tag=item.tag, error=err.to_stream_error()))

        async def reader() -> None:
            try:
                async for item in request_iterator:
                    t = asyncio.create_task(run_one(item))
                    tasks.add(t)
                    t.add_done_callback(tasks.discard)
            finally:
                if tasks:
                    await asyncio.gather(*list(tasks), return_exceptions=True)
                await out.put(None)

        read_task = asyncio.create_task(reader())
        try:
            while True:
                msg = await out.get()
                if msg is None:
                    break
                yield msg
        finally:
            read_task.cancel()
            for t in list(tasks):
                t.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await read_task

    async def CloseSession(self, request: environment_pb2.CloseSessionRequest, context: grpc.aio.ServicerContext
                           ) -> environment_pb2.CloseSessionResponse:
        return await self.farm.close_session(request)

    async def GetSession(self, request: environment_pb2.GetSessionRequest, context: grpc.aio.ServicerContext
                         ) -> environment_pb2.GetSessionResponse:
        return environment_pb2.GetSessionResponse(session=self.farm.get_session(request.session_id))

    async def RenewLease(self, request: environment_pb2.RenewLeaseRequest, context: grpc.aio.ServicerContext
                         ) -> environment_pb2.RenewLeaseResponse:
        return environment_pb2.RenewLeaseResponse(session=self.farm.renew(request))


class BrowserFarmServicer(browser_pb2_grpc.BrowserFarmServiceServicer):
    """BrowserFarmService over the farm."""

    def __init__(self, farm: Farm) -> None:
        self.farm = farm

    async def ListSessions(self, request: browser_pb2.ListSessionsRequest, context: grpc.aio.ServicerContext
                           ) -> browser_pb2.ListSessionsResponse:
        return self.farm.list_sessions(request)

    async def GetCapacity(self, request: browser_pb2.GetCapacityRequest, context: grpc.aio.ServicerContext
                          ) -> browser_pb2.GetCapacityResponse:
        return self.farm.capacity()

    async def CaptureScreenshot(self, request: browser_pb2.CaptureScreenshotRequest,
                                context: grpc.aio.ServicerContext) -> browser_pb2.CaptureScreenshotResponse:
        return await self.farm.capture(request)

    async def Drain(self, request: browser_pb2.DrainRequest, context: grpc.aio.ServicerContext
                    ) -> browser_pb2.DrainResponse:
        return self.farm.drain(request)

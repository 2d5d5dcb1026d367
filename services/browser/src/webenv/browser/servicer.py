"""gRPC servicers: thin adapters from the contract to the Farm.

OpenSession closes a session its caller will never see: one whose open completed within
``DEADLINE_MARGIN_SECONDS`` of the caller's deadline (the answer would arrive after it) is closed at once and
answered DEADLINE_EXCEEDED, and one whose RPC ends cancelled after the handler answered (the caller went away, or
its deadline passed while the answer was on the wire) is closed when grpc reports it. Before, such a session held
its context until its idle lease (seen in CI as a stray session after opens given up midway).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator

import grpc
from webenv import errors
from webenv.browser.farm import Farm
from webenv.envcontract import step_stream
from webenv.v1 import browser_pb2, browser_pb2_grpc, environment_pb2, environment_pb2_grpc

log = logging.getLogger("webenv.browser")
DEADLINE_MARGIN_SECONDS = 0.05  # what an answer needs to reach its caller before the caller's deadline


def _remaining(context: grpc.aio.ServicerContext) -> float | None:
    t = context.time_remaining()
    return None if t is None else max(0.0, t - DEADLINE_MARGIN_SECONDS)


class EnvironmentServicer(environment_pb2_grpc.EnvironmentServiceServicer):
    """EnvironmentService over the farm."""

    def __init__(self, farm: Farm) -> None:
        self.farm = farm
        self._closing: set[asyncio.Task] = set()

    async def OpenSession(self, request: environment_pb2.OpenSessionRequest, context: grpc.aio.ServicerContext
                          ) -> environment_pb2.OpenSessionResponse:
        resp = await self.farm.open(request)
        sid = resp.session.session_id
        left = context.time_remaining()
        if left is not None and left < DEADLINE_MARGIN_SECONDS:
            await self._close_unseen(sid)
            raise errors.DeadlineExceeded(f"the session opened {max(left, 0.0) * 1000:.0f} ms before the caller's "
                                          "deadline, too late to reach it; it was closed", reason="OPEN_TOO_LATE")
        loop = asyncio.get_running_loop()

        def ended(ctx: grpc.aio.ServicerContext) -> None:
            if ctx.cancelled():  # the answer did not reach its caller
                task = loop.create_task(self._close_unseen(sid))
                self._closing.add(task)
                task.add_done_callback(self._closing.discard)

        context.add_done_callback(ended)
        return resp

    async def _close_unseen(self, session_id: str) -> None:
        """Close a session whose caller never got its OpenSession answer (best effort: it may be closed already)."""
        with contextlib.suppress(Exception):  # NOT_FOUND when it ended meanwhile
            await self.farm.close_session(environment_pb2.CloseSessionRequest(session_id=session_id))
            log.info("session %s closed: its OpenSession answer did not reach the caller in time", session_id)

    async def Step(self, request: environment_pb2.StepRequest, context: grpc.aio.ServicerContext
                   ) -> environment_pb2.StepResponse:
        return await self.farm.step(request, deadline=_remaining(context))

    async def StepStream(self, request_iterator: AsyncIterator[environment_pb2.StepStreamRequest],
                         context: grpc.aio.ServicerContext) -> AsyncIterator[environment_pb2.StepStreamResponse]:
        """Each request runs as its own task; answers leave in completion order (`webenv.envcontract`, the same
        semantics as the world model's)."""
        async for msg in step_stream(request_iterator, self.farm.step):
            yield msg

    async def CloseSession(self, request: environment_pb2.CloseSessionRequest, context: grpc.aio.ServicerContext
                           ) -> environment_pb2.CloseSessionResponse:
        return await self.farm.close_session(request)

    async def ForkSession(self, request: environment_pb2.ForkSessionRequest, context: grpc.aio.ServicerContext
                          ) -> environment_pb2.ForkSessionResponse:
        return await self.farm.fork(request)

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

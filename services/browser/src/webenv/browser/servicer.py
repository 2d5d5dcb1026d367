"""gRPC servicers: thin adapters from the contract to the Farm."""

from __future__ import annotations

from collections.abc import AsyncIterator

import grpc
from webenv.browser.farm import Farm
from webenv.envcontract import step_stream
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

"""BrowserFarmService's servicer: a thin adapter to the Farm.

EnvironmentService has no servicer here: it is the sdk's `webenv.envservice.EnvironmentService` over the farm as
its backend (`__main__.serving`), the same lifecycle code (checks, request ids, the session's lock, step_index
retries, deadlines, StepStream, closing an OpenSession answer that reached no one) that serves the world model.
"""

from __future__ import annotations

import grpc
from webenv.browser.farm import Farm
from webenv.v1 import browser_pb2, browser_pb2_grpc


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

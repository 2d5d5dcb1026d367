"""`python -m webenv.browser`: the browser farm service."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from webenv import runtime
from webenv.browser.config import Settings
from webenv.browser.farm import Farm
from webenv.browser.servicer import BrowserFarmServicer
from webenv.envservice import EnvironmentService, TaskCatalog
from webenv.runtime import Server, run
from webenv.runtime.cli import service_app
from webenv.v1 import browser_pb2_grpc, environment_pb2_grpc

log = logging.getLogger("webenv.browser")


@asynccontextmanager
async def serving(settings: Settings) -> AsyncIterator[tuple[Server, Farm]]:
    """Start the farm and its gRPC server (health SERVING once browsers are up); stop both on exit."""
    farm = Farm(settings)
    services = [
        (environment_pb2_grpc.add_EnvironmentServiceServicer_to_server, EnvironmentService(farm, TaskCatalog(settings.sites_addr)),
         "webenv.v1.EnvironmentService"),
        (browser_pb2_grpc.add_BrowserFarmServiceServicer_to_server, BrowserFarmServicer(farm),
         "webenv.v1.BrowserFarmService"),
    ]
    async with runtime.serving("browser", settings, services, start=farm.start, close=farm.close) as server:
        yield server, farm


async def main(settings: Settings) -> None:
    async with serving(settings) as (server, farm):
        log.info("browser farm ready", extra={"browsers": settings.farm_browsers, "node": farm.node})
        await server.wait_for_termination()


app = service_app("webenv-browser", "The browser farm: EnvironmentService and BrowserFarmService on real Chromium.",
                  lambda: run(main, Settings, "webenv-browser"))
cli = app  # the console script (pyproject.toml)


if __name__ == "__main__":
    cli()

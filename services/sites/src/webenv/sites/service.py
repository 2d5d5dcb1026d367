"""The running service: TaskService over gRPC (sdk runtime) and the websites over HTTP (uvicorn), one loop.

Both share the world's StateStore in one asyncio event loop, so a form POST and a ForkSiteState never race.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sys

from webenv.runtime import Server, serving
from webenv.runtime.http import HttpServer
from webenv.sites.config import Settings
from webenv.sites.servicer import TaskServicer
from webenv.sites.world import World, build_world
from webenv.taskfiles import TaskFileError
from webenv.v1 import task_pb2_grpc

log = logging.getLogger("webenv.sites")


def world_from(settings: Settings) -> World:
    return build_world(count=settings.sites_count, seed=settings.sites_seed, yaml_dirs=settings.sites_yaml_dirs,
                       rubric_dirs=settings.sites_rubric_dirs, builtin=settings.sites_builtin_tasks,
                       with_miniwob=settings.sites_miniwob, real_web=settings.sites_real_web,
                       max_sessions=settings.sites_max_sessions, builders=settings.sites_builders)


class SitesService:
    """`async with SitesService(settings) as svc:` serves gRPC on svc.port and HTTP on svc.http_port."""

    def __init__(self, settings: Settings, world: World | None = None) -> None:
        self.settings = settings
        self.world = world
        self.server: Server | None = None
        self._http: HttpServer | None = None
        self._serving = contextlib.AsyncExitStack()

    @property
    def port(self) -> int:
        return self.server.port if self.server is not None else 0

    @property
    def http_port(self) -> int:
        return self._http.port if self._http is not None else 0

    async def __aenter__(self) -> SitesService:
        if self.world is None:
            self.world = await asyncio.to_thread(world_from, self.settings)
        w = self.world
        http = HttpServer(w.app, self.settings.http_host, self.settings.http_port)

        async def start_http() -> None:
            await http.start()
            self._http = http

        async def stop_http() -> None:
            if self._http is not None:
                await self._http.stop()

        services = [(task_pb2_grpc.add_TaskServiceServicer_to_server, TaskServicer(w.tasks, w.sites, w.store),
                     "webenv.v1.TaskService")]
        self.server = await self._serving.enter_async_context(
            serving("sites", self.settings, services, start=start_http, close=stop_http))
        log.info("sites serving", extra={"grpc_port": self.port, "http_port": self.http_port,
                                          "sites": len(w.sites.sites), "tasks": len(w.tasks)})
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self._serving.aclose()


async def main(settings: Settings) -> None:
    try:
        world = await asyncio.to_thread(world_from, settings)
    except TaskFileError as exc:
        # A bad task file is bad configuration: one line per problem, all of them, exit code 2 (no traceback).
        print(f"webenv-sites: {len(exc.errors)} problem(s) in task files (WEBENV_SITES_YAML_DIRS, "
              f"WEBENV_SITES_RUBRIC_DIRS):\n{exc}", file=sys.stderr)
        raise SystemExit(2) from None
    async with SitesService(settings, world) as svc:
        await svc.server.wait_for_termination()

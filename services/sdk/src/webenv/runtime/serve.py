"""One start-up and shutdown order for every service: bind, start the service's parts, SERVING, serve, stop.

Each service used to write this order itself, and the copies drifted (a model closed outside any `finally`, parts
of a service left running when a later part failed to start). Here it is written once:

1. the gRPC server binds its port with health NOT_SERVING (probes see the process, load balancers send nothing);
2. `start()` brings the service's own parts up (launch browsers, load a model, reload jobs); while it runs, the
   port answers health checks;
3. health turns SERVING and the service serves until SIGTERM/SIGINT (:meth:`Server.wait_for_termination`) or
   until the caller leaves the `serving` block;
4. the server stops (health NOT_SERVING first, in-flight RPCs get `grace_seconds`), then `close()` releases the
   parts — always, whether `start()` failed half-way, serving raised, or the process was asked to stop.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from contextlib import asynccontextmanager
from typing import Any

import grpc
from webenv.runtime.config import ServiceSettings
from webenv.runtime.server import Server

#: (``add_XServicer_to_server``, servicer, full service name), e.g.
#: ``(environment_pb2_grpc.add_EnvironmentServiceServicer_to_server, svc, "webenv.v1.EnvironmentService")``.
Service = tuple[Callable[[Any, grpc.aio.Server], None], Any, str]


@asynccontextmanager
async def serving(name: str, settings: ServiceSettings, services: Iterable[Service], *,
                  start: Callable[[], Awaitable[object]] | None = None,
                  close: Callable[[], Awaitable[object]] | None = None) -> AsyncIterator[Server]:
    """Serve `services` in the order above; yields the SERVING :class:`Server` (its `port`, `metrics_port`)."""
    server = Server(name, settings)
    for add, servicer, full_name in services:
        server.add_service(add, servicer, full_name)
    try:
        async with server:
            if start is not None:
                await start()
            await server.set_serving()
            yield server
    finally:
        if close is not None:
            await close()


async def serve(name: str, settings: ServiceSettings, services: Iterable[Service], *,
                start: Callable[[], Awaitable[object]] | None = None,
                close: Callable[[], Awaitable[object]] | None = None) -> None:
    """:func:`serving` until SIGTERM/SIGINT: the body of a service's ``main``."""
    async with serving(name, settings, services, start=start, close=close) as server:
        await server.wait_for_termination()

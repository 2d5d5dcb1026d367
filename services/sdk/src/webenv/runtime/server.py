"""The one way every webenv service serves gRPC.

:class:`Server` gives each service the same behaviour: a grpc.aio server with deliberate message-size and
keepalive limits, gRPC health checking (NOT_SERVING until the service calls :meth:`Server.set_serving`), server
reflection, the metrics/auth/error interceptor, a /metrics endpoint, optional TLS, and graceful shutdown on
SIGTERM (health goes NOT_SERVING first so load balancers stop routing, then in-flight RPCs get ``grace_seconds``
to finish), and freed heap given back to the OS after each busy period (:mod:`webenv.runtime.heap`). :func:`run` is the console-script entry: it loads settings (exit code 2 with a readable message on
bad values), sets up JSON logs and runs the service's ``main``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_health.v1.health import aio as health_aio
from grpc_reflection.v1alpha import reflection
from pydantic import ValidationError
from webenv.runtime.config import ServiceSettings, describe_validation_error
from webenv.runtime.heap import Activity, HeapTrimmer, limit_arenas
from webenv.runtime.interceptors import ServerInterceptor
from webenv.runtime.logs import setup_logging
from webenv.runtime.metrics import MetricsEndpoint

log = logging.getLogger("webenv.runtime")

S = TypeVar("S", bound=ServiceSettings)

_SERVING = health_pb2.HealthCheckResponse.SERVING
_NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING


def server_options(settings: ServiceSettings) -> list[tuple[str, Any]]:
    """Channel arguments chosen on purpose: big enough messages for screenshots, keepalive that survives NATs."""
    limit = settings.max_message_mb * 1024 * 1024
    keepalive_ms = int(settings.keepalive_seconds * 1000)
    return [
        ("grpc.max_send_message_length", limit),
        ("grpc.max_receive_message_length", limit),
        ("grpc.keepalive_time_ms", keepalive_ms),
        ("grpc.keepalive_timeout_ms", 10_000),
        ("grpc.keepalive_permit_without_calls", 1),
        ("grpc.http2.min_ping_interval_without_data_ms", min(keepalive_ms, 10_000)),
        ("grpc.http2.max_pings_without_data", 0),
        ("grpc.so_reuseport", 0),
    ]


def tls_credentials(settings: ServiceSettings) -> grpc.ServerCredentials:
    """Server credentials from the PEM files named by WEBENV_TLS_CERT_FILE / WEBENV_TLS_KEY_FILE."""
    key = Path(settings.tls_key_file).read_bytes()
    cert = Path(settings.tls_cert_file).read_bytes()
    return grpc.ssl_server_credentials([(key, cert)])


class Server:
    """A service's gRPC server; use ``async with server:`` then ``set_serving()`` and ``wait_for_termination()``."""

    def __init__(self, name: str, settings: ServiceSettings) -> None:
        self.name = name
        self.settings = settings
        self._services: list[str] = []
        self._health = health_aio.HealthServicer()
        self._metrics: MetricsEndpoint | None = None
        self._stop = asyncio.Event()
        self._stopped = False
        self.port = 0
        self.metrics_port = 0
        token = settings.auth_token.get_secret_value()
        activity = Activity()
        self.heap = HeapTrimmer(activity, settings.heap_trim_idle_seconds)
        self.grpc = grpc.aio.server(
            interceptors=[ServerInterceptor(auth_token=token, activity=activity)],
            options=server_options(settings),
            maximum_concurrent_rpcs=settings.max_concurrent_rpcs or None,
        )
        health_pb2_grpc.add_HealthServicer_to_server(self._health, self.grpc)

    def add_service(self, add_to_server: Callable[[Any, grpc.aio.Server], None], servicer: Any, full_name: str) -> None:
        """Register a servicer, e.g. ``add_EnvironmentServiceServicer_to_server, svc, "webenv.v1.EnvironmentService"``."""
        add_to_server(servicer, self.grpc)
        self._services.append(full_name)

    @property
    def services(self) -> list[str]:
        """Full names of the services registered (without health and reflection)."""
        return list(self._services)

    async def start(self) -> None:
        """Bind the ports and start serving, with health NOT_SERVING until :meth:`set_serving`."""
        for service in ("", *self._services):
            await self._health.set(service, _NOT_SERVING)
        reflection.enable_server_reflection(
            (*self._services, health_pb2.DESCRIPTOR.services_by_name["Health"].full_name, reflection.SERVICE_NAME),
            self.grpc,
        )
        address = f"{self.settings.host}:{self.settings.grpc_port}"
        if self.settings.tls_cert_file:
            self.port = self.grpc.add_secure_port(address, tls_credentials(self.settings))
        else:
            self.port = self.grpc.add_insecure_port(address)
        if self.port == 0:
            raise OSError(f"{self.name}: cannot bind gRPC port {address}")
        await self.grpc.start()
        self.heap.start()
        if self.settings.metrics_enabled:
            self._metrics = MetricsEndpoint(self.settings.host, self.settings.metrics_port)
            self.metrics_port = self._metrics.port
        log.info(
            "%s listening", self.name, extra={"grpc_port": self.port, "metrics_port": self.metrics_port}
        )

    async def set_serving(self, serving: bool = True) -> None:
        """Report the service ready (or not ready) to health checks, for every registered service."""
        status = _SERVING if serving else _NOT_SERVING
        for service in ("", *self._services):
            await self._health.set(service, status)

    async def wait_for_termination(self) -> None:
        """Block until SIGTERM/SIGINT or :meth:`stop`, then shut down gracefully."""
        loop = asyncio.get_running_loop()
        installed = []
        for sig in (signal.SIGTERM, signal.SIGINT):
            with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
                loop.add_signal_handler(sig, self._stop.set)
                installed.append(sig)
        try:
            await self._stop.wait()
        finally:
            for sig in installed:
                loop.remove_signal_handler(sig)
        await self._shutdown()

    async def stop(self) -> None:
        """Ask the server to stop (as SIGTERM does) and wait until it has."""
        self._stop.set()
        await self._shutdown()

    async def _shutdown(self) -> None:
        if self._stopped:
            return
        self._stopped = True
        log.info("%s shutting down", self.name, extra={"grace_seconds": self.settings.grace_seconds})
        await self._health.enter_graceful_shutdown()
        await self.heap.stop()
        await self.grpc.stop(self.settings.grace_seconds)
        if self._metrics is not None:
            self._metrics.close()

    async def __aenter__(self) -> Server:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        self._stop.set()
        await self._shutdown()


def load_settings(settings_cls: type[S], prog: str) -> S:
    """Read settings from the environment or exit(2) with one readable line per bad variable."""
    try:
        return settings_cls()
    except ValidationError as exc:
        print(f"{prog}: bad configuration:\n{describe_validation_error(exc)}", file=sys.stderr)
        raise SystemExit(2) from None


def run(main: Callable[[S], Awaitable[None]], settings_cls: type[S], name: str | None = None) -> None:
    """Console-script entry point of a service: settings, logging, then ``asyncio.run(main(settings))``."""
    prog = name or (sys.argv[0].rsplit("/", 1)[-1] if sys.argv and sys.argv[0] else "webenv")
    settings = load_settings(settings_cls, prog)
    limit_arenas(settings.malloc_arena_max)  # before the service starts its threads
    setup_logging(prog, settings.log_level, settings.log_json)
    try:
        asyncio.run(main(settings))
    except KeyboardInterrupt:
        pass

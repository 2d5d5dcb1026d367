"""The service: openenv-core's FastAPI app (HTTP /reset /step /state /schema /metadata /health, WebSocket /ws) for
:class:`webenv.openenv.env.WebEnvironment`, served by the runtime's HttpServer beside the usual gRPC health,
reflection and Prometheus /metrics (as the gateway serves its HTTP)."""

from __future__ import annotations

import contextlib
import json
import logging
from typing import Any

from fastapi.responses import JSONResponse
from webenv.openenv.config import Settings
from webenv.openenv.env import Backend, WebAction, WebEnvironment, WebObservation
from webenv.runtime import Server, serving
from webenv.runtime.http import BearerAuth, HttpServer

from openenv.core.env_server.http_server import create_fastapi_app
from openenv.core.env_server.types import ConcurrencyConfig

log = logging.getLogger("webenv.openenv")


#: At most this many characters of field errors are added to an invalid message's answer.
MAX_FIELD_ERRORS_CHARS = 600


def name_the_fields(text: str) -> str:
    """openenv-core's answer to a WebSocket message that fails validation says only ``Invalid message`` (the field
    errors sit in ``data.errors``, which its EnvClient does not show): the message then names each field and what
    is wrong with it, e.g. ``Invalid message: actoin: extra inputs are not permitted; action: field required``
    (bounded). Any other answer passes unchanged."""
    if '"Invalid message"' not in text:
        return text
    try:
        answer = json.loads(text)
        data = answer["data"]
        found = [f"{'.'.join(str(p) for p in e.get('loc', ())) or 'message'}: {str(e.get('msg', '')).lower()}"
                 for e in data.get("errors") or ()]
    except (ValueError, KeyError, TypeError, AttributeError):
        return text
    if data.get("message") != "Invalid message" or not found:
        return text
    detail = "; ".join(found)
    if len(detail) > MAX_FIELD_ERRORS_CHARS:
        detail = detail[:MAX_FIELD_ERRORS_CHARS] + " ..."
    data["message"] = f"Invalid message: {detail}"
    return json.dumps(answer)


class FieldErrors:
    """ASGI middleware: every WebSocket answer goes through :func:`name_the_fields`."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "websocket":
            await self.app(scope, receive, send)
            return

        async def named(message: dict) -> None:
            if message["type"] == "websocket.send" and message.get("text"):
                message = {**message, "text": name_the_fields(message["text"])}
            await send(message)

        await self.app(scope, receive, named)


def make_app(backend: Backend):  # type: ignore[no-untyped-def]
    """openenv-core's app over one shared backend (WEBENV_OPENENV_MAX_SESSIONS concurrent WebSocket sessions),
    behind the platform's bearer token when WEBENV_AUTH_TOKEN is set (openenv-core has no authentication of its
    own; /health stays open for probes), its invalid-message answers naming the fields (:class:`FieldErrors`)."""
    settings = backend.settings
    app = create_fastapi_app(
        lambda: WebEnvironment(backend), WebAction, WebObservation,
        concurrency_config=ConcurrencyConfig(max_concurrent_envs=settings.openenv_max_sessions,
                                             session_timeout=settings.openenv_session_timeout_seconds))
    # openenv-core's /health always answers healthy: ours is the peers' (`Backend.health`), 503 when unhealthy
    app.router.routes[:] = [r for r in app.router.routes if getattr(r, "path", None) != "/health"]

    @app.get("/health", tags=["Health"], summary="Health check: the farm, the catalog and the judge behind the server")
    async def health() -> JSONResponse:
        status, body = await backend.health()
        return JSONResponse(body, status_code=503 if status == "unhealthy" else 200)

    return BearerAuth(FieldErrors(app), settings.auth_token.get_secret_value())


class OpenEnvServer:
    """``async with OpenEnvServer(settings) as s:`` serves OpenEnv on s.http.port and health on s.server.port."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.backend = Backend(settings)
        self.app = make_app(self.backend)
        self.http = HttpServer(self.app, settings.http_host, settings.http_port,
                               ssl_certfile=settings.tls_cert_file, ssl_keyfile=settings.tls_key_file)
        self.server: Server | None = None
        self._serving = contextlib.AsyncExitStack()

    async def __aenter__(self) -> OpenEnvServer:
        self.server = await self._serving.enter_async_context(
            serving("openenv", self.settings, [], start=self.http.start, close=self._close))
        log.info("openenv serving", extra={"http_port": self.http.port, "grpc_port": self.server.port})
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self._serving.aclose()

    async def _close(self) -> None:
        await self.http.stop(self.settings.grace_seconds)
        await self.backend.close()


async def main(settings: Settings) -> None:
    """Serve until SIGTERM/SIGINT."""
    async with OpenEnvServer(settings) as s:
        assert s.server is not None
        await s.server.wait_for_termination()

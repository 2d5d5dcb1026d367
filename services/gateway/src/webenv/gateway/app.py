"""The gateway process: the REST API (transcoder), live streams, blobs, the console, auth and health.

HTTP (uvicorn, Starlette) and a gRPC port that serves only ``grpc.health.v1`` and reflection (so the gateway is
probed and health-gated like every service) share one event loop; the upstream channels are the sdk's
(``make_channel``: deadlines, UNAVAILABLE retries, the platform's bearer token and CA bundle).

Auth mirrors the gRPC side: with ``WEBENV_AUTH_TOKEN`` set, every ``/v1/`` request (REST, WebSocket, blobs)
needs ``Authorization: Bearer <token>`` or the ``webenv_token`` cookie that the console's login sets (HttpOnly,
SameSite=Strict, so other sites cannot use it; WebSockets authenticated by the cookie must also come from the
gateway's own origin). Health, the OpenAPI document and the console's static files stay open, as health and
reflection do on gRPC. With ``WEBENV_TLS_CERT_FILE``/``WEBENV_TLS_KEY_FILE`` both HTTP and gRPC serve TLS.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import json
import logging
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import grpc
from google.protobuf import descriptor_pool
from grpc_health.v1 import health_pb2, health_pb2_grpc
from starlette.applications import Starlette
from starlette.datastructures import Headers
from starlette.requests import Request, cookie_parser
from starlette.responses import FileResponse, JSONResponse, RedirectResponse, Response
from starlette.routing import Mount, Route, WebSocketRoute
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Receive, Scope, Send
from starlette.websockets import WebSocket
from webenv import errors, screenshots
from webenv.client import make_channel
from webenv.gateway import __version__, metrics, status
from webenv.gateway.config import Settings
from webenv.gateway.live import LiveHub
from webenv.gateway.openapi import document
from webenv.gateway.transcoder import Transcoder, routes_for
from webenv.runtime import Server, serving
from webenv.runtime.http import HttpServer
from webenv.v1 import (  # noqa: F401  (importing registers every service's descriptors)
    browser_pb2,
    collector_pb2,
    environment_pb2,
    judge_pb2,
    policy_pb2,
    task_pb2,
    trainer_pb2,
    worldmodel_pb2,
)

log = logging.getLogger("webenv.gateway")
COOKIE = "webenv_token"
CONSOLE_DIR = Path(__file__).parent / "console"

#: Paths that are not RPCs, described by hand in the OpenAPI document.
EXTRA_PATHS: dict[str, Any] = {
    "/v1/blobs/{key}": {"get": {
        "operationId": "Blobs_Get", "tags": ["Blobs"], "summary": "A stored screenshot",
        "description": "A blob of the collector's content-addressed store by its key (StepRecord.screenshot_key: "
                       "sha256 hex and extension). Immutable: cached for a year.",
        "parameters": [{"name": "key", "in": "path", "required": True, "schema": {"type": "string",
                        "pattern": screenshots.KEY.pattern}}],
        "responses": {"200": {"description": "The image.", "content": {"image/png": {}, "image/jpeg": {}}},
                      "default": {"description": "An error (google.rpc.Status).",
                                  "content": {"application/json": {"schema": {
                                      "$ref": "#/components/schemas/google.rpc.Status"}}}}}}},
    "/v1/runs/{run_id}/live": {"get": {
        "operationId": "Live_Run", "tags": ["Live"], "summary": "A run's progress (WebSocket)",
        "description": "WebSocket. One JSON message per WatchRun report ({type: progress, progress: "
                       "WatchRunResponse}), then {type: end} (or {type: error, error: Status}). A slow viewer gets "
                       "{type: dropped, dropped: n} and the newer reports: its queue drops the oldest.",
        "parameters": [{"name": "run_id", "in": "path", "required": True, "schema": {"type": "string"}}],
        "responses": {"101": {"description": "Switching to WebSocket."}}}},
    "/v1/sessions/{session_id}/live": {"get": {
        "operationId": "Live_Session", "tags": ["Live"], "summary": "One session's steps (WebSocket)",
        "description": "WebSocket. {type: step} for every step made through this gateway (action, timings, "
                       "observation summary), {type: progress} from polling GetSession (step count, step rate), "
                       "{type: frame} screenshots (the step's own, or farm previews) when ?frames=1, then "
                       "{type: end}.",
        "parameters": [{"name": "session_id", "in": "path", "required": True, "schema": {"type": "string"}},
                       {"name": "frames", "in": "query", "required": False, "schema": {"type": "boolean"}}],
        "responses": {"101": {"description": "Switching to WebSocket."}}}},
}


class AuthMiddleware:
    """Bearer token (header or the console's cookie) on /v1/ when WEBENV_AUTH_TOKEN is set."""

    def __init__(self, app: ASGIApp, token: str) -> None:
        self.app = app
        self.token = token.encode()

    def check(self, headers: Headers) -> tuple[bool, bool]:
        """(authorized, by cookie)."""
        auth = headers.get("authorization", "")
        if auth.startswith("Bearer "):
            return hmac.compare_digest(auth[7:].encode(), self.token), False
        cookie = cookie_parser(headers.get("cookie", "")).get(COOKIE)
        if cookie is not None:
            return hmac.compare_digest(cookie.encode(), self.token), True
        return False, False

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket") or not self.token or not scope["path"].startswith("/v1/"):
            await self.app(scope, receive, send)
            return
        headers = Headers(scope=scope)
        ok, by_cookie = self.check(headers)
        if ok and by_cookie and scope["type"] == "websocket":
            origin = headers.get("origin")
            ok = origin is None or urlsplit(origin).netloc == headers.get("host")
        if ok:
            await self.app(scope, receive, send)
            return
        if scope["type"] == "websocket":
            await send({"type": "websocket.close", "code": 1008})
            return
        err = errors.Unauthenticated("missing or invalid bearer token", reason="BAD_TOKEN")
        await status.error_response(err)(scope, receive, send)


class Gateway:
    """``async with Gateway(settings) as gw:`` serves HTTP on gw.http_port and health on gw.server.port."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.server: Server | None = None  # health and /metrics, while serving
        self._serving = contextlib.AsyncExitStack()
        self._token = settings.auth_token.get_secret_value()
        self._upstreams = settings.upstreams()
        self._channels: dict[str, grpc.aio.Channel] = {}
        pool = descriptor_pool.Default()
        self.routes = routes_for(pool.FindServiceByName(name) for name in self._upstreams)
        self.live = LiveHub(self.channel_for, viewer_queue=settings.viewer_queue, max_viewers=settings.max_viewers,
                            session_poll_seconds=settings.session_poll_seconds,
                            frame_interval_seconds=settings.frame_interval_seconds, frame_width=settings.frame_width)
        self.transcoder = Transcoder(
            self.routes, self.channel_for, timeout=settings.upstream_timeout_seconds,
            max_body=settings.max_body_mb * 1024 * 1024,
            on_response={"/webenv.v1.EnvironmentService/Step": self.live.on_step,
                         "/webenv.v1.EnvironmentService/CloseSession": self.live.on_close},
        )
        self.openapi = document(self.routes, EXTRA_PATHS, version=__version__)
        self.app = AuthMiddleware(self._starlette(), self._token)
        self.http = HttpServer(self.app, settings.http_host, settings.http_port,
                               ssl_certfile=settings.tls_cert_file, ssl_keyfile=settings.tls_key_file)

    @property
    def http_port(self) -> int:
        return self.http.port

    def channel_for(self, service: str) -> grpc.aio.Channel:
        """The (shared) channel to the service's address."""
        address = self._upstreams[service]
        ch = self._channels.get(address)
        if ch is None:
            ch = self._channels[address] = make_channel(
                address, timeout=self.settings.upstream_timeout_seconds, token=self._token or None,
                max_message_mb=self.settings.max_message_mb)
        return ch

    # -- HTTP -------------------------------------------------------------------------------------------------------
    def _starlette(self) -> Starlette:
        return Starlette(routes=[
            Route("/", lambda _: RedirectResponse("/console/")),
            Route("/healthz", self.health),
            Route("/openapi.json", lambda _: JSONResponse(self.openapi)),
            Route("/console/auth", self.console_auth, methods=["GET"]),
            Route("/console/login", self.console_login, methods=["POST"]),
            Route("/console/logout", self.console_logout, methods=["POST"]),
            Mount("/console", StaticFiles(directory=CONSOLE_DIR, html=True)),
            WebSocketRoute("/v1/runs/{run_id}/live", self.ws_run),
            WebSocketRoute("/v1/sessions/{session_id}/live", self.ws_session),
            Route("/v1/blobs/{key}", self.blob, methods=["GET", "HEAD"]),
            Route("/v1/{path:path}", self.transcoder.handle, methods=["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE"]),
        ])

    async def health(self, request: Request) -> Response:
        """The gateway's health; with ?upstreams=1 also each upstream's grpc.health.v1 answer."""
        out: dict[str, Any] = {"status": "SERVING", "version": __version__}
        if request.query_params.get("upstreams"):
            by_address: dict[str, list[str]] = {}
            for svc, address in self._upstreams.items():
                by_address.setdefault(address, []).append(svc)

            async def check(services: list[str]) -> str:
                try:
                    stub = health_pb2_grpc.HealthStub(self.channel_for(services[0]))
                    resp = await stub.Check(health_pb2.HealthCheckRequest(), timeout=2)
                    return health_pb2.HealthCheckResponse.ServingStatus.Name(resp.status)
                except grpc.aio.AioRpcError as exc:
                    return exc.code().name

            results = await asyncio.gather(*(check(s) for s in by_address.values()))
            out["upstreams"] = {address: {"status": st, "services": [s.rsplit(".", 1)[-1] for s in services]}
                                for (address, services), st in zip(by_address.items(), results, strict=True)}
        return JSONResponse(out)

    async def console_auth(self, request: Request) -> Response:
        """Whether the API needs a token, and whether this browser has a valid one."""
        ok = not self._token or AuthMiddleware(self.app, self._token).check(request.headers)[0]
        return JSONResponse({"required": bool(self._token), "authenticated": ok})

    async def console_login(self, request: Request) -> Response:
        """Check a token and keep it in an HttpOnly, SameSite=Strict cookie for the console's requests."""
        try:
            token = str((await request.json()).get("token", ""))
        except (json.JSONDecodeError, AttributeError):
            token = ""
        if not self._token or not hmac.compare_digest(token.encode(), self._token.encode()):
            return status.error_response(errors.Unauthenticated("wrong token", reason="BAD_TOKEN"))
        resp = JSONResponse({"authenticated": True})
        resp.set_cookie(COOKIE, token, httponly=True, samesite="strict", secure=self.http.tls, path="/")
        return resp

    async def console_logout(self, request: Request) -> Response:
        resp = JSONResponse({"authenticated": False})
        resp.delete_cookie(COOKIE, path="/")
        return resp

    async def ws_run(self, websocket: WebSocket) -> None:
        await self.live.serve(websocket, "run", websocket.path_params["run_id"])

    async def ws_session(self, websocket: WebSocket) -> None:
        await self.live.serve(websocket, "session", websocket.path_params["session_id"])

    async def blob(self, request: Request) -> Response:
        """A screenshot from the collector's blob folder, by content address (immutable, cached for a year)."""
        key = request.path_params["key"]
        if not screenshots.KEY.match(key):
            return status.error_response(errors.InvalidArgument(
                "key: not a blob key (64 hex digits of SHA-256, then .png, .jpg or .webp)", reason="BAD_BLOB_KEY",
                metadata={"field": "key"}))
        if not self.settings.blob_dir:
            metrics.BLOBS.labels("missing").inc()
            return status.error_response(errors.NotFound(
                "this gateway serves no blobs: set WEBENV_BLOB_DIR to the collector's blob folder",
                reason="BLOBS_NOT_CONFIGURED"))
        path = Path(self.settings.blob_dir) / key[:2] / key
        if not await asyncio.to_thread(path.is_file):
            metrics.BLOBS.labels("missing").inc()
            return status.error_response(errors.NotFound(f"blob {key} not found", reason="BLOB_NOT_FOUND",
                                                         metadata={"key": key}))
        etag = f'"{key}"'
        if request.headers.get("if-none-match") == etag:
            metrics.BLOBS.labels("not_modified").inc()
            return Response(status_code=304, headers={"ETag": etag})
        metrics.BLOBS.labels("ok").inc()
        return FileResponse(path, media_type=screenshots.media_type(key),
                            headers={"Cache-Control": "public, max-age=31536000, immutable", "ETag": etag})

    # -- lifecycle --------------------------------------------------------------------------------------------------
    async def __aenter__(self) -> Gateway:
        if self.settings.blob_dir and not await asyncio.to_thread(Path(self.settings.blob_dir).is_dir):
            log.warning("WEBENV_BLOB_DIR=%s is not a folder (yet): screenshots answer NOT_FOUND until it is",
                        self.settings.blob_dir)
        self.server = await self._serving.enter_async_context(
            serving("gateway", self.settings, [], start=self.http.start, close=self._close))
        log.info("gateway serving", extra={"http_port": self.http.port, "grpc_port": self.server.port,
                                            "routes": len(self.routes), "tls": self.http.tls})
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self._serving.aclose()

    async def _close(self) -> None:
        await self.live.close()
        await self.http.stop(self.settings.grace_seconds)
        for ch in self._channels.values():
            with contextlib.suppress(Exception):
                await ch.close()


async def main(settings: Settings) -> None:
    """The service: serve until SIGTERM/SIGINT, then stop health, live streams and HTTP in order."""
    async with Gateway(settings) as gw:
        await gw.server.wait_for_termination()

"""An HTTP (ASGI) server beside a service's gRPC server, in the same event loop.

uvicorn is started on a socket bound here (so port 0 works and the chosen port is known before serving),
without its own signal handlers: :class:`~webenv.runtime.Server` owns SIGTERM/SIGINT for the whole process
and stops HTTP after gRPC. The sites service serves its websites this way, the gateway its REST API and
console.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import json
import socket
from collections.abc import Iterator
from typing import Any

import uvicorn


class _EmbeddedUvicorn(uvicorn.Server):
    """uvicorn without its own signal handlers."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


class HttpServer:
    """``await HttpServer(app, host, port).start()`` serves ``app``; ``port`` is the bound port afterwards."""

    def __init__(self, app: Any, host: str, port: int, *, ssl_certfile: str = "", ssl_keyfile: str = "",
                 **config: Any) -> None:
        self.app = app
        self.host = host
        self.port = port
        self.tls = bool(ssl_certfile)
        options: dict[str, Any] = dict(lifespan="off", access_log=False, log_level="warning", log_config=None,
                                       timeout_keep_alive=30, backlog=2048)
        if ssl_certfile:
            options |= {"ssl_certfile": ssl_certfile, "ssl_keyfile": ssl_keyfile}
        self._config = {**options, **config}
        self._server: _EmbeddedUvicorn | None = None
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        """Bind the port and serve until :meth:`stop` (raises if uvicorn stops during start-up)."""
        # proto=IPPROTO_TCP: asyncio sets TCP_NODELAY only on sockets that say so, and accepted connections inherit
        # it; without it a response written in two parts (headers, body) waits ~40 ms for a delayed ACK (Nagle).
        sock = socket.socket(socket.AF_INET6 if ":" in self.host else socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((self.host, self.port))
        sock.set_inheritable(True)
        self.port = sock.getsockname()[1]
        self._server = _EmbeddedUvicorn(uvicorn.Config(self.app, **self._config))
        self._task = asyncio.create_task(self._server.serve(sockets=[sock]))
        while not self._server.started:
            if self._task.done():
                self._task.result()
                raise RuntimeError("HTTP server stopped during start-up")
            await asyncio.sleep(0.01)

    async def stop(self, grace: float = 10.0) -> None:
        """Stop accepting, let open requests finish (for at most ``grace`` seconds)."""
        if self._server is None or self._task is None:
            return
        self._server.should_exit = True
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self._task, timeout=grace)
        self._server = self._task = None


class BearerAuth:
    """ASGI middleware: with a token, every HTTP request and WebSocket needs ``Authorization: Bearer <token>``, as
    every gRPC call does (``WEBENV_AUTH_TOKEN``, the runtime's server interceptor); paths in ``open_paths`` (a
    liveness probe) stay open. A refused request is 401 with a ``google.rpc.Status``-shaped JSON body
    (UNAUTHENTICATED, reason BAD_TOKEN) and ``WWW-Authenticate``; a refused WebSocket is closed before it is
    accepted (code 1008). The adapters' HTTP sides (OpenEnv, MCP) use it; without a token it passes everything."""

    BODY = json.dumps({"code": 16, "status": "UNAUTHENTICATED", "message": "missing or invalid bearer token",
                       "details": [{"@type": "type.googleapis.com/google.rpc.ErrorInfo", "reason": "BAD_TOKEN",
                                    "domain": "webenv"}]}).encode()

    def __init__(self, app: Any, token: str, *, open_paths: tuple[str, ...] = ("/health",)) -> None:
        self.app = app
        self.token = token.encode()
        self.open_paths = open_paths

    def authorized(self, scope: dict) -> bool:
        for key, value in scope.get("headers") or ():
            if key.lower() == b"authorization" and value.startswith(b"Bearer "):
                return hmac.compare_digest(value[7:], self.token)
        return False

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if (not self.token or scope["type"] not in ("http", "websocket") or scope["path"] in self.open_paths
                or self.authorized(scope)):
            await self.app(scope, receive, send)
            return
        if scope["type"] == "websocket":
            await send({"type": "websocket.close", "code": 1008})
            return
        await send({"type": "http.response.start", "status": 401, "headers": [
            (b"content-type", b"application/json"), (b"content-length", str(len(self.BODY)).encode()),
            (b"www-authenticate", b'Bearer realm="webenv"')]})
        await send({"type": "http.response.body", "body": self.BODY})

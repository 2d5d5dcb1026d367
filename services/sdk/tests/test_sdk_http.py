"""webenv.runtime.http: an ASGI server beside gRPC, on a port it binds itself, with Nagle off on every connection."""

from __future__ import annotations

import asyncio
import socket

from webenv.runtime.http import HttpServer


async def app(scope, receive, send):
    if scope["type"] != "http":
        return
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/plain")]})
    await send({"type": "http.response.body", "body": b"ok"})  # headers and body as two writes


async def test_accepted_connections_have_tcp_nodelay():
    """A response written in two parts must not wait for the client's delayed ACK (~40 ms per request)."""
    server = HttpServer(app, "127.0.0.1", 0)
    await server.start()
    try:
        assert server.port > 0
        reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
        writer.write(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        await writer.drain()
        assert (await reader.readuntil(b"ok")).startswith(b"HTTP/1.1 200")
        conns = server._server.server_state.connections
        assert conns
        for proto in conns:
            sock = proto.transport.get_extra_info("socket")
            assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) == 1
        writer.close()
    finally:
        await server.stop(1.0)

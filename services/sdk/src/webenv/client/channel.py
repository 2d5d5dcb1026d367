"""Client channels with the platform's defaults.

Every unary call gets a deadline unless the caller gives one (a call without a deadline can hang forever on a
dead peer); streaming calls get none by default because a StepStream legitimately lives for a whole run.
Retries happen only on UNAVAILABLE (AIP-194), declared in the gRPC service config so the library does them
with backoff, never by string-matching errors in our code.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import grpc

#: Retries of UNAVAILABLE with exponential backoff, for every method.
SERVICE_CONFIG = {
    "methodConfig": [
        {
            "name": [{}],
            "retryPolicy": {
                "maxAttempts": 4,
                "initialBackoff": "0.1s",
                "maxBackoff": "2s",
                "backoffMultiplier": 2,
                "retryableStatusCodes": ["UNAVAILABLE"],
            },
        }
    ]
}


class _Defaults:
    """Adds the default deadline (unary-request calls) and the bearer token (all calls)."""

    def __init__(self, timeout: float | None, token: str | None) -> None:
        self._timeout = timeout
        self._auth = (("authorization", f"Bearer {token}"),) if token else ()

    def details(self, details: grpc.aio.ClientCallDetails, unary: bool) -> grpc.aio.ClientCallDetails:
        timeout = details.timeout
        if timeout is None and unary:
            timeout = self._timeout
        metadata = details.metadata
        if self._auth:
            metadata = grpc.aio.Metadata(*(tuple(metadata) if metadata else ()), *self._auth)
        return grpc.aio.ClientCallDetails(details.method, timeout, metadata, details.credentials, details.wait_for_ready)


# grpc.aio files each interceptor under the first call kind it implements, so one class per kind.
class _UnaryUnary(grpc.aio.UnaryUnaryClientInterceptor):
    def __init__(self, defaults: _Defaults) -> None:
        self._d = defaults

    async def intercept_unary_unary(self, continuation: Any, client_call_details: Any, request: Any) -> Any:
        return await continuation(self._d.details(client_call_details, unary=True), request)


class _UnaryStream(grpc.aio.UnaryStreamClientInterceptor):
    def __init__(self, defaults: _Defaults) -> None:
        self._d = defaults

    async def intercept_unary_stream(self, continuation: Any, client_call_details: Any, request: Any) -> Any:
        return await continuation(self._d.details(client_call_details, unary=False), request)


class _StreamUnary(grpc.aio.StreamUnaryClientInterceptor):
    def __init__(self, defaults: _Defaults) -> None:
        self._d = defaults

    async def intercept_stream_unary(self, continuation: Any, client_call_details: Any, request_iterator: Any) -> Any:
        return await continuation(self._d.details(client_call_details, unary=True), request_iterator)


class _StreamStream(grpc.aio.StreamStreamClientInterceptor):
    def __init__(self, defaults: _Defaults) -> None:
        self._d = defaults

    async def intercept_stream_stream(self, continuation: Any, client_call_details: Any, request_iterator: Any) -> Any:
        return await continuation(self._d.details(client_call_details, unary=False), request_iterator)


def make_channel(
    address: str,
    *,
    timeout: float | None = 30.0,
    token: str | None = None,
    root_certificates: bytes | None = None,
    max_message_mb: int = 64,
    options: list[tuple[str, Any]] | None = None,
) -> grpc.aio.Channel:
    """An aio channel to ``address`` (``host:port``) with default deadlines, retries and optional TLS/auth.

    ``timeout`` is the default deadline in seconds for unary calls (None disables it). ``root_certificates``
    turns TLS on (use ``b""`` for the system roots). When not given, ``token`` and ``root_certificates`` come from
    the environment every webenv service shares: ``WEBENV_AUTH_TOKEN`` (the same token the servers check) and
    ``WEBENV_TLS_CA_FILE`` (a PEM bundle), so service-to-service calls keep working when a deployment turns auth or
    TLS on.
    """
    if token is None:
        token = os.environ.get("WEBENV_AUTH_TOKEN") or None
    if root_certificates is None and os.environ.get("WEBENV_TLS_CA_FILE"):
        root_certificates = Path(os.environ["WEBENV_TLS_CA_FILE"]).read_bytes()
    limit = max_message_mb * 1024 * 1024
    opts: list[tuple[str, Any]] = [
        ("grpc.max_send_message_length", limit),
        ("grpc.max_receive_message_length", limit),
        ("grpc.enable_retries", 1),
        ("grpc.service_config", json.dumps(SERVICE_CONFIG)),
        ("grpc.keepalive_time_ms", 30_000),
        ("grpc.keepalive_timeout_ms", 10_000),
        *(options or []),
    ]
    defaults = _Defaults(timeout, token)
    interceptors = [kind(defaults) for kind in (_UnaryUnary, _UnaryStream, _StreamUnary, _StreamStream)]
    if root_certificates is not None:
        creds = grpc.ssl_channel_credentials(root_certificates or None)
        return grpc.aio.secure_channel(address, creds, options=opts, interceptors=interceptors)
    return grpc.aio.insecure_channel(address, options=opts, interceptors=interceptors)

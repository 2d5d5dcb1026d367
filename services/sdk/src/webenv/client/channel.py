"""Client channels with the platform's defaults: the one way every caller (services, the CLI, the stack launcher,
the bench scripts) opens a channel, asynchronous (:func:`make_channel`) or synchronous (:func:`make_sync_channel`).

Both take their settings from the environment the services share (:func:`channel_settings`): the bearer token
``WEBENV_AUTH_TOKEN`` the servers check, TLS roots from ``WEBENV_TLS_CA_FILE`` and the servers' message limit
``WEBENV_MAX_MESSAGE_MB``. Every unary call gets a deadline unless the caller gives one (a call without a deadline
can hang forever on a dead peer); streaming calls get none by default because a StepStream legitimately lives for a whole run.
Retries happen only on UNAVAILABLE (AIP-194), declared in the gRPC service config so the library does them
with backoff, never by string-matching errors in our code.
"""

from __future__ import annotations

import json
import os
from collections import namedtuple
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


def channel_settings(
    token: str | None = None, root_certificates: bytes | None = None, max_message_mb: int | None = None
) -> tuple[str | None, bytes | None, int]:
    """The token, TLS roots (None: plaintext) and message limit (MiB) a channel uses: what the caller gave, else the
    environment the services share.

    ``WEBENV_AUTH_TOKEN`` is the token the servers check. TLS roots come from ``WEBENV_TLS_CA_FILE`` (a PEM bundle:
    the CA of the servers' ``WEBENV_TLS_CERT_FILE``, or that certificate itself when it is self-signed); a server's
    own certificate is never taken for one, so a gateway serving TLS in front of plaintext services still reaches
    them. ``WEBENV_MAX_MESSAGE_MB`` is the servers' limit (64 MiB by default, as theirs; 1 to 2047).
    """
    if token is None:
        token = os.environ.get("WEBENV_AUTH_TOKEN") or None
    if root_certificates is None:
        pem = os.environ.get("WEBENV_TLS_CA_FILE")
        if pem:
            root_certificates = Path(pem).read_bytes()
    if max_message_mb is None:
        raw = os.environ.get("WEBENV_MAX_MESSAGE_MB") or "64"
        if not raw.strip().isdigit() or not 1 <= int(raw) <= 2047:
            raise ValueError(f"WEBENV_MAX_MESSAGE_MB: expected a whole number of MiB from 1 to 2047 (got {raw[:40]!r})")
        max_message_mb = int(raw)
    return token, root_certificates, max_message_mb


def _options(max_message_mb: int, options: list[tuple[str, Any]] | None) -> list[tuple[str, Any]]:
    limit = max_message_mb * 1024 * 1024
    return [
        ("grpc.max_send_message_length", limit),
        ("grpc.max_receive_message_length", limit),
        ("grpc.enable_retries", 1),
        ("grpc.service_config", json.dumps(SERVICE_CONFIG)),
        ("grpc.keepalive_time_ms", 30_000),
        ("grpc.keepalive_timeout_ms", 10_000),
        *(options or []),
    ]


def make_channel(
    address: str,
    *,
    timeout: float | None = 30.0,
    token: str | None = None,
    root_certificates: bytes | None = None,
    max_message_mb: int | None = None,
    options: list[tuple[str, Any]] | None = None,
) -> grpc.aio.Channel:
    """An aio channel to ``address`` (``host:port``) with default deadlines, retries and optional TLS/auth.

    ``timeout`` is the default deadline in seconds for unary calls (None disables it). ``root_certificates``
    turns TLS on (use ``b""`` for the system roots). ``token``, ``root_certificates`` and ``max_message_mb`` not given
    come from the environment every webenv service shares (:func:`channel_settings`), so calls keep working when a
    deployment turns auth or TLS on.
    """
    token, root_certificates, max_message_mb = channel_settings(token, root_certificates, max_message_mb)
    opts = _options(max_message_mb, options)
    defaults = _Defaults(timeout, token)
    # nothing to add to a call (no default deadline, no token): no interceptors, so no cost per call (the benches)
    kinds = (_UnaryUnary, _UnaryStream, _StreamUnary, _StreamStream) if timeout is not None or token else ()
    interceptors = [kind(defaults) for kind in kinds]
    if root_certificates is not None:
        creds = grpc.ssl_channel_credentials(root_certificates or None)
        return grpc.aio.secure_channel(address, creds, options=opts, interceptors=interceptors)
    return grpc.aio.insecure_channel(address, options=opts, interceptors=interceptors)


class _SyncDetails(
    namedtuple("_SyncDetails", ("method", "timeout", "metadata", "credentials", "wait_for_ready", "compression")),
    grpc.ClientCallDetails,
):
    pass


class _SyncDefaults(
    grpc.UnaryUnaryClientInterceptor,
    grpc.UnaryStreamClientInterceptor,
    grpc.StreamUnaryClientInterceptor,
    grpc.StreamStreamClientInterceptor,
):
    """:class:`_Defaults` for synchronous channels (one class serves every call kind there)."""

    def __init__(self, defaults: _Defaults) -> None:
        self._d = defaults

    def _details(self, details: grpc.ClientCallDetails, unary: bool) -> _SyncDetails:
        timeout = details.timeout
        if timeout is None and unary:
            timeout = self._d._timeout
        metadata = (*(details.metadata or ()), *self._d._auth)
        return _SyncDetails(details.method, timeout, metadata or None, details.credentials,
                            getattr(details, "wait_for_ready", None), getattr(details, "compression", None))

    def intercept_unary_unary(self, continuation: Any, client_call_details: Any, request: Any) -> Any:
        return continuation(self._details(client_call_details, unary=True), request)

    def intercept_unary_stream(self, continuation: Any, client_call_details: Any, request: Any) -> Any:
        return continuation(self._details(client_call_details, unary=False), request)

    def intercept_stream_unary(self, continuation: Any, client_call_details: Any, request_iterator: Any) -> Any:
        return continuation(self._details(client_call_details, unary=True), request_iterator)

    def intercept_stream_stream(self, continuation: Any, client_call_details: Any, request_iterator: Any) -> Any:
        return continuation(self._details(client_call_details, unary=False), request_iterator)


def make_sync_channel(
    address: str,
    *,
    timeout: float | None = 30.0,
    token: str | None = None,
    root_certificates: bytes | None = None,
    max_message_mb: int | None = None,
    options: list[tuple[str, Any]] | None = None,
) -> grpc.Channel:
    """:func:`make_channel` for synchronous callers (the CLI, scripts): the same deadlines, retries, limits, TLS and
    token; usable as a context manager, ``close()`` ends it."""
    token, root_certificates, max_message_mb = channel_settings(token, root_certificates, max_message_mb)
    opts = _options(max_message_mb, options)
    if root_certificates is not None:
        channel = grpc.secure_channel(address, grpc.ssl_channel_credentials(root_certificates or None), options=opts)
    else:
        channel = grpc.insecure_channel(address, options=opts)
    if timeout is None and not token:
        return channel
    return grpc.intercept_channel(channel, _SyncDefaults(_Defaults(timeout, token)))

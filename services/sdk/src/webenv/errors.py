"""The error convention of webenv (AIP-193).

A service raises a :class:`WebenvError` subclass from a servicer method; the runtime's interceptor turns it into
the matching gRPC status with a ``google.rpc.ErrorInfo`` detail (reason, domain ``webenv.dev``, metadata) and,
for retryable errors, a ``google.rpc.RetryInfo``. Clients call :func:`from_rpc_error` to get the same exception
back, so code on both sides speaks in domain errors rather than status-code arithmetic. Inside a bidi stream one
item's failure travels as a ``StreamError`` (:meth:`WebenvError.to_stream_error`) and the stream goes on.

Messages and metadata are bounded (:data:`MAX_MESSAGE_BYTES`, :data:`MAX_METADATA_ITEMS`,
:data:`MAX_METADATA_VALUE_BYTES`) when the error is made, because they often quote the caller's input: the status
travels in HTTP/2 trailers twice (``grpc-message`` percent-encoded, ``grpc-status-details-bin`` base64), and a
client's default 8 KiB metadata limit turned a 100 KB echo into RESOURCE_EXHAUSTED "metadata size exceeds hard
limit" instead of the real error. Messages start with the field they name, so the cut keeps it.
"""

from __future__ import annotations

from typing import ClassVar

import grpc
from google.protobuf import duration_pb2
from google.rpc import code_pb2, error_details_pb2, status_pb2
from grpc_status import rpc_status
from webenv.v1 import common_pb2

DOMAIN = "webenv.dev"

#: Longest message (UTF-8 bytes). Worst case on the wire: 3x percent-encoded plus 4/3x in the details trailer.
MAX_MESSAGE_BYTES = 1024
#: Most ErrorInfo metadata entries, and the longest key and value (UTF-8 bytes).
MAX_METADATA_ITEMS = 8
MAX_METADATA_KEY_BYTES = 64
MAX_METADATA_VALUE_BYTES = 128


def bounded(text: str, limit: int = MAX_MESSAGE_BYTES) -> str:
    """``text`` cut to at most ``limit`` UTF-8 bytes, saying how much was left out (never splits a character)."""
    data = text.encode("utf-8", "replace")
    if len(data) <= limit:
        return text if text.isascii() else data.decode("utf-8")  # lone surrogates become "?"
    marker = f"... ({len(data)} bytes, cut)"
    keep = max(limit - len(marker.encode()), 0)
    return data[:keep].decode("utf-8", "ignore") + marker


def _bounded_metadata(metadata: dict[str, str] | None) -> dict[str, str]:
    items = list((metadata or {}).items())
    out = {
        bounded(str(k), MAX_METADATA_KEY_BYTES): bounded(str(v), MAX_METADATA_VALUE_BYTES)
        for k, v in items[: MAX_METADATA_ITEMS - (len(items) > MAX_METADATA_ITEMS)]
    }
    if len(items) > MAX_METADATA_ITEMS:
        out["omitted_entries"] = str(len(items) - MAX_METADATA_ITEMS + 1)
    return out


class WebenvError(Exception):
    """A domain error with a gRPC status code, a machine-readable reason and metadata."""

    code: ClassVar[grpc.StatusCode] = grpc.StatusCode.INTERNAL
    default_reason: ClassVar[str] = "INTERNAL"

    def __init__(
        self,
        message: str,
        *,
        reason: str | None = None,
        metadata: dict[str, str] | None = None,
        retry_after_seconds: float | None = None,
    ) -> None:
        message = bounded(str(message))
        super().__init__(message)
        self.message = message
        self.reason = bounded(reason or self.default_reason, MAX_METADATA_KEY_BYTES)
        self.metadata = _bounded_metadata(metadata)
        self.retry_after_seconds = retry_after_seconds

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.message!r}, reason={self.reason!r}, metadata={self.metadata!r})"

    def status_proto(self) -> status_pb2.Status:
        """The error as a ``google.rpc.Status`` (code, message, ErrorInfo and RetryInfo details)."""
        detail = status_pb2.Status(code=self.code.value[0], message=self.message)
        info = error_details_pb2.ErrorInfo(reason=self.reason, domain=DOMAIN, metadata=self.metadata)
        detail.details.add().Pack(info)
        if self.retry_after_seconds is not None:
            delay = duration_pb2.Duration()
            delay.FromNanoseconds(int(self.retry_after_seconds * 1e9))
            detail.details.add().Pack(error_details_pb2.RetryInfo(retry_delay=delay))
        return detail

    def to_status(self) -> grpc.Status:
        """The rich status for ``context.abort_with_status``."""
        return rpc_status.to_status(self.status_proto())

    def to_stream_error(self) -> common_pb2.StreamError:
        """This error as one failed item of a multiplexed stream."""
        return common_pb2.StreamError(code=self.code.value[0], message=self.message, reason=self.reason)


class InvalidArgument(WebenvError):
    """The request is malformed; retrying it unchanged fails again."""

    code = grpc.StatusCode.INVALID_ARGUMENT
    default_reason = "INVALID_ARGUMENT"


class NotFound(WebenvError):
    """A named resource (session, task, run) does not exist."""

    code = grpc.StatusCode.NOT_FOUND
    default_reason = "NOT_FOUND"


class AlreadyExists(WebenvError):
    """The resource to create exists already."""

    code = grpc.StatusCode.ALREADY_EXISTS
    default_reason = "ALREADY_EXISTS"


class FailedPrecondition(WebenvError):
    """The system is not in a state where the request can run (e.g. a closed session, a draining node)."""

    code = grpc.StatusCode.FAILED_PRECONDITION
    default_reason = "FAILED_PRECONDITION"


class ResourceExhausted(WebenvError):
    """A limit is reached; retry after ``retry_after_seconds``."""

    code = grpc.StatusCode.RESOURCE_EXHAUSTED
    default_reason = "RESOURCE_EXHAUSTED"


class Unavailable(WebenvError):
    """A dependency is down; the only code clients retry automatically."""

    code = grpc.StatusCode.UNAVAILABLE
    default_reason = "UNAVAILABLE"


class DeadlineExceeded(WebenvError):
    """The operation ran past its deadline (e.g. a step on a hung page)."""

    code = grpc.StatusCode.DEADLINE_EXCEEDED
    default_reason = "DEADLINE_EXCEEDED"


class Unauthenticated(WebenvError):
    """No valid credentials."""

    code = grpc.StatusCode.UNAUTHENTICATED
    default_reason = "UNAUTHENTICATED"


class PermissionDenied(WebenvError):
    """Credentials are valid but not allowed to do this (e.g. a URL refused by the farm's guard)."""

    code = grpc.StatusCode.PERMISSION_DENIED
    default_reason = "PERMISSION_DENIED"


class Unimplemented(WebenvError):
    """The server does not implement the method (yet)."""

    code = grpc.StatusCode.UNIMPLEMENTED
    default_reason = "UNIMPLEMENTED"


class Internal(WebenvError):
    """A bug or an unexpected failure on the server."""

    code = grpc.StatusCode.INTERNAL
    default_reason = "INTERNAL"


_BY_CODE: dict[grpc.StatusCode, type[WebenvError]] = {
    cls.code: cls
    for cls in (
        InvalidArgument,
        NotFound,
        AlreadyExists,
        FailedPrecondition,
        ResourceExhausted,
        Unavailable,
        DeadlineExceeded,
        Unauthenticated,
        PermissionDenied,
        Unimplemented,
        Internal,
    )
}
_BY_NUMBER: dict[int, grpc.StatusCode] = {c.value[0]: c for c in grpc.StatusCode}


def error_class(code: grpc.StatusCode) -> type[WebenvError]:
    """The exception class for a status code (``WebenvError`` itself for codes without one)."""
    return _BY_CODE.get(code, WebenvError)


def from_rpc_error(exc: grpc.RpcError) -> WebenvError:
    """Rebuild the domain error from a failed call, reading ErrorInfo and RetryInfo details when present."""
    code = exc.code() if hasattr(exc, "code") else grpc.StatusCode.UNKNOWN
    message = exc.details() if hasattr(exc, "details") else str(exc)
    reason: str | None = None
    metadata: dict[str, str] = {}
    retry: float | None = None
    status = _status_of(exc)
    if status is not None:
        for any_detail in status.details:
            if any_detail.Is(error_details_pb2.ErrorInfo.DESCRIPTOR):
                info = error_details_pb2.ErrorInfo()
                any_detail.Unpack(info)
                reason, metadata = info.reason, dict(info.metadata)
            elif any_detail.Is(error_details_pb2.RetryInfo.DESCRIPTOR):
                ri = error_details_pb2.RetryInfo()
                any_detail.Unpack(ri)
                retry = ri.retry_delay.ToNanoseconds() / 1e9
    cls = error_class(code)
    err = cls(message or code.name, reason=reason or code.name, metadata=metadata, retry_after_seconds=retry)
    if cls is WebenvError:
        err.code = code  # type: ignore[misc]  # keep codes without a dedicated class (CANCELLED, UNKNOWN...)
    return err


def from_stream_error(err: common_pb2.StreamError) -> WebenvError:
    """Rebuild the domain error carried by a StreamError item."""
    code = _BY_NUMBER.get(err.code, grpc.StatusCode.UNKNOWN)
    out = error_class(code)(err.message, reason=err.reason or code.name)
    if type(out) is WebenvError:
        out.code = code  # type: ignore[misc]
    return out


def _status_of(exc: grpc.RpcError) -> status_pb2.Status | None:
    """The google.rpc.Status trailer of a failed call, for both sync and aio errors."""
    trailers = exc.trailing_metadata() if hasattr(exc, "trailing_metadata") else None
    for key, value in trailers or ():
        if key == "grpc-status-details-bin":
            status = status_pb2.Status.FromString(value)
            return status if status.code != code_pb2.OK else None
    return None

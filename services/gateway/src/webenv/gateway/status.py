"""Errors over HTTP: a ``google.rpc.Status`` as JSON, with the HTTP status grpc-gateway gives each gRPC code.

A service's error reaches the HTTP client unchanged: the code, the message and every detail of the status the
service sent (``ErrorInfo`` with reason and metadata, ``RetryInfo``), rendered by protobuf's JSON mapping
(``{"code": 3, "message": "...", "details": [{"@type": "type.googleapis.com/google.rpc.ErrorInfo", ...}]}``).
A ``RetryInfo`` also becomes a ``Retry-After`` header. Errors the gateway raises itself (bad JSON, unknown
route, missing token) use the same form, built from :mod:`webenv.errors`.
"""

from __future__ import annotations

import json
import math

import grpc
from google.protobuf import json_format
from google.rpc import error_details_pb2, status_pb2
from starlette.responses import Response
from webenv import errors

#: gRPC code -> HTTP status, as grpc-gateway's runtime.HTTPStatusFromCode maps them.
HTTP_STATUS: dict[grpc.StatusCode, int] = {
    grpc.StatusCode.OK: 200,
    grpc.StatusCode.CANCELLED: 499,
    grpc.StatusCode.UNKNOWN: 500,
    grpc.StatusCode.INVALID_ARGUMENT: 400,
    grpc.StatusCode.DEADLINE_EXCEEDED: 504,
    grpc.StatusCode.NOT_FOUND: 404,
    grpc.StatusCode.ALREADY_EXISTS: 409,
    grpc.StatusCode.PERMISSION_DENIED: 403,
    grpc.StatusCode.UNAUTHENTICATED: 401,
    grpc.StatusCode.RESOURCE_EXHAUSTED: 429,
    grpc.StatusCode.FAILED_PRECONDITION: 400,
    grpc.StatusCode.ABORTED: 409,
    grpc.StatusCode.OUT_OF_RANGE: 400,
    grpc.StatusCode.UNIMPLEMENTED: 501,
    grpc.StatusCode.INTERNAL: 500,
    grpc.StatusCode.UNAVAILABLE: 503,
    grpc.StatusCode.DATA_LOSS: 500,
}
_BY_NUMBER = {c.value[0]: c for c in grpc.StatusCode}
MAX_MESSAGE = 1000


def from_rpc_error(exc: grpc.aio.AioRpcError) -> status_pb2.Status:
    """The status a service ended a call with: its rich status trailer when sent, else code and message."""
    for key, value in exc.trailing_metadata() or ():
        if key == "grpc-status-details-bin":
            status = status_pb2.Status.FromString(value)
            if status.code:
                return status
    return status_pb2.Status(code=exc.code().value[0], message=(exc.details() or exc.code().name)[:MAX_MESSAGE])


def to_json(status: status_pb2.Status) -> dict:
    """The status in protobuf's JSON mapping (details as typed Any objects)."""
    return json_format.MessageToDict(status)


def retry_after(status: status_pb2.Status) -> float | None:
    """The RetryInfo delay of a status, if it has one."""
    for detail in status.details:
        if detail.Is(error_details_pb2.RetryInfo.DESCRIPTOR):
            info = error_details_pb2.RetryInfo()
            detail.Unpack(info)
            return info.retry_delay.ToNanoseconds() / 1e9
    return None


def http_status(status: status_pb2.Status) -> int:
    return HTTP_STATUS.get(_BY_NUMBER.get(status.code, grpc.StatusCode.UNKNOWN), 500)


def response(status: status_pb2.Status, http: int | None = None, headers: dict[str, str] | None = None) -> Response:
    """An HTTP error response carrying ``status``."""
    out = dict(headers or {})
    delay = retry_after(status)
    if delay is not None:
        out["Retry-After"] = str(max(1, math.ceil(delay)))
    if status.code == grpc.StatusCode.UNAUTHENTICATED.value[0]:
        out.setdefault("WWW-Authenticate", 'Bearer realm="webenv"')
    body = json.dumps(to_json(status), ensure_ascii=False).encode()
    return Response(body, status_code=http or http_status(status), media_type="application/json", headers=out)


def error_response(err: errors.WebenvError, http: int | None = None) -> Response:
    return response(err.status_proto(), http)

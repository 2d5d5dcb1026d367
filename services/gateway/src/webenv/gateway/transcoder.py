"""HTTP/JSON <-> gRPC transcoding driven by the contract's descriptors and its ``google.api.http`` rules.

This is the standard mapping of ``google/api/http.proto`` (what Envoy's gRPC-JSON transcoder, grpc-gateway and
Google's own APIs implement), done in Python from the descriptors the generated stubs already load: every method
with an ``option (google.api.http)`` becomes a route; path variables (``{session_id}``, ``{task_id=**}``) fill
request fields, ``body: "*"`` parses the JSON body into the request, and every field not bound by the path or the
body is a query parameter (``?filter.split=SPLIT_TRAIN&page_size=10``, repeated fields repeated). Requests and
responses use protobuf's JSON mapping (json_format: lowerCamelCase names, enums by name, 64-bit integers as
strings, unpopulated fields emitted, as grpc-gateway does by default). Server-streaming methods answer with
newline-delimited JSON, one ``{"result": ...}`` per message and ``{"error": <google.rpc.Status>}`` if the stream
fails after it started, as grpc-gateway streams. Client- and bidi-streaming methods (StepStream, ActStream) have
no HTTP rule: their HTTP form is the WebSocket live streams of :mod:`webenv.gateway.live`.

Why in-process Python rather than Envoy or grpc-gateway: neither exists here without a Go toolchain or an Envoy
binary, both would add a hop and a process to every request, and the gateway must also see the steps that pass
through it (live streams) and serve the console: one process that owns the descriptors does all three. The
routes, the JSON names and the error form are the same ones those tools produce from the same annotations, so a
client written against either works here.
"""

from __future__ import annotations

import json
import logging
import re
import time
from collections.abc import AsyncIterator, Callable, Iterable
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qsl, unquote

import grpc
from google.api import annotations_pb2, http_pb2
from google.protobuf import descriptor, json_format, message, symbol_database
from google.protobuf.descriptor import FieldDescriptor as FD
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from webenv import errors
from webenv.gateway import metrics, status

log = logging.getLogger(__name__)

_VERBS = ("get", "put", "post", "delete", "patch")
#: Well-known message types whose JSON form is a string (usable as query parameters).
_STRING_MESSAGES = {
    "google.protobuf.Timestamp", "google.protobuf.Duration", "google.protobuf.FieldMask",
}  # fmt: skip
_WRAPPERS = {
    "google.protobuf.DoubleValue", "google.protobuf.FloatValue", "google.protobuf.Int64Value",
    "google.protobuf.UInt64Value", "google.protobuf.Int32Value", "google.protobuf.UInt32Value",
    "google.protobuf.BoolValue", "google.protobuf.StringValue", "google.protobuf.BytesValue",
}  # fmt: skip
_INTS = {FD.TYPE_INT32, FD.TYPE_INT64, FD.TYPE_UINT32, FD.TYPE_UINT64, FD.TYPE_SINT32, FD.TYPE_SINT64,
         FD.TYPE_FIXED32, FD.TYPE_FIXED64, FD.TYPE_SFIXED32, FD.TYPE_SFIXED64}


class MethodNotAllowed(errors.WebenvError):
    """The path is an API route, but not for this HTTP method (405)."""

    code = grpc.StatusCode.UNIMPLEMENTED
    default_reason = "METHOD_NOT_ALLOWED"


def to_dict(msg: message.Message) -> dict[str, Any]:
    """A message in protobuf's JSON mapping, unpopulated fields included (grpc-gateway's default)."""
    return json_format.MessageToDict(msg, always_print_fields_with_no_presence=True)


def dumps(obj: Any) -> bytes:
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":")).encode()


# -- path templates -------------------------------------------------------------------------------------------------


def _split_top(text: str, sep: str) -> list[str]:
    """Split on ``sep`` outside braces."""
    out, depth, cur = [], 0, []
    for ch in text:
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
        if ch == sep and depth == 0:
            out.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    out.append("".join(cur))
    return out


def _segments_regex(segments: list[str], variables: list[str], inside: bool = False) -> list[str]:
    parts = []
    for i, seg in enumerate(segments):
        if seg == "*":
            parts.append("[^/]+")
        elif seg == "**":
            if i != len(segments) - 1:
                raise ValueError("'**' must be the last segment")
            parts.append(".+")
        elif seg.startswith("{") and seg.endswith("}"):
            if inside:
                raise ValueError("nested variables")
            name, _, pattern = seg[1:-1].partition("=")
            if "**" in pattern.split("/") and i != len(segments) - 1:
                raise ValueError("a variable matching '**' must be the last segment")
            if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*", name):
                raise ValueError(f"bad variable {name!r}")
            variables.append(name)
            inner = _segments_regex(pattern.split("/"), variables, inside=True) if pattern else ["[^/]+"]
            parts.append("(" + "/".join(inner) + ")")
        elif seg and "{" not in seg and "}" not in seg:
            parts.append(re.escape(seg))
        else:
            raise ValueError(f"bad segment {seg!r}")
    return parts


def compile_template(template: str) -> tuple[re.Pattern[str], tuple[str, ...]]:
    """The regex of a google.api.http path template and its variables' field paths, in group order."""
    if not template.startswith("/"):
        raise ValueError(f"template {template!r} must start with '/'")
    body = template[1:]
    tail = _split_top(body, "/")[-1]
    verb = ""
    pieces = _split_top(tail, ":")
    if len(pieces) > 1:
        verb = pieces[-1]
        body = body[: len(body) - len(verb) - 1]
    variables: list[str] = []
    parts = _segments_regex(_split_top(body, "/"), variables)
    regex = "^/" + "/".join(parts) + (":" + re.escape(verb) if verb else "") + "$"
    return re.compile(regex), tuple(variables)


# -- routes -----------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Binding:
    """One HTTP binding of a method: verb, path template and where the body goes."""

    verb: str
    template: str
    regex: re.Pattern[str]
    variables: tuple[str, ...]
    body: str
    response_body: str

    @property
    def specificity(self) -> tuple[int, int]:
        """Routes with a custom verb, then more literal text, win when several templates match a path."""
        literal = re.sub(r"\{[^}]*\}", "", self.template)
        return (1 if re.search(r":[A-Za-z]+$", self.template) else 0, len(literal))


@dataclass(frozen=True)
class Route:
    """A gRPC method reachable over HTTP through one binding."""

    service: str
    method: descriptor.MethodDescriptor
    binding: Binding
    request_cls: type[message.Message]
    response_cls: type[message.Message]

    @property
    def full_method(self) -> str:
        return f"/{self.service}/{self.method.name}"

    @property
    def streaming(self) -> bool:
        return self.method.server_streaming

    @property
    def label(self) -> str:
        return f"{self.binding.verb} {self.binding.template}"


def _bindings(rule: http_pb2.HttpRule) -> Iterable[Binding]:
    kind = rule.WhichOneof("pattern")
    if kind == "custom":
        verb, template = rule.custom.kind.upper(), rule.custom.path
    elif kind in _VERBS:
        verb, template = kind.upper(), getattr(rule, kind)
    else:
        return
    regex, variables = compile_template(template)
    yield Binding(verb, template, regex, variables, rule.body, rule.response_body)
    for extra in rule.additional_bindings:
        yield from _bindings(extra)


def routes_for(services: Iterable[descriptor.ServiceDescriptor]) -> list[Route]:
    """Every (method, binding) of the services that carry google.api.http rules, most specific first."""
    db = symbol_database.Default()
    out = []
    for svc in services:
        for m in svc.methods:
            opts = m.GetOptions()
            if not opts.HasExtension(annotations_pb2.http) or m.client_streaming:
                continue
            req_cls = db.GetSymbol(m.input_type.full_name)
            resp_cls = db.GetSymbol(m.output_type.full_name)
            for b in _bindings(opts.Extensions[annotations_pb2.http]):
                for var in b.variables:
                    field_path(m.input_type, var)  # raises on a rule naming no field
                out.append(Route(svc.full_name, m, b, req_cls, resp_cls))
    out.sort(key=lambda r: r.binding.specificity, reverse=True)
    return out


# -- request fields ---------------------------------------------------------------------------------------------------


def field_path(desc: descriptor.Descriptor, path: str) -> list[descriptor.FieldDescriptor]:
    """Fields along a dotted path (proto or JSON names), or InvalidArgument naming it."""
    out = []
    for name in path.split("."):
        fd = desc.fields_by_name.get(name) or next((f for f in desc.fields if f.json_name == name), None) \
            if desc is not None else None
        if fd is None:
            raise errors.InvalidArgument(f"{path}: no such field in {out[-1].message_type.name if out else 'the request'}",
                                         reason="UNKNOWN_FIELD", metadata={"field": path})
        out.append(fd)
        desc = fd.message_type
    return out


def _scalar(fd: descriptor.FieldDescriptor, value: str, path: str) -> Any:
    """A query or path value converted to what json_format expects for the field."""
    try:
        if fd.type == FD.TYPE_BOOL:
            if value.lower() in ("true", "1"):
                return True
            if value.lower() in ("false", "0"):
                return False
            raise ValueError("expected true or false")
        if fd.type in _INTS:
            return int(value)
        if fd.type in (FD.TYPE_DOUBLE, FD.TYPE_FLOAT):
            return float(value)
        if fd.type == FD.TYPE_ENUM:
            return int(value) if value.lstrip("-").isdigit() else value
        if fd.type == FD.TYPE_MESSAGE:
            name = fd.message_type.full_name
            if name in _STRING_MESSAGES:
                return value
            if name in _WRAPPERS:
                return _scalar(fd.message_type.fields_by_name["value"], value, path)
            raise ValueError("a message field goes in the request body, not in the URL")
    except ValueError as exc:
        raise errors.InvalidArgument(f"{path}: {exc}"[:300], reason="BAD_PARAMETER", metadata={"field": path}) from exc
    return value


def _set(target: dict[str, Any], fields: list[descriptor.FieldDescriptor], values: list[str], path: str) -> None:
    node = target
    for fd in fields[:-1]:
        if fd.is_repeated:
            raise errors.InvalidArgument(f"{path}: repeated messages cannot be set from the URL",
                                         reason="BAD_PARAMETER", metadata={"field": path})
        node = node.setdefault(fd.name, {})
    leaf = fields[-1]
    if leaf.message_type is not None and leaf.message_type.GetOptions().map_entry:
        raise errors.InvalidArgument(f"{path}: map fields go in the request body", reason="BAD_PARAMETER",
                                     metadata={"field": path})
    if leaf.name in node:
        raise errors.InvalidArgument(f"{path}: given twice", reason="BAD_PARAMETER", metadata={"field": path})
    if leaf.is_repeated:
        node[leaf.name] = [_scalar(leaf, v, path) for v in values]
    elif len(values) > 1:
        raise errors.InvalidArgument(f"{path}: not a repeated field, given {len(values)} times",
                                     reason="BAD_PARAMETER", metadata={"field": path})
    else:
        node[leaf.name] = _scalar(leaf, values[0], path)


def _parse_error(exc: json_format.ParseError, where: str) -> errors.InvalidArgument:
    """json_format's error as INVALID_ARGUMENT naming the field (``filter.split``), not json_format's nesting."""
    text = str(exc)
    names = re.findall(r"Failed to parse (\w+) field", text)
    unknown = re.search(r'has no field named "(\w+)"', text)
    field = ".".join(names) if names else unknown.group(1) if unknown else where
    reason = text.rsplit(" field: ", 1)[-1] if names else text
    return errors.InvalidArgument(f"{field}: {reason}"[:500], reason="BAD_JSON", metadata={"field": field})


def build_request(route: Route, path_params: dict[str, str], query: list[tuple[str, str]],
                  body: bytes) -> message.Message:
    """The gRPC request an HTTP request maps to (INVALID_ARGUMENT naming the field when it cannot)."""
    req = route.request_cls()
    b = route.binding
    if b.body and body.strip():
        try:
            data = json.loads(body)
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise errors.InvalidArgument(f"body: not JSON: {exc}"[:300], reason="BAD_JSON",
                                         metadata={"field": "body"}) from exc
        if b.body == "*":
            if not isinstance(data, dict):
                raise errors.InvalidArgument("body: must be a JSON object", reason="BAD_JSON",
                                             metadata={"field": "body"})
        else:
            data = {b.body: data}
        try:
            json_format.ParseDict(data, req)
        except json_format.ParseError as exc:
            raise _parse_error(exc, "body") from exc
    params: dict[str, Any] = {}
    desc = route.request_cls.DESCRIPTOR
    for var in b.variables:
        _set(params, field_path(desc, var), [path_params[var]], var)
    grouped: dict[str, list[str]] = {}
    for key, value in query:
        grouped.setdefault(key, []).append(value)
    if grouped and b.body == "*":
        name = next(iter(grouped))
        raise errors.InvalidArgument(f"{name}: this method takes every field in the JSON body, not in the URL",
                                     reason="BAD_PARAMETER", metadata={"field": name})
    for key, values in grouped.items():
        fields = field_path(desc, key)
        if b.body and b.body != "*" and fields[0].name == b.body:
            raise errors.InvalidArgument(f"{key}: set in the body", reason="BAD_PARAMETER", metadata={"field": key})
        _set(params, fields, values, key)
    if params:
        extra = route.request_cls()
        try:
            json_format.ParseDict(params, extra)
        except json_format.ParseError as exc:
            raise _parse_error(exc, "query") from exc
        req.MergeFrom(extra)
    return req


# -- serving ------------------------------------------------------------------------------------------------------------


class Transcoder:
    """Matches HTTP requests to routes, calls the services, renders JSON (or a google.rpc.Status)."""

    def __init__(self, routes: list[Route], channel_for: Callable[[str], grpc.aio.Channel], *, timeout: float,
                 max_body: int, on_response: dict[str, Callable[[Any, Any], None]] | None = None) -> None:
        self.routes = routes
        self.timeout = timeout
        self.max_body = max_body
        self.on_response = on_response or {}
        self._calls: dict[str, Any] = {}
        for r in routes:
            if r.full_method in self._calls:
                continue
            ch = channel_for(r.service)
            factory = ch.unary_stream if r.streaming else ch.unary_unary
            self._calls[r.full_method] = factory(r.full_method, request_serializer=r.request_cls.SerializeToString,
                                                 response_deserializer=r.response_cls.FromString)

    def match(self, verb: str, raw_path: str) -> tuple[Route, dict[str, str]]:
        """The route for a request (NOT_FOUND / UNIMPLEMENTED for a known path with another verb)."""
        verb = "GET" if verb == "HEAD" else verb
        known = False
        for r in self.routes:
            m = r.binding.regex.match(raw_path)
            if m is None:
                continue
            if r.binding.verb != verb:
                known = True
                continue
            return r, {v: unquote(g) for v, g in zip(r.binding.variables, m.groups(), strict=True)}
        if known:
            raise MethodNotAllowed(f"{verb} is not allowed on {raw_path}"[:300])
        raise errors.NotFound(f"no API route {verb} {raw_path}"[:300], reason="NO_ROUTE", metadata={"path": raw_path[:200]})

    async def _body(self, request: Request) -> bytes:
        size = int(request.headers.get("content-length") or 0)
        if size > self.max_body:
            raise errors.ResourceExhausted(f"body: {size} bytes is over the limit of {self.max_body}",
                                           reason="BODY_TOO_LARGE", metadata={"field": "body"})
        chunks, total = [], 0
        async for chunk in request.stream():
            total += len(chunk)
            if total > self.max_body:
                raise errors.ResourceExhausted(f"body: over the limit of {self.max_body} bytes", reason="BODY_TOO_LARGE",
                                               metadata={"field": "body"})
            chunks.append(chunk)
        return b"".join(chunks)

    async def handle(self, request: Request) -> Response:
        """Serve one API request (any failure becomes a google.rpc.Status response)."""
        t0 = time.perf_counter()
        raw_path = request.scope.get("raw_path", b"").decode("latin-1").split("?", 1)[0] or request.url.path
        label = "unmatched"
        try:
            route, path_params = self.match(request.method, raw_path)
            label = route.label
            body = await self._body(request) if route.binding.body else b""
            req = build_request(route, path_params, parse_qsl(request.url.query, keep_blank_values=True), body)
            if route.streaming:
                resp = await self._stream(route, req)
            else:
                t1 = time.perf_counter()
                reply = await self._calls[route.full_method](req, timeout=self.timeout)
                upstream = time.perf_counter() - t1
                hook = self.on_response.get(route.full_method)
                if hook is not None:
                    hook(req, reply)
                payload = to_dict(getattr(reply, route.binding.response_body)) if route.binding.response_body \
                    else to_dict(reply)
                resp = Response(dumps(payload), media_type="application/json")
                metrics.TRANSCODE_SECONDS.labels(label).observe(time.perf_counter() - t0 - upstream)
        except grpc.aio.AioRpcError as exc:
            resp = status.response(status.from_rpc_error(exc))
        except errors.WebenvError as exc:
            http = 405 if isinstance(exc, MethodNotAllowed) else 413 if exc.reason == "BODY_TOO_LARGE" else None
            resp = status.error_response(exc, http)
        except Exception as exc:
            log.exception("gateway error on %s %s", request.method, raw_path)
            resp = status.error_response(errors.Internal(f"gateway error: {type(exc).__name__}: {exc}"[:300]))
        metrics.HTTP_REQUESTS.labels(label, request.method, str(resp.status_code)).inc()
        metrics.HTTP_SECONDS.labels(label).observe(time.perf_counter() - t0)
        return resp

    async def _stream(self, route: Route, req: message.Message) -> Response:
        """Newline-delimited JSON; an error before the first message is a plain error response."""
        call = self._calls[route.full_method](req)
        it = call.__aiter__()
        try:
            first = await it.__anext__()
        except StopAsyncIteration:
            first = None

        async def lines() -> AsyncIterator[bytes]:
            try:
                if first is None:
                    return
                yield dumps({"result": to_dict(first)}) + b"\n"
                async for item in it:
                    yield dumps({"result": to_dict(item)}) + b"\n"
            except grpc.aio.AioRpcError as exc:
                yield dumps({"error": status.to_json(status.from_rpc_error(exc))}) + b"\n"
            finally:
                call.cancel()

        return StreamingResponse(lines(), media_type="application/x-ndjson")

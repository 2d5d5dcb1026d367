"""The OpenAPI 3.1 document of the REST API, generated from the descriptors and their google.api.http rules.

Paths, parameters, bodies and schemas come from the same routes the transcoder serves, so the document cannot
drift from the API; descriptions are the contract's own comments (``make protos`` writes the descriptor set with
source info, ``webenv/v1/webenv.binpb``). Schemas follow protobuf's JSON mapping: lowerCamelCase names, enums as
their value names, 64-bit integers and bytes as strings, Timestamp as date-time.
"""

from __future__ import annotations

import re
from importlib import resources
from typing import Any

from google.protobuf import descriptor, descriptor_pb2
from google.protobuf.descriptor import FieldDescriptor as FD
from google.rpc import status_pb2
from webenv.gateway.transcoder import Route, field_path

_SCALARS: dict[int, dict[str, Any]] = {
    FD.TYPE_DOUBLE: {"type": "number", "format": "double"}, FD.TYPE_FLOAT: {"type": "number", "format": "float"},
    FD.TYPE_INT64: {"type": "string", "format": "int64"}, FD.TYPE_UINT64: {"type": "string", "format": "uint64"},
    FD.TYPE_SINT64: {"type": "string", "format": "int64"}, FD.TYPE_FIXED64: {"type": "string", "format": "uint64"},
    FD.TYPE_SFIXED64: {"type": "string", "format": "int64"}, FD.TYPE_INT32: {"type": "integer", "format": "int32"},
    FD.TYPE_UINT32: {"type": "integer", "format": "uint32"}, FD.TYPE_SINT32: {"type": "integer", "format": "int32"},
    FD.TYPE_FIXED32: {"type": "integer", "format": "uint32"}, FD.TYPE_SFIXED32: {"type": "integer", "format": "int32"},
    FD.TYPE_BOOL: {"type": "boolean"}, FD.TYPE_STRING: {"type": "string"},
    FD.TYPE_BYTES: {"type": "string", "format": "byte"},
}  # fmt: skip
_WELL_KNOWN: dict[str, dict[str, Any]] = {
    "google.protobuf.Timestamp": {"type": "string", "format": "date-time"},
    "google.protobuf.Duration": {"type": "string", "example": "1.5s"},
    "google.protobuf.FieldMask": {"type": "string", "description": "Comma-separated field paths (lowerCamelCase)."},
    "google.protobuf.Any": {"type": "object", "properties": {"@type": {"type": "string"}},
                            "additionalProperties": True},
    "google.protobuf.Struct": {"type": "object", "additionalProperties": True},
}


def load_comments() -> dict[str, str]:
    """Leading comments of every message, field, enum, value, service and method, by full name."""
    try:
        data = resources.files("webenv.v1").joinpath("webenv.binpb").read_bytes()
    except (FileNotFoundError, ModuleNotFoundError):
        return {}
    fds = descriptor_pb2.FileDescriptorSet.FromString(data)
    out: dict[str, str] = {}
    for f in fds.file:
        names: dict[tuple[int, ...], str] = {}

        def walk_msg(m: descriptor_pb2.DescriptorProto, path: tuple[int, ...], prefix: str,
                     names: dict[tuple[int, ...], str] = names) -> None:
            full = f"{prefix}.{m.name}"
            names[path] = full
            for i, fld in enumerate(m.field):
                names[(*path, 2, i)] = f"{full}.{fld.name}"
            for i, nested in enumerate(m.nested_type):
                walk_msg(nested, (*path, 3, i), full)
            for i, e in enumerate(m.enum_type):
                walk_enum(e, (*path, 4, i), full)

        def walk_enum(e: descriptor_pb2.EnumDescriptorProto, path: tuple[int, ...], prefix: str,
                      names: dict[tuple[int, ...], str] = names) -> None:
            names[path] = f"{prefix}.{e.name}"
            for i, v in enumerate(e.value):
                names[(*path, 2, i)] = f"{prefix}.{v.name}"

        for i, m in enumerate(f.message_type):
            walk_msg(m, (4, i), f.package)
        for i, e in enumerate(f.enum_type):
            walk_enum(e, (5, i), f.package)
        for i, s in enumerate(f.service):
            names[(6, i)] = f"{f.package}.{s.name}"
            for j, m in enumerate(s.method):
                names[(6, i, 2, j)] = f"{f.package}.{s.name}.{m.name}"
        for loc in f.source_code_info.location:
            name = names.get(tuple(loc.path))
            if name and loc.leading_comments.strip():
                out[name] = re.sub(r"\s*\n\s*", " ", loc.leading_comments.strip())
    return out


class _Schemas:
    def __init__(self, comments: dict[str, str]) -> None:
        self.comments = comments
        self.components: dict[str, Any] = {}

    def ref(self, desc: descriptor.Descriptor | descriptor.EnumDescriptor) -> dict[str, Any]:
        if isinstance(desc, descriptor.Descriptor) and desc.full_name in _WELL_KNOWN:
            return dict(_WELL_KNOWN[desc.full_name])
        name = desc.full_name
        if name not in self.components:
            self.components[name] = {}  # placeholder against recursion
            self.components[name] = self._enum(desc) if isinstance(desc, descriptor.EnumDescriptor) else self._message(desc)
        return {"$ref": f"#/components/schemas/{name}"}

    def _describe(self, schema: dict[str, Any], full_name: str) -> dict[str, Any]:
        text = self.comments.get(full_name)
        if text:
            schema["description"] = text
        return schema

    def _enum(self, desc: descriptor.EnumDescriptor) -> dict[str, Any]:
        return self._describe({"type": "string", "enum": [v.name for v in desc.values]}, desc.full_name)

    def field(self, fd: descriptor.FieldDescriptor) -> dict[str, Any]:
        if fd.message_type is not None and fd.message_type.GetOptions().map_entry:
            value = fd.message_type.fields_by_name["value"]
            schema = {"type": "object", "additionalProperties": self._single(value)}
        elif fd.is_repeated:
            schema = {"type": "array", "items": self._single(fd)}
        else:
            schema = self._single(fd)
        text = self.comments.get(fd.full_name)
        if text:
            schema = {"allOf": [schema], "description": text} if "$ref" in schema else {**schema, "description": text}
        return schema

    def _single(self, fd: descriptor.FieldDescriptor) -> dict[str, Any]:
        if fd.type == FD.TYPE_MESSAGE:
            return self.ref(fd.message_type)
        if fd.type == FD.TYPE_ENUM:
            return self.ref(fd.enum_type)
        return dict(_SCALARS[fd.type])

    def _message(self, desc: descriptor.Descriptor) -> dict[str, Any]:
        props = {fd.json_name: self.field(fd) for fd in desc.fields}
        return self._describe({"type": "object", "properties": props}, desc.full_name)


def _query_params(desc: descriptor.Descriptor, schemas: _Schemas, skip: set[str], prefix: str = "",
                  depth: int = 0) -> list[dict[str, Any]]:
    """Leaf fields reachable as query parameters (nested messages flattened with dots)."""
    out = []
    for fd in desc.fields:
        path = f"{prefix}{fd.name}"
        if path in skip:
            continue
        if fd.type == FD.TYPE_MESSAGE and fd.message_type.full_name not in _WELL_KNOWN:
            if fd.message_type.GetOptions().map_entry or fd.is_repeated or depth >= 3:
                continue
            out += _query_params(fd.message_type, schemas, skip, f"{path}.", depth + 1)
            continue
        schema = schemas.field(fd)
        param = {"name": path, "in": "query", "required": False, "schema": schema}
        if fd.is_repeated:
            param["explode"] = True
        if "description" in schema:
            param["description"] = schema["description"]
        out.append(param)
    return out


def _openapi_path(template: str) -> str:
    return re.sub(r"\{([^}=]+)(=[^}]*)?\}", r"{\1}", template)


def document(routes: list[Route], extra_paths: dict[str, Any] | None = None, version: str = "v1") -> dict[str, Any]:
    """The OpenAPI 3.1 document for ``routes`` (plus hand-described non-RPC paths such as blobs and WebSockets)."""
    comments = load_comments()
    schemas = _Schemas(comments)
    status_ref = schemas.ref(status_pb2.Status.DESCRIPTOR)
    paths: dict[str, dict[str, Any]] = {}
    seen: dict[str, int] = {}
    for r in sorted(routes, key=lambda r: (r.binding.template, r.binding.verb)):
        b = r.binding
        req = r.request_cls.DESCRIPTOR
        params = []
        for var in b.variables:
            fd = field_path(req, var)[-1]
            p = {"name": var, "in": "path", "required": True, "schema": schemas.field(fd)}
            if "**" in b.template or re.search(r"\{" + re.escape(var) + r"=[^}]*/", b.template):
                p["description"] = (p["schema"].get("description", "") + " May contain '/'.").strip()
            params.append(p)
        if not b.body:
            params += _query_params(req, schemas, set(b.variables))
        elif b.body != "*":
            params += _query_params(req, schemas, {*b.variables, b.body})
        base = f"{r.service.rsplit('.', 1)[-1]}_{r.method.name}"
        seen[base] = seen.get(base, 0) + 1
        op: dict[str, Any] = {
            "operationId": base if seen[base] == 1 else f"{base}_{seen[base]}",
            "tags": [r.service.rsplit(".", 1)[-1]],
            "summary": r.method.name,
            "parameters": params,
            "responses": {"default": {"description": "An error (google.rpc.Status).",
                                      "content": {"application/json": {"schema": status_ref}}}},
        }
        text = comments.get(f"{r.service}.{r.method.name}")
        if text:
            op["description"] = text
        if b.body:
            body_schema = schemas.ref(req) if b.body == "*" else schemas.field(field_path(req, b.body)[-1])
            op["requestBody"] = {"required": True, "content": {"application/json": {"schema": body_schema}}}
        out_schema = schemas.ref(r.response_cls.DESCRIPTOR)
        if r.streaming:
            op["responses"]["200"] = {
                "description": "A stream: one JSON object per line, {\"result\": message}, or {\"error\": status} if "
                               "the stream fails after it started.",
                "content": {"application/x-ndjson": {"schema": {"type": "object", "properties": {
                    "result": out_schema, "error": status_ref}}}}}
        else:
            op["responses"]["200"] = {"description": "OK", "content": {"application/json": {"schema": out_schema}}}
        paths.setdefault(_openapi_path(b.template), {})[b.verb.lower()] = op
    for path, ops in (extra_paths or {}).items():
        paths.setdefault(path, {}).update(ops)
    return {
        "openapi": "3.1.0",
        "info": {"title": "webenv API", "version": version,
                 "description": "The webenv.v1 gRPC contract over HTTP/JSON (google.api.http mapping, protobuf JSON "
                                "names). Errors are google.rpc.Status objects; HTTP statuses follow grpc-gateway."},
        "servers": [{"url": "/"}],
        "security": [{"bearer": []}],
        "paths": paths,
        "components": {"schemas": schemas.components,
                       "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer",
                                                      "description": "WEBENV_AUTH_TOKEN, when the gateway has one "
                                                                     "(or the webenv_token cookie the console sets)."}}},
    }


"""A seeded request fuzzer for webenv services: malformed and abusive requests over every RPC of a service.

It is a hostile client made repeatable: for each method of a ``webenv.v1`` service it sends bytes
that do not decode, and messages built from the method's request descriptor with edge values (empty, huge
strings, NUL bytes, unknown enum numbers, NaN, negative and extreme integers, deep nesting, long repeated
fields), and records the status of every call. The CI suite (``tests/test_abuse.py``) runs a few hundred of
them with a fixed seed; ``bench/abuse.py`` runs thousands and measures the memory the services keep.

A service passes when no call ends UNKNOWN or INTERNAL (a malformed request is the caller's fault), every
error message fits the bounds of :mod:`webenv.errors`, and the service is still healthy afterwards.

Every string the fuzzer invents is free of ``:``, ``/``, ``@`` and ``.``, so no field can become a URL, a
``host:port`` or a resolvable name; the only addresses it sends are the loopback ones in :data:`ADDRESSES` (the
discard port, normally closed), so fuzzing never sends traffic off the machine.
"""

from __future__ import annotations

import asyncio
import math
import random
import string
import time
from collections.abc import Iterable
from dataclasses import dataclass, field

import grpc
from google.protobuf import descriptor as _d
from google.protobuf import message as _message
from google.protobuf import message_factory
from webenv import errors
from webenv.v1 import (
    browser_pb2,
    collector_pb2,
    environment_pb2,
    judge_pb2,
    policy_pb2,
    task_pb2,
    trainer_pb2,
    worldmodel_pb2,
)

#: Addresses the fuzzer may put in string fields: loopback only (port 9 is discard, normally closed).
ADDRESSES = ("127.0.0.1:9", "[::1]:9", "http://127.0.0.1:9/", "http://[::1]:9/x?y=1")
_ALPHABET = "".join(c for c in string.ascii_letters + string.digits + " _-#=?!,;'\"<>()[]{}*+\\\t\n" if c not in ":/@.")
_F = _d.FieldDescriptor
_INTS = (0, 1, -1, 2, 7, 1000, 2**31 - 1, -(2**31), 2**63 - 1, -(2**63))
_UINTS = (0, 1, 2, 1000, 2**32 - 1, 2**64 - 1)
_FLOATS = (0.0, -0.0, 1.0, -1.0, 0.5, 1e308, -1e308, math.inf, -math.inf, math.nan, 5e-324)
_INT_TYPES = {_F.TYPE_INT32, _F.TYPE_SINT32, _F.TYPE_SFIXED32, _F.TYPE_INT64, _F.TYPE_SINT64, _F.TYPE_SFIXED64}
_UINT_TYPES = {_F.TYPE_UINT32, _F.TYPE_FIXED32, _F.TYPE_UINT64, _F.TYPE_FIXED64}
_BITS = {_F.TYPE_INT32: 32, _F.TYPE_SINT32: 32, _F.TYPE_SFIXED32: 32, _F.TYPE_UINT32: 32, _F.TYPE_FIXED32: 32}
#: The gRPC services each webenv process serves (docs/api.md), by the process name ``webenv.cli.stack`` uses.
SERVED_BY: dict[str, tuple[_d.ServiceDescriptor, ...]] = {
    "browser": (environment_pb2.DESCRIPTOR.services_by_name["EnvironmentService"],
                browser_pb2.DESCRIPTOR.services_by_name["BrowserFarmService"]),
    "sites": (task_pb2.DESCRIPTOR.services_by_name["TaskService"],),
    "policy": (policy_pb2.DESCRIPTOR.services_by_name["PolicyService"],),
    "judge": (judge_pb2.DESCRIPTOR.services_by_name["JudgeService"],),
    "collector": (collector_pb2.DESCRIPTOR.services_by_name["CollectorService"],),
    "trainer": (trainer_pb2.DESCRIPTOR.services_by_name["TrainerService"],),
    "worldmodel": (worldmodel_pb2.DESCRIPTOR.services_by_name["WorldModelService"],
                   environment_pb2.DESCRIPTOR.services_by_name["EnvironmentService"]),
}
#: Channel options for fuzzing: hostile requests and their answers may be tens of MB.
CHANNEL_OPTIONS = [("grpc.max_send_message_length", 64 << 20), ("grpc.max_receive_message_length", 64 << 20)]
#: Codes that mean a server bug for any request (a malformed request is INVALID_ARGUMENT or another domain code).
FAILING_CODES = (grpc.StatusCode.UNKNOWN, grpc.StatusCode.INTERNAL)


@dataclass
class Outcome:
    """One fuzzed call."""

    method: str  # /package.Service/Method
    kind: str  # "garbage" (undecodable bytes) or "message"
    code: grpc.StatusCode
    details: str
    seconds: float

    @property
    def failed(self) -> bool:
        """A server bug: UNKNOWN/INTERNAL, an unbounded message, or a client refusing the error's metadata."""
        return (
            self.code in FAILING_CODES
            or len(self.details.encode()) > errors.MAX_MESSAGE_BYTES
            or "metadata size" in self.details
        )


@dataclass
class Report:
    """Outcomes of a fuzz run, with counts by method and code."""

    outcomes: list[Outcome] = field(default_factory=list)

    def counts(self) -> dict[str, dict[str, int]]:
        """{method: {code name: calls}}."""
        out: dict[str, dict[str, int]] = {}
        for o in self.outcomes:
            by = out.setdefault(o.method, {})
            by[o.code.name] = by.get(o.code.name, 0) + 1
        return out

    def failures(self) -> list[Outcome]:
        return [o for o in self.outcomes if o.failed]


class Fuzzer:
    """Builds hostile requests for a method's request descriptor; every choice comes from one seeded RNG."""

    def __init__(self, seed: int, *, addresses: Iterable[str] = ADDRESSES, huge_bytes: int = 100_000) -> None:
        self.rng = random.Random(seed)
        self.addresses = tuple(addresses)
        self.huge = huge_bytes

    # -- values ---------------------------------------------------------------------------------------------------
    def text(self) -> str:
        r = self.rng.random()
        if r < 0.15:
            return ""
        if r < 0.25:
            return self.rng.choice(self.addresses)
        if r < 0.32:
            return self.rng.choice("xé€😀") * self.rng.randint(self.huge // 4, self.huge)  # huge, multi-byte
        if r < 0.40:
            return "a\x00b" + "\x00" * self.rng.randint(0, 8)
        if r < 0.46:
            return "%2e%2e%5c" * self.rng.randint(1, 50) + "\\" * self.rng.randint(0, 300)  # escapes, long names
        if r < 0.52:
            return "é\u202e\ufeff\U0001f600" * self.rng.randint(1, 64)
        return "".join(self.rng.choice(_ALPHABET) for _ in range(self.rng.randint(1, 300)))

    def scalar(self, f: _d.FieldDescriptor):
        t = f.type
        if t in _INT_TYPES:
            v = self.rng.choice(_INTS) if self.rng.random() < 0.7 else self.rng.randint(-50, 500)
            bits = _BITS.get(t, 64)
            return max(min(v, 2 ** (bits - 1) - 1), -(2 ** (bits - 1)))
        if t in _UINT_TYPES:
            v = self.rng.choice(_UINTS) if self.rng.random() < 0.7 else self.rng.randint(0, 500)
            return min(v, 2 ** _BITS.get(t, 64) - 1)
        if t in (_F.TYPE_DOUBLE, _F.TYPE_FLOAT):
            v = self.rng.choice(_FLOATS) if self.rng.random() < 0.7 else self.rng.uniform(-1e3, 1e3)
            return max(min(v, 3.4e38), -3.4e38) if t == _F.TYPE_FLOAT and math.isfinite(v) else v
        if t == _F.TYPE_BOOL:
            return self.rng.random() < 0.5
        if t == _F.TYPE_STRING:
            return self.text()
        if t == _F.TYPE_BYTES:
            return self.rng.randbytes(self.rng.choice((0, 1, 16, 4096)))
        if t == _F.TYPE_ENUM:
            known = [v.number for v in f.enum_type.values]
            return self.rng.choice([*known, *known, 999, -1, 2**31 - 1])
        raise TypeError(f"unsupported field type {t}")

    # -- messages -------------------------------------------------------------------------------------------------
    def fill(self, msg: _message.Message, depth: int = 0) -> _message.Message:
        """Set a random subset of ``msg``'s fields to hostile values (recursing ``depth`` levels at most 4)."""
        for f in msg.DESCRIPTOR.fields:
            if self.rng.random() < 0.45:
                continue
            is_map = f.message_type is not None and f.message_type.GetOptions().map_entry
            if is_map:
                key_f, val_f = f.message_type.fields_by_name["key"], f.message_type.fields_by_name["value"]
                target = getattr(msg, f.name)
                for _ in range(self.rng.choice((1, 2, 40))):
                    k = self.scalar(key_f)
                    if val_f.message_type is not None:
                        self.fill(target[k], depth + 1)
                    else:
                        target[k] = self.scalar(val_f)
            elif f.is_repeated:
                n = self.rng.choice((0, 1, 3, 300)) if depth < 2 else self.rng.choice((0, 1))
                seq = getattr(msg, f.name)
                for _ in range(n):
                    if f.message_type is not None:
                        if depth < 4:
                            self.fill(seq.add(), depth + 1)
                    else:
                        seq.append(self.scalar(f))
            elif f.message_type is not None:
                if depth < 4:
                    self.fill(getattr(msg, f.name), depth + 1)
                    if f.containing_oneof is None or self.rng.random() < 0.5:
                        getattr(msg, f.name).SetInParent()
            else:
                setattr(msg, f.name, self.scalar(f))
        return msg

    def request(self, descriptor: _d.Descriptor) -> bytes:
        """One serialized hostile request for a message type."""
        cls = message_factory.GetMessageClass(descriptor)
        return self.fill(cls()).SerializeToString()

    def garbage(self) -> bytes:
        """Bytes that do not parse as any message (a truncated varint / a bad wire type)."""
        return self.rng.choice((b"\xff\xff\xff\xff\xff", b"\x0a\xff\xff\xff\x0f", b"\x07", b"\x12\x05ab"))


def _identity(b: bytes) -> bytes:
    return b


def _details(exc: grpc.aio.AioRpcError) -> str:
    return exc.details() or ""


async def call_method(
    channel: grpc.aio.Channel, method: _d.MethodDescriptor, payloads: list[bytes], deadline: float
) -> tuple[grpc.StatusCode, str]:
    """Send ``payloads`` (one for unary requests, several for a request stream) and read every answer."""
    path = f"/{method.containing_service.full_name}/{method.name}"
    try:
        if not method.client_streaming and not method.server_streaming:
            await channel.unary_unary(path, request_serializer=_identity, response_deserializer=_identity)(
                payloads[0], timeout=deadline)
        elif not method.client_streaming:
            call = channel.unary_stream(path, request_serializer=_identity, response_deserializer=_identity)(
                payloads[0], timeout=deadline)
            async for _ in call:
                pass
        else:
            factory = channel.stream_stream if method.server_streaming else channel.stream_unary
            call = factory(path, request_serializer=_identity, response_deserializer=_identity)(
                iter(payloads), timeout=deadline)
            if method.server_streaming:
                async for _ in call:
                    pass
            else:
                await call
    except grpc.aio.AioRpcError as exc:
        return exc.code(), _details(exc)
    return grpc.StatusCode.OK, ""


async def fuzz_service(
    channel: grpc.aio.Channel,
    service: _d.ServiceDescriptor,
    fuzzer: Fuzzer,
    *,
    per_method: int = 8,
    deadline: float = 10.0,
    concurrency: int = 8,
    skip: Iterable[str] = (),
) -> Report:
    """Fuzz every method of ``service`` over ``channel``: per method one undecodable request, then ``per_method``
    hostile messages (streams get 1-4 items per call). Calls run ``concurrency`` at a time; the requests are
    built up front from the seed, so the same seed sends the same bytes whatever the timing."""
    skipped = set(skip)
    plan: list[tuple[_d.MethodDescriptor, str, list[bytes]]] = []
    for method in service.methods:
        if method.name in skipped:
            continue
        plan.append((method, "garbage", [fuzzer.garbage()]))
        for _ in range(per_method):
            items = fuzzer.rng.randint(1, 4) if method.client_streaming else 1
            plan.append((method, "message", [fuzzer.request(method.input_type) for _ in range(items)]))
    report = Report()
    sem = asyncio.Semaphore(concurrency)

    async def one(method: _d.MethodDescriptor, kind: str, payloads: list[bytes]) -> None:
        async with sem:
            t0 = time.monotonic()
            code, details = await call_method(channel, method, payloads, deadline)
            report.outcomes.append(Outcome(f"/{service.full_name}/{method.name}", kind, code, details,
                                           time.monotonic() - t0))

    await asyncio.gather(*(one(*p) for p in plan))
    return report


__all__ = ["ADDRESSES", "CHANNEL_OPTIONS", "FAILING_CODES", "SERVED_BY", "Fuzzer", "Outcome", "Report", "call_method",
           "fuzz_service"]

"""The EnvironmentService skeleton (webenv.envservice) over a tiny in-memory backend, on a real gRPC channel.

The backend counts: a session holds a number, `scroll` adds to it, `wait(ms)` sleeps, `answer` ends the episode.
Checked here is what the skeleton does for every implementation (the farm and the world model: their wire
behaviour is tests/test_environment_conformance.py): a repeated step_index is answered from cache and acted once;
bad input is INVALID_ARGUMENT naming the field; a step past its deadline is DEADLINE_EXCEEDED and counted (the
service's rule, whatever the backend did); idle sessions and ended episodes are swept EXPIRED, only the last ended states and request ids are
kept; the limit refuses more sessions; StepStream answers every item.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass

import grpc
import pytest
from webenv import errors, runtime
from webenv.actions import parse_action
from webenv.envservice import EnvironmentService, EnvSession, SessionTable
from webenv.runtime import ServiceSettings
from webenv.v1 import common_pb2, environment_pb2, environment_pb2_grpc

pytestmark = pytest.mark.timeout(60)


@dataclass
class Counter(EnvSession):
    value: int = 0

    def to_proto(self) -> environment_pb2.Session:
        return environment_pb2.Session(session_id=self.session_id, state=self.state,  # type: ignore[arg-type]
                                       step_count=self.step_count, labels=self.labels,
                                       lease_expires_at=self.lease_expires_at())


class CountingBackend:
    """The smallest EnvBackend: what an implementation writes beside the skeleton."""

    max_lease_seconds = 60.0
    max_wait_ms = 5000
    step_timeout_seconds: float | None = None

    def __init__(self, table: SessionTable[Counter]) -> None:
        self.table = table
        self.acted = 0

    def check_open(self, request: environment_pb2.OpenSessionRequest) -> None:
        pass

    def _answer(self, s: Counter) -> environment_pb2.OpenSessionResponse:
        return environment_pb2.OpenSessionResponse(session=s.to_proto(),
                                                   observation=common_pb2.Observation(markdown=str(s.value)))

    async def open(self, request: environment_pb2.OpenSessionRequest) -> environment_pb2.OpenSessionResponse:
        async with self.table.admission(1):
            s = Counter(session_id=uuid.uuid4().hex, lease_seconds=request.lease_seconds or 30.0,
                        labels=dict(request.labels))
            self.table.add(s)
        return self._answer(s)

    async def reopen(self, s: Counter) -> environment_pb2.OpenSessionResponse:
        return self._answer(s)

    async def step(self, s: Counter, request: environment_pb2.StepRequest, kind: str) -> environment_pb2.StepResponse:
        if kind == "wait":
            await asyncio.sleep(request.action.wait.milliseconds / 1000)
        self.acted += 1
        s.value += 1 if kind == "scroll" else 0
        s.done = kind == "answer"
        return environment_pb2.StepResponse(session_id=s.session_id, step_index=s.step_count, done=s.done,
                                            observation=common_pb2.Observation(markdown=str(s.value)))

    async def step_timed_out(self, s: Counter, kind: str, seconds: float) -> str:
        return "nothing was reset"

    async def fork_capture(self, parent: Counter, request: environment_pb2.ForkSessionRequest) -> int:
        return parent.value

    async def fork_copies(self, value: int, request: environment_pb2.ForkSessionRequest
                          ) -> list[environment_pb2.OpenSessionResponse]:
        copies = [Counter(session_id=uuid.uuid4().hex, lease_seconds=30.0, value=value) for _ in range(request.count)]
        for c in copies:
            self.table.add(c)
        return [self._answer(c) for c in copies]

    async def evidence(self, s: Counter) -> str:
        return f'{{"value": {s.value}}}'

    def network_trace(self, s: Counter) -> list[common_pb2.NetworkEvent]:
        return [common_pb2.NetworkEvent(method="GET", url=f"counter://{s.value}", status=200)]


@dataclass
class Served:
    stub: environment_pb2_grpc.EnvironmentServiceStub
    backend: CountingBackend


@pytest.fixture
async def served() -> AsyncIterator[Served]:
    table: SessionTable[Counter] = SessionTable(where="node test", max_sessions=4, reaper_interval_seconds=0.05,
                                                ended_kept=2, request_ids_kept=2, done_lease_seconds=0.2)
    backend = CountingBackend(table)
    settings = ServiceSettings(grpc_port=0, metrics_port=0, host="127.0.0.1", log_json=False, grace_seconds=1.0)
    services = [(environment_pb2_grpc.add_EnvironmentServiceServicer_to_server, EnvironmentService(backend),
                 "webenv.v1.EnvironmentService")]
    async def start() -> None:
        table.start()

    async with runtime.serving("envservice-test", settings, services, start=start, close=table.close) as server:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{server.port}") as channel:
            yield Served(environment_pb2_grpc.EnvironmentServiceStub(channel), backend)


async def _error(call) -> errors.WebenvError:  # type: ignore[no-untyped-def]
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await call
    return errors.from_rpc_error(info.value)


def _step(sid: str, action: str, index: int | None = None, **kw: object) -> environment_pb2.StepRequest:
    return environment_pb2.StepRequest(session_id=sid, action=parse_action(action), step_index=index, **kw)  # type: ignore[arg-type]


async def _open(s: Served, **kw: object) -> str:
    return (await s.stub.OpenSession(environment_pb2.OpenSessionRequest(start_url="http://x.test/", **kw))  # type: ignore[arg-type]
            ).session.session_id


async def test_a_repeated_step_index_is_answered_from_cache_and_acted_once(served: Served) -> None:
    sid = await _open(served)
    first = await served.stub.Step(_step(sid, "scroll(0, 10)", 0))
    again = await served.stub.Step(_step(sid, "scroll(0, 10)", 0))
    assert again == first and first.observation.markdown == "1" and served.backend.acted == 1
    err = await _error(served.stub.Step(_step(sid, "noop()", 0)))  # the same index, another action
    assert isinstance(err, errors.FailedPrecondition) and err.reason == "STEP_INDEX_MISMATCH"
    assert err.metadata["expected"] == "1"
    got = await served.stub.GetSession(environment_pb2.GetSessionRequest(session_id=sid))
    assert got.session.step_count == 1
    closed = await served.stub.CloseSession(environment_pb2.CloseSessionRequest(session_id=sid, capture_evidence=True))
    assert closed.session.state == environment_pb2.SESSION_STATE_CLOSED and closed.site_state_json == '{"value": 1}'
    assert [e.url for e in closed.network_events] == ["counter://1"]  # the backend's network trace, with the evidence


async def test_bad_input_is_invalid_argument_naming_the_field(served: Served) -> None:
    sid = await _open(served)
    bad = [
        (served.stub.Step(environment_pb2.StepRequest(session_id=sid, action=common_pb2.Action())), "action"),
        (served.stub.Step(_step("", "noop()")), "session_id"),
        (served.stub.Step(_step(sid, "noop()", timeout_seconds=-1)), "timeout_seconds"),
        (served.stub.Step(_step(sid, "wait(6000)")), "action.wait.milliseconds"),
        (served.stub.Step(_step(sid, "noop()", -1)), "step_index"),
        (served.stub.OpenSession(environment_pb2.OpenSessionRequest()), "start"),
        (served.stub.OpenSession(environment_pb2.OpenSessionRequest(start_url="http://x.test/", lease_seconds=61)),
         "lease_seconds"),
        (served.stub.RenewLease(environment_pb2.RenewLeaseRequest(session_id=sid, lease_seconds=-1)), "lease_seconds"),
        (served.stub.ForkSession(environment_pb2.ForkSessionRequest(session_id=sid, count=0)), "count"),
        (served.stub.GetSession(environment_pb2.GetSessionRequest()), "session_id"),
    ]
    for call, field in bad:
        err = await _error(call)
        assert isinstance(err, errors.InvalidArgument) and err.metadata.get("field") == field, (field, err)
    assert served.backend.acted == 0
    err = await _error(served.stub.Step(_step("nope", "noop()")))
    assert isinstance(err, errors.NotFound) and err.reason == "SESSION_NOT_FOUND" and "node test" in err.message


async def test_a_step_past_its_deadline_is_deadline_exceeded(served: Served) -> None:
    sid = await _open(served)
    t0 = time.monotonic()
    err = await _error(served.stub.Step(_step(sid, "wait(2000)", 0, timeout_seconds=0.1)))
    assert isinstance(err, errors.DeadlineExceeded) and err.reason == "STEP_TIMEOUT"
    assert err.metadata["expected"] == "1" and "nothing was reset" in err.message  # counted, whatever the backend
    assert time.monotonic() - t0 < 1.5
    err = await _error(served.stub.Step(_step(sid, "wait(2000)", 0)))  # its retry: no cached answer to give
    assert isinstance(err, errors.FailedPrecondition) and err.reason == "STEP_INDEX_MISMATCH"
    with pytest.raises(grpc.aio.AioRpcError) as info:  # the RPC's own deadline bounds the step too
        await served.stub.Step(_step(sid, "wait(2000)", 1), timeout=0.3)
    assert info.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    assert (await served.stub.Step(_step(sid, "noop()", 2))).step_index == 2  # both timed-out steps counted


async def test_idle_and_ended_sessions_are_evicted_and_memory_is_bounded(served: Served) -> None:
    s = served
    table = s.backend.table
    idle = await _open(s, lease_seconds=0.2)
    ended = await _open(s)
    done = await s.stub.Step(_step(ended, 'answer("x")', 0))
    assert done.done and await s.stub.Step(_step(ended, 'answer("x")', 0)) == done  # kept for its retry
    deadline = time.monotonic() + 5
    while {idle, ended} & set(table.sessions) and time.monotonic() < deadline:  # noqa: ASYNC110 - the sweep
        await asyncio.sleep(0.05)
    for sid in (idle, ended):
        got = await s.stub.GetSession(environment_pb2.GetSessionRequest(session_id=sid))
        assert got.session.state == environment_pb2.SESSION_STATE_EXPIRED
        err = await _error(s.stub.Step(_step(sid, "noop()")))
        assert isinstance(err, errors.FailedPrecondition) and err.reason == "SESSION_EXPIRED", err
    third = await _open(s)
    await s.stub.CloseSession(environment_pb2.CloseSessionRequest(session_id=third))
    assert len(table.ended) == 2  # the first ended one is forgotten, as one never opened
    err = await _error(s.stub.GetSession(environment_pb2.GetSessionRequest(session_id=idle)))
    assert isinstance(err, errors.NotFound) and err.reason == "SESSION_NOT_FOUND"
    # request ids: a retry answers the same session while its id is among the last 2 kept
    ids = {rid: await _open(s, request_id=rid) for rid in ("a", "b", "c")}
    assert await _open(s, request_id="c") == ids["c"] and len(table.open_requests) == 2
    # the limit (4): a fifth session is refused, after a sweep found nothing to end
    await _open(s)
    err = await _error(s.stub.OpenSession(environment_pb2.OpenSessionRequest(start_url="http://x.test/")))
    assert isinstance(err, errors.ResourceExhausted) and err.reason == "TOO_MANY_SESSIONS" and err.retry_after_seconds
    fork = await _error(s.stub.ForkSession(environment_pb2.ForkSessionRequest(session_id=ids["c"], count=1)))
    assert isinstance(fork, errors.ResourceExhausted)


async def test_fork_and_step_stream(served: Served) -> None:
    s = served
    sid = await _open(s)
    await s.stub.Step(_step(sid, "scroll(0, 1)", 0))
    forked = await s.stub.ForkSession(environment_pb2.ForkSessionRequest(session_id=sid, count=2, request_id="f"))
    again = await s.stub.ForkSession(environment_pb2.ForkSessionRequest(session_id=sid, count=2, request_id="f"))
    ids = [f.session.session_id for f in forked.sessions]
    assert [f.session.session_id for f in again.sessions] == ids and forked.sessions[0].observation.markdown == "1"

    async def items() -> AsyncIterator[environment_pb2.StepStreamRequest]:
        for tag, req in (("a", _step(ids[0], "scroll(0, 1)", 0)), ("b", _step(ids[1], "noop()", 3)),
                         ("c", _step(ids[0], "scroll(0, 1)", 0))):
            yield environment_pb2.StepStreamRequest(tag=tag, step=req)

    got = {r.tag: r async for r in s.stub.StepStream(items())}
    assert got["a"].response == got["c"].response and got["a"].response.observation.markdown == "2"
    assert got["b"].error.reason == "STEP_INDEX_MISMATCH"

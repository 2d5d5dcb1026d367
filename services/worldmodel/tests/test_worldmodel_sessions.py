"""Simulated sessions are bounded and evicted as the farm's, over a real gRPC channel to a served tiny model.

Short lifetimes here (a sweep every 0.1 s, an ended episode kept 0.3 s, 3 ended sessions and 2 request ids
remembered): a closed session, an idle one past its lease and an ended episode left unclosed are dropped (the
sweep, not a later call, drops them), acting on one says how it ended (FAILED_PRECONDITION SESSION_CLOSED /
SESSION_EXPIRED, as the farm answers) until it is forgotten (NOT_FOUND SESSION_NOT_FOUND), the open-sessions
gauge follows, and OpenSession/ForkSession retries are answered only for the last request ids kept.
"""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass

import grpc
import pytest
from webenv import errors
from webenv.actions import parse_action
from webenv.testing import scrape
from webenv.v1 import common_pb2, environment_pb2, environment_pb2_grpc
from webenv.worldmodel.simenv import SimulatedEnvironment

pytestmark = pytest.mark.timeout(120)

TASK = common_pb2.Task(task_id="evict", start_url="http://evict.web.test/",
                       metadata={"start_state": '[1] heading "Evict" level=1\n[2] button "Go"'})


@dataclass
class Served:
    stub: environment_pb2_grpc.EnvironmentServiceStub
    env: SimulatedEnvironment
    metrics_port: int


@pytest.fixture(scope="module")
async def served(tiny_model: str) -> AsyncIterator[Served]:
    from webenv.worldmodel.app import serving
    from webenv.worldmodel.config import Settings

    settings = Settings(grpc_port=0, metrics_port=0, host="127.0.0.1", worldmodel_model_path=tiny_model,
                        worldmodel_max_new_tokens=8, worldmodel_horizon=2, worldmodel_done_lease_seconds=0.3,
                        worldmodel_reaper_interval_seconds=0.1, worldmodel_ended_sessions_kept=3,
                        worldmodel_request_ids_kept=2, log_json=False, grace_seconds=1.0)
    async with serving(settings) as (server, _, env):
        async with grpc.aio.insecure_channel(f"127.0.0.1:{server.port}") as channel:
            yield Served(environment_pb2_grpc.EnvironmentServiceStub(channel), env, server.metrics_port)


async def _open(s: Served, **kw: object) -> str:
    return (await s.stub.OpenSession(environment_pb2.OpenSessionRequest(task=TASK, **kw))).session.session_id


def _step(sid: str, action: str, index: int | None = None) -> environment_pb2.StepRequest:
    return environment_pb2.StepRequest(session_id=sid, action=parse_action(action), step_index=index)


async def _error(call) -> errors.WebenvError:  # type: ignore[no-untyped-def]
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await call
    return errors.from_rpc_error(info.value)


async def _until_dropped(s: Served, sids: set[str], seconds: float = 10.0) -> None:
    """Wait until the sweep has dropped these sessions (nothing is asked of them meanwhile)."""
    deadline = time.monotonic() + seconds
    while sids & set(s.env.sessions) and time.monotonic() < deadline:  # noqa: ASYNC110 - the sweep sets no event
        await asyncio.sleep(0.05)
    assert not sids & set(s.env.sessions), "the sweep did not drop them"


def _gauge(s: Served) -> float:
    m = re.search(r"^webenv_worldmodel_simulated_sessions_open (\S+)$", scrape(s.metrics_port), re.M)
    assert m, "no open-sessions gauge"
    return float(m.group(1))


async def test_closed_idle_and_ended_sessions_are_evicted(served: Served) -> None:
    s = served
    closed, idle, answered, truncated = (await _open(s), await _open(s, lease_seconds=0.4), await _open(s),
                                         await _open(s))
    assert _gauge(s) == len(s.env.sessions) >= 4
    # closed: dropped at once, its final state kept
    await s.stub.CloseSession(environment_pb2.CloseSessionRequest(session_id=closed))
    assert closed not in s.env.sessions
    got = await s.stub.GetSession(environment_pb2.GetSessionRequest(session_id=closed))
    assert got.session.state == environment_pb2.SESSION_STATE_CLOSED
    err = await _error(s.stub.Step(_step(closed, "noop()")))
    assert isinstance(err, errors.FailedPrecondition) and err.reason == "SESSION_CLOSED", err
    # ended episodes (an answer, the horizon) stay for their last step's retry and CloseSession, then go
    done = await s.stub.Step(_step(answered, 'answer("x")', 0))
    assert done.done and (await s.stub.Step(_step(answered, 'answer("x")', 0))) == done  # the retry, from cache
    for i in range(2):
        last = await s.stub.Step(_step(truncated, "noop()", i))
    assert last.truncated
    await _until_dropped(s, {idle, answered, truncated})  # idle past its 0.4 s lease, ended ones past 0.3 s
    for sid in (idle, answered, truncated):
        got = await s.stub.GetSession(environment_pb2.GetSessionRequest(session_id=sid))
        assert got.session.state == environment_pb2.SESSION_STATE_EXPIRED
        err = await _error(s.stub.Step(_step(sid, "noop()")))
        assert isinstance(err, errors.FailedPrecondition) and err.reason == "SESSION_EXPIRED", (sid, err)
    # only the last 3 ended sessions are remembered: the first is forgotten, as one never opened
    assert len(s.env.ended) == 3
    for call in (s.stub.Step(_step(closed, "noop()")),
                 s.stub.GetSession(environment_pb2.GetSessionRequest(session_id=closed))):
        err = await _error(call)
        assert isinstance(err, errors.NotFound) and err.reason == "SESSION_NOT_FOUND", err
    assert _gauge(s) == len(s.env.sessions)
    text = scrape(s.metrics_port)
    assert 'webenv_worldmodel_simulated_sessions_closed_total{state="expired"}' in text
    assert 'webenv_worldmodel_simulated_sessions_closed_total{state="closed"}' in text


async def test_request_ids_are_bounded(served: Served) -> None:
    s = served
    first = {rid: await _open(s, request_id=rid) for rid in ("open-1", "open-2", "open-3")}
    assert await _open(s, request_id="open-3") == first["open-3"]  # kept: the same session
    assert await _open(s, request_id="open-2") == first["open-2"]
    again = await _open(s, request_id="open-1")  # forgotten (2 kept): a new session
    assert again not in first.values()
    await s.stub.CloseSession(environment_pb2.CloseSessionRequest(session_id=first["open-2"]))
    assert await _open(s, request_id="open-2") != first["open-2"]  # a kept id of an ended session opens anew
    parent = first["open-3"]

    async def fork(rid: str) -> list[str]:
        resp = await s.stub.ForkSession(environment_pb2.ForkSessionRequest(session_id=parent, count=1, request_id=rid))
        return [x.session.session_id for x in resp.sessions]

    copies = {rid: await fork(rid) for rid in ("fork-1", "fork-2", "fork-3")}
    assert await fork("fork-3") == copies["fork-3"]
    assert await fork("fork-1") != copies["fork-1"]
    assert len(s.env.table.open_requests) == len(s.env.table.fork_requests) == 2
    for sid in list(s.env.sessions):
        await s.stub.CloseSession(environment_pb2.CloseSessionRequest(session_id=sid))
    assert not s.env.sessions and _gauge(s) == 0


def test_farm_address_is_validated(tiny_model: str) -> None:
    from pydantic import ValidationError
    from webenv.worldmodel.config import Settings

    for bad in ("farm", "farm:0", "farm:port", "far m:50051"):
        with pytest.raises(ValidationError, match="worldmodel_farm_addr"):
            Settings(worldmodel_model_path=tiny_model, worldmodel_farm_addr=bad)
    assert Settings(worldmodel_model_path=tiny_model, worldmodel_farm_addr=" dns:///browser:50051 ").worldmodel_farm_addr \
        == "dns:///browser:50051"

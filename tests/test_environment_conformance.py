"""One EnvironmentService contract, two implementations: the browser farm (real Chromium) and the world model.

A client switches between real and simulated browsing by address alone, so both must answer the same requests
the same way. Every test here runs against both, over real gRPC channels on loopback: the farm drives Chromium
over a local page server (`*.web.test` mapped to it, as the synthetic web is in production), the world model
serves a tiny model trained here in seconds with a recorded start page for the same URL. Checked: malformed
actions, observation specs and starts are INVALID_ARGUMENT naming the field; a repeated step_index (step 0
included) with the same action is answered from cache and never acted twice, the same index with another
action or any other index is STEP_INDEX_MISMATCH; unknown, empty
and ended sessions get the same codes and reasons; leases are validated, renewed and expire the same way;
a step past its deadline counts on both (the sdk client's next step goes through); OpenSession is idempotent by
request_id; StepStream answers every tagged item, failures as StreamErrors, without
ending the stream; ForkSession bounds its count the same way and answers copies that start at step 0 on the parent's
page, stepped and closed apart from it.
"""

from __future__ import annotations

import asyncio
import http.server
import json
import threading
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path

import grpc
import pytest
from webenv import errors
from webenv.actions import parse_action
from webenv.client import EnvironmentClient
from webenv.v1 import common_pb2, environment_pb2, environment_pb2_grpc

pytestmark = pytest.mark.timeout(180)

HOST = "conformance.web.test"
START = f"http://{HOST}/"
PAGE = """<!doctype html><html><head><title>Conformance</title></head><body><h1>Conformance</h1>
<a href="/second" id="next">Second page</a><button id="btn">Press</button><input id="name"></body></html>"""
START_STATE = '[1] heading "Conformance" level=1\n[2] link "Second page"\n[3] button "Press"\n[4] textbox ""'
LEASE_MAX = 3600.0


class _Pages(http.server.BaseHTTPRequestHandler):
    def log_message(self, *args: object) -> None:
        return

    def do_GET(self) -> None:
        body = PAGE.encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@pytest.fixture(scope="module")
def page_server() -> Iterator[str]:
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Pages)
    srv.daemon_threads = True
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield f"127.0.0.1:{srv.server_address[1]}"
    srv.shutdown()
    srv.server_close()


@pytest.fixture(scope="module")
def tiny_world_model(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, Path]:
    """A tiny world model (trained for a few steps: its quality is not what is tested here) and a start state."""
    from webenv.worldmodel import tinyweb
    from webenv.worldmodel.dataset import join_exports, write_transitions
    from webenv.worldmodel.train import TrainConfig, train

    folder = tmp_path_factory.mktemp("conformance-wm")
    files = tinyweb.write_exports(folder / "exports")
    data = folder / "transitions.jsonl"
    write_transitions(join_exports([files["axtree"]], [files["markdown"]], json.loads(files["sites"].read_text())), data)
    res = train(TrainConfig(data=[str(data)], out=str(folder / "run"), size="tiny", vocab_size=400, batch_size=4,
                            max_steps=4, eval_every=4, warmup=1), progress=False)
    starts = folder / "starts.jsonl"
    starts.write_text(json.dumps({"url": START, "state": START_STATE, "links": {"2": "/second"}}) + "\n")
    return res.model_dir, starts


@dataclass
class Env:
    """One implementation under test."""

    kind: str
    stub: environment_pb2_grpc.EnvironmentServiceStub
    env_kind: int
    channel: grpc.aio.Channel


def _slow_waits(sim: object) -> None:
    """A simulated `wait(ms)` takes no time; here the world model's prediction of one takes as long as it asks,
    standing in for a slow model (a language model under load), so a step runs past its deadline on both backends."""
    predictor = sim.predictor  # type: ignore[attr-defined]
    predict = predictor.predict

    async def slow(query):  # type: ignore[no-untyped-def]
        if query.action_text.startswith("wait("):
            await asyncio.sleep(int(query.action_text[len("wait("):-1]) / 1000)
        return await predict(query)

    predictor.predict = slow


@pytest.fixture(scope="module", params=["browser_farm", "world_model"])
async def env(request: pytest.FixtureRequest, page_server: str, tiny_world_model: tuple[str, Path],
              chromium_path: str) -> AsyncIterator[Env]:
    if request.param == "browser_farm":
        from webenv.browser.__main__ import serving
        from webenv.browser.config import Settings

        settings = Settings(grpc_port=0, metrics_port=0, host="127.0.0.1", farm_chromium_path=chromium_path,
                            farm_sites_http_addr=page_server, farm_warm_contexts=1, farm_max_sessions=16,
                            farm_reaper_interval_seconds=0.2, farm_max_lease_seconds=LEASE_MAX, log_json=False,
                            grace_seconds=1.0)
        kind = common_pb2.ENV_KIND_BROWSER
    else:
        from webenv.worldmodel.app import serving
        from webenv.worldmodel.config import Settings

        model, starts = tiny_world_model
        settings = Settings(grpc_port=0, metrics_port=0, host="127.0.0.1", worldmodel_model_path=model,
                            worldmodel_start_states=str(starts), worldmodel_max_new_tokens=8,
                            worldmodel_max_lease_seconds=LEASE_MAX, log_json=False, grace_seconds=1.0)
        kind = common_pb2.ENV_KIND_WORLD_MODEL
    async with serving(settings) as served:
        server = served[0]
        if request.param == "world_model":
            _slow_waits(served[2])
        async with grpc.aio.insecure_channel(f"127.0.0.1:{server.port}") as channel:
            yield Env(request.param, environment_pb2_grpc.EnvironmentServiceStub(channel), kind, channel)


async def _error(call) -> errors.WebenvError:
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await call
    return errors.from_rpc_error(info.value)


async def _open(env: Env, **kw: object) -> environment_pb2.OpenSessionResponse:
    return await env.stub.OpenSession(environment_pb2.OpenSessionRequest(start_url=START, **kw))  # type: ignore[arg-type]


def _step(sid: str, action: str | common_pb2.Action, index: int | None) -> environment_pb2.StepRequest:
    act = parse_action(action) if isinstance(action, str) else action
    return environment_pb2.StepRequest(session_id=sid, action=act, step_index=index)


BAD_ACTIONS = [
    (common_pb2.Action(), "action"),
    (common_pb2.Action(click=common_pb2.ClickAction()), "action.click.target"),
    (common_pb2.Action(fill=common_pb2.FillAction(text="x")), "action.fill.target"),
    (common_pb2.Action(select=common_pb2.SelectAction(target=common_pb2.ElementTarget(element_id="3"))), "action.select.options"),
    (common_pb2.Action(press=common_pb2.PressAction(key=" ")), "action.press.key"),
    (common_pb2.Action(wait=common_pb2.WaitAction(milliseconds=-5)), "action.wait.milliseconds"),
    (common_pb2.Action(navigate=common_pb2.NavigateAction(url="")), "action.navigate.url"),
    (common_pb2.Action(click_at=common_pb2.ClickAtAction(x=-1, y=3)), "action.click_at"),
    (common_pb2.Action(switch_tab=common_pb2.SwitchTabAction(tab_id="")), "action.switch_tab.tab_id"),
]


async def test_malformed_requests_are_invalid_argument_naming_the_field(env: Env) -> None:
    opened = await _open(env)
    sid = opened.session.session_id
    assert opened.session.env_kind == env.env_kind and opened.observation.url == START
    for action, field in BAD_ACTIONS:
        err = await _error(env.stub.Step(environment_pb2.StepRequest(session_id=sid, action=action)))
        assert isinstance(err, errors.InvalidArgument), (env.kind, field, err)
        assert (err.reason, err.metadata.get("field")) == ("BAD_ACTION", field), (env.kind, err)
    # nothing was acted: the next step is still step 0
    first = await env.stub.Step(_step(sid, "scroll(0, 100)", 0))
    assert first.step_index == 0
    bad_opens = [
        (environment_pb2.OpenSessionRequest(), "BAD_START", "start"),
        (environment_pb2.OpenSessionRequest(start_url=START, observation_spec=common_pb2.ObservationSpec(formats=[99])),
         "BAD_OBSERVATION_SPEC", "observation_spec.formats"),
        (environment_pb2.OpenSessionRequest(start_url=START, observation_spec=common_pb2.ObservationSpec(
            budget_tokens=500, tokenizer="no-such-tokenizer")), "BAD_OBSERVATION_SPEC", "observation_spec.tokenizer"),
        (environment_pb2.OpenSessionRequest(start_url=START, observation_spec=common_pb2.ObservationSpec(
            budget_tokens=500, tokenizer="chars/4", budget_chars=2000)), "BAD_OBSERVATION_SPEC",
         "observation_spec.budget_tokens"),
        (environment_pb2.OpenSessionRequest(start_url=START, lease_seconds=-1), "BAD_LEASE", "lease_seconds"),
        (environment_pb2.OpenSessionRequest(start_url=START, lease_seconds=LEASE_MAX + 1), "BAD_LEASE", "lease_seconds"),
    ]
    for req, reason, field in bad_opens:
        err = await _error(env.stub.OpenSession(req))
        assert isinstance(err, errors.InvalidArgument) and (err.reason, err.metadata.get("field")) == (reason, field), (env.kind, err)
    err = await _error(env.stub.Step(environment_pb2.StepRequest(session_id=sid, action=parse_action("noop()"),
                                                                 timeout_seconds=-1)))
    assert isinstance(err, errors.InvalidArgument) and err.metadata.get("field") == "timeout_seconds"
    err = await _error(env.stub.Step(_step(sid, "noop()", -1)))
    assert isinstance(err, errors.InvalidArgument) and (err.reason, err.metadata.get("field")) == ("BAD_STEP_INDEX", "step_index")
    await env.stub.CloseSession(environment_pb2.CloseSessionRequest(session_id=sid))


async def test_repeated_step_index_is_answered_from_cache_step_zero_included(env: Env) -> None:
    sid = (await _open(env)).session.session_id
    r0 = await env.stub.Step(_step(sid, "scroll(0, 100)", 0))
    assert r0.step_index == 0
    again = await env.stub.Step(_step(sid, "scroll(0, 100)", 0))  # a retry: the cached answer, not a second action
    assert again == r0
    assert (await env.stub.GetSession(environment_pb2.GetSessionRequest(session_id=sid))).session.step_count == 1
    # the same index with another action is no retry
    err = await _error(env.stub.Step(_step(sid, "wait(10)", 0)))
    assert isinstance(err, errors.FailedPrecondition) and err.reason == "STEP_INDEX_MISMATCH", (env.kind, err)
    assert err.metadata.get("expected") == "1" and "another action" in err.message
    r1 = await env.stub.Step(_step(sid, "noop()", 1))
    assert r1.step_index == 1 and await env.stub.Step(_step(sid, "noop()", 1)) == r1
    for stale in (0, 5):  # behind the last answered step / ahead of the next one
        err = await _error(env.stub.Step(_step(sid, "noop()", stale)))
        assert isinstance(err, errors.FailedPrecondition), (env.kind, err)
        assert err.reason == "STEP_INDEX_MISMATCH" and err.metadata.get("expected") == "2", (env.kind, err)
    unchecked = await env.stub.Step(_step(sid, "noop()", None))  # unset: no check
    assert unchecked.step_index == 2
    again = await env.stub.Step(_step(sid, "noop()", None))  # the same action unset again is a new step, not a retry
    assert again.step_index == 3
    await env.stub.CloseSession(environment_pb2.CloseSessionRequest(session_id=sid))


async def test_a_step_past_its_deadline_counts_on_both(env: Env) -> None:
    """One rule (the sdk's EnvironmentService): a timed-out step counts, on the farm (whose hung renderer may have
    acted) and the world model (whose page did not change) alike, so the sdk client's next step goes through."""
    async with EnvironmentClient(env.channel) as client:
        sid = (await client.open(start_url=START)).session.session_id
        assert (await client.step(sid, "noop()")).step_index == 0
        t0 = time.monotonic()
        with pytest.raises(errors.DeadlineExceeded) as info:
            await client.step(sid, "wait(3000)", timeout_seconds=0.3)
        assert time.monotonic() - t0 < 2.5, env.kind
        assert (info.value.reason, info.value.metadata.get("expected")) == ("STEP_TIMEOUT", "2"), (env.kind, info.value)
        err = await _error(env.stub.Step(_step(sid, "wait(3000)", 1)))  # its retry: nothing cached, not the step before
        assert isinstance(err, errors.FailedPrecondition) and err.reason == "STEP_INDEX_MISMATCH", (env.kind, err)
        assert (await client.step(sid, "noop()")).step_index == 2, env.kind
        assert (await client.get(sid)).step_count == 3, env.kind
        await client.close(sid)


async def test_unknown_empty_and_ended_sessions(env: Env) -> None:
    calls = {
        "Step": lambda sid: env.stub.Step(_step(sid, "noop()", None)),
        "GetSession": lambda sid: env.stub.GetSession(environment_pb2.GetSessionRequest(session_id=sid)),
        "CloseSession": lambda sid: env.stub.CloseSession(environment_pb2.CloseSessionRequest(session_id=sid)),
        "RenewLease": lambda sid: env.stub.RenewLease(environment_pb2.RenewLeaseRequest(session_id=sid)),
        "ForkSession": lambda sid: env.stub.ForkSession(environment_pb2.ForkSessionRequest(session_id=sid, count=1)),
    }
    for name, call in calls.items():
        err = await _error(call("no-such-session"))
        assert isinstance(err, errors.NotFound) and err.reason == "SESSION_NOT_FOUND", (env.kind, name, err)
        err = await _error(call(""))
        assert isinstance(err, errors.InvalidArgument) and err.metadata.get("field") == "session_id", (env.kind, name, err)
    sid = (await _open(env)).session.session_id
    closed = await env.stub.CloseSession(environment_pb2.CloseSessionRequest(session_id=sid))
    assert closed.session.state == environment_pb2.SESSION_STATE_CLOSED
    got = await env.stub.GetSession(environment_pb2.GetSessionRequest(session_id=sid))
    assert got.session.state == environment_pb2.SESSION_STATE_CLOSED and got.session.env_kind == env.env_kind
    for name in ("Step", "CloseSession", "RenewLease", "ForkSession"):
        err = await _error(calls[name](sid))
        assert isinstance(err, errors.FailedPrecondition) and err.reason == "SESSION_CLOSED", (env.kind, name, err)


async def test_fork_session(env: Env) -> None:
    sid = (await _open(env)).session.session_id
    await env.stub.Step(_step(sid, "noop()", 0))
    for bad in (0, 33):
        err = await _error(env.stub.ForkSession(environment_pb2.ForkSessionRequest(session_id=sid, count=bad)))
        assert isinstance(err, errors.InvalidArgument) and (err.reason, err.metadata.get("field")) == ("BAD_COUNT", "count")
    forked = await env.stub.ForkSession(environment_pb2.ForkSessionRequest(session_id=sid, count=2, labels={"k": "v"}))
    ids = [f.session.session_id for f in forked.sessions]
    assert len(set(ids)) == 2 and sid not in ids, env.kind
    for f in forked.sessions:
        assert f.session.step_count == 0 and f.session.env_kind == env.env_kind and f.session.labels["k"] == "v"
        assert f.observation.url == START, (env.kind, f.observation.url)
    assert (await env.stub.Step(_step(ids[0], "noop()", 0))).step_index == 0
    assert (await env.stub.Step(_step(sid, "noop()", 1))).step_index == 1
    for x in [*ids, sid]:
        await env.stub.CloseSession(environment_pb2.CloseSessionRequest(session_id=x))


async def test_leases_are_validated_renewed_and_expire(env: Env) -> None:
    opened = await _open(env, lease_seconds=30)
    sid = opened.session.session_id
    left = opened.session.lease_expires_at.ToDatetime().timestamp() - time.time()
    assert 25 < left <= 31, (env.kind, left)
    renewed = await env.stub.RenewLease(environment_pb2.RenewLeaseRequest(session_id=sid, lease_seconds=600))
    left = renewed.session.lease_expires_at.ToDatetime().timestamp() - time.time()
    assert 590 < left <= 601, (env.kind, left)
    for bad in (-1, LEASE_MAX + 1):
        err = await _error(env.stub.RenewLease(environment_pb2.RenewLeaseRequest(session_id=sid, lease_seconds=bad)))
        assert isinstance(err, errors.InvalidArgument) and (err.reason, err.metadata.get("field")) == ("BAD_LEASE", "lease_seconds")
    await env.stub.CloseSession(environment_pb2.CloseSessionRequest(session_id=sid))
    # an idle session past its lease is reclaimed: EXPIRED, and acting on it says so
    short = (await _open(env, lease_seconds=1)).session.session_id
    deadline = time.monotonic() + 15
    state = None
    while time.monotonic() < deadline:
        await asyncio.sleep(0.3)
        state = (await env.stub.GetSession(environment_pb2.GetSessionRequest(session_id=short))).session.state
        if state == environment_pb2.SESSION_STATE_EXPIRED:
            break
    assert state == environment_pb2.SESSION_STATE_EXPIRED, env.kind
    err = await _error(env.stub.Step(_step(short, "noop()", 0)))
    assert isinstance(err, errors.FailedPrecondition) and err.reason == "SESSION_EXPIRED", (env.kind, err)


async def test_open_is_idempotent_by_request_id(env: Env) -> None:
    a = await _open(env, request_id="conformance-open-1")
    b = await _open(env, request_id="conformance-open-1")
    c = await _open(env, request_id="conformance-open-2")
    assert a.session.session_id == b.session.session_id != c.session.session_id
    for sid in {a.session.session_id, c.session.session_id}:
        await env.stub.CloseSession(environment_pb2.CloseSessionRequest(session_id=sid))


async def test_step_stream_answers_every_item_in_completion_order(env: Env) -> None:
    s1 = (await _open(env)).session.session_id
    s2 = (await _open(env)).session.session_id
    items = [
        ("ok-1", _step(s1, "scroll(0, 50)", 0)),
        ("bad-action", environment_pb2.StepRequest(session_id=s2, action=common_pb2.Action(), step_index=0)),
        ("unknown", _step("no-such-session", "noop()", 0)),
        ("ok-2", _step(s2, "noop()", 0)),
        ("retry-1", _step(s1, "scroll(0, 50)", 0)),  # the same step again, concurrently: one action, one answer
        ("mismatch", _step(s2, "noop()", 7)),
    ]

    async def requests() -> AsyncIterator[environment_pb2.StepStreamRequest]:
        for tag, req in items:
            yield environment_pb2.StepStreamRequest(tag=tag, step=req)

    got = {r.tag: r async for r in env.stub.StepStream(requests())}
    assert set(got) == {tag for tag, _ in items}, env.kind
    assert got["ok-1"].WhichOneof("result") == "response" and got["ok-2"].response.session_id == s2
    assert got["retry-1"].response == got["ok-1"].response
    expect = {"bad-action": (grpc.StatusCode.INVALID_ARGUMENT, "BAD_ACTION"),
              "unknown": (grpc.StatusCode.NOT_FOUND, "SESSION_NOT_FOUND"),
              "mismatch": (grpc.StatusCode.FAILED_PRECONDITION, "STEP_INDEX_MISMATCH")}
    for tag, (code, reason) in expect.items():
        err = got[tag].error
        assert (err.code, err.reason) == (code.value[0], reason), (env.kind, tag, err)
    for sid in (s1, s2):
        assert (await env.stub.GetSession(environment_pb2.GetSessionRequest(session_id=sid))).session.step_count == 1
        await env.stub.CloseSession(environment_pb2.CloseSessionRequest(session_id=sid))

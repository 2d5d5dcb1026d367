"""WorldModelService and the simulated EnvironmentService over a real gRPC channel with a tiny model."""

from __future__ import annotations

import asyncio
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from webenv import errors, tokens
from webenv.actions import parse_action
from webenv.testing import scrape
from webenv.v1 import common_pb2, environment_pb2, environment_pb2_grpc, worldmodel_pb2, worldmodel_pb2_grpc
from webenv.worldmodel.dataset import read_transitions
from webenv.worldmodel.formats import Format, convert


async def _expect(code: grpc.StatusCode, call, reason: str | None = None) -> errors.WebenvError:
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await call
    assert info.value.code() == code, info.value.details()
    err = errors.from_rpc_error(info.value)
    if reason:
        assert err.reason == reason
    return err


async def test_health_serving(wm_channel: grpc.aio.Channel) -> None:
    health = health_pb2_grpc.HealthStub(wm_channel)
    for service in ("", "webenv.v1.WorldModelService", "webenv.v1.EnvironmentService"):
        resp = await health.Check(health_pb2.HealthCheckRequest(service=service))
        assert resp.status == health_pb2.HealthCheckResponse.SERVING


def _held_out(transitions_file: Path, action: str):
    return next(r for r in read_transitions([transitions_file]) if r.split == "test" and r.action_text == action)


async def test_predict_and_model_info(wm_channel: grpc.aio.Channel, transitions_file: Path) -> None:
    stub = worldmodel_pb2_grpc.WorldModelServiceStub(wm_channel)
    info = await stub.GetModelInfo(worldmodel_pb2.GetModelInfoRequest())
    assert info.backend == "transformers" and info.parameters > 0
    assert list(info.formats) == [worldmodel_pb2.STATE_FORMAT_AXTREE]
    # a product link on the held-out site: its href (given as links) says where it goes; the page is composed
    r = _held_out(transitions_file, "click(12)")
    req = worldmodel_pb2.PredictRequest(format=worldmodel_pb2.STATE_FORMAT_AXTREE, state=r.state, url=r.url, links=r.links,
                                        action=parse_action(r.action_text), instruction=r.instruction,
                                        history=[worldmodel_pb2.Transition(url=r.url, action_text="noop()")])
    resp = await stub.Predict(req)
    assert (resp.next_url, resp.next_state, dict(resp.next_links)) == (r.next_url, r.next_state, r.next_links)
    assert resp.navigated and not resp.fallback and resp.edit == "" and resp.latency_seconds >= 0
    # typing on the held-out site: an edit of this page
    r = _held_out(transitions_file, 'fill(3, "Jade")')
    resp = await stub.Predict(worldmodel_pb2.PredictRequest(format=worldmodel_pb2.STATE_FORMAT_AXTREE, state=r.state,
                                                            url=r.url, action=parse_action(r.action_text)))
    assert resp.next_state == r.next_state and not resp.navigated and resp.next_url == r.url
    # XML requests are served by the axtree model through the lossless conversion
    xml = convert(r.state, Format.AXTREE, Format.XML)
    resp = await stub.Predict(worldmodel_pb2.PredictRequest(format=worldmodel_pb2.STATE_FORMAT_XML, state=xml, url=r.url,
                                                            action=parse_action("noop()"), max_new_tokens=16))
    assert resp.next_state.startswith("<page>")
    text = scrape(wm_channel.metrics_port)  # type: ignore[attr-defined]
    assert 'webenv_worldmodel_predictions_total{source="compose"}' in text
    assert 'webenv_worldmodel_decisions_total{decided_by="rule"}' in text  # the noop; who decided each step, by part
    assert "webenv_worldmodel_predict_seconds_bucket" in text


async def test_predict_bad_inputs(wm_channel: grpc.aio.Channel) -> None:
    stub = worldmodel_pb2_grpc.WorldModelServiceStub(wm_channel)
    ok = dict(state='[1] link "A"', url="http://a.web.test/", action=parse_action("click(1)"))
    await _expect(grpc.StatusCode.INVALID_ARGUMENT, stub.Predict(worldmodel_pb2.PredictRequest(**ok)), "FORMAT_UNSPECIFIED")
    await _expect(grpc.StatusCode.INVALID_ARGUMENT, stub.Predict(worldmodel_pb2.PredictRequest(format=42, **ok)), "UNKNOWN_FORMAT")
    err = await _expect(grpc.StatusCode.INVALID_ARGUMENT,
                        stub.Predict(worldmodel_pb2.PredictRequest(format=worldmodel_pb2.STATE_FORMAT_HTML, **ok)),
                        "FORMAT_NOT_SUPPORTED")
    assert "html" in err.message
    big = dict(ok, state="x" * 20_001)
    err = await _expect(grpc.StatusCode.INVALID_ARGUMENT,
                        stub.Predict(worldmodel_pb2.PredictRequest(format=worldmodel_pb2.STATE_FORMAT_AXTREE, **big)),
                        "STATE_TOO_LARGE")
    assert "20001 characters" in err.message and err.metadata["field"] == "state"
    err = await _expect(grpc.StatusCode.INVALID_ARGUMENT,
                        stub.Predict(worldmodel_pb2.PredictRequest(format=worldmodel_pb2.STATE_FORMAT_AXTREE, state="x")),
                        "BAD_ACTION")
    assert err.metadata["field"] == "action"
    await _expect(grpc.StatusCode.INVALID_ARGUMENT,
                  stub.Predict(worldmodel_pb2.PredictRequest(format=worldmodel_pb2.STATE_FORMAT_XML, **ok)),
                  "STATE_MALFORMED")


async def test_a_budget_in_tokens_holds_on_the_world_model_too(wm_channel: grpc.aio.Channel,
                                                                transitions_file: Path) -> None:
    """The sdk's one budget rule on the world model's AXTREE and MARKDOWN, in all-MiniLM-L6-v2 tokens."""
    env = environment_pb2_grpc.EnvironmentServiceStub(wm_channel)
    ep = [r for r in read_transitions([transitions_file]) if r.episode_id == "shop-0001.web.test-search"]
    spec = common_pb2.ObservationSpec(formats=[common_pb2.OBSERVATION_FORMAT_AXTREE, common_pb2.OBSERVATION_FORMAT_MARKDOWN],
                                      budget_tokens=150, tokenizer=tokens.MINILM)
    opened = await env.OpenSession(environment_pb2.OpenSessionRequest(start_url=ep[0].url, observation_spec=spec))
    count = tokens.counter(tokens.MINILM)
    obs = opened.observation
    assert count(ep[0].state) > 150 and obs.budget.full_tokens == count(ep[0].state)  # the page is over: cut
    assert count(obs.axtree) == obs.budget.kept_tokens <= 150 and obs.budget.tokenizer == tokens.MINILM
    assert count(obs.markdown) <= 150 and not obs.elements
    step = await env.Step(environment_pb2.StepRequest(session_id=opened.session.session_id,
                                                      action=parse_action(ep[0].action_text), step_index=0))
    assert count(step.observation.axtree) <= 150 and count(step.observation.markdown) <= 150  # the session's budget
    await env.CloseSession(environment_pb2.CloseSessionRequest(session_id=opened.session.session_id))


async def test_simulated_episode_on_a_held_out_site(wm_channel: grpc.aio.Channel, transitions_file: Path) -> None:
    """The search episode of the held-out site, simulated: typing, a form submission, a result, back again."""
    env = environment_pb2_grpc.EnvironmentServiceStub(wm_channel)
    ep = [r for r in read_transitions([transitions_file]) if r.episode_id == "shop-0001.web.test-search"]
    spec = common_pb2.ObservationSpec(formats=[common_pb2.OBSERVATION_FORMAT_AXTREE, common_pb2.OBSERVATION_FORMAT_MARKDOWN])
    opened = await env.OpenSession(environment_pb2.OpenSessionRequest(
        request_id="req-1", start_url=ep[0].url, observation_spec=spec, labels={"run": "t"}))
    s = opened.session
    assert s.env_kind == common_pb2.ENV_KIND_WORLD_MODEL and s.state == environment_pb2.SESSION_STATE_OPEN
    assert opened.observation.axtree == ep[0].state and "[6:Products](/products)" in opened.observation.markdown
    again = await env.OpenSession(environment_pb2.OpenSessionRequest(request_id="req-1", start_url=ep[0].url))
    assert again.session.session_id == s.session_id  # AIP-155 idempotency
    for i, r in enumerate(ep[:4]):  # the model's own predictions fed back, as in a rollout
        step = await env.Step(environment_pb2.StepRequest(session_id=s.session_id, action=parse_action(r.action_text),
                                                          step_index=i))
        assert (step.observation.url, step.observation.axtree) == (r.next_url, r.next_state), r.action_text
        assert step.step_index == i and step.timings.total_seconds > 0 and step.truncated == (i == 3)  # horizon 4
    got = await env.GetSession(environment_pb2.GetSessionRequest(session_id=s.session_id))
    assert got.session.step_count == 4 and got.session.labels["run"] == "t"
    renewed = await env.RenewLease(environment_pb2.RenewLeaseRequest(session_id=s.session_id, lease_seconds=600))
    assert renewed.session.lease_expires_at.seconds >= got.session.lease_expires_at.seconds + 290
    await _expect(grpc.StatusCode.FAILED_PRECONDITION,
                  env.Step(environment_pb2.StepRequest(session_id=s.session_id, action=parse_action("noop()"))),
                  "EPISODE_DONE")
    closed = await env.CloseSession(environment_pb2.CloseSessionRequest(session_id=s.session_id, capture_evidence=True))
    assert closed.session.state == environment_pb2.SESSION_STATE_CLOSED and '"simulated": true' in closed.site_state_json


async def test_incremental_observations_of_a_simulated_episode(wm_channel: grpc.aio.Channel,
                                                              transitions_file: Path) -> None:
    """ObservationSpec.incremental holds for the world model as for the farm (the sdk's EnvironmentService encodes,
    its EnvironmentClient rebuilds): each step's rebuilt tree is the model's prediction, sent as edits."""
    from webenv.client import EnvironmentClient, observation_spec

    ep = [r for r in read_transitions([transitions_file]) if r.episode_id == "shop-0001.web.test-search"]
    async with EnvironmentClient(wm_channel) as env:
        opened = await env.open(start_url=ep[0].url, spec=observation_spec(("axtree",), incremental=True))
        sid = opened.session.session_id
        assert opened.observation.axtree == ep[0].state and not opened.observation.HasField("delta")
        deltas = 0
        for i, r in enumerate(ep[:4]):
            step = await env.step(sid, r.action_text)
            assert (step.observation.url, step.observation.axtree) == (r.next_url, r.next_state), r.action_text
            if step.observation.HasField("delta"):
                assert step.observation.delta.base_step == i - 1
                deltas += 1
        await env.close(sid)
    assert deltas >= 1  # typing into the search box changes a line or two of the page


async def test_fork_copies_a_simulated_session(wm_channel: grpc.aio.Channel, transitions_file: Path) -> None:
    """A fork predicts exactly as its parent would (page, memory and action history copied), steps on its own from
    step 0 and is truncated where the parent would be."""
    env = environment_pb2_grpc.EnvironmentServiceStub(wm_channel)
    ep = [r for r in read_transitions([transitions_file]) if r.episode_id == "shop-0001.web.test-search"]
    sid = (await env.OpenSession(environment_pb2.OpenSessionRequest(start_url=ep[0].url, labels={"run": "f"}))).session.session_id
    for i, r in enumerate(ep[:2]):
        await env.Step(environment_pb2.StepRequest(session_id=sid, action=parse_action(r.action_text), step_index=i))
    forked = await env.ForkSession(environment_pb2.ForkSessionRequest(session_id=sid, count=2, request_id="fork-1",
                                                                      labels={"branch": "b"}))
    assert len(forked.sessions) == 2 and forked.fork_seconds >= 0
    again = await env.ForkSession(environment_pb2.ForkSessionRequest(session_id=sid, count=2, request_id="fork-1"))
    assert [x.session.session_id for x in again.sessions] == [x.session.session_id for x in forked.sessions]
    for f in forked.sessions:
        assert f.session.step_count == 0 and f.session.labels == {"run": "f", "branch": "b"}
        assert (f.observation.url, f.observation.axtree) == (ep[1].next_url, ep[1].next_state)
    a, b = (x.session.session_id for x in forked.sessions)
    step = await env.Step(environment_pb2.StepRequest(session_id=a, action=parse_action(ep[2].action_text), step_index=0))
    assert (step.observation.url, step.observation.axtree) == (ep[2].next_url, ep[2].next_state)
    assert not step.truncated
    step = await env.Step(environment_pb2.StepRequest(session_id=a, action=parse_action("noop()"), step_index=1))
    assert step.truncated  # the parent's horizon (4) less its 2 steps
    assert (await env.GetSession(environment_pb2.GetSessionRequest(session_id=sid))).session.step_count == 2
    assert (await env.GetSession(environment_pb2.GetSessionRequest(session_id=b))).session.step_count == 0
    step = await env.Step(environment_pb2.StepRequest(session_id=sid, action=parse_action(ep[2].action_text), step_index=2))
    assert step.observation.axtree == ep[2].next_state
    await env.CloseSession(environment_pb2.CloseSessionRequest(session_id=b))
    await _expect(grpc.StatusCode.NOT_FOUND, env.ForkSession(environment_pb2.ForkSessionRequest(session_id="nope", count=1)),
                  "SESSION_NOT_FOUND")
    err = await _expect(grpc.StatusCode.INVALID_ARGUMENT,
                        env.ForkSession(environment_pb2.ForkSessionRequest(session_id=sid, count=33)), "BAD_COUNT")
    assert err.metadata["field"] == "count"
    await _expect(grpc.StatusCode.FAILED_PRECONDITION,
                  env.ForkSession(environment_pb2.ForkSessionRequest(session_id=b, count=1)), "SESSION_CLOSED")


async def test_horizon_truncates_and_provided_start_state(wm_channel: grpc.aio.Channel) -> None:
    env = environment_pb2_grpc.EnvironmentServiceStub(wm_channel)
    task = common_pb2.Task(task_id="t1", instruction="Find it", start_url="http://new-0001.web.test/",
                           metadata={"start_state": '[1] heading "New" level=1\n[2] link "Go"'})
    s = (await env.OpenSession(environment_pb2.OpenSessionRequest(task=task))).session
    assert s.task_id == "t1"
    results = []
    for _ in range(4):  # horizon is 4 in the fixture
        results.append(await env.Step(environment_pb2.StepRequest(session_id=s.session_id, action=parse_action("noop()"))))
    assert [r.truncated for r in results] == [False, False, False, True]
    s = (await env.OpenSession(environment_pb2.OpenSessionRequest(task=task))).session
    done = await env.Step(environment_pb2.StepRequest(session_id=s.session_id, action=parse_action('answer("x")'), step_index=0))
    assert done.done and not done.truncated


async def test_step_stream(wm_channel: grpc.aio.Channel) -> None:
    env = environment_pb2_grpc.EnvironmentServiceStub(wm_channel)
    task = common_pb2.Task(start_url="http://s.web.test/", metadata={"start_state": '[1] heading "S" level=1\n[2] button "B"'})
    ids = [(await env.OpenSession(environment_pb2.OpenSessionRequest(task=task))).session.session_id for _ in range(3)]

    async def requests():
        for i, sid in enumerate(ids):
            yield environment_pb2.StepStreamRequest(tag=f"t{i}", step=environment_pb2.StepRequest(
                session_id=sid, action=parse_action("click(1)"), step_index=0))
        yield environment_pb2.StepStreamRequest(tag="bad", step=environment_pb2.StepRequest(
            session_id="nope", action=parse_action("click(1)")))
        yield environment_pb2.StepStreamRequest(tag="noaction", step=environment_pb2.StepRequest(session_id=ids[0]))

    got = {r.tag: r async for r in env.StepStream(requests())}
    assert set(got) == {"t0", "t1", "t2", "bad", "noaction"}
    assert all(got[f"t{i}"].response.session_id == ids[i] for i in range(3))
    assert got["bad"].error.code == grpc.StatusCode.NOT_FOUND.value[0] and got["bad"].error.reason == "SESSION_NOT_FOUND"
    assert got["noaction"].error.reason == "BAD_ACTION"


async def test_environment_bad_inputs(wm_channel: grpc.aio.Channel) -> None:
    env = environment_pb2_grpc.EnvironmentServiceStub(wm_channel)
    await _expect(grpc.StatusCode.NOT_FOUND, env.GetSession(environment_pb2.GetSessionRequest(session_id="nope")), "SESSION_NOT_FOUND")
    await _expect(grpc.StatusCode.NOT_FOUND, env.Step(environment_pb2.StepRequest(session_id="nope", action=parse_action("noop()"))),
                  "SESSION_NOT_FOUND")
    # no recorded start page and no browser farm to take it from: the field and the way out are named
    err = await _expect(grpc.StatusCode.FAILED_PRECONDITION,
                        env.OpenSession(environment_pb2.OpenSessionRequest(start_url="http://unknown.web.test/")),
                        "START_STATE_UNKNOWN")
    assert err.metadata["field"] == "start_url" and "WEBENV_WORLDMODEL_FARM_ADDR" in err.message
    err = await _expect(grpc.StatusCode.FAILED_PRECONDITION, env.OpenSession(environment_pb2.OpenSessionRequest(
        task=common_pb2.Task(task_id="miniwob/click-test", start_url="http://miniwob.web.test/miniwob/click-test.html"))),
        "START_STATE_UNKNOWN")
    assert err.metadata["field"] == "task.start_url"
    # a task given by id alone, with no task catalog (WEBENV_WORLDMODEL_SITES_ADDR) to resolve it: the whole task is asked for
    err = await _expect(grpc.StatusCode.INVALID_ARGUMENT, env.OpenSession(environment_pb2.OpenSessionRequest(
        task=common_pb2.Task(task_id="synthetic/shop-0001/t1"))), "BAD_TASK")
    assert err.metadata["field"] == "task" and "whole task" in err.message
    await _expect(grpc.StatusCode.INVALID_ARGUMENT, env.OpenSession(environment_pb2.OpenSessionRequest()), "BAD_START")
    spec = common_pb2.ObservationSpec(formats=[common_pb2.OBSERVATION_FORMAT_SCREENSHOT])
    err = await _expect(grpc.StatusCode.INVALID_ARGUMENT,
                        env.OpenSession(environment_pb2.OpenSessionRequest(start_url="http://x/", observation_spec=spec)),
                        "FORMAT_NOT_SUPPORTED")
    assert "OBSERVATION_FORMAT_SCREENSHOT" in err.message
    await _expect(grpc.StatusCode.NOT_FOUND, env.CloseSession(environment_pb2.CloseSessionRequest(session_id="nope")))
    await _expect(grpc.StatusCode.NOT_FOUND, env.RenewLease(environment_pb2.RenewLeaseRequest(session_id="nope")))


async def test_unsimulable_formats_are_left_out_not_refused(wm_channel: grpc.aio.Channel) -> None:
    """A collector's farm spec (AXTREE + HTML) works against the world model by address alone."""
    env = environment_pb2_grpc.EnvironmentServiceStub(wm_channel)
    task = common_pb2.Task(task_id="t2", start_url="http://new-0002.web.test/",
                           metadata={"start_state": '[1] heading "New" level=1\n[2] link "Go"'})
    spec = common_pb2.ObservationSpec(formats=[common_pb2.OBSERVATION_FORMAT_AXTREE, common_pb2.OBSERVATION_FORMAT_HTML])
    opened = await env.OpenSession(environment_pb2.OpenSessionRequest(task=task, observation_spec=spec))
    assert list(opened.observation.formats) == [common_pb2.OBSERVATION_FORMAT_AXTREE]
    assert opened.observation.axtree.startswith("[1] heading") and opened.observation.html == ""
    step = await env.Step(environment_pb2.StepRequest(session_id=opened.session.session_id,
                                                      action=parse_action("noop()")))
    assert list(step.observation.formats) == [common_pb2.OBSERVATION_FORMAT_AXTREE]


async def test_concurrent_predictions_share_the_backend(wm_channel: grpc.aio.Channel) -> None:
    stub = worldmodel_pb2_grpc.WorldModelServiceStub(wm_channel)
    req = worldmodel_pb2.PredictRequest(format=worldmodel_pb2.STATE_FORMAT_AXTREE, state='[1] button "A"',
                                        url="http://zzz-0001.web.test/", action=parse_action("click(1)"), max_new_tokens=8)
    resps = await asyncio.gather(*(stub.Predict(req) for _ in range(6)))
    assert len({r.next_state for r in resps}) == 1  # greedy decoding is deterministic


async def test_fuzzed_requests_get_clean_errors(wm_channel: grpc.aio.Channel) -> None:
    """The seeded abuse fuzz over both services the world model serves: no UNKNOWN/INTERNAL, bounded messages,
    undecodable bytes INVALID_ARGUMENT, and the server still SERVING afterwards."""
    from webenv import fuzz

    fuzzer = fuzz.Fuzzer(18)
    outcomes = []
    for service in fuzz.SERVED_BY["worldmodel"]:
        outcomes += (await fuzz.fuzz_service(wm_channel, service, fuzzer, per_method=5, deadline=60)).outcomes
    assert len({o.method for o in outcomes}) == 9
    assert not [o for o in outcomes if o.failed], [(o.method, o.code, o.details[:200]) for o in outcomes if o.failed]
    assert all(o.code == grpc.StatusCode.INVALID_ARGUMENT for o in outcomes if o.kind == "garbage")
    resp = await health_pb2_grpc.HealthStub(wm_channel).Check(health_pb2.HealthCheckRequest())
    assert resp.status == health_pb2.HealthCheckResponse.SERVING

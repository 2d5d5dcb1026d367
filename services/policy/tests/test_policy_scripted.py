"""oracle, random and explore over a real gRPC channel: Act, ActStream, ListPolicies, bad requests."""

from __future__ import annotations

import asyncio
import random

import grpc
import pytest
from webenv import errors
from webenv.actions import parse_action
from webenv.agent.observe import select_options
from webenv.policy.synthetic import random_observation, request
from webenv.v1 import common_pb2, policy_pb2

FILL_ROLES = {"textbox", "searchbox", "spinbutton", "combobox"}


def check_valid(obs: common_pb2.Observation, action: common_pb2.Action, step_index: int) -> None:
    """The invariants the random and explore policies promise for every action."""
    kind = action.WhichOneof("kind")
    assert kind in {"click", "fill", "select", "hover", "press", "scroll", "go_back", "navigate"}, kind
    by_id = {el.element_id: el for el in obs.elements}
    if kind in ("click", "fill", "select", "hover") or (kind == "press" and action.press.HasField("target")):
        target = getattr(action, kind).target
        assert target.WhichOneof("ref") == "element_id"
        el = by_id.get(target.element_id)
        assert el is not None, f"{kind} targets id {target.element_id} not in the observation"
        assert el.visible and not el.disabled, f"{kind} on a hidden or disabled element {el}"
        if kind == "fill":
            assert el.tag == "textarea" or (el.tag == "input" and el.role in FILL_ROLES) or \
                (el.tag == "div" and el.role == "textbox"), f"fill on a non-fillable {el.tag}/{el.role}"
        if kind == "select":
            assert el.tag == "select"
            assert set(action.select.options) <= set(select_options(obs, el.element_id))
        if kind == "press":
            assert el.tag in ("input", "textarea", "select", "div")
    if kind == "go_back":
        assert step_index > 0, "go_back on the first step"
    if kind == "navigate":
        assert action.navigate.url.startswith(("http://", "https://"))


async def test_list_policies(serve_policy, policy_stub):
    async with serve_policy(policy_default="explore") as (server, _), policy_stub(server) as stub:
        resp = await stub.ListPolicies(policy_pb2.ListPoliciesRequest())
    names = {p.name: p for p in resp.policies}
    assert set(names) == {"oracle", "random", "explore"}  # no model configured: no llm policy
    assert resp.default_policy == "explore"
    assert all(p.description and p.backend == "none" for p in resp.policies)
    # The oracle says which tasks it can act on, so collectors leave the others out of its runs.
    assert names["oracle"].needs_solution and not names["random"].needs_solution
    assert "miniwob/click-test" in names["oracle"].solved_task_ids
    assert not names["explore"].solved_task_ids


@pytest.mark.parametrize("policy", ["random", "explore"])
async def test_never_invalid_and_reproducible(serve_policy, policy_stub, policy):
    """Hundreds of generated pages: every action valid; the same seed gives the same actions."""
    rng = random.Random(7)
    pages = [random_observation(rng, with_axtree=i % 5 != 0) for i in range(150)]
    async with serve_policy() as (server, _), policy_stub(server) as stub:
        async def episode(ep: str, seed: int) -> list[str]:
            texts = []
            for step, obs in enumerate(pages):
                resp = await stub.Act(request(obs, policy=policy, episode_id=ep, step_index=step, seed=seed))
                check_valid(obs, resp.action, step)
                assert resp.policy == policy and resp.episode_id == ep
                assert parse_action(resp.action_text) == resp.action
                texts.append(resp.action_text)
            return texts

        first, again, other = await asyncio.gather(episode("a", 11), episode("b", 11), episode("c", 12))
    assert first == again
    assert first != other
    kinds = {t.split("(")[0] for t in first}
    assert {"click", "scroll"} <= kinds and ("fill" in kinds or "select" in kinds)


async def test_random_uses_axtree_when_no_elements(serve_policy, policy_stub):
    obs = common_pb2.Observation(url="http://x.web.test/", axtree='[3] link "Home"\n[4] heading "Hi"\n[7] textbox "Email"')
    async with serve_policy(policy_random_mix="click=1,fill=1") as (server, _), policy_stub(server) as stub:
        seen = set()
        for seed in range(1, 30):
            resp = await stub.Act(request(obs, policy="random", seed=seed))
            seen.add(resp.action_text.split(",")[0])
    assert seen <= {"click(3)", "click(7)", "fill(7"}
    assert "fill(7" in seen


async def test_explore_prefers_novelty_and_fills_forms(serve_policy, policy_stub):
    form = common_pb2.Observation(url="http://shop.web.test/login")
    form.elements.add(element_id="1", tag="input", role="textbox", name="Email", visible=True, clickable=True)
    form.elements.add(element_id="2", tag="input", role="textbox", name="Password", visible=True, clickable=True)
    form.elements.add(element_id="3", tag="button", role="button", name="Sign in", visible=True, clickable=True)
    form.elements.add(element_id="4", tag="a", role="link", name="Home", href="/", visible=True, clickable=True)
    async with serve_policy() as (server, _), policy_stub(server) as stub:
        actions = []
        for step in range(4):
            resp = await stub.Act(request(form, policy="explore", episode_id="e", step_index=step, seed=3))
            actions.append(resp.action)
            assert resp.memory.startswith("objective:")
    assert actions[0].fill.target.element_id == "1" and "@" in actions[0].fill.text
    assert actions[1].fill.target.element_id == "2"
    assert actions[2].click.target.element_id == "3"  # submit once the fields are filled
    assert actions[3].click.target.element_id == "4"  # then the link to an unseen page


async def test_oracle_follows_task_solution(serve_policy, policy_stub):
    task = common_pb2.Task(task_id="synthetic/shop-0001/t9", source=common_pb2.TASK_SOURCE_SYNTHETIC)
    task.oracle.add().CopyFrom(parse_action('fill("#q", "laptop")'))
    task.oracle.add().CopyFrom(parse_action('click("#search")'))
    task.oracle.add().CopyFrom(parse_action('answer("$499")'))
    async with serve_policy() as (server, _), policy_stub(server) as stub:
        texts = [(await stub.Act(policy_pb2.ActRequest(episode_id="o", policy="oracle", task=task,
                                                        step_index=i))).action_text for i in range(5)]
    assert texts == ['fill("#q", "laptop")', 'click("#search")', 'answer("$499")', 'answer("$499")',
                     'answer("$499")']


async def test_oracle_retries_an_action_that_failed_on_the_page(serve_policy, policy_stub):
    task = common_pb2.Task(task_id="synthetic/shop-0001/t3", source=common_pb2.TASK_SOURCE_SYNTHETIC)
    for text in ['click("#modal-close")', 'click("#buy")', 'answer("done")']:
        task.oracle.add().CopyFrom(parse_action(text))
    failed = common_pb2.Observation(url="http://shop-0001.web.test/", last_action_error="context destroyed")
    ok = common_pb2.Observation(url="http://shop-0001.web.test/")
    pages = [ok, failed, ok, failed, failed, failed, ok]
    async with serve_policy() as (server, _), policy_stub(server) as stub:
        texts = [(await stub.Act(policy_pb2.ActRequest(episode_id="r", policy="oracle", task=task, observation=obs,
                                                        step_index=i))).action_text for i, obs in enumerate(pages)]
        again = await stub.Act(policy_pb2.ActRequest(episode_id="r", policy="oracle", task=task, observation=ok,
                                                     step_index=6))
    assert texts == ['click("#modal-close")', 'click("#modal-close")', 'click("#buy")', 'click("#buy")',
                     'click("#buy")', 'answer("done")', 'answer("done")']  # two retries at most, then on
    assert again.action_text == texts[6]  # the same step asked twice gets the same answer


async def test_oracle_miniwob_scripts(serve_policy, policy_stub):
    task = common_pb2.Task(task_id="miniwob/enter-text", source=common_pb2.TASK_SOURCE_MINIWOB,
                           metadata={"miniwob_task": "enter-text"})
    obs = common_pb2.Observation(url="http://localhost/miniwob/enter-text.html")
    obs.elements.add(element_id="5", tag="input", role="textbox", visible=True, clickable=True)
    obs.elements.add(element_id="6", tag="button", role="button", name="Submit", visible=True, clickable=True)
    utterance = 'Enter "Kasie" into the text field and press Submit.'
    async with serve_policy() as (server, _), policy_stub(server) as stub:
        first = await stub.Act(policy_pb2.ActRequest(episode_id="m", policy="oracle", task=task, observation=obs,
                                                     instruction=utterance))
        obs.elements[0].value = "Kasie"
        second = await stub.Act(policy_pb2.ActRequest(episode_id="m", policy="oracle", task=task, observation=obs,
                                                      instruction=utterance, step_index=1))
        task.metadata["miniwob_task"] = "click-test"
        obs.elements[1].name = "Click Me!"
        third = await stub.Act(policy_pb2.ActRequest(episode_id="n", policy="oracle", task=task, observation=obs))
    # enter-text is counted (an AXTREE observation need not show the field's value): fill the page's own field, then
    # submit it, by the task page's selectors
    assert first.action_text == 'fill("#tt", "Kasie")'
    assert second.action_text == 'click("#subbtn")'
    assert third.action_text == "click(6)"


async def test_act_stream_multiplexes_and_reports_item_errors(serve_policy, policy_stub):
    rng = random.Random(1)
    async with serve_policy() as (server, _), policy_stub(server) as stub:
        items = []
        for i in range(20):
            items.append(policy_pb2.ActStreamRequest(
                tag=f"t{i}", request=request(random_observation(rng), policy="random" if i % 2 else "explore",
                                             episode_id=f"ep{i % 4}", step_index=i // 4, seed=5)))
        items.append(policy_pb2.ActStreamRequest(tag="bad-policy", request=policy_pb2.ActRequest(policy="nope")))
        items.append(policy_pb2.ActStreamRequest(tag="no-obs", request=policy_pb2.ActRequest(policy="random")))
        items.append(policy_pb2.ActStreamRequest(tag="no-task", request=policy_pb2.ActRequest(policy="oracle")))
        items.append(policy_pb2.ActStreamRequest(tag="no-request"))

        async def gen():
            for item in items:
                yield item

        answers = {r.tag: r async for r in stub.ActStream(gen())}
    assert set(answers) == {i.tag for i in items}
    for i in range(20):
        assert answers[f"t{i}"].WhichOneof("result") == "response"
    expect = {"bad-policy": "UNKNOWN_POLICY", "no-obs": "MISSING_OBSERVATION", "no-task": "MISSING_TASK",
              "no-request": "MISSING_REQUEST"}
    for tag, reason in expect.items():
        err = answers[tag].error
        assert err.code == grpc.StatusCode.INVALID_ARGUMENT.value[0] and err.reason == reason, (tag, err)
        assert err.message


@pytest.mark.parametrize(
    ("req", "reason", "words"),
    [
        (policy_pb2.ActRequest(policy="foo"), "UNKNOWN_POLICY", "foo"),
        (policy_pb2.ActRequest(policy="llm"), "UNKNOWN_POLICY", "WEBENV_POLICY_MODEL_PATH"),
        (policy_pb2.ActRequest(policy="random"), "MISSING_OBSERVATION", "observation"),
        (policy_pb2.ActRequest(policy="explore"), "MISSING_OBSERVATION", "observation"),
        (policy_pb2.ActRequest(policy="oracle"), "MISSING_TASK", "task"),
        (policy_pb2.ActRequest(policy="oracle", task=common_pb2.Task(task_id="t")), "NO_ORACLE_SOLUTION", "t"),
        (policy_pb2.ActRequest(policy="oracle", task=common_pb2.Task(
            task_id="m", source=common_pb2.TASK_SOURCE_MINIWOB, metadata={"miniwob_task": "book-flight"})),
         "NO_ORACLE_SOLUTION", "book-flight"),
        (policy_pb2.ActRequest(policy="oracle", task=common_pb2.Task(task_id="e", oracle=[common_pb2.Action()])),
         "BAD_ORACLE_ACTION", "task.oracle[0]"),
        (policy_pb2.ActRequest(policy="random", step_index=-1, observation=common_pb2.Observation()),
         "BAD_STEP_INDEX", "step_index"),
    ],
)
async def test_bad_requests_are_invalid_argument(serve_policy, policy_stub, req, reason, words):
    async with serve_policy() as (server, _), policy_stub(server) as stub:
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await stub.Act(req)
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert words in info.value.details()
    err = errors.from_rpc_error(info.value)
    assert err.reason == reason


async def test_metrics_exported(serve_policy, policy_stub, scrape):
    async with serve_policy() as (server, _), policy_stub(server) as stub:
        obs = random_observation(random.Random(2), n=10)
        await stub.Act(request(obs, policy="random", seed=1))
        text = scrape(server.metrics_port)
    assert 'webenv_policy_acts_total{policy="random"}' in text
    assert "webenv_policy_act_seconds_bucket" in text
    assert "grpc_server_handled_total" in text

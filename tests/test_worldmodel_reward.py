"""The reward of a simulated episode is computed against the simulated pages, over real channels.

A world-model EnvironmentService (the model scripted: each action's next page fixed here, with the values a model
predicting by analogy would show, not the real site's) and a real judge service: an answer read correctly off
the simulated page passes, a wrong one fails, and the same trajectory from a browser is graded by the real facts;
a transaction the agent submitted on the right record's page passes from the simulated site state (the forms it
submitted, carried by CloseSession's evidence), a wrong quantity or another record's page fails, and a fork goes
on with a copy of the state.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import dataclass

import grpc
import pytest
from webenv import runtime
from webenv.actions import parse_action
from webenv.envservice import EnvironmentService
from webenv.judge.config import Settings as JudgeSettings
from webenv.judge.engine import Judge
from webenv.judge.servicer import JudgeServicer
from webenv.runtime import ServiceSettings
from webenv.v1 import common_pb2, environment_pb2, environment_pb2_grpc, judge_pb2, judge_pb2_grpc
from webenv.worldmodel.compose import PageView
from webenv.worldmodel.predict import Prediction, Query
from webenv.worldmodel.simenv import SimulatedEnvironment

pytestmark = pytest.mark.timeout(60)

URL = "http://air-0003.web.test/"
ITEM = URL + "flights/F7"
OTHER = URL + "flights/F8"
HOME = ('[1] main ""\n\t[2] heading "Flights" level=1\n\t[3] link "Koi Xenon 12"\n\tStaticText "from $233"\n'
        '\t[4] link "Haven Zephyr 9"\n\tStaticText "from $41"')
#: The item's page as the model predicts it: the right labels, values re-bound from another website's page.
FLIGHT = ('[1] main ""\n\t[2] heading "{title}" level=1\n\t[3] term "Departure"\n\t[4] definition "19:05"\n'
          '\t[5] term "Duration"\n\t[6] definition "2h 10m"\n\t[7] spinbutton "Seats"\n\t[8] checkbox "Window seat" '
          'checked=false\n\t[9] button "Book"\n\t[10] link "Home"')
SCRIPT = {(URL, "click(3)"): (ITEM, FLIGHT.format(title="Koi Xenon 12"), True),
          (URL, "click(4)"): (OTHER, FLIGHT.format(title="Haven Zephyr 9"), True)}


class Scripted:
    """A stand-in for the world model: SCRIPT's next page, else the page kept (an edit)."""

    async def predict(self, q: Query) -> Prediction:
        url, state, nav = SCRIPT.get((q.page.url, q.action_text), (q.page.url, q.page.state, False))
        return Prediction(PageView(url, state), "compose" if nav else "edit", navigated=nav)


@dataclass
class Stack:
    env: environment_pb2_grpc.EnvironmentServiceStub
    judge: judge_pb2_grpc.JudgeServiceStub


@pytest.fixture(scope="module")
async def stack() -> AsyncIterator[Stack]:
    sim = SimulatedEnvironment(Scripted(), {URL: (PageView(URL, HOME), "")}, horizon=20)  # type: ignore[arg-type]
    settings = ServiceSettings(grpc_port=0, metrics_port=0, host="127.0.0.1", log_json=False, grace_seconds=1.0)
    env_services = [(environment_pb2_grpc.add_EnvironmentServiceServicer_to_server, EnvironmentService(sim),
                     "webenv.v1.EnvironmentService")]
    judge_settings = JudgeSettings(host="127.0.0.1", grpc_port=0, metrics_port=0, log_json=False)
    judge_services = [(judge_pb2_grpc.add_JudgeServiceServicer_to_server, JudgeServicer(Judge()),
                       "webenv.v1.JudgeService")]
    async with runtime.serving("worldmodel", settings, env_services) as env_server, \
            runtime.serving("judge", judge_settings, judge_services) as judge_server, \
            grpc.aio.insecure_channel(f"127.0.0.1:{env_server.port}") as env_ch, \
            grpc.aio.insecure_channel(f"127.0.0.1:{judge_server.port}") as judge_ch:
        yield Stack(environment_pb2_grpc.EnvironmentServiceStub(env_ch), judge_pb2_grpc.JudgeServiceStub(judge_ch))


def fact(description: str, criterion: common_pb2.Criterion) -> common_pb2.Task:
    task = common_pb2.Task(task_id="synthetic/air-0003/t", instruction="do it", start_url=URL)
    task.rubric.rubric_id, task.rubric.version = task.task_id, 1
    task.rubric.groups.add(group_id="g", description="the fact").facts.add(
        fact_id="g.0", description=description, criterion=criterion)
    return task


async def episode(stack: Stack, actions: list[str], fork_at: int | None = None) -> common_pb2.Trajectory:
    """Run ``actions`` in a simulated session (the last one ends it) and close it with its evidence; with
    ``fork_at``, the actions from there run in a fork of the session."""
    opened = await stack.env.OpenSession(environment_pb2.OpenSessionRequest(start_url=URL))
    sid, obs = opened.session.session_id, opened.observation
    traj = common_pb2.Trajectory(episode_id=sid, env_kind=opened.session.env_kind)
    i = 0
    for n, text in enumerate(actions):
        if n == fork_at:
            fork = await stack.env.ForkSession(environment_pb2.ForkSessionRequest(session_id=sid, count=1))
            sid, i = fork.sessions[0].session.session_id, 0
        action = parse_action(text)
        traj.steps.add(step_index=n, observation=obs, action=action, action_text=text)
        resp = await stack.env.Step(environment_pb2.StepRequest(session_id=sid, action=action, step_index=i))
        obs, i = resp.observation, i + 1
        if action.WhichOneof("kind") == "answer":
            traj.final_answer = action.answer.text
    traj.final_observation.CopyFrom(obs)
    closed = await stack.env.CloseSession(environment_pb2.CloseSessionRequest(session_id=sid, capture_evidence=True))
    traj.site_state_json = closed.site_state_json
    return traj


async def verdict(stack: Stack, task: common_pb2.Task, traj: common_pb2.Trajectory) -> common_pb2.Verdict:
    return (await stack.judge.Evaluate(judge_pb2.EvaluateRequest(task=task, trajectory=traj))).verdict


DEPARTURE = fact("The answer gives the departure of Koi Xenon 12: 21:30",
                 common_pb2.Criterion(answer=common_pb2.AnswerCriterion(mode=common_pb2.MATCH_MODE_CONTAINS,
                                                                        expected="21:30")))


async def test_an_answer_is_graded_against_the_simulated_page(stack: Stack) -> None:
    read = await episode(stack, ["click(3)", 'answer("departure: 19:05")'])
    assert read.env_kind == common_pb2.ENV_KIND_WORLD_MODEL
    v = await verdict(stack, DEPARTURE, read)
    assert v.passed, v
    assert "simulated: the pages show Departure: '19:05'" in v.results[0].reason
    wrong = await episode(stack, ["click(3)", 'answer("departure: 2h 10m")'])
    assert not (await verdict(stack, DEPARTURE, wrong)).passed
    # another flight's page shows the same labels: its departure is not this flight's
    elsewhere = await episode(stack, ["click(4)", 'answer("departure: 19:05")'])
    assert not (await verdict(stack, DEPARTURE, elsewhere)).passed
    unseen = await episode(stack, ['answer("departure: 19:05")'])  # never opened the flight
    miss = await verdict(stack, DEPARTURE, unseen)
    assert not miss.passed and "no page the agent saw shows this fact" in miss.results[0].reason
    # the very same trajectory from a real browser is graded by the real facts
    real = common_pb2.Trajectory()
    real.CopyFrom(read)
    real.env_kind = common_pb2.ENV_KIND_BROWSER
    assert not (await verdict(stack, DEPARTURE, real)).passed


async def test_a_transaction_is_graded_against_the_simulated_site_state(stack: Stack) -> None:
    seats = fact("The booking for F7 has seats = 2", common_pb2.Criterion(site_state=common_pb2.SiteStateCriterion(
        path='$.bookings[?(@.flight=="F7")].seats', op=common_pb2.COMPARISON_EQ, value_json="2")))
    window = fact("The booking for F7 has window = True", common_pb2.Criterion(site_state=common_pb2.SiteStateCriterion(
        path='$.bookings[?(@.flight=="F7")].window', op=common_pb2.COMPARISON_EQ, value_json="true")))
    booked = await episode(stack, ["click(3)", 'fill(7, "2")', "click(8)", "click(9)", 'answer("done")'])
    state = json.loads(booked.site_state_json)
    assert state["simulated"] and state["submissions"] == [
        {"url": ITEM, "heading": "Koi Xenon 12", "button": "Book", "fields": {"Seats": "2", "Window seat": "true"}}]
    v = await verdict(stack, seats, booked)
    assert v.passed and "submitted Seats = '2'" in v.results[0].reason, v
    assert (await verdict(stack, window, booked)).passed
    three = await episode(stack, ["click(3)", 'fill(7, "3")', "click(9)", 'answer("done")'])
    assert not (await verdict(stack, seats, three)).passed
    assert not (await verdict(stack, window, three)).passed  # the box was never ticked
    unsent = await episode(stack, ["click(3)", 'fill(7, "2")', 'answer("done")'])  # filled, never submitted
    assert not (await verdict(stack, seats, unsent)).passed
    other = await episode(stack, ["click(4)", 'fill(7, "2")', "click(9)", 'answer("done")'])  # another flight
    failed = await verdict(stack, seats, other)
    assert not failed.passed and "on a page naming F7" in failed.results[0].reason
    # a fork carries the fields set before it and submits on its own
    forked = await episode(stack, ["click(3)", 'fill(7, "2")', "click(9)", 'answer("done")'], fork_at=2)
    assert (await verdict(stack, seats, forked)).passed

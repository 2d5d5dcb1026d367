"""Observation budgets (issue 52): ObservationSpec.budget_chars is met on every hand-made page of the farm's tests and
on an ~8,000-element page, by pruning as agent harnesses do (long lists collapsed with counts, interactive nodes in
view first), with the answer a task asks for still readable and Observation.budget saying what was cut."""

from __future__ import annotations

import pytest
from webenv import errors
from webenv.v1 import common_pb2 as pb

pytestmark = pytest.mark.timeout(300)


def spec(budget: int) -> pb.ObservationSpec:
    return pb.ObservationSpec(formats=[pb.OBSERVATION_FORMAT_AXTREE], budget_chars=budget)


async def test_the_budget_holds_on_every_hand_made_page(env, page_server):
    o = await env.open(start_url=page_server.url("basic"), spec=spec(600))
    sid = o.session.session_id
    assert len(o.observation.axtree) <= 600
    for name in page_server.names:
        r = await env.step(sid, f'goto("{page_server.url(name)}")')  # the session's spec: its budget
        obs = r.observation
        assert len(obs.axtree) <= 600, name
        assert not obs.elements and pb.OBSERVATION_FORMAT_ELEMENTS not in obs.formats  # only read for visibility
        if obs.HasField("budget"):
            assert obs.budget.budget_chars == 600 and obs.budget.kept_chars == len(obs.axtree) <= 600, name
            assert obs.budget.full_chars > 600 and "budget_chars=0" in obs.axtree and obs.budget.how_to_get_more
    await env.close(sid)


async def test_a_big_page_within_budget_keeps_the_answer_and_says_what_was_cut(env, page_server):
    full = await env.open(start_url=page_server.url("big"), spec=pb.ObservationSpec(
        formats=[pb.OBSERVATION_FORMAT_AXTREE]))
    assert not full.observation.HasField("budget")
    whole = len(full.observation.axtree)
    await env.close(full.session.session_id)
    o = await env.open(start_url=page_server.url("big"), spec=spec(4000), request_id="big-budget")
    again = await env.open(start_url=page_server.url("big"), spec=spec(4000), request_id="big-budget")
    assert again.session.session_id == o.session.session_id  # the same open: its page within the same budget
    assert len(again.observation.axtree) <= 4000 and not again.observation.elements
    obs = o.observation
    tree = obs.axtree
    assert whole > 100_000 and len(tree) <= 4000  # the whole tree: cut at the farm's cap, 200,000
    assert whole / len(tree) >= 25
    assert "Order 4417 ships on 12 March." in tree  # the answer, after 1,500 rows
    assert 'searchbox "Find an order"' in tree  # interactive and in view
    assert "more row cut ([" in tree and "more link cut" in tree  # the table and the menu, collapsed with counts
    assert obs.budget.full_chars > whole and obs.budget.items_collapsed >= 1490 and obs.budget.kept_chars == len(tree)
    # a step asking for the whole tree gets it; a budget too small to say anything is refused, naming the field
    r = await env.step(o.session.session_id, "noop()", spec=pb.ObservationSpec(formats=[pb.OBSERVATION_FORMAT_AXTREE]))
    assert len(r.observation.axtree) == whole and not r.observation.HasField("budget")
    with pytest.raises(errors.InvalidArgument) as exc:
        await env.step(o.session.session_id, "noop()", spec=spec(50))
    assert "observation_spec.budget_chars" in str(exc.value)
    await env.close(o.session.session_id)

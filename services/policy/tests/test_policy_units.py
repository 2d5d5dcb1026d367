"""Pure pieces: output parsing, episode-state eviction, observation reading, prompt rendering."""

from __future__ import annotations

import random

from webenv.agent.observe import absolute_url, candidates, page_kind
from webenv.agent.prompt import build_prompt
from webenv.policy.parse import parse_output
from webenv.policy.state import EpisodeStore
from webenv.policy.synthetic import random_observation, request
from webenv.v1 import common_pb2


def test_parse_memory_prompt_answer():
    p = parse_output("Memory: cart has 2 items\nmore detail\nProgress: found it\nIntention: pay\n"
                     'Action: `fill(3, "a (b)")`')
    assert not p.failed and p.memory == "cart has 2 items\nmore detail" and p.intention == "pay"
    assert p.action.fill.target.element_id == "3" and p.action.fill.text == "a (b)"


def test_parse_tolerates_markdown_and_free_text():
    assert parse_output("**Action:** click(12)").action.click.target.element_id == "12"
    assert parse_output("I think I should click(4) now.").action.click.target.element_id == "4"
    assert parse_output('Action: I will answer("42") now').action.answer.text == "42"


def test_parse_failures_are_flagged_noops():
    for raw in ["", "no idea", "Action: teleport(3)", 'Action: click("unterminated']:
        p = parse_output(raw)
        assert p.failed and p.error and p.action.WhichOneof("kind") == "noop", raw


def test_episode_store_evicts_by_count_and_idle_time():
    now = [0.0]
    store = EpisodeStore(dict, max_episodes=2, ttl_seconds=10, clock=lambda: now[0])
    store.get("a")["x"] = 1
    store.get("b")
    store.get("a")  # a is now the most recent
    store.get("c")  # evicts b
    assert "a" in store and "c" in store and "b" not in store
    assert store.get("a") == {"x": 1}
    now[0] = 100.0
    store.get("d")  # a and c idle for too long
    assert len(store) == 1 and "d" in store


def test_candidates_from_axtree_and_urls():
    obs = common_pb2.Observation(axtree='[1] link "Home"\n[2] heading "Top"\n[3] textbox "Q" disabled\n[4] button "Go"')
    assert [c.element_id for c in candidates(obs)] == ["1", "4"]
    assert absolute_url("http://a.test/x/y", "../z#frag") == "http://a.test/z"
    assert absolute_url("http://a.test/", "javascript:void(0)") is None
    assert page_kind("http://a.test/product/123") == page_kind("http://a.test/product/77")


def test_prompt_truncates_and_falls_back():
    obs = random_observation(random.Random(1), n=40)
    obs.axtree = "x" * 5000
    prompt = build_prompt(request(obs, policy="llm"), "do it", fmt="html", history_window=3, max_chars=500)
    assert "Observation (axtree)" in prompt.user and "(truncated)" in prompt.user
    assert len(prompt.user) < 1200


def test_answer_regex_allows_only_this_pages_ids():
    import re

    from webenv.policy.constrain import answer_regex

    obs = common_pb2.Observation(url="http://a.web.test/")
    obs.elements.add(element_id="7", tag="button", role="button", name="Buy", visible=True, clickable=True)
    obs.elements.add(element_id="9", tag="input", role="textbox", name="Q", visible=True, clickable=True)
    obs.elements.add(element_id="11", tag="a", role="link", name="Hidden", visible=False, clickable=True)
    pattern = re.compile(answer_regex(obs))
    head = "Memory: m\nProgress: p\nIntention: i\nAction: "
    for ok in ["click(7)", 'fill(9, "laptop")', 'press(9, "Enter")', "scroll(0, -300)", 'answer("$4")', "go_back()"]:
        assert pattern.fullmatch(head + ok), ok
        assert not parse_output(head + ok).failed
    for bad in ["click(11)", "click(8)", 'fill(7, "x")', 'select(9, "a")', "Action: click(7)"]:
        assert not pattern.fullmatch(head + bad), bad

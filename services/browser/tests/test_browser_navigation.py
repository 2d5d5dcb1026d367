"""Regression: a click that starts a navigation to a slow page must not return before the new page is
there (its observation shows the new page) and the next action must find the new page's elements."""

from __future__ import annotations

import asyncio

import pytest
from webenv.client import EnvironmentClient
from webenv.v1 import common_pb2

F = common_pb2.ObservationFormat


async def _click_then_act(env, page_server, click: str, ms: int, path: str, heading: str) -> None:
    """`click` is a selector to click, or a whole action (e.g. a press of Enter in a form field)."""
    o = await env.open(start_url=page_server.url("navrace"))
    sid = o.session.session_id
    try:
        if ms:
            r = await env.step(sid, f'fill("#ms", "{ms}")')
            assert not r.observation.last_action_error
        r = await env.step(sid, click if "(" in click else f'click("{click}")')
        obs = r.observation
        assert not obs.last_action_error, obs.last_action_error
        assert path in obs.url, (click, obs.url)
        assert heading in obs.axtree, (click, obs.axtree)
        r = await env.step(sid, 'click("#next-btn")')
        assert not r.observation.last_action_error, r.observation.last_action_error
        assert 'StaticText "next clicked"' in r.observation.axtree
    finally:
        await env.close(sid)


@pytest.mark.parametrize("ms", [300, 800])
async def test_form_submit_to_slow_page(env, page_server, ms):
    await _click_then_act(env, page_server, "#search-btn", ms, "/slow/results?ms=", "Slow results shoes")


async def test_post_form_and_slow_link(env, page_server):
    await _click_then_act(env, page_server, "#post-btn", 0, "/slow/results", "Slow results posted")
    await _click_then_act(env, page_server, "#slow-link", 0, "/slow/target", "Slow target")


async def test_enter_in_a_field_submits_and_waits(env, page_server):
    await _click_then_act(env, page_server, 'press("#q", "Enter")', 600, "/slow/results?ms=", "Slow results shoes")


async def test_navigation_race_under_load(env, page_server):
    """Several sessions at once (a loaded renderer and event loop), form and link, repeated."""
    cases = [("#search-btn", 300, "/slow/results?ms=", "Slow results shoes"),
             ("#search-btn", 700, "/slow/results?ms=", "Slow results shoes"),
             ("#slow-link", 0, "/slow/target", "Slow target"),
             ("#post-btn", 0, "/slow/results", "Slow results posted")] * 2
    await asyncio.gather(*(_click_then_act(env, page_server, *c) for c in cases))


async def test_prevented_submit_does_not_wait(env, page_server):
    o = await env.open(start_url=page_server.url("navrace"))
    sid = o.session.session_id
    r = await env.step(sid, 'click("#js-btn")')
    assert 'StaticText "stayed"' in r.observation.axtree and "/pages/navrace" in r.observation.url
    assert r.timings.settle_seconds < 1.0, r.timings
    await env.close(sid)


@pytest.fixture
def laggy_network_events(monkeypatch):
    """Deliver the farm's request events 250 ms late, as a loaded event loop does: the settle rule must not
    depend on seeing a navigation's request before the action returns."""
    from webenv.browser.settle import watchers

    lag = 0.25
    watch, done = watchers._request_watch, watchers.ContextState.done

    def late_watch(state, guard):
        fn = watch(state, guard)
        return lambda req: asyncio.get_running_loop().call_later(lag, fn, req)

    monkeypatch.setattr(watchers, "_request_watch", late_watch)
    monkeypatch.setattr(watchers.ContextState, "done",
                        lambda self, req: asyncio.get_running_loop().call_later(lag, done, self, req))


async def test_navigation_with_late_network_events(laggy_network_events, farm_factory, page_server):
    async with farm_factory() as f, EnvironmentClient(f.channel) as env:
        for _ in range(2):
            await _click_then_act(env, page_server, "#search-btn", 300, "/slow/results?ms=", "Slow results shoes")
            await _click_then_act(env, page_server, "#slow-link", 0, "/slow/target", "Slow target")
            await _click_then_act(env, page_server, "#post-btn", 0, "/slow/results", "Slow results posted")
            await _click_then_act(env, page_server, 'press("#q", "Enter")', 300, "/slow/results?ms=",
                                  "Slow results shoes")

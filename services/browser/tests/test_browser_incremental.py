"""Incremental observations (issue 52): with ``ObservationSpec.incremental`` the farm walks only what changed on the
page and sends AXTREE and MARKDOWN as edits to the session's last observation; the sdk's EnvironmentClient rebuilds
them. After every step of clicks and fills through the hand-made pages, the rebuilt text equals a whole observation
pass of the same page made right after it (no increments, no cache); tests/test_incremental_miniwob.py checks the
same after every step of every scripted MiniWoB++ oracle episode (the oracle is another service's)."""

from __future__ import annotations

import asyncio
import re

import pytest
from webenv import errors
from webenv.browser.observe import ObserveSettings, observe
from webenv.client import observation_spec
from webenv.testing import scrape
from webenv.v1 import common_pb2 as pb

pytestmark = pytest.mark.timeout(900)

F = pb.ObservationFormat
INC = observation_spec(("axtree", "markdown"), incremental=True)
#: What the check pass observes: the whole text, and the elements and DOM the oracle's scripts read.
CHECK = pb.ObservationSpec(formats=[F.OBSERVATION_FORMAT_AXTREE, F.OBSERVATION_FORMAT_MARKDOWN,
                                    F.OBSERVATION_FORMAT_ELEMENTS, F.OBSERVATION_FORMAT_DOM])
#: MiniWoB's own clock ("7 / 10sec"), the one text that changes by itself between a step and its check (1 Hz).
CLOCK = re.compile(r"\d+ / \d+(sec|s)\b")


async def whole(farm, sid: str) -> pb.Observation:
    """A whole pass of the session's page now: no increments, no settle wait, the farm's own caps."""
    s = farm.farm.registry.sessions[sid]
    obs, _ = await observe(s.page, None, CHECK, ObserveSettings(), settle=False)
    return obs


def same(got: pb.Observation, check: pb.Observation, where: str) -> None:
    for name in ("axtree", "markdown"):
        a, b = CLOCK.sub("T", getattr(got, name)), CLOCK.sub("T", getattr(check, name))
        if a != b:
            import difflib

            diff = "\n".join(list(difflib.unified_diff(b.splitlines(), a.splitlines(), "whole", "rebuilt",
                                                       lineterm=""))[:40])
            raise AssertionError(f"{where}: the rebuilt {name} is not the whole pass's:\n{diff}")


async def test_rebuilt_equals_whole_through_the_hand_made_pages(env, farm, page_server):
    spec = observation_spec(("axtree", "markdown"), incremental=True, full_every=3)
    for name in page_server.names:
        if name == "loop":  # its button hangs the renderer (the step-timeout tests' page)
            continue
        opened = await env.open(start_url=page_server.url(name), spec=spec)
        sid = opened.session.session_id
        check = await whole(farm, sid)
        same(opened.observation, check, f"{name} open")
        acts = [e for e in check.elements if e.visible and not e.disabled][:6]
        try:
            for i, e in enumerate(acts):
                text = f'fill({e.element_id}, "hello {i}")' if e.role in ("textbox", "searchbox") else \
                    f'click({e.element_id})'
                r = await env.step(sid, text)
                same(r.observation, await whole(farm, sid), f"{name} step {i} {text}")
                if (i + 1) % 3 == 0:
                    assert not r.observation.HasField("delta"), f"{name} step {i}: a whole one was due"
                check = await whole(farm, sid)
        finally:
            await env.close(sid)


def elements(farm) -> dict[str, float]:
    """The farm's webenv_browser_observe_elements_total, by `how`."""
    return {how: float(n) for how, n in re.findall(r'webenv_browser_observe_elements_total\{how="(\w+)"\} (\S+)',
                                                   scrape(farm.metrics_port))}


async def test_a_client_that_lost_its_base_is_told_and_resyncs(env, farm, page_server):
    opened = await env.open(start_url=page_server.url("products"), spec=INC)
    sid = opened.session.session_id
    before = elements(farm)
    first = await env.step(sid, 'click("#b1")')
    after = elements(farm)  # the page work shrinks: the click's pass reused the other 99 products' subtrees
    walked, reused = (after[h] - before.get(h, 0) for h in ("walked", "reused"))
    assert reused >= 95 and walked < 20, (walked, reused)
    assert first.observation.HasField("delta") and first.observation.delta.base_step == -1
    assert len(first.observation.delta.axtree) <= 3 and '"added"' in first.observation.axtree
    env._rebuilder.forget(sid)  # the client loses its base (as after an answer it never received)
    with pytest.raises(errors.FailedPrecondition) as exc:
        await env.step(sid, 'click("#b2")')
    assert exc.value.reason == "DELTA_BASE_LOST" and "incremental false" in str(exc.value)
    again = await env.step(sid, "noop()")  # the client asks for a whole one by itself
    assert not again.observation.HasField("delta") and again.observation.axtree.count('"added"') == 2
    same(again.observation, await whole(farm, sid), "after resync")
    after = await env.step(sid, 'click("#b3")')
    assert after.observation.HasField("delta") and after.observation.delta.base_step == 2
    assert after.observation.axtree.count('"added"') == 3
    with pytest.raises(errors.InvalidArgument) as bad:
        await env.step(sid, "noop()", spec=pb.ObservationSpec(incremental=True, full_every=-1))
    assert "observation_spec.full_every" in str(bad.value)
    await env.close(sid)


async def test_an_adapter_shows_the_whole_view(farm, page_server):
    """The Gymnasium adapter (webenv.compat.gym, on the sdk's EnvironmentClient) asked for increments: each step's
    observation shows the whole tree, every product with its button, as a whole observation would."""
    from webenv.compat.gym import WebEnv

    def run() -> list[str]:
        env = WebEnv(farm.address, start_url=page_server.url("products"), formats=["axtree"], incremental=True)
        try:
            first, _ = env.reset()
            trees = [first["axtree"]]
            for i in (1, 50, 99):
                obs, *_ = env.step(f'click("#b{i}")')
                trees.append(obs["axtree"])
            return trees
        finally:
            env.close()

    trees = await asyncio.to_thread(run)
    for n, tree in enumerate(trees):
        assert tree.count('button "Add"') + tree.count('button "added"') == 100, n
        assert tree.count('button "added"') == n and 'link "Product 99"' in tree


FRAMED = """<h1>T</h1><ul><li><a href=#>one</a></li><li><a href=#>two</a></li></ul>
<iframe srcdoc="<p id=f>frame text</p><button onclick=&quot;document.getElementById('f').textContent='frame changed'&quot;>
fb</button>"></iframe><x-card></x-card><script>customElements.define('x-card', class extends HTMLElement {
constructor() { super(); const r = this.attachShadow({mode: 'open'});
r.innerHTML = '<p id=s>shadow text</p><button id=sb>sb</button>';
r.getElementById('sb').onclick = () => { r.getElementById('s').textContent = 'shadow changed'; }; }});</script>
<p><span id=w>word</span> <button id=arm onclick="document.getElementById('w').onclick = () => {}">arm</button></p>"""


async def test_frames_and_shadow_roots_are_walked_every_time(chromium_path):
    """What the page's MutationObserver cannot see (a frame's document, a shadow root, a click handler given as a
    property) is never reused: a click in each changes another element there, and the incremental pass still equals
    a whole one."""
    from playwright.async_api import async_playwright
    from webenv.browser.observe import PageText
    from webenv.browser.settle.watchers import INIT_JS

    async with async_playwright() as p:
        browser = await p.chromium.launch(executable_path=chromium_path)
        try:
            page = await (await browser.new_context()).new_page()
            await page.add_init_script(INIT_JS)  # the farm's watchers, as its contexts have them
            await page.route("http://t.web.test/", lambda r: r.fulfill(body=FRAMED, content_type="text/html"))
            await page.goto("http://t.web.test/")
            text, cfg = PageText(), ObserveSettings()
            await observe(page, None, INC, cfg, settle=False, text=text)
            await page.frame_locator("iframe").locator("button").click()
            await page.locator("x-card").locator("#sb").click()
            await page.click("#arm")  # a click handler given as a property: no mutation, a new role
            got, raw = await observe(page, None, INC, cfg, settle=False, fresh=False, text=text)
            check, _ = await observe(page, None, CHECK, cfg, settle=False)
            assert not raw["incremental"]["full"] and raw["incremental"]["reused"] >= 2  # the list's items reused
            same(got, check, "frame and shadow clicks")
            assert '"frame changed"' in got.axtree and '"shadow changed"' in got.axtree and 'clickable "word"' in got.axtree
        finally:
            await browser.close()

"""The web console in a real browser (Playwright driving the Debian Chromium) against the real platform.

Pages render from the REST API, filters work, a stored episode replays step by step with its screenshot, the
acted-on element marked, the a11y-tree diff and the verdict per fact; a live session updates while an agent
steps it through the REST API; the training page draws a learning curve; and no page logs a console error.
"""

from __future__ import annotations

import json
import re

import pytest
from playwright.sync_api import Page, expect

pytestmark = pytest.mark.timeout(600)
def _episodes(platform, run_id: str) -> list[dict]:
    with platform.client() as c, c.stream("GET", "/v1/episodes", params={"run_ids": run_id}) as r:
        return [json.loads(line)["result"]["episode"] for line in r.iter_lines() if line.strip()]


def test_runs_and_a_runs_episodes_with_filters(page: Page, platform):
    oracle, rnd = platform.runs["oracle"], platform.runs["random"]
    expect(page.locator(f'tr[data-run="{oracle}"] .pass-rate')).to_have_text("100.0%")
    expect(page.locator(f'tr[data-run="{rnd}"] .pass-rate')).to_have_text("0.0%")
    page.click(f'tr[data-run="{rnd}"]')
    rows = page.locator("#episodes tbody tr")
    expect(rows).to_have_count(3)
    page.select_option("#f-verdict", "passed")
    expect(rows).to_have_count(0)
    page.select_option("#f-verdict", "failed")
    expect(rows).to_have_count(3)
    first_task = rows.first.locator("td").nth(1).inner_text()
    page.fill("#f-task", first_task)
    expect(rows).to_have_count(1)
    page.fill("#f-task", "")
    levels = page.locator("#f-level option").all_inner_texts()
    assert levels[0] == "all" and len(levels) >= 2
    page.select_option("#f-level", index=1)
    expect(rows).to_have_count(3)
    versions = page.locator("#f-version option").all_inner_texts()
    assert versions[0] == "all" and len(versions) >= 2
    expect(page.locator("#ep-count")).to_have_text("3 of 3")


def test_an_episode_replays_step_by_step(page: Page, platform):
    # A stored step whose action addressed an element, with its box kept: the replay marks it.
    target = None
    for name in ("random", "oracle"):
        for ep in _episodes(platform, platform.runs[name]):
            for s in ep["trajectory"]["steps"]:
                kind = next(iter(s["action"]), "")
                eid = s.get("targetElementId") or s["action"].get(kind, {}).get("target", {}).get("elementId")
                if eid and any(e["elementId"] == eid for e in s["observation"].get("elements", [])):
                    target = (name, ep, s["stepIndex"], eid)
                    break
            if target:
                break
        if target:
            break
    assert target, "no stored step acted on an element id"
    name, ep, index, eid = target
    page.goto(f"/console/#/runs/{platform.runs[name]}/episodes/{ep['episodeId']}")
    steps = page.locator("#step-list div")
    expect(steps).to_have_count(len(ep["trajectory"]["steps"]) + 1)
    expect(page.locator("#verdict h2")).to_contain_text("Verdict")
    expect(page.locator("#facts tbody tr")).to_have_count(len(ep["verdict"]["results"]))
    for _ in range(index):
        page.click("#next")
    expect(page.locator("#step-list div.active")).to_have_attribute("data-k", str(index))
    img = page.locator("#shot-img")
    expect(img).to_be_visible()
    page.wait_for_function("document.querySelector('#shot-img').naturalWidth > 0")
    expect(page.locator("#target-id")).to_have_text(eid)
    mark = page.locator("#target-mark")
    expect(mark).to_be_visible()
    box, shot = mark.bounding_box(), img.bounding_box()
    assert box and shot and box["width"] > 2 and shot["x"] <= box["x"] <= shot["x"] + shot["width"]
    expect(page.locator("#action-text")).to_have_text(ep["trajectory"]["steps"][index]["actionText"])
    expect(page.locator(".timings span").first).to_be_attached()
    expect(page.locator("#axdiff, #step-main p.muted").first).to_be_visible()
    # Keyboard and the final page.
    page.keyboard.press("ArrowRight")
    expect(page.locator("#step-list div.active")).to_have_attribute("data-k", str(index + 1))
    page.locator("#step-list div").last.click()
    expect(page.locator("#step-main h2")).to_have_text("Final page")
    # The oracle's verdict per fact with reasons.
    oracle_ep = _episodes(platform, platform.runs["oracle"])[0]
    page.goto(f"/console/#/runs/{platform.runs['oracle']}/episodes/{oracle_ep['episodeId']}")
    expect(page.locator("#verdict .badge").first).to_have_text("passed")
    expect(page.locator("#facts .badge.HOLDS").first).to_be_visible()
    first_reason = oracle_ep["verdict"]["results"][0]["reason"]
    expect(page.locator("#facts tbody tr").first).to_contain_text(first_reason[:40])


def test_a_live_session_updates_while_an_agent_steps(page: Page, platform):
    spec = {"formats": ["OBSERVATION_FORMAT_AXTREE", "OBSERVATION_FORMAT_SCREENSHOT"],
            "screenshot": {"codec": "IMAGE_CODEC_JPEG", "width": 480}}
    with platform.client() as c:
        sid = c.post("/v1/sessions", json={"startUrl": "http://shop-0001.web.test/", "observationSpec": spec,
                                           "labels": {"run_id": "console-test"}}).json()["session"]["sessionId"]
        page.goto("/console/#/live")
        card = page.locator(f'[data-session="{sid}"]')
        expect(card).to_be_visible()
        expect(card.locator("img")).to_be_visible(timeout=30_000)  # the farm's preview of the session
        card.click()
        expect(page.locator("#s-state")).to_contain_text("OPEN")
        expect(page.locator("#live-frame")).to_be_visible(timeout=30_000)
        for i in range(4):
            r = c.post(f"/v1/sessions/{sid}:step", json={"action": {"scroll": {"dy": 300}}, "stepIndex": i})
            assert r.status_code == 200, r.text
            expect(page.locator("#s-log .step-row")).to_have_count(i + 1)
            expect(page.locator("#s-steps")).to_have_text(str(i + 1))
        expect(page.locator("#s-log .step-row").first).to_contain_text("scroll(0, 300)")
        expect(page.locator("#live-frame")).to_have_attribute("data-step", re.compile(r"[0-9]+"))
        c.post(f"/v1/sessions/{sid}:close", json={})
        expect(page.locator("#s-state")).to_contain_text("CLOSED")


def test_training_page_draws_the_learning_curve(page: Page, platform):
    with platform.client() as c:
        for _ in range(2):  # two versions of one family: a curve of two points
            job = c.post("/v1/jobs", json={"spec": {
                "name": "curve", "algorithm": "TRAINING_ALGORITHM_BC", "model": "MODEL_KIND_SCORER",
                "data": {"runIds": [platform.runs["oracle"]]},
                "hyper": {"maxSteps": 4, "batchSize": 4, "validationFraction": 0}}}).json()["job"]
            with c.stream("GET", f"/v1/jobs/{job['jobId']}:watch") as r:
                for _ in r.iter_lines():
                    pass
        checkpoints = c.get("/v1/checkpoints").json()["checkpoints"]
    page.goto("/console/#/training")
    expect(page.locator("#curve svg polyline").first).to_be_attached()  # a flat line has no height: "hidden"
    points = page.locator("#curve svg circle")
    expect(points).to_have_count(len([cp for cp in checkpoints if cp["loss"] > 0]))
    expect(points.first).to_be_visible()
    assert {t.split(":")[0] for t in page.locator("#curve svg circle title").all_text_contents()} == {
        cp["ref"] for cp in checkpoints if cp["loss"] > 0}
    expect(page.locator("#checkpoints tbody tr")).to_have_count(len(checkpoints))
    expect(page.locator("#jobs")).to_contain_text("curve")


def test_api_page_lists_the_routes(page: Page):
    page.goto("/console/#/api")
    expect(page.locator("#routes")).to_contain_text("/v1/sessions/{session_id}:step")
    expect(page.locator("#routes")).to_contain_text("EnvironmentService_Step")

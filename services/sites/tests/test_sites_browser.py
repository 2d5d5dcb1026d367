"""The synthetic web in real Chromium: every family renders without JS errors, and oracle solutions of a
sample of tasks from every family and kind satisfy their rubric by ground truth (and wrong answers do not)."""

from __future__ import annotations

import asyncio
import json
import uuid

from playwright.async_api import Browser, Page
from webenv.sites.families import FAMILIES
from webenv.v1 import common_pb2 as pb
from webenv.v1 import task_pb2

from .rubriceval import Evidence, failing_facts, page_selectors


async def _page(browser: Browser, host: str, session: str) -> tuple[Page, list[str]]:
    ctx = await browser.new_context()
    await ctx.add_cookies([{"name": "site_session", "value": session, "domain": host, "path": "/"}])
    page = await ctx.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.on("console", lambda msg: errors.append(msg.text) if msg.type == "error" else None)
    page.set_default_timeout(10_000)
    return page, errors


async def test_every_family_renders_without_js_errors(browser, sites_service) -> None:
    sites = sites_service.world.sites.sites
    layouts_seen: set[int] = set()
    for fam in FAMILIES:
        of_fam = [s for s in sites if s.family.name == fam]
        # one site per family, chosen so that the eight together show every layout variant
        pick = next((s for s in of_fam if int(s.look["layout"]) not in layouts_seen), of_fam[0])
        for site in (pick,):
            layouts_seen.add(int(site.look["layout"]))
            page, errors = await _page(browser, site.host, uuid.uuid4().hex)
            if site.family.login_required:
                u = site.users[1]
                await page.goto(site.url("/login"))
                await page.fill("#username", u.username)
                await page.fill("#password", u.password)
                await page.click("#login-submit")
            item = site.items[3]
            for path in ("/", f"/{site.family.path}", f"/{site.family.path}?sort=rating_desc&page=2",
                         f"/{site.family.path}/{item.id}", "/help", "/about?ref=x", "/account"):
                resp = await page.goto(site.url(path))
                assert resp is not None and resp.status == 200, (site.host, path)
                assert await page.title()
            await page.goto(site.url(f"/{site.family.path}/{item.id}"))
            assert (await page.inner_text("#item-rating")).startswith(f"{item.rating:.1f}")  # rendered by JS
            await page.click("#tab-reviews")
            assert await page.is_visible("#panel-reviews")
            assert errors == [], (site.host, errors)
            await page.context.close()
    assert layouts_seen == {0, 1, 2}


async def test_forms_show_validation_errors_in_browser(browser, sites_service) -> None:
    site = next(s for s in sites_service.world.sites.sites if s.family.name == "travel")
    page, errors = await _page(browser, site.host, uuid.uuid4().hex)
    await page.goto(site.url(f"/flights/{site.items[0].id}"))
    await page.evaluate("document.querySelectorAll('[required]').forEach(e => e.removeAttribute('required'))")
    await page.fill("#f-seats", "42")
    await page.click("#action-submit")
    assert "must be between 1 and 9" in await page.inner_text("#err-seats")
    assert "required" in await page.inner_text("#err-passenger")
    assert [e for e in errors if "status of 422" not in e] == []  # the 422 answer itself is logged by Chromium
    await page.context.close()


def _sample(tasks: list[pb.Task]) -> list[pb.Task]:
    """Per family: the hardest task of every kind (longest oracle), on alternating sites of the family."""
    out: list[pb.Task] = []
    for f, fam in enumerate(FAMILIES):
        fam_tasks = [t for t in tasks if t.family == fam and t.source == pb.TASK_SOURCE_SYNTHETIC]
        sites = sorted({t.site for t in fam_tasks})
        for k, kind in enumerate((pb.TASK_KIND_INFORMATION, pb.TASK_KIND_NAVIGATION, pb.TASK_KIND_TRANSACTION)):
            of_kind = [t for t in fam_tasks if t.kind == kind and t.site == sites[k % len(sites)]]
            out.append(max(of_kind, key=lambda t: (t.difficulty, len(t.oracle))))
        # plus, on every other family, the easiest task of one kind (rotating) on a third site: other generators,
        # other layouts (on every family it was 8 more episodes of a CI at its time limit)
        if f % 2 == 0:
            kind = (pb.TASK_KIND_INFORMATION, pb.TASK_KIND_NAVIGATION, pb.TASK_KIND_TRANSACTION)[len(out) % 3]
            easy = [t for t in fam_tasks if t.kind == kind and t.site == sites[2 % len(sites)]]
            out.append(min(easy, key=lambda t: (t.difficulty, len(t.oracle), t.task_id)))
    return out


async def _run_oracle(page: Page, task: pb.Task) -> tuple[str, list[str]]:
    await page.goto(task.start_url)
    urls = [page.url]
    answer = ""
    for act in task.oracle:
        kind = act.WhichOneof("kind")
        if kind == "click":
            await page.click(act.click.target.selector)
        elif kind == "fill":
            await page.fill(act.fill.target.selector, act.fill.text)
        elif kind == "select":
            await page.select_option(act.select.target.selector, list(act.select.options))
        elif kind == "answer":
            answer = act.answer.text
        else:
            raise AssertionError(f"oracle uses unexpected action {kind}")
        await page.wait_for_load_state("load")
        urls.append(page.url)
    return answer, urls


async def _evidence(page: Page, task: pb.Task, answer: str, urls: list[str], state: dict) -> Evidence:
    texts: dict[str, str | None] = {}
    for css in page_selectors(task):
        el = await page.query_selector(css or "body")
        texts[css] = await el.inner_text() if el else None
    return Evidence(answer=answer, urls=urls, page_texts=texts, site_state=state)


async def test_oracles_satisfy_rubrics_and_wrong_answers_fail(browser, sites_service, task_stub) -> None:
    tasks = _sample(sites_service.world.tasks.tasks)
    assert {t.family for t in tasks} == set(FAMILIES) and len({t.kind for t in tasks}) == 3
    slots = asyncio.Semaphore(4)  # four pages at a time: each episode waits on page loads more than on the CPU

    async def check(task: pb.Task) -> None:
        async with slots:
            session = uuid.uuid4().hex
            await task_stub.ResetSiteState(task_pb2.ResetSiteStateRequest(site_session=session, site=task.site))
            page, errors = await _page(browser, task.site, session)
            try:
                answer, urls = await _run_oracle(page, task)
                state = json.loads((await task_stub.GetSiteState(
                    task_pb2.GetSiteStateRequest(site_session=session, site=task.site))).state_json)
                ev = await _evidence(page, task, answer, urls, state)
                assert failing_facts(task, ev) == [], (task.task_id, task.instruction, urls)
                assert errors == [], (task.task_id, errors)

                # the same episode with a wrong answer / no actions fails
                if task.kind == pb.TASK_KIND_INFORMATION:
                    wrong = Evidence(answer="I could not find it", urls=urls, page_texts=ev.page_texts,
                                     site_state=state)
                else:
                    fresh = uuid.uuid4().hex
                    await task_stub.ResetSiteState(task_pb2.ResetSiteStateRequest(site_session=fresh, site=task.site))
                    empty = json.loads((await task_stub.GetSiteState(
                        task_pb2.GetSiteStateRequest(site_session=fresh, site=task.site))).state_json)
                    await page.goto(task.start_url)
                    wrong = await _evidence(page, task, "done", [task.start_url], empty)
                assert failing_facts(task, wrong), task.task_id
            finally:
                await page.context.close()

    await asyncio.gather(*(check(t) for t in tasks))

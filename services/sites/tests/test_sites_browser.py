"""The synthetic web in real Chromium: every family renders without JS errors (through the builders of the test
web), and oracle solutions of a sample of tasks from every family and kind satisfy their rubric by ground truth
(and wrong answers do not)."""

from __future__ import annotations

import asyncio
import json
import uuid

from playwright.async_api import Browser, Page
from playwright.async_api import TimeoutError as PlaywrightTimeoutError
from webenv.sites import builders
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
    """One site per family, on as many builders as the test web has, every page kind in Chromium: 200, a title, no
    script error (some builders draw their pages by script after load)."""
    sites = sites_service.world.sites.sites
    builders_seen: set[str] = set()
    for fam in FAMILIES:
        of_fam = [s for s in sites if s.family.name == fam]
        site = next((s for s in of_fam if s.builder_name not in builders_seen), of_fam[0])
        builders_seen.add(site.builder_name)
        b = builders.get(site.builder_name)
        page, errors = await _page(browser, site.host, uuid.uuid4().hex)
        if site.family.login_required:
            u = site.users[1]
            await page.goto(site.url("/"))  # as the oracle does: close what covers the page (a modal may), sign in
            for act in b.dismiss(site) + b.log_in(site, u.username, u.password):
                await _do(page, act)
                await page.wait_for_load_state("load")
            await page.wait_for_load_state("load")
        item = site.items[3]
        for path in ("/", b.url_listing(site), b.url_listing(site, sort="rating_desc", page=2), b.url_record(site, item),
                     b.url(site, "help"), b.url(site, "about"), b.url(site, "account")):
            if b.scheme.hash:  # every page is one document: load each afresh (a fragment change loads nothing)
                await page.goto("about:blank")
            resp = await page.goto(site.url(path))
            assert resp is not None and resp.status == 200, (site.host, path)
            assert await page.title()
        await page.goto(site.url(b.url_record(site, item)))
        assert item.title in await page.inner_text("body")
        assert errors == [], (site.host, errors)
        await page.context.close()
    assert len(builders_seen) >= min(len(sites_service.world.sites.builders), len(FAMILIES)) - 1


async def test_forms_show_validation_errors_in_browser(browser, sites_service) -> None:
    site = next(s for s in sites_service.world.sites.sites if s.family.name == "travel")
    b = builders.get(site.builder_name)
    page, errors = await _page(browser, site.host, uuid.uuid4().hex)
    item = site.items[0]
    await page.goto(site.url(b.url_record(site, item)))
    # a submission the page's own controls would not make (seats out of range, no passenger): the server refuses it
    await page.evaluate("""act => { const f = document.querySelector(`form[action="${act}"]`);
        f.querySelectorAll('[required]').forEach(e => e.removeAttribute('required'));
        f.querySelector('[name=seats]').value = '42'; f.querySelector('[name=passenger]').value = '';
        f.submit(); }""", b.form_url(site, "act", id=item.id))
    await page.wait_for_load_state("load")
    text = await page.inner_text("body")
    assert "must be between 1 and 9" in text and "required" in text, text[:500]
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


async def _do(page: Page, act: pb.Action) -> str:
    """Perform one oracle action; the answer's text for an answer."""
    kind = act.WhichOneof("kind")
    if kind == "click":
        await page.click(act.click.target.selector)
    elif kind == "fill":
        await page.fill(act.fill.target.selector, act.fill.text)
    elif kind == "select":
        before = page.url
        # a sort select (outside a POST form) may navigate a moment after the change (facetgrid submits its GET form,
        # hashapp moves the hash): wait for it, as the farm settles; a select of a POST form, or of a form with a
        # submit button, never navigates by itself
        navigates = await page.eval_on_selector(act.select.target.selector,
                                                "el => !el.form || (el.form.method.toLowerCase() !== 'post'"
                                                " && !el.form.querySelector('button:not([type=button]), [type=submit]'))")
        await page.select_option(act.select.target.selector, list(act.select.options))
        if navigates:
            try:
                await page.wait_for_url(lambda url: url != before, timeout=5000)
            except PlaywrightTimeoutError:
                pass
    elif kind == "answer":
        return act.answer.text
    else:
        raise AssertionError(f"oracle uses unexpected action {kind}")
    return ""


async def _run_oracle(page: Page, task: pb.Task) -> tuple[str, list[str]]:
    await page.goto(task.start_url)
    urls = [page.url]
    answer = ""
    for act in task.oracle:
        answer = await _do(page, act) or answer
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

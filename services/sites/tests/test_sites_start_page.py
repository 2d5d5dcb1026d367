"""Information tasks never ask what their start page already shows (issue 50: `webenv validate --catalog`'s leak
check found answers on home pages, a featured job's salary, the newest recipe's author). The containment rule is the
leak check's own (`webenv.answers`, which `webenv.cli.validation` uses)."""

from __future__ import annotations

import asyncio

from starlette.testclient import TestClient
from webenv.answers import answer_groups, given_away, normalize
from webenv.sites import builders
from webenv.sites.catalog import Site, SiteCatalog
from webenv.sites.state import StateStore
from webenv.sites.tasks import TaskFactory, site_tasks
from webenv.sites.web import SitesApp
from webenv.v1 import common_pb2 as pb

#: The information tasks the whole-catalog run of `webenv validate` failed for this (8 builders), with what their
#: start page showed of the answer before the fix.
LEAKED = {
    "synthetic/wiki-0000/info-3": "installation of zephyr project",
    "synthetic/jobs-0000/info-0": "$143,000 / year", "synthetic/jobs-0000/info-3": "$179,000 / year",
    "synthetic/recipes-0000/info-1": "24 oct 2026", "synthetic/shop-0002/info-3": "$369.95",
    "synthetic/travel-0002/info-0": "africa", "synthetic/jobs-0002/info-3": "$32,000 / year",
    "synthetic/shop-0003/info-3": "$276.95", "synthetic/jobs-0003/info-0": "design",
    "synthetic/forum-0004/info-0": "general", "synthetic/mail-0004/info-0": "receipts",
    "synthetic/shop-0005/info-0": "books", "synthetic/recipes-0005/info-0": "desserts",
    "synthetic/forum-0006/info-0": "oct 17, 2026", "synthetic/mail-0007/info-0": "receipts",
    "synthetic/travel-0008/info-3": "$50.99", "synthetic/travel-0009/info-3": "$1,072.49",
    "synthetic/bank-0009/info-0": "shopping", "synthetic/mail-0009/info-0": "inbox",
    "synthetic/shop-0010/info-3": "$6.99",
}

#: The drawn page's title, text and markup but scripts and styles (what an agent's observation holds, and more).
DRAWN = """() => { const b = document.body.cloneNode(true);
    b.querySelectorAll('script,style,template,noscript').forEach((e) => e.remove());
    return document.title + ' ' + document.body.innerText + ' ' + b.outerHTML; }"""


def test_the_tasks_validate_found_leaking_no_longer_leak() -> None:
    """Rendered by the sites app as a fresh session gets it (signed out, cookie notice up), each start page no longer
    gives its task's answer away, and the task still asks for what the page showed no more."""
    cat = SiteCatalog(88, seed=0, builders=builders.splits())  # the sites are the 1,000-site catalog's first 88
    client = TestClient(SitesApp(cat, StateStore()))
    hosts = {tid.split("/")[1] + ".web.test" for tid in LEAKED}
    tasks = {t.task_id: t for h in sorted(hosts) for t in TaskFactory(cat.by_host[h]).all()}
    for tid, shown in LEAKED.items():
        task = tasks[tid]
        assert task.kind == pb.TASK_KIND_INFORMATION
        page = client.get(task.start_url, headers={"host": task.site})
        assert page.status_code == 200 and shown in normalize(page.text), (tid, shown)
        groups = answer_groups(task)
        assert given_away(groups, page.text) is None, (tid, given_away(groups, page.text), task.instruction)


async def test_no_information_task_of_any_builder_is_answered_by_its_start_page(browser, sites_service) -> None:
    """Every site of the test web (every builder, every family), its start page drawn by Chromium in a fresh session
    (scripts run: a builder may draw its pages by script): no information task's answer is in its text or markup."""
    world = sites_service.world
    tasks = [t for t in world.tasks.tasks if t.source == pb.TASK_SOURCE_SYNTHETIC
             and t.kind == pb.TASK_KIND_INFORMATION]
    assert {t.builder for t in tasks} == set(builders.REGISTRY)
    ctx = await browser.new_context()  # one context: a host's first visit is a fresh session on it
    slots = asyncio.Semaphore(4)

    async def start_text(site: Site) -> str:
        async with slots:
            page = await ctx.new_page()
            try:
                await page.goto(site.url("/"))
                return await page.evaluate(DRAWN)
            finally:
                await page.close()

    try:
        texts = await asyncio.gather(*(start_text(s) for s in world.sites.sites))
    finally:
        await ctx.close()
    for site, text in zip(world.sites.sites, texts, strict=True):
        for task in (t for t in tasks if t.site == site.host):
            assert given_away(answer_groups(task), text) is None, (task.task_id, given_away(answer_groups(task), text))


def test_no_information_task_is_answered_by_echoing_its_instruction() -> None:
    """The five tasks whose answer (a one-digit count) was in their instruction's password, so the instruction echoed
    back passed a substring criterion (`mail-0014/info-0`: "0" attachments after "falcon-1006"), ask for another
    attribute: no fact group's substring criteria are all inside the instruction."""
    catalog = SiteCatalog(1000, seed=0, builders=builders.splits())
    for n in ("0014", "0057", "0080", "0083", "0098"):
        site = catalog.get(f"mail-{n}.web.test")
        assert site is not None
        for task in site_tasks(site):
            said = task.instruction.lower()
            for group in task.rubric.groups:
                crits = [f.criterion.answer for f in group.facts]
                assert not all(c.mode == pb.MATCH_MODE_CONTAINS and c.expected.lower() in said for c in crits), \
                    f"{task.task_id}: the instruction holds {[c.expected for c in crits]}"

"""Site builders: every builder renders every family, shares no id / class / data- attribute with all the others,
parses its own URLs back to what they mean, grades a fact the same way as every other builder, and its oracle
solutions pass their rubrics in real Chromium (a sample of every builder x kind)."""

from __future__ import annotations

import asyncio
import json
import re
import uuid

from starlette.testclient import TestClient
from webenv.sites import builders
from webenv.sites.catalog import Site, SiteCatalog
from webenv.sites.families import FAMILIES
from webenv.sites.state import StateStore
from webenv.sites.tasks import TaskFactory
from webenv.sites.web import SitesApp
from webenv.v1 import common_pb2 as pb
from webenv.v1 import task_pb2

from .rubriceval import Evidence, failing_facts
from .test_sites_browser import _evidence, _page, _run_oracle

_ATTR = re.compile(r'\s(id|class|data-[\w-]+)="([^"]*)"')


def _every_pair() -> tuple[SiteCatalog, list[Site]]:
    """A catalog with one site per builder x family (the site numbers picked so assignment gives each pair)."""
    cat = SiteCatalog(len(FAMILIES) * len(builders.REGISTRY) * 2, seed=0, builders=builders.splits())
    return cat, cat.sites


def _client(cat: SiteCatalog) -> TestClient:
    return TestClient(SitesApp(cat, StateStore()))


def _pages(client: TestClient, site: Site) -> dict[str, str]:
    b = builders.get(site.builder_name)
    item = site.items[2]
    slug = sorted(site.category_labels)[0]
    out = {}
    if site.family.login_required:
        u = site.users[0]
        r = client.post(b.form_url(site, "login"), data={"username": u.username, "password": u.password, "next": "/"},
                        headers={"host": site.host}, follow_redirects=False)
        assert r.status_code == 303, (site.host, r.text[:300])
    for url in ("/", b.url_listing(site), b.url_listing(site, category=slug, sort="value_desc"),
                b.url_listing(site, sort="rating_desc", page=2), b.url_listing(site, q=item.title), b.url_record(site, item),
                b.url(site, "help"), b.url(site, "about"), b.url(site, "login")):
        r = client.get(url, headers={"host": site.host})
        assert r.status_code == 200, (site.builder_name, site.host, url, r.status_code)
        out[url] = r.text
    return out


def test_every_builder_renders_every_family_and_reads_its_urls_back() -> None:
    cat, sites = _every_pair()
    client = _client(cat)
    seen: set[tuple[str, str]] = set()
    for site in sites:
        if (site.builder_name, site.family.name) in seen:
            continue
        seen.add((site.builder_name, site.family.name))
        b = builders.get(site.builder_name)
        pages = _pages(client, site)
        item = site.items[2]
        assert any(item.title in html for html in pages.values())
        assert b.meaning(site, "http://x" + b.url_record(site, item)).params["id"] == item.id
        m = b.meaning(site, b.url_listing(site, category=sorted(site.category_labels)[0], sort="date_desc", page=3))
        assert (m.kind, m.params["category"], m.params["sort"], m.params["page"]) == \
            ("listing", sorted(site.category_labels)[0], "date_desc", "3")
        assert b.meaning(site, b.url(site, "help")).kind == "help"
    assert seen == {(b, f) for b in builders.REGISTRY for f in FAMILIES}


def test_no_id_class_or_data_attribute_is_common_to_all_builders() -> None:
    cat, sites = _every_pair()
    client = _client(cat)
    attrs: dict[str, set[tuple[str, str]]] = {name: set() for name in builders.REGISTRY}
    for site in sites:
        for html in _pages(client, site).values():
            for kind, value in _ATTR.findall(html):
                if kind.startswith("data-"):
                    attrs[site.builder_name].add(("data", kind))
                else:
                    attrs[site.builder_name].update((kind, v) for v in value.split())
    common = set.intersection(*attrs.values())
    assert common == set(), sorted(common)[:20]


def test_a_rubric_grades_the_same_fact_the_same_way_on_every_builder() -> None:
    """The same kind of fact ("the page of item X is open", "the listing is sorted by rating at page 2") holds on
    each builder's URL for it and fails on that builder's URL for another item or sort."""
    cat, sites = _every_pair()
    for name in builders.REGISTRY:
        site = next(s for s in sites if s.builder_name == name and not s.family.login_required)
        b = builders.get(name)
        f = TaskFactory(site)
        a, other = site.items[0], site.items[1]
        page_a = Evidence(urls=[site.url(b.url_record(site, a))])
        page_other = Evidence(urls=[site.url(b.url_record(site, other))])
        holds = pb.Task(rubric=pb.Rubric(groups=[pb.FactGroup(facts=[pb.Fact(criterion=f.record_fact(a))])]))
        assert failing_facts(holds, page_a) == [] and failing_facts(holds, page_other), name
        listing = pb.Task(rubric=pb.Rubric(groups=[pb.FactGroup(facts=[
            pb.Fact(fact_id="s", criterion=f.listing_fact("sort", "rating_desc")),
            pb.Fact(fact_id="p", criterion=f.listing_fact("page", "2"))])]))
        right = Evidence(urls=[site.url(b.url_listing(site, sort="rating_desc", page=2))])
        wrong = Evidence(urls=[site.url(b.url_listing(site, sort="value_asc", page=2))])
        assert failing_facts(listing, right) == [], (name, right.urls)
        assert len(failing_facts(listing, wrong)) == 1, (name, wrong.urls)
        # the facts depend on the builder only through its URL scheme: every rubric names the same facts
        assert [g.group_id for g in f.nav_item(0).rubric.groups] == ["page"]


def _sample(tasks: list[pb.Task], names: list[str]) -> list[pb.Task]:
    """Per builder and kind: the task with the longest oracle on a rotating family."""
    out = []
    for b, name in enumerate(names):
        for k, kind in enumerate((pb.TASK_KIND_INFORMATION, pb.TASK_KIND_NAVIGATION, pb.TASK_KIND_TRANSACTION)):
            pool = [t for t in tasks if t.source == pb.TASK_SOURCE_SYNTHETIC and t.kind == kind
                    and t.builder == name]
            fams = sorted({t.family for t in pool})
            fam = fams[(b + k) % len(fams)]
            out.append(max((t for t in pool if t.family == fam), key=lambda t: (len(t.oracle), t.task_id)))
    return out


async def test_oracles_pass_on_every_builder_and_kind(browser, sites_service, task_stub) -> None:
    # every builder of the test web (all registered ones; WEBENV_SITES_BUILDERS='["name"]' runs one builder's)
    names = list(sites_service.world.sites.builders)
    tasks = _sample(sites_service.world.tasks.tasks, names)
    assert {t.builder for t in tasks} == set(names)
    slots = asyncio.Semaphore(4)

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
                assert failing_facts(task, ev) == [], (task.task_id, task.builder, urls)
                assert errors == [], (task.task_id, errors)
            finally:
                await page.context.close()

    await asyncio.gather(*(check(t) for t in tasks))


def test_held_out_builders_never_reach_training() -> None:
    """A held-out builder's sites are test sites and a validation builder's are never train sites, whatever their
    host's own split: ListTasks --split train (what runs that collect training data ask for) and the trainer's guard
    (it refuses every validation- and test-split episode) keep them out of training."""
    from webenv.sites.world import build_world
    from webenv.splits import HELD_OUT, split_of

    held, validation = builders.of_split(pb.SPLIT_TEST), builders.of_split(pb.SPLIT_VALIDATION)
    assert len(held) >= 2 and validation and builders.of_split(pb.SPLIT_TRAIN)
    world = build_world(count=len(builders.REGISTRY) * 24, with_miniwob=False, builtin=False)
    moved = 0
    for t in world.tasks.tasks:
        if t.builder in held:
            assert t.split == pb.SPLIT_TEST, t.task_id
        elif t.builder in validation:
            assert t.split in HELD_OUT, t.task_id
        else:
            assert t.split == split_of(t.site), t.task_id
        moved += t.split != split_of(t.site)
    assert moved  # some train hosts were moved out of training by their builder
    train = world.tasks.select(task_pb2.TaskFilter(split=pb.SPLIT_TRAIN))
    assert not {world.tasks.tasks[i].builder for i in train} & set(held + validation)
    # the single-platform web keeps the split by host alone
    assert all(t.split == split_of(t.site) for t in
               build_world(count=16, with_miniwob=False, builtin=False, builders=["platform"]).tasks.tasks)

"""Widgets particular to one builder, beyond what every builder passes (test_sites_builders.py): govform's
one-question-per-page wizard checks each answer before the next question and posts once, from "Check your answers";
facetgrid's facets filter the shown cards in the browser, with no request; docsite's toctree unfolds the section of
the page shown."""

from __future__ import annotations

import uuid

from starlette.testclient import TestClient
from webenv.sites import builders
from webenv.sites.builders.base import PAGE_SIZE, search
from webenv.sites.catalog import SiteCatalog
from webenv.sites.families import FAMILIES
from webenv.sites.state import StateStore
from webenv.sites.web import SitesApp
from webenv.v1 import common_pb2 as pb

from .test_sites_browser import _do, _page


def _one_builder(name: str) -> tuple[SiteCatalog, TestClient]:
    cat = SiteCatalog(len(FAMILIES), seed=0, builders={name: pb.SPLIT_TRAIN})
    return cat, TestClient(SitesApp(cat, StateStore()))


def test_govform_wizard_checks_each_answer_and_posts_once() -> None:
    cat, client = _one_builder("govform")
    b = builders.get("govform")
    site = next(s for s in cat.sites if s.family.name == "travel")
    item, h = site.items[0], {"host": site.host}
    here, act = b.url_record(site, item), b.url(site, "act", id=item.id)
    start = client.get(here, headers=h).text
    assert f'href="{here}?step=1"' in start and act not in start  # a start page: no form yet
    # a passenger name too short: the next question is not asked, the same one comes back with the error
    r = client.get(here, params={"step": "2", "passenger": "Al"}, headers=h)
    assert r.status_code == 200 and "must be at least 3 characters" in r.text and 'id="gv-f-passenger"' in r.text
    assert 'name="seats"' not in r.text
    r = client.get(here, params={"step": "2", "passenger": "Alice Brown"}, headers=h)
    assert 'id="gv-f-seats"' in r.text and '<input type="hidden" name="passenger" value="Alice Brown">' in r.text
    # every answer given: "Check your answers" lists them and carries them to the one POST
    r = client.get(here, params={"step": "4", "passenger": "Alice Brown", "seats": "2", "cabin": "Business"}, headers=h)
    assert "Check your answers" in r.text and f'action="{act}"' in r.text
    assert '<input type="hidden" name="seats" value="2">' in r.text and ">Business<" in r.text
    r = client.post(act, data={"passenger": "Alice Brown", "seats": "2", "cabin": "Business"}, headers=h,
                    follow_redirects=False)
    assert r.status_code == 303 and b.meaning(site, r.headers["location"]).kind == "done"


def test_docsite_toctree_unfolds_the_section_shown() -> None:
    cat, client = _one_builder("docsite")
    b = builders.get("docsite")
    site = next(s for s in cat.sites if not s.family.login_required)
    item, h = site.items[3], {"host": site.host}
    for url in (b.url_record(site, item), b.url_listing(site, category=item.category)):
        html = client.get(url, headers=h).text
        assert html.count('class="ds-toctree-l1 ds-current"') == 1
        assert f'<li class="ds-toctree-l2"><a href="{b.url_record(site, item)}">' in html
    assert 'class="ds-toctree-l1 ds-current"' not in client.get(b.url_listing(site), headers=h).text


async def test_facetgrid_facets_filter_the_cards_in_the_browser(browser, sites_service) -> None:
    site = next(s for s in sites_service.world.sites.sites if s.builder_name == "facetgrid")
    b = builders.get("facetgrid")
    page, errors = await _page(browser, site.host, uuid.uuid4().hex)
    await page.goto(site.url("/"))
    for act in b.dismiss(site) + (b.log_in(site, site.users[0].username, site.users[0].password)
                                  if site.family.login_required else []):
        await _do(page, act)
        await page.wait_for_load_state("load")
    await page.goto(site.url(b.url_listing(site)))
    shown = search(site, "", "", "relevance")[:PAGE_SIZE]
    brand = sorted({it.author for it in shown})[0]
    cards = page.locator(".fg-grid > .fg-col:visible")
    assert await cards.count() == len(shown)
    url = page.url
    await page.click('label[for="fg-brand-0"]')
    assert await cards.count() == sum(it.author == brand for it in shown)
    assert await page.inner_text(".fg-shown") == str(sum(it.author == brand for it in shown))
    await page.click('label[for="fg-brand-0"]')
    assert await cards.count() == len(shown) and page.url == url  # filtered and unfiltered in place, no request
    assert errors == []
    await page.context.close()

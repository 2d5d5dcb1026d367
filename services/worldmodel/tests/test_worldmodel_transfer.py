"""Unseen markup (issue 48's held-out site builders, hand-made websites, MiniWoB++): copy by default.

A new document is composed from a training exemplar only when the exemplar's source page is like this one (the
markup of a builder trained on); otherwise the same website's last page of that kind (sibling), else the page kept.
A family never trained on borrows other families' edits of the element's own line only, and a link no training
action matches loads its href."""

from __future__ import annotations

import asyncio

from webenv.worldmodel import tinyweb
from webenv.worldmodel.analogy import PageActions
from webenv.worldmodel.compose import Exemplars, PageMemory, PageView, sibling_key
from webenv.worldmodel.page import links_from_markdown
from webenv.worldmodel.predict import ModelInfo, Predictor, Query

TRAIN, TEST = "shop-0000.web.test", "shop-0001.web.test"
#: a page of another markup (another builder's): no banner or main region, other roles and depths
ODD = PageView(f"http://{TEST}/list.cgi", "\n".join(
    ['[1] heading "Shop 1" level=2', '[2] table ""', '\t[3] row ""', '\t\t[4] cell ""', '\t\t\t[5] link "Nova Pine Chair"',
     '\t[6] row ""', '\t\t[7] cell ""', '\t\t\t[8] link "Jade Delta Kettle"', '[9] textbox "Search"', '[10] button "Go"']),
    {"5": "/products/P1000", "8": "/products/P1001"})


def _predictor() -> Predictor:
    ex, pa = Exemplars(), PageActions()
    for ep in tinyweb.episodes():
        for r in ep:
            if r["site"] != TRAIN:
                continue
            links = links_from_markdown(r["markdown"])
            pa.add(r["site"], PageView(r["url"], r["state"], links), r["action_text"], r["next_url"], r["next_state"])
            if r["url"] != r["next_url"]:
                ex.add(r["site"], r["url"], r["state"], r["action_text"], r["next_url"], r["next_state"],
                       links_from_markdown(r["next_markdown"]))
    return Predictor(None, ModelInfo("m", "none", ["axtree"], 0, 0), ex, pa, mode="analogy")


def _predict(p: Predictor, q: Query):
    return asyncio.run(p.predict(q))


def test_siblings_are_the_same_websites_pages_of_a_kind() -> None:
    mem = PageMemory()
    rec = PageView(f"http://{TEST}/products/P1000", "record", {})
    mem.navigated(PageView(f"http://{TEST}/", "home", {}))
    mem.navigated(rec)
    assert mem.sibling(f"http://{TEST}/products/P1002") is rec
    assert mem.sibling(f"http://{TRAIN}/products/P1002") is None  # another website's page never stands in
    assert mem.sibling(f"http://{TEST}/about") is None
    assert sibling_key("http://h/#/records/12") == sibling_key("http://h/#/records/7") != sibling_key("http://h/#/list")


def test_unseen_markup_keeps_the_page_instead_of_composing() -> None:
    p = _predictor()
    home = PageView(f"http://{TEST}/", *tinyweb.page(TEST, "/"))
    same = _predict(p, Query(home, "click(12)", memory=PageMemory()))  # the markup trained on: composed
    assert same.source == "compose" and same.next_url == f"http://{TEST}/products/P1000"
    odd = _predict(p, Query(ODD, "click(5)", memory=PageMemory()))  # unlike any exemplar: kept, at the link's URL
    assert (odd.source, odd.next_url, odd.next_state) == ("keep", f"http://{TEST}/products/P1000", ODD.state)
    mem = PageMemory()
    seen = PageView(f"http://{TEST}/products/P1001", "\n".join(['[1] heading "Jade Delta Kettle" level=1', 'StaticText "$18"']), {})
    mem.navigated(seen)
    mem.navigated(ODD)
    sib = _predict(p, Query(ODD, "click(5)", memory=mem))  # this website's own record page is the template
    assert sib.source == "sibling" and sib.next_state.endswith('StaticText "$18"')  # its content, the chrome refreshed
    p.min_similarity = 0.0  # the gate off: composed from the exemplar whatever the markup
    assert _predict(p, Query(ODD, "click(5)", memory=PageMemory())).source == "compose"


def test_a_family_never_trained_on() -> None:
    p = _predictor()
    page = PageView("http://quillpine.web.test/", "\n".join(
        ['[1] banner ""', '\t[2] link "About us"', '[3] main ""', '\t[4] searchbox "Search"', '\t[5] button "Find"']),
        {"2": "about.html"})
    nav = _predict(p, Query(page, "click(2)", memory=PageMemory()))
    assert nav.navigated and nav.next_url == "http://quillpine.web.test/about.html" and nav.decided_by == "rule"
    filled = _predict(p, Query(page, 'fill(4, "orchard")', memory=PageMemory()))  # the shop's fill, on this line only
    assert filled.decided_by == "analogy" and filled.source == "edit"
    changed = [(a, b) for a, b in zip(page.state.split("\n"), filled.next_state.split("\n"), strict=True) if a != b]
    assert len(changed) == 1 and 'value="orchard"' in changed[0][1]
    p.any_family, p.link_default = False, False  # as before: nothing matches, the page is kept
    assert _predict(p, Query(page, "click(2)", memory=PageMemory())).source == "keep"

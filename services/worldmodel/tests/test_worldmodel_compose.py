"""Pages of new documents: recalled from the session, or composed by analogy on a website never seen."""

from __future__ import annotations

from webenv.worldmodel import tinyweb
from webenv.worldmodel.compose import Exemplars, PageMemory, PageView, compose, refresh_chrome
from webenv.worldmodel.page import links_from_markdown, page_kind, parse, regions, shift_ids

TRAIN, TEST = "shop-0000.web.test", "shop-0001.web.test"


def _page(site: str, path: str, query: str = "") -> PageView:
    state, links = tinyweb.page(site, path, query)
    return PageView(f"http://{site}{path}" + (f"?q={query}" if query else ""), state, links)


def _exemplars() -> Exemplars:
    ex = Exemplars()
    for ep in tinyweb.episodes():
        for r in ep:
            if r["site"] == TRAIN and r["url"] != r["next_url"]:
                ex.add(r["site"], r["url"], r["state"], r["action_text"], r["next_url"], r["next_state"],
                       links_from_markdown(r["next_markdown"]))
    return ex


def test_composed_pages_of_an_unseen_site_take_its_words_and_ids() -> None:
    ex = _exemplars()
    home = _page(TEST, "/")
    for action, path in (("click(12)", "/products/P1000"), ("click(16)", "/products/P1002"), ("click(6)", "/products")):
        url = f"http://{TEST}{path}"
        exemplar = ex.best(home, action, url)
        assert exemplar is not None and exemplar.site == TRAIN  # only training websites are exemplars
        got = compose(home, action, url, exemplar)
        want = _page(TEST, path)
        assert (got.url, got.state, got.links) == (url, want.state, want.links), got.state


def test_recall_refreshes_the_chrome_and_the_memory_keeps_history() -> None:
    mem = PageMemory()
    home, products = _page(TEST, "/"), _page(TEST, "/products")
    mem.navigated(home)
    mem.navigated(products)
    assert mem.back_url() == home.url and mem.forward_url() is None
    typed = PageView(products.url, products.state.replace('searchbox "Search"', 'searchbox "Search" value="x"'), products.links)
    mem.changed(typed)  # back and forward restore a page as it was left; loading its URL again gives it as loaded
    mem.go_back()
    assert mem.forward_page() == typed and mem.recall(products.url) == products
    # the banner now says something new (as a cart count would): a recalled page shows the current banner
    current = PageView(home.url, home.state.replace('link "Products"', 'link "Products (1)"'), home.links)
    got = refresh_chrome(products, current)
    assert 'link "Products (1)"' in got.state and got.state.split("\n")[8:] == products.state.split("\n")[8:]


def test_page_helpers() -> None:
    assert page_kind("http://a.web.test/products/P1007?tab=reviews&x=1") == "/products/{id}?tab&x"
    assert page_kind("http://a.web.test/") == "/"
    nodes = parse(_page(TEST, "/").state)
    assert [r.role for r in regions(nodes)] == ["banner", "main", "contentinfo"]
    assert shift_ids(['\t[9] heading "x"', 'StaticText "[3] y"'], 2) == ['\t[11] heading "x"', 'StaticText "[3] y"']

"""Pages of new documents: recalled from the session, or composed by analogy on a website never seen."""

from __future__ import annotations

from prometheus_client import REGISTRY
from webenv.llm import GenerationRequest, GenerationResult
from webenv.worldmodel import tinyweb
from webenv.worldmodel.compose import Exemplars, PageMemory, PageView, compose, refresh_chrome
from webenv.worldmodel.page import links_from_markdown, page_kind, parse, regions, shift_ids
from webenv.worldmodel.predict import ModelInfo, Predictor, Query, url_problem

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


class _Says:
    """A language model that completes every prompt with `text` (a tiny model's malformed `<nav>` output)."""

    def __init__(self, text: str) -> None:
        self.text = text

    async def generate(self, requests: list[GenerationRequest]) -> list[GenerationResult]:
        return [GenerationResult(self.text) for _ in requests]


async def test_a_predicted_url_that_is_not_a_web_url_is_never_the_next_pages() -> None:
    home = _page(TEST, "/")
    fallbacks = REGISTRY.get_sample_value("webenv_worldmodel_fallbacks_total", {"reason": "url"}) or 0.0
    info = ModelInfo("stub", "stub", ["axtree"], 0, 0)
    for mode, text in (("lm", "<nav><nav><nav> <nav>"), ("lm", "<nav>/<nav>"), ("webworld", f"URL: <nav>\n{home.state}")):
        predictor = Predictor(_Says(text), info, _exemplars(), mode=mode)  # type: ignore[arg-type]
        # a click on a link: its href (the page of that new document, composed) instead of the malformed URL
        link = await predictor.predict(Query(home, "click(12)", memory=PageMemory()))
        assert (link.next_url, link.navigated, link.source) == (f"http://{TEST}/products/P1000", True, "compose"), mode
        assert link.fallback and link.fallback_reason == "url" and "predicted URL" in link.error
        # a click on a button (no href here): the page is kept
        button = await predictor.predict(Query(home, "click(4)", memory=PageMemory()))
        assert (button.next_url, button.next_state, button.navigated, button.fallback) == (home.url, home.state, False, True)
    assert REGISTRY.get_sample_value("webenv_worldmodel_fallbacks_total", {"reason": "url"}) == fallbacks + 6
    assert url_problem(f"http://{TEST}/products/P1000") == ""
    assert url_problem("<nav><nav>") and url_problem(f"http://{TEST}/<nav>") and url_problem("javascript:void(0)")


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


def test_a_selector_action_and_an_id_action_on_one_button_are_one_kind_and_a_search_that_found_is_preferred() -> None:
    from webenv.worldmodel.page import target_line

    home = ('[1] banner\n\t[2] search\n\t\t[3] searchbox "Go" value="{q}"\n\t\t[4] button "Go"\n[5] main\n'
            '\t[6] heading "Welcome"')
    lines = home.format(q="x").split("\n")
    # `#search-btn`: its last hinted word says button; the searchbox and the search landmark share only its first word
    assert target_line(lines, 'click("#search-btn")') == 3 and target_line(lines, "click(4)") == 3

    def results(*names: str) -> str:
        return "[1] banner\n[5] main\n" + "\n".join(f'\t[{7 + i}] link "{n}"' for i, n in enumerate(names))

    ex = Exemplars()
    # the crawl's random query found nothing; the oracle's selector search found the record it typed
    ex.add("shop-0000.web.test", "http://shop-0000.web.test/", home.format(q="qwerty"), "click(4)",
           "http://shop-0000.web.test/products?q=qwerty", results("Teapot", "Kettle"), {})
    ex.add("shop-0000.web.test", "http://shop-0000.web.test/", home.format(q="Blue Lamp"), 'click("#search-btn")',
           "http://shop-0000.web.test/products?q=Blue+Lamp", results("Blue Lamp"), {})
    here = PageView("http://shop-0002.web.test/", home.format(q="Red Chair"))
    best = ex.best(here, "click(4)", "http://shop-0002.web.test/products?q=Red+Chair")
    assert best is not None and best.found and best.target_role == "button"
    page = compose(here, "click(4)", "http://shop-0002.web.test/products?q=Red+Chair", best)
    assert 'link "Red Chair"' in page.state  # the record searched for is on the simulated results page


def _unseen_markup_page(site: str, path: str, main: str, search: str = "") -> PageView:
    """A page of markup no exemplar shares: a banner every page of the site has, then this page's own lines."""
    state = (f'[1] banner ""\n\t[2] link "Acme"\n\t[3] searchbox "Find"{f" value={search!r}".replace(chr(39), chr(34)) if search else ""}'
             f'\n\t[4] button "Find"\n[5] main ""\n{main}')
    return PageView(f"http://{site}{path}", state, {"2": "/", "9": "/records/7"})


def test_a_new_document_of_unseen_markup_keeps_the_sessions_chrome_and_drops_this_pages_own_lines() -> None:
    from webenv.worldmodel.compose import LineSurvival, session_lines
    from webenv.worldmodel.predict import SURVIVAL_THRESHOLD

    assert SURVIVAL_THRESHOLD > 0  # served on
    survival = LineSurvival(min_count=1)
    for i in range(3):  # training navigations: the banner the session saw on another page stays, the rest goes
        memory = PageMemory()
        before = _unseen_markup_page("shop-0000.web.test", "/", '\t[6] heading "Home"')
        memory.navigated(before)
        here = _unseen_markup_page("shop-0000.web.test", f"/list{i}", f'\t[6] heading "List {i}"\n\t[9] link "Item {i}"')
        memory.navigated(here)
        nxt = _unseen_markup_page("shop-0000.web.test", f"/item{i}", f'\t[6] heading "Item {i}"\n\t[7] paragraph ""')
        survival.add(here.url, here.state, nxt.url, nxt.state, session_lines(memory, here.url))
    assert len(LineSurvival.from_json(survival.to_json())) == len(survival)
    pred = Predictor(None, ModelInfo("m", "", ["axtree"], 0, 0), mode="analogy", survival=survival)
    memory = PageMemory()
    memory.navigated(_unseen_markup_page("shop-0005.web.test", "/", '\t[6] heading "Welcome"'))
    page = _unseen_markup_page("shop-0005.web.test", "/records", '\t[6] heading "Records"\n\t[9] link "Record 7"')
    memory.navigated(page)
    import asyncio

    p = asyncio.run(pred.predict(Query(page, "click(9)", memory=memory)))  # a link to a page this session has not loaded
    assert p.navigated and p.source == "prune" and p.next_url == "http://shop-0005.web.test/records/7"
    assert '\t[2] link "Acme"' in p.next_state and '\t[4] button "Find"' in p.next_state  # the site's chrome
    assert "Records" not in p.next_state and "Record 7" not in p.next_state  # this page's own lines
    pred.survival_threshold = 0.0  # off: the current page kept whole at the new URL
    assert asyncio.run(pred.predict(Query(page, "click(9)", memory=memory))).next_state == page.state


def test_another_builders_url_scheme_is_not_believed_and_a_search_goes_where_this_sessions_search_went() -> None:
    import asyncio

    from webenv.worldmodel.analogy import PageActions

    pa = PageActions()  # a training builder's search: its button submits to its own /list.cgi
    home = _unseen_markup_page("shop-0000.web.test", "/", '\t[6] heading "Home"', search="lamp")
    pa.add("shop-0000.web.test", home, "click(4)", "http://shop-0000.web.test/list.cgi?query=lamp", home.state)
    pred = Predictor(None, ModelInfo("m", "", ["axtree"], 0, 0), mode="analogy", page_actions=pa)
    memory = PageMemory()
    first = _unseen_markup_page("shop-0005.web.test", "/", '\t[6] heading "Welcome"', search="red chair")
    memory.navigated(first)
    p = asyncio.run(pred.predict(Query(first, "click(4)", memory=memory)))
    # /list.cgi is no path this website has shown: a new document, at this URL (nothing better to go by)
    assert p.navigated and p.next_url == first.url and p.source in ("prune", "keep")
    pred.known_paths = False  # before: the training builder's scheme
    assert asyncio.run(pred.predict(Query(first, "click(4)", memory=memory))).next_url.endswith("/list.cgi?query=red+chair")
    pred.known_paths = True
    # this session searched before: its results page shows what it searched for, and its URL holds it
    results = _unseen_markup_page("shop-0005.web.test", "/find", '\t[6] heading "Results"', search="red chair")
    memory.navigated(PageView(results.url + "?term=red+chair&page=1", results.state, results.links))
    again = _unseen_markup_page("shop-0005.web.test", "/find", '\t[6] heading "Results"', search="blue lamp & co")
    p = asyncio.run(pred.predict(Query(PageView(results.url + "?term=red+chair&page=1", again.state, again.links),
                                       "click(4)", memory=memory)))
    assert p.navigated and p.next_url == "http://shop-0005.web.test/find?term=blue+lamp+%26+co&page=1"

"""What some builders' URL schemes and servers do beyond the shared builder tests: pages sent as offsets, MediaWiki
titles, dated permalinks that hold only with the item's own date, and the single-page app's one shell (deep links
redirected into it, forms posting to the routes' paths, a validation error answered with the view to show)."""

from __future__ import annotations

import json
import re

from starlette.testclient import TestClient
from webenv.sites import builders
from webenv.sites.catalog import Site, SiteCatalog
from webenv.sites.state import StateStore
from webenv.sites.web import SitesApp

NAMES = ("wikiwiki", "boardroom", "pressroom", "hashapp")


def _web() -> tuple[SiteCatalog, TestClient]:
    cat = SiteCatalog(8 * len(NAMES) * 2, seed=0, builders={n: builders.REGISTRY[n][1] for n in NAMES})
    return cat, TestClient(SitesApp(cat, StateStore()))


def _site(cat: SiteCatalog, builder: str, family: str = "") -> Site:
    return next(s for s in cat.sites if s.builder_name == builder and (s.family.name == family or not family
                                                                        and not s.family.login_required))


def test_pages_travel_as_offsets_and_titles_as_mediawiki_spells_them() -> None:
    cat, _ = _web()
    for name, param in (("wikiwiki", "offset"), ("boardroom", "start")):
        site, b = _site(cat, name), builders.get(name)
        url = b.url_listing(site, sort="rating_desc", page=3)
        assert f"{param}=20" in url, url
        assert b.meaning(site, url).params["page"] == "3"
        rx = re.compile(b.scheme.listing_regex(site, "page", "3"))
        assert rx.search(site.url(url)) and not rx.search(site.url(url.replace(f"{param}=20", f"{param}=3")))
    site, b = _site(cat, "wikiwiki"), builders.get("wikiwiki")
    item = next(it for it in site.items if re.fullmatch(r"[A-Za-z0-9]+( [A-Za-z0-9]+)+", it.title))
    assert b.url_record(site, item) == "/wiki/" + item.title.replace(" ", "_")
    assert b.url_listing(site, q="x").startswith("/index.php?title=Special:Search&search=x")


def test_a_dated_permalink_holds_only_with_the_items_own_date() -> None:
    cat, client = _web()
    site, b = _site(cat, "pressroom"), builders.get("pressroom")
    item = site.items[0]
    url = b.url_record(site, item)
    assert url.startswith(f"/{item.date[:4]}/{item.date[5:7]}/") and url.endswith("/")
    assert b.meaning(site, url).params["id"] == item.id
    wrong_year = f"/{int(item.date[:4]) - 1}" + url[5:]
    assert b.meaning(site, wrong_year).kind == "unknown"
    assert client.get(wrong_year, headers={"host": site.host}).status_code == 404
    assert client.get(url.rstrip("/"), headers={"host": site.host}).status_code == 200  # the trailing slash is optional


def _views(html: str) -> tuple[dict, dict]:
    boot = re.search(r'<script type="application/json" id="ha-boot">(.*?)</script>', html, re.S)
    session = re.search(r'<script type="application/json" id="ha-session">(.*?)</script>', html, re.S)
    assert boot and session
    return json.loads(boot.group(1)), json.loads(session.group(1))


def test_the_single_page_app_serves_one_shell_and_forms_post_to_the_routes_paths() -> None:
    cat, client = _web()
    b = builders.get("hashapp")
    site = _site(cat, "hashapp", "travel")
    host = {"host": site.host}
    item = site.items[0]
    assert b.url_record(site, item) == "/#/item/" + item.id.removeprefix(site.family.id_prefix)
    deep = client.get("/list?q=x&sort=top-rated", headers=host, follow_redirects=False)  # a deep link: into the app
    assert deep.status_code == 303 and deep.headers["location"] == "/#/list?q=x&sort=top-rated"
    boot, session = _views(client.get("/", headers=host).text)
    assert [x["id"] for x in boot["items"]] == [it.id for it in site.items] and session["view"] is None
    rating = {x["id"]: float(x["r"]) for x in boot["items"]}  # the orderings the script sorts and filters by
    assert [rating[i] for i in boot["order"]["rating_desc"]] == sorted(rating.values(), reverse=True)
    bad = client.post(b.form_url(site, "act", id=item.id), data={"passenger": "", "seats": "42"}, headers=host)
    assert bad.status_code == 422
    view = _views(bad.text)[1]["view"]
    assert view["kind"] == "item" and "must be between 1 and 9" in view["errors"]["seats"] and "passenger" in view["errors"]
    ok = client.post(b.form_url(site, "act", id=item.id), headers=host, follow_redirects=False,
                     data={"passenger": "Ada Lovelace", "seats": "2", "cabin": site.family.action.fields[2].options[0]})
    assert ok.status_code == 303 and ok.headers["location"].startswith("/#/done/")
    assert _views(client.get("/", headers=host).text)[1]["records"][0]["passenger"] == "Ada Lovelace"
    private = _site(cat, "hashapp", "bank")  # a login-required site's catalog stays out of the shell until login
    assert _views(client.get("/", headers={"host": private.host}).text)[0]["items"] == []

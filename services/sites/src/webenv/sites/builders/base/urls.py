"""What a URL means: `Meaning` (a page kind and its parameters) and `Scheme`, a builder's URL scheme (parsing a
URL into a Meaning, building the URL of a Meaning, the regex a rubric matches a URL with), with the slugs and word
variants builders name their pages by."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING
from urllib.parse import parse_qsl, quote, urlencode, urlsplit

from webenv.sites import content as c
from webenv.sites.builders.base.request import SORTS
from webenv.sites.families.base import Item

if TYPE_CHECKING:
    from webenv.sites.catalog import Site



@dataclass(frozen=True)
class Meaning:
    """What a URL shows: a page kind (PAGE_KINDS) and its parameters (id, q, category, sort, page, ref...)."""

    kind: str
    params: dict[str, str] = field(default_factory=dict, hash=False)

    def get(self, key: str, default: str = "") -> str:
        return self.params.get(key, default)


_PLACEHOLDER = re.compile(r"\{(\w+)\}")
#: URLs built so far, by (scheme, site, kind, parameters): a page links to the same few dozen URLs on every request.
_URLS: dict[tuple[object, ...], str] = {}
URL_CACHE_SIZE = 500_000


@dataclass(frozen=True)
class Scheme:
    """A builder's URL scheme: one template per page kind, and the names its listing uses in the query.

    Templates are paths with `{placeholders}`: `{base}` (the family's list word, e.g. "products"), `{id}` (an item,
    order or record id), `{num}` (an item id's number, P1003 -> 1003), `{yyyy}` / `{mm}` (the item's year and month,
    for dated permalinks), `{slug}` (the item title's slug: a template
    with `{slug}` but no `{id}` finds the item by slug; with both, the id decides). A template may carry literal
    query pairs (`/index.php?view=item&id={id}`). The listing's query, category,
    sort and page travel as query parameters under the names given here, sort values renamed by `sort_values`;
    `category_path` (e.g. `/{base}/c/{category}`) puts the category in the path instead. `hash=True`: the routes
    live in the URL's fragment (`/#/item/P1003`), the server answering every page kind at `/` with a shell that
    renders the fragment's page by script. `page_step=N`: the page travels as the offset of its first entry
    (`offset=20` is page 3 of 10 a page), as wiki and forum software spell it. `slugify` makes an item's `{slug}`
    from its title (default: lower case and hyphens).
    """

    routes: dict[str, str]
    base: str = "{family}"  # the listing word: {family} = the family's path, {noun} / {plural} also work
    q: str = "q"
    category: str = "category"
    sort: str = "sort"
    page: str = "page"
    sort_values: dict[str, str] = field(default_factory=dict)
    category_path: str = ""
    hash: bool = False
    page_step: int = 0
    slugify: Callable[[str], str] = c.slugify

    def base_of(self, site: Site) -> str:
        fam = site.family
        return self.base.format(family=fam.path, noun=fam.noun, plural=fam.plural.replace(" ", "-"))

    # building URLs -------------------------------------------------------------------------------------------
    def build(self, site: Site, kind: str, **params: str) -> str:
        key = (id(self), site.host, site.seed, kind, *sorted(params.items()))
        url = _URLS.get(key)
        if url is None:  # pages link to the same URLs over and over: build each once
            url = _URLS[key] = self._build(site, kind, **params)
            if len(_URLS) > URL_CACHE_SIZE:
                _URLS.clear()
        return url

    def _build(self, site: Site, kind: str, **params: str) -> str:
        tpl = self.routes[kind]
        values = {"base": self.base_of(site), **params}
        names = _PLACEHOLDER.findall(tpl)
        if "slug" in names and "slug" not in values:
            values["slug"] = site_slugs(site, self.slugify)[1][params["id"]]
        if "num" in names:
            values["num"] = params["id"].removeprefix(site.family.id_prefix)
        if "yyyy" in names or "mm" in names:
            values["yyyy"], values["mm"] = _year_month(site, params["id"])
        path = _PLACEHOLDER.sub(lambda m: quote(str(values[m.group(1)]), safe=""), tpl)
        return ("/#" + path) if self.hash else path

    def listing(self, site: Site, q: str = "", category: str = "", sort: str = "relevance", page: int = 1) -> str:
        key = (id(self), site.host, site.seed, "listing", q, category, sort, page)
        url = _URLS.get(key)
        if url is None:
            url = _URLS[key] = self._listing(site, q, category, sort, page)
            if len(_URLS) > URL_CACHE_SIZE:
                _URLS.clear()
        return url

    def _listing(self, site: Site, q: str, category: str, sort: str, page: int) -> str:
        path = self.routes["listing"]
        query: list[tuple[str, str]] = []
        if category and self.category_path:
            path = self.category_path
        elif category:
            query.append((self.category, category))
        if q:
            query.insert(0, (self.q, q))
        if sort != "relevance":
            query.append((self.sort, self.sort_values.get(sort, sort)))
        if page > 1:
            query.append((self.page, self._page_shown(page)))
        values = {"base": self.base_of(site), "category": category}
        path = _PLACEHOLDER.sub(lambda m: quote(str(values[m.group(1)]), safe=""), path)
        sep = "&" if "?" in path else "?"
        url = path + (sep + urlencode(query) if query else "")
        return ("/#" + url) if self.hash else url

    # reading URLs --------------------------------------------------------------------------------------------
    @cached_property
    def _compiled(self) -> list[tuple[str, re.Pattern[str], list[tuple[str, str]]]]:
        out = []
        routes = dict(self.routes)
        if self.category_path:
            routes["listing_category"] = self.category_path
        for kind, tpl in routes.items():
            path, _, query = tpl.partition("?")
            path = path.rstrip("/") or "/"  # a template's trailing slash (/faq/) is optional, as the request's is
            rx = "".join(
                (rf"(?P<{part}>\d+)" if part == "num" else f"(?P<{part}>[^/?#]+)") if i % 2 else re.escape(part)
                for i, part in enumerate(_PLACEHOLDER.split(path))
            )
            pairs = [tuple(p.split("=", 1)) for p in query.split("&") if p]
            out.append((kind, re.compile(rx + "/?"), pairs))  # type: ignore[misc]
        # literal-query routes first (they share a path with others), then longer templates
        out.sort(key=lambda r: (-len(r[2]), -len(r[1].pattern)))
        return out

    def meaning(self, site: Site, url: str) -> Meaning:
        """Page kind and parameters of a URL of this site (a full URL, or a path with its query / fragment)."""
        parts = urlsplit(url)
        path, query = parts.path or "/", parts.query
        if self.hash:
            inner = urlsplit(parts.fragment or "/")
            path, query = inner.path or "/", inner.query
        return self.match(site, path, dict(parse_qsl(query, keep_blank_values=True)))

    def match(self, site: Site, path: str, query: dict[str, str]) -> Meaning:
        base = self.base_of(site)
        for kind, rx, pairs in self._compiled:
            m = rx.fullmatch(path if path == "/" else path.rstrip("/") or "/")
            if m is None:
                continue
            params = {k: v for k, v in m.groupdict().items()}
            if params.get("base", base) != base:
                continue
            ok = True
            for k, v in pairs:
                got = query.get(k)
                ph = _PLACEHOLDER.fullmatch(v)
                if ph:
                    if got is None:
                        ok = False
                    else:
                        params[ph.group(1)] = got
                elif got != v:
                    ok = False
            if not ok:
                continue
            params.pop("base", None)
            if "num" in params and "id" not in params:
                if not params["num"].isdigit():
                    continue
                params["id"] = site.family.id_prefix + params.pop("num")
            if "slug" in params and "id" not in params:
                item = site_slugs(site, self.slugify)[0].get(params["slug"])
                if item is None:
                    continue
                params["id"] = item
            if "yyyy" in params or "mm" in params:  # a dated permalink: the date must be the item's
                if params.get("id") not in site.by_id or \
                        _year_month(site, params["id"]) != (params.pop("yyyy", ""), params.pop("mm", "")):
                    continue
            if kind in ("listing", "listing_category"):
                params = self._listing_params(query, params.get("category"))
                kind = "listing"
            elif kind == "about":
                params["ref"] = query.get("ref", "")
            elif kind == "login":
                params["next"] = query.get("next", "")
            elif kind == "cart":
                params["added"] = query.get("added", "")
            return Meaning(kind, params)
        return Meaning("unknown", {"path": path})

    def _listing_params(self, query: dict[str, str], category: str | None) -> dict[str, str]:
        sort_back = {v: k for k, v in self.sort_values.items()}
        sort = query.get(self.sort, "relevance")
        sort = sort_back.get(sort, sort)
        page = query.get(self.page, "1")
        if self.page_step and page.isdigit():
            page = str(int(page) // self.page_step + 1)
        return {"q": query.get(self.q, ""), "category": category if category is not None else query.get(self.category, ""),
                "sort": sort if sort in SORTS else "relevance", "page": page if page.isdigit() and int(page) > 0 else "1"}

    # URL facts for rubrics (MATCH_MODE_REGEX on the final URL) -------------------------------------------------
    def record_regex(self, site: Site, item: Item) -> str:
        """A regular expression that matches exactly the URLs of this item's page."""
        return _url_regex(self.build(site, "record", id=item.id), self.hash)

    def listing_regex(self, site: Site, key: str, value: str) -> str:
        """A regular expression for "a listing URL whose `key` (category, sort, page) is `value`"."""
        if key == "category" and self.category_path:
            head = _PLACEHOLDER.sub(lambda m: quote(value if m.group(1) == "category" else self.base_of(site), safe=""),
                                    self.category_path)
            return r"^[a-z]+://[^/]+" + ("/#" if self.hash else "") + re.escape(head) + r"/?(?:[?#]|$)"
        name = {"category": self.category, "sort": self.sort, "page": self.page}[key]
        shown = self.sort_values.get(value, value) if key == "sort" else self._page_shown(int(value)) if key == "page" \
            else value
        lead = r"#[^?]*\?(?:[^#]*&)?" if self.hash else r"\?(?:[^#]*&)?"
        return lead + re.escape(urlencode({name: shown})) + r"(?:&|#|$)"

    def _page_shown(self, page: int) -> str:
        return str((page - 1) * self.page_step) if self.page_step else str(page)


def _url_regex(target: str, hashed: bool) -> str:
    if hashed:  # "/#/item/P1003"
        return r"^[a-z]+://[^/]+/#" + re.escape(target[2:]) + r"/?$"
    path, _, query = target.partition("?")
    rx = r"^[a-z]+://[^/]+" + re.escape(path) + r"/?"
    if not query:
        return rx + r"(?:[?#]|$)"
    look = "".join(rf"(?=(?:[^#]*&)?{re.escape(p)}(?:&|#|$))" for p in query.split("&"))
    return rx + r"\?" + look


def _year_month(site: Site, item_id: str) -> tuple[str, str]:
    date = site.by_id[item_id].date  # ISO
    return date[:4], date[5:7]


_SLUGS: dict[tuple[int, Callable[[str], str]], tuple[dict[str, str], dict[str, str]]] = {}


def site_slugs(site: Site, slugify: Callable[[str], str] = c.slugify) -> tuple[dict[str, str], dict[str, str]]:
    """(slug -> item id, item id -> slug) for a site's items; titles are unique per site, so are slugs."""
    key = (id(site), slugify)
    got = _SLUGS.get(key)
    if got is None or got[1].keys() != site.by_id.keys():
        to_id: dict[str, str] = {}
        for it in site.items:
            s = slugify(it.title) or it.id.lower()
            if s in to_id:
                s = f"{s}-{it.id.lower()}"
            to_id[s] = it.id
        got = (to_id, {v: k for k, v in to_id.items()})
        _SLUGS[key] = got
    return got

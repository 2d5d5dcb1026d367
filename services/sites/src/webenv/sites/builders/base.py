"""The builder interface: what every site builder provides, and the request handling they all share.

A builder is one way a team builds a website: its URL scheme (`Scheme`), the markup of each page kind (the
`render_*` methods), and how a user performs each abstract step on it (the oracle methods: `dismiss`, `log_in`,
`open_record`, `browse`, `submit_record`, `add_to_cart`, `check_out`). What a request *does* is the same on every
builder and lives here, in `Builder.route`: the builder's scheme parses the URL into a `Meaning` (page kind +
parameters), the shared handler reads or changes the site state (state.py: carts, orders, records, logins) with
the same validation, and the builder renders the result. So any family's content renders through any builder,
and a rubric that grades the site state, the answer or the URL's meaning grades the same fact on every builder.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from functools import cached_property, lru_cache
from html import escape
from typing import TYPE_CHECKING, Any, ClassVar
from urllib.parse import parse_qsl, quote, urlencode, urlsplit

from prometheus_client import Counter
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from webenv.sites import content as c
from webenv.sites.families.base import FieldSpec, Item
from webenv.v1 import common_pb2 as pb

if TYPE_CHECKING:
    from webenv.sites.catalog import Site
    from webenv.sites.state import State

TRANSACTIONS = Counter("webenv_sites_transactions_total", "State-changing form submissions accepted", ["family"])
FORM_ERRORS = Counter("webenv_sites_form_errors_total", "Form submissions rejected by validation", ["family"])

SORTS = ("relevance", "value_asc", "value_desc", "date_desc", "rating_desc")
PAGE_SIZE = 10
#: Page kinds a URL can mean (Meaning.kind). POST-only kinds: act, cart_add, cart_remove (and login/checkout posts).
PAGE_KINDS = ("home", "listing", "record", "act", "login", "logout", "help", "about", "account", "cart", "cart_add",
              "cart_remove", "checkout", "order", "done")
#: Kinds a login-required portal (bank, mail) shows only to a signed-in user.
PRIVATE = frozenset({"listing", "record", "act", "account", "cart", "cart_add", "cart_remove", "checkout", "order",
                     "done"})
#: The checkout form of every shop (the field names are the site state's shipping keys).
CHECKOUT_FIELDS = (
    FieldSpec("name", "Full name", "text", min_len=3),
    FieldSpec("street", "Street address", "text", min_len=3),
    FieldSpec("city", "City", "text", min_len=2),
    FieldSpec("zip", "ZIP code", "text", min_len=5),
)

# --- oracle actions (the action grammar's element actions, addressed by CSS selector) -----------------------


def click(selector: str) -> pb.Action:
    return pb.Action(click=pb.ClickAction(target=pb.ElementTarget(selector=selector)))


def fill(selector: str, text: str) -> pb.Action:
    return pb.Action(fill=pb.FillAction(target=pb.ElementTarget(selector=selector), text=text))


def select(selector: str, option: str) -> pb.Action:
    return pb.Action(select=pb.SelectAction(target=pb.ElementTarget(selector=selector), options=[option]))


def answer(text: str) -> pb.Action:
    return pb.Action(answer=pb.AnswerAction(text=text))


def with_query(url: str, **params: str) -> str:
    """url plus query parameters, whether or not it already has a query."""
    return url + ("&" if "?" in url else "?") + urlencode(params)


def css_str(value: str) -> str:
    """A CSS string literal (for attribute selectors such as a[href="..."])."""
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


# --- what a URL means ----------------------------------------------------------------------------------------


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


@lru_cache(maxsize=262144)
def _pick(builder: str, host: str, key: str, n: int) -> int:
    """Which of n word variants a builder uses on a site (a stable hash: the same on every run)."""
    return c.stable_int(builder, host, key) % n


# --- one request -----------------------------------------------------------------------------------------------


class Ctx:
    """One request on one site: the site, its session id, that session's state for the site, the form posted."""

    def __init__(self, site: Site, session: str, st: State, request: Request, form: dict[str, str]) -> None:
        self.site, self.session, self.st, self.request, self.form = site, session, st, request, form

    @property
    def user(self) -> str | None:
        return self.st["auth"]["user"] if self.st["auth"]["logged_in"] else None

    def cart_count(self) -> int:
        return sum(x["qty"] for x in self.st.get("cart", {}).get("items", []))

    @property
    def show_banner(self) -> bool:
        return bool(self.site.look["cookie_banner"]) and "cookie_consent" not in self.request.cookies

    @property
    def show_popup(self) -> bool:
        return bool(self.site.look["popup"]) and "popup_dismissed" not in self.request.cookies


def validate(fields: tuple[FieldSpec, ...], form: dict[str, str]) -> tuple[dict[str, Any], dict[str, str]]:
    """Typed values and per-field error messages, as the server would check them."""
    values: dict[str, Any] = {}
    errors: dict[str, str] = {}
    for f in fields:
        raw = form.get(f.name, "").strip()
        if f.kind == "checkbox":
            values[f.name] = raw == "on"
            continue
        if f.required and not raw:
            errors[f.name] = f"{f.label} is required."
            continue
        if f.kind == "number":
            try:
                n = int(raw)
            except ValueError:
                errors[f.name] = f"{f.label} must be a whole number."
                continue
            if (f.min is not None and n < f.min) or (f.max is not None and n > f.max):
                errors[f.name] = f"{f.label} must be between {f.min} and {f.max}."
                continue
            values[f.name] = n
        elif f.kind == "select":
            if raw not in f.options:
                errors[f.name] = f"Choose a valid {f.label.lower()}."
                continue
            values[f.name] = raw
        else:
            if len(raw) < f.min_len:
                errors[f.name] = f"{f.label} must be at least {f.min_len} characters."
                continue
            if f.kind == "email" and ("@" not in raw or "." not in raw.split("@")[-1]):
                errors[f.name] = f"{f.label} must be a valid email address."
                continue
            if f.name == "zip" and not (raw.isdigit() and len(raw) == 5):
                errors[f.name] = "ZIP code must be 5 digits."
                continue
            values[f.name] = raw
    return values, errors


def search(site: Site, q: str, category: str, sort: str) -> list[Item]:
    """Items matching every word of q (title, author, body), exact title matches first."""
    items = site.items
    if category:
        items = [it for it in items if it.category == category]
    ql = q.strip().lower()
    if ql:
        words = ql.split()
        items = [it for it in items if all(w in f"{it.title} {it.author} {it.body}".lower() for w in words)]
    if sort == "value_asc":
        items = sorted(items, key=lambda it: (it.value, it.id))
    elif sort == "value_desc":
        items = sorted(items, key=lambda it: (-it.value, it.id))
    elif sort == "date_desc":
        items = sorted(items, key=lambda it: (it.date, it.id), reverse=True)
    elif sort == "rating_desc":
        items = sorted(items, key=lambda it: (-it.rating, it.id))
    elif ql:
        items = sorted(items, key=lambda it: (it.title.lower() != ql, it.id))
    return items


def pages_of(total: int) -> int:
    return max(1, -(-total // PAGE_SIZE))


def cart_lines(ctx: Ctx) -> tuple[list[tuple[Item, int]], float]:
    """The cart's (product, quantity) lines whose product the site still has, and their total price."""
    lines = [(ctx.site.by_id[x["sku"]], int(x["qty"])) for x in ctx.st["cart"]["items"] if x["sku"] in ctx.site.by_id]
    return lines, sum(it.value * qty for it, qty in lines)


# --- the builder -----------------------------------------------------------------------------------------------


class Builder:
    """One way to build a website. Subclasses set `name` and `scheme`, implement the `render_*` methods they
    change (the defaults below are plain, attribute-free markup) and the oracle's selectors; `route` is shared."""

    #: Registry name (lower-case letters, digits and '-'): `Task.builder`, `TaskFilter.builders`.
    name: ClassVar[str] = ""
    #: One line: which real-world team or software this builder imitates.
    summary: ClassVar[str] = ""
    scheme: ClassVar[Scheme]
    #: Word banks: each key's variants, one picked per site (`word`); keys missing here fall back to the site's.
    words: ClassVar[dict[str, tuple[str, ...]]] = {}

    # --- URLs ------------------------------------------------------------------------------------------------
    def url(self, site: Site, kind: str, **params: str) -> str:
        return self.scheme.build(site, kind, **params)

    def url_listing(self, site: Site, q: str = "", category: str = "", sort: str = "relevance", page: int = 1) -> str:
        return self.scheme.listing(site, q, category, sort, page)

    def url_record(self, site: Site, item: Item) -> str:
        return self.scheme.build(site, "record", id=item.id)

    def form_url(self, site: Site, kind: str, **params: str) -> str:
        """Where a form of this page kind posts: its URL, or for a hash-routed builder that route's path on the
        server (`/#/login` posts to `/login`: a fragment never reaches the server)."""
        url = self.scheme.build(site, kind, **params)
        return url.removeprefix("/#") if self.scheme.hash else url

    def meaning(self, site: Site, url: str) -> Meaning:
        """What a URL of this site shows (navigation rubrics and tests read URLs through this)."""
        return self.scheme.meaning(site, url)

    def word(self, site: Site, key: str) -> str:
        bank = self.words.get(key)
        if not bank:
            return site.words[key]
        return bank[_pick(self.name, site.host, key, len(bank))]

    # --- routing: one call per request ---------------------------------------------------------------------------
    def route(self, ctx: Ctx) -> Response:
        site, req = ctx.site, ctx.request
        path = req.scope["path"]
        post = req.method == "POST"
        if self.scheme.hash and not post and path.rstrip("/") in ("", "/index.html"):
            return self.shell(ctx)
        m = self.scheme.match(site, path, dict(req.query_params))
        kind = m.kind
        if kind in PRIVATE and site.family.login_required and ctx.user is None:
            here = path + ("?" + req.url.query if req.url.query else "")
            return self.redirect(with_query(self.url(site, "login"), next=here))
        if kind == "home":
            return self.page(ctx, "Home", self.render_home(ctx))
        if kind == "listing":
            return self.listing(ctx, m)
        if kind == "record":
            item = site.by_id.get(m.get("id"))
            if item is None:
                return self.not_found(ctx, f"No {site.family.noun} here")
            return self.page(ctx, item.title, self.render_record(ctx, item, {}, {}))
        if kind == "act":
            item = site.by_id.get(m.get("id"))
            if item is None or site.family.action is None:
                return self.not_found(ctx, f"No {site.family.noun} here")
            if not post:
                return self.redirect(self.url_record(site, item))
            return self.act(ctx, item)
        if kind == "login":
            return self.login(ctx, m.get("next"))
        if kind == "logout":
            ctx.st["auth"] = {"logged_in": False, "user": None}
            return self.redirect(self.url(site, "home"))
        if kind == "help":
            return self.page(ctx, "Help", self.render_help(ctx))
        if kind == "about":
            return self.page(ctx, "About", self.render_about(ctx, m.get("ref")))
        if kind == "account":
            if ctx.user is None:
                return self.redirect(with_query(self.url(site, "login"), next=self.url(site, "account")))
            return self.page(ctx, "Account", self.render_account(ctx))
        if kind == "done" and site.family.action is not None:
            rec = next((r for r in ctx.st[site.family.action.key] if r["id"] == m.get("id")), None)
            if rec is None:
                return self.not_found(ctx, f"No record {m.get('id')}")
            text = site.family.action.done_text
            return self.page(ctx, text, self.render_done(ctx, text, rec["id"], [(k, str(v)) for k, v in rec.items() if k != "id"]))
        if site.family.name == "shop":
            if kind == "cart":
                return self.page(ctx, "Cart", self.render_cart(ctx, site.by_id.get(m.get("added"))))
            if kind == "cart_add" and post:
                return self.cart_add(ctx)
            if kind == "cart_remove" and post:
                sku = ctx.form.get("sku", "")
                ctx.st["cart"]["items"] = [x for x in ctx.st["cart"]["items"] if x["sku"] != sku]
                return self.redirect(self.url(site, "cart"))
            if kind == "checkout":
                return self.checkout(ctx)
            if kind == "order":
                order = next((o for o in ctx.st["orders"] if o["order_id"] == m.get("id")), None)
                if order is None:
                    return self.not_found(ctx, f"No order {m.get('id')}")
                lines = [(ln["title"], f'{ln["qty"]} x ${ln["price"]:,.2f}') for ln in order["items"]]
                lines.append(("Ship to", ", ".join(order["shipping"].values())))
                return self.page(ctx, "Order placed", self.render_done(ctx, "Thank you for your order", order["order_id"], lines))
        return self.not_found(ctx, f"Nothing at {path}")

    def redirect(self, url: str) -> Response:
        return RedirectResponse(url, status_code=303)

    def not_found(self, ctx: Ctx, what: str) -> Response:
        return self.page(ctx, "Not found", self.render_not_found(ctx, what), 404)

    def listing(self, ctx: Ctx, m: Meaning) -> Response:
        site = ctx.site
        q, category, sort, page = m.get("q")[:200], m.get("category"), m.get("sort", "relevance"), int(m.get("page", "1"))
        if category not in site.category_labels:
            category = ""
        found = search(site, q, category, sort)
        shown = found[(page - 1) * PAGE_SIZE: page * PAGE_SIZE]
        body = self.render_listing(ctx, shown, q=q, category=category, sort=sort, page=page, total=len(found), found=found)
        return self.page(ctx, site.family.plural.capitalize(), body)

    def login(self, ctx: Ctx, nxt: str) -> Response:
        nxt = ctx.form.get("next") or nxt or self.url(ctx.site, "home")
        if not nxt.startswith("/") or nxt.startswith("//"):
            nxt = "/"
        if ctx.request.method != "POST":
            return self.page(ctx, "Log in", self.render_login(ctx, nxt, ""))
        username, password = ctx.form.get("username", "").strip(), ctx.form.get("password", "")
        user = next((u for u in ctx.site.users if u.username == username and u.password == password), None)
        if user is None:
            FORM_ERRORS.labels(ctx.site.family.name).inc()
            msg = "Enter your username and password." if not username or not password else "Wrong username or password."
            return self.page(ctx, "Log in", self.render_login(ctx, nxt, msg), 401)
        ctx.st["auth"] = {"logged_in": True, "user": user.username}
        return self.redirect(nxt)

    def act(self, ctx: Ctx, item: Item) -> Response:
        spec = ctx.site.family.action
        assert spec is not None
        values, errors = validate(spec.fields, ctx.form)
        if errors:
            FORM_ERRORS.labels(ctx.site.family.name).inc()
            return self.page(ctx, item.title, self.render_record(ctx, item, ctx.form, errors), 422)
        recs = ctx.st[spec.key]
        rec = {"id": f"{spec.key[:3].upper()}-{len(recs) + 1:04d}", spec.item_field: item.id, **values}
        if ctx.user:
            rec["user"] = ctx.user
        recs.append(rec)
        TRANSACTIONS.labels(ctx.site.family.name).inc()
        return self.redirect(self.url(ctx.site, "done", id=rec["id"]))

    def cart_add(self, ctx: Ctx) -> Response:
        item = ctx.site.by_id.get(ctx.form.get("sku", ""))
        if item is None:
            return self.not_found(ctx, "No such product")
        try:
            qty = int(ctx.form.get("qty", "1"))
        except ValueError:
            qty = 0
        if not 1 <= qty <= 10:
            FORM_ERRORS.labels("shop").inc()
            body = self.render_record(ctx, item, ctx.form, {"qty": "Quantity must be between 1 and 10."})
            return self.page(ctx, item.title, body, 422)
        lines = ctx.st["cart"]["items"]
        line = next((x for x in lines if x["sku"] == item.id), None)
        if line is None:
            lines.append({"sku": item.id, "title": item.title, "qty": qty, "price": item.value})
        else:
            line["qty"] = min(10, line["qty"] + qty)
        return self.redirect(with_query(self.url(ctx.site, "cart"), added=item.id))

    def checkout(self, ctx: Ctx) -> Response:
        if ctx.request.method != "POST":
            if not ctx.st["cart"]["items"]:
                return self.redirect(self.url(ctx.site, "cart"))
            return self.page(ctx, "Checkout", self.render_checkout(ctx, {}, {}))
        values, errors = validate(CHECKOUT_FIELDS, ctx.form)
        if not ctx.st["cart"]["items"]:
            errors["cart"] = "Your cart is empty."
        if errors:
            FORM_ERRORS.labels("shop").inc()
            return self.page(ctx, "Checkout", self.render_checkout(ctx, ctx.form, errors), 422)
        items = [dict(x) for x in ctx.st["cart"]["items"]]
        order = {
            "order_id": f"ORD-{len(ctx.st['orders']) + 1:04d}",
            "items": items,
            "shipping": {k: values[k] for k in ("name", "street", "city", "zip")},
            "total": round(sum(x["qty"] * x["price"] for x in items), 2),
            "status": "placed",
        }
        ctx.st["orders"].append(order)
        ctx.st["cart"]["items"] = []
        TRANSACTIONS.labels("shop").inc()
        return self.redirect(self.url(ctx.site, "order", id=order["order_id"]))

    # --- rendering (override) --------------------------------------------------------------------------------------
    def page(self, ctx: Ctx, title: str, body: str, status: int = 200) -> HTMLResponse:
        """The whole document around a page's body: head, navigation, interruptions, footer."""
        raise NotImplementedError

    def shell(self, ctx: Ctx) -> Response:
        """Hash-routed builders: the one document that renders every page kind from the URL's fragment."""
        raise NotImplementedError

    def render_home(self, ctx: Ctx) -> str:
        raise NotImplementedError

    def render_listing(self, ctx: Ctx, items: list[Item], *, q: str, category: str, sort: str, page: int, total: int,
                       found: list[Item]) -> str:
        raise NotImplementedError

    def render_record(self, ctx: Ctx, item: Item, values: dict[str, str], errors: dict[str, str]) -> str:
        raise NotImplementedError

    def render_login(self, ctx: Ctx, nxt: str, error: str) -> str:
        raise NotImplementedError

    def render_cart(self, ctx: Ctx, added: Item | None) -> str:
        raise NotImplementedError

    def render_checkout(self, ctx: Ctx, values: dict[str, str], errors: dict[str, str]) -> str:
        raise NotImplementedError

    def render_done(self, ctx: Ctx, heading: str, ref: str, lines: list[tuple[str, str]]) -> str:
        rows = "".join(f"<li>{escape(k)}: {escape(v)}</li>" for k, v in lines)
        return (f"<h1>{escape(heading)}</h1><p>Reference: <strong>{escape(ref)}</strong></p><ul>{rows}</ul>"
                f'<p><a href="{escape(self.url(ctx.site, "home"))}">Continue</a></p>')

    def render_help(self, ctx: Ctx) -> str:
        fam = ctx.site.family
        return (f"<h1>Help</h1><h2>How do I find a {escape(fam.noun)}?</h2><p>Use the search or browse the "
                f"{escape(fam.plural)}.</p><h2>How do you use cookies?</h2><p>Only to remember your session.</p>")

    def render_about(self, ctx: Ctx, ref: str) -> str:
        extra = f"<p>Shared item: {escape(ref)}</p>" if ref else ""
        return f"<h1>About {escape(ctx.site.name)}</h1><p>{escape(str(ctx.site.look['tagline']))}</p>{extra}"

    def render_account(self, ctx: Ctx) -> str:
        key = ctx.site.family.action.key if ctx.site.family.action else "orders"
        recs = "".join(f"<li>{escape(json.dumps(r, sort_keys=True))}</li>" for r in ctx.st.get(key, []))
        return f"<h1>Your account</h1><p>Signed in as {escape(ctx.user or '')}</p><h2>History</h2><ul>{recs}</ul>"

    def render_not_found(self, ctx: Ctx, what: str) -> str:
        return f"<h1>Not found</h1><p>{escape(what)}</p>"

    # --- the oracle: abstract steps as actions on this builder's pages ---------------------------------------------
    # The selectors of the common steps: with them set, dismiss, log_in, open_record and open_listed need no code.
    #: The pop-up's close control and the cookie notice's accept control.
    popup_close: ClassVar[str] = ""
    cookie_accept: ClassVar[str] = ""
    #: The link to the login form, then its username field, password field and submit button.
    login_steps: ClassVar[tuple[str, str, str, str]] = ("", "", "", "")
    #: The search box and its submit button.
    search_box: ClassVar[tuple[str, str]] = ("", "")
    #: What holds a listing's links to records (open_listed clicks the record's link inside it).
    results: ClassVar[str] = "main"

    def dismiss(self, site: Site) -> list[pb.Action]:
        """Close what covers the first page (pop-up, cookie banner), as a user would before anything else."""
        return ([click(self.popup_close)] if site.look["popup"] else []) + \
            ([click(self.cookie_accept)] if site.look["cookie_banner"] else [])

    def log_in(self, site: Site, username: str, password: str) -> list[pb.Action]:
        """From any page, signed out: reach the login form, sign in, come back."""
        link, user, password_field, submit = self.login_steps
        return [click(link), fill(user, username), fill(password_field, password), click(submit)]

    def open_record(self, site: Site, item: Item) -> list[pb.Action]:
        """From any page: find the item (search) and open its page."""
        box, go = self.search_box
        return [fill(box, item.title), click(go)] + self.open_listed(site, item)

    def browse(self, site: Site, *, category: str = "", sort: str = "relevance", page: int = 1) -> list[pb.Action]:
        """From any page: the listing filtered to a category, sorted, at page N."""
        raise NotImplementedError

    def open_listed(self, site: Site, item: Item) -> list[pb.Action]:
        """On a listing that shows the item: open its page."""
        return [click(f"{self.results} a[href={css_str(self.url_record(site, item))}]")]

    def submit_record(self, site: Site, item: Item, values: dict[str, object]) -> list[pb.Action]:
        """On the item's page: fill the family's form with the values (field name -> value) and submit it."""
        raise NotImplementedError

    def add_to_cart(self, site: Site, item: Item, qty: int) -> list[pb.Action]:
        """On a product's page: add qty of it to the cart, and close what the site shows after."""
        raise NotImplementedError

    def check_out(self, site: Site, address: dict[str, str]) -> list[pb.Action]:
        """With a filled cart, from the page add_to_cart leaves: check out to the address."""
        raise NotImplementedError


def options_html(options: Iterable[tuple[str, str]], chosen: str) -> str:
    return "".join(f'<option value="{escape(v)}"{" selected" if v == chosen else ""}>{escape(lbl)}</option>'
                    for v, lbl in options)


def native_control(f: FieldSpec, value: str, ident: str, blank: str = "", attrs: str = "") -> str:
    """A field's plain HTML control (a text, email or number input, a textarea, a select whose first option `blank`
    chooses nothing, a checkbox) named by the field, with the id `ident` and extra attributes; the builder wraps it in
    its own labels, layout and errors."""
    head = f'id="{ident}" name="{f.name}"' + (f" {attrs}" if attrs else "")
    if f.kind == "textarea":
        return f"<textarea {head}>{escape(value)}</textarea>"
    if f.kind == "select":
        return (f'<select {head}><option value="">{escape(blank)}</option>'
                f"{options_html(((o, o) for o in f.options), value)}</select>")
    if f.kind == "checkbox":
        return f'<input {head} type="checkbox"{" checked" if value == "on" else ""}>'
    kind = "number" if f.kind == "number" else "email" if f.kind == "email" else "text"
    return f'<input {head} type="{kind}" value="{escape(value)}">'


def fill_native(fields: Iterable[FieldSpec], values: dict[str, Any], target: str) -> list[pb.Action]:
    """The oracle's actions on native controls: choose the option, tick a checkbox that should be on, type the rest;
    `target` is a CSS selector with `{name}` for the field's name."""
    acts: list[pb.Action] = []
    for f in fields:
        css, v = target.format(name=f.name), values[f.name]
        if f.kind == "select":
            acts.append(select(css, str(v)))
        elif f.kind == "checkbox":
            if v:
                acts.append(click(css))
        else:
            acts.append(fill(css, str(v)))
    return acts

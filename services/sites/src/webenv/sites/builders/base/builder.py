"""`Builder`: the interface every site builder implements (its scheme, the `render_*` methods, the oracle methods)
and `Builder.route`, the one request handler every builder shares: the scheme parses the URL, the handler reads or
changes the site state, the builder renders the result."""

from __future__ import annotations

import json
import re
from functools import lru_cache
from html import escape
from typing import TYPE_CHECKING, ClassVar

from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from webenv.sites import content as c
from webenv.sites.builders.base.oracle import click, css_str, fill, with_query
from webenv.sites.builders.base.request import (
    CHECKOUT_FIELDS,
    FORM_ERRORS,
    PAGE_SIZE,
    PRIVATE,
    TRANSACTIONS,
    Ctx,
    search,
    validate,
)
from webenv.sites.builders.base.urls import Meaning, Scheme
from webenv.sites.families.base import Item
from webenv.sites.state import default_state
from webenv.v1 import common_pb2 as pb

if TYPE_CHECKING:
    from webenv.sites.catalog import Site


#: What a browser never shows as text: scripts, styles, templates (an agent's observation leaves them out too).
_UNSHOWN = re.compile(r"<(script|style|template|noscript)\b.*?</\1\s*>", re.S | re.I)
_TAG = re.compile(r"<[^>]*>")


@lru_cache(maxsize=262144)
def _pick(builder: str, host: str, key: str, n: int) -> int:
    """Which of n word variants a builder uses on a site (a stable hash: the same on every run)."""
    return c.stable_int(builder, host, key) % n


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

    # --- the start page ----------------------------------------------------------------------------------------------
    def start_text(self, site: Site) -> str:
        """What the site's start page (`/` in a fresh session: signed out, cookie notice and pop-up up) gives an agent
        to read, for the task generator to keep information tasks from asking what it already shows: the served
        document but its scripts and styles, tags and all (attribute values are read too: link titles, alt texts),
        then the same with its tags taken out (a value split by markup, "$179,000 <span>/ year</span>", reads whole).
        More than an agent's observation (hidden panels count too), never less; a builder that draws its pages by
        script adds what its script draws (`HashApp`)."""
        key = site.family.action.key if site.family.action else None
        scope = {"type": "http", "method": "GET", "path": "/", "raw_path": b"/", "query_string": b"",
                 "headers": [(b"host", site.host.encode())], "scheme": "http", "server": (site.host, 80)}
        ctx = Ctx(site, "start", default_state(site.host, site.family.name, key), Request(scope), {})
        doc = _UNSHOWN.sub(" ", bytes(self.route(ctx).body).decode())
        return f"{doc} {_TAG.sub(' ', doc)}"

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
    #: The tab that shows a record's own attributes (Item.attrs) where they sit in a panel hidden until it is chosen
    #: ("" where they are always shown): the oracle opens it before it answers with them (reveal).
    details_tab: ClassVar[str] = ""

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

    def reveal(self, site: Site, item: Item, labels: list[str]) -> list[pb.Action]:
        """On the item's page: show the facts asked for by their labels, as a user would before reading them (the
        attributes tab, when any asked label is one of the item's own attributes and they sit in a hidden panel). An
        oracle that answers what its pages never showed demonstrates answers no agent could have read."""
        own = {k.lower() for k, _ in item.attrs}
        return [click(self.details_tab)] if self.details_tab and own & {label.lower() for label in labels} else []

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

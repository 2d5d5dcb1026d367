"""The ASGI app serving every synthetic site by Host header, plus MiniWoB++ under miniwob.web.test and the
hand-written websites (`data/handmade/<host>/`, static pages built unlike the generator's templates) on their hosts.

Per-session state is keyed by the `site_session` cookie (set per host; a request without it gets a fresh
one). Forms are plain urlencoded POSTs answered with 303 redirects (post/redirect/get), so browser
history and reloads behave as on real sites.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, quote

from prometheus_client import Counter, Histogram
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import HTMLResponse, PlainTextResponse, RedirectResponse, Response
from starlette.staticfiles import StaticFiles
from webenv.sites import pages
from webenv.sites.catalog import PAGE_SIZE, SORTS, Site, SiteCatalog
from webenv.sites.families.base import FieldSpec, Item
from webenv.sites.state import State, StateStore, default_state, valid_session_id

COOKIE = "site_session"
MINIWOB_HOST = "miniwob.web.test"

HTTP_REQUESTS = Counter("webenv_sites_http_requests_total", "HTTP requests served", ["family", "code"])
HTTP_SECONDS = Histogram(
    "webenv_sites_http_request_seconds", "HTTP request handling time",
    buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0),
)
TRANSACTIONS = Counter("webenv_sites_transactions_total", "State-changing form submissions accepted", ["family"])
FORM_ERRORS = Counter("webenv_sites_form_errors_total", "Form submissions rejected by validation", ["family"])


class Ctx:
    """One request on one site: the site, its session id and that session's state for the site."""

    def __init__(self, site: Site, session: str, st: State, request: Request, form: dict[str, str]) -> None:
        self.site, self.session, self.st, self.request, self.form = site, session, st, request, form

    @property
    def user(self) -> str | None:
        return self.st["auth"]["user"] if self.st["auth"]["logged_in"] else None

    def cart_count(self) -> int:
        return sum(x["qty"] for x in self.st.get("cart", {}).get("items", []))

    def page(self, title: str, body: str, status: int = 200, extra: str = "") -> HTMLResponse:
        show_banner = bool(self.site.look["cookie_banner"]) and "cookie_consent" not in self.request.cookies
        html = pages.layout(self.site, title, body, user=self.user, cart_count=self.cart_count(),
                            show_banner=show_banner, extra=extra)
        return HTMLResponse(html, status_code=status)


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


class SitesApp:
    """ASGI callable: Host header -> site -> page handler."""

    def __init__(self, catalog: SiteCatalog, store: StateStore, miniwob_dir: str | None = None,
                 handmade_dir: Path | None = None) -> None:
        self.catalog = catalog
        self.store = store
        self.static: dict[str, tuple[str, StaticFiles]] = {}  # host -> (metrics family, its files)
        if miniwob_dir:
            self.static[MINIWOB_HOST] = ("miniwob", StaticFiles(directory=miniwob_dir))
        if handmade_dir is not None and handmade_dir.is_dir():
            for d in sorted(handmade_dir.iterdir()):
                if d.is_dir() and d.name.endswith(".web.test"):
                    self.static[d.name] = ("handmade", StaticFiles(directory=str(d), html=True))

    def state_factory(self, site: Site) -> Callable[[], State]:
        key = site.family.action.key if site.family.action else None
        return lambda: default_state(site.host, site.family.name, key)

    async def __call__(self, scope: dict, receive: Callable[[], Awaitable[dict]], send: Callable[[dict], Awaitable[None]]) -> None:
        if scope["type"] == "lifespan":
            while True:
                msg = await receive()
                if msg["type"] == "lifespan.startup":
                    await send({"type": "lifespan.startup.complete"})
                elif msg["type"] == "lifespan.shutdown":
                    await send({"type": "lifespan.shutdown.complete"})
                    return
        if scope["type"] != "http":
            return
        t0 = time.perf_counter()
        request = Request(scope, receive)
        host = (request.headers.get("host") or "").split(":", 1)[0].lower()
        if host in self.static:
            family, files = self.static[host]
            try:
                await files(scope, receive, send)
                code = 200
            except HTTPException as exc:  # StaticFiles raises before sending anything
                code = exc.status_code
                await PlainTextResponse(exc.detail, status_code=code)(scope, receive, send)
            HTTP_REQUESTS.labels(family, str(code)).inc()
            return
        site = self.catalog.get(host)
        if site is None:
            response: Response = PlainTextResponse(f"no such site: {host!r}", status_code=404)
            family = "none"
        else:
            family = site.family.name
            response = await self.handle(site, request)
        await response(scope, receive, send)
        HTTP_REQUESTS.labels(family, str(response.status_code)).inc()
        HTTP_SECONDS.observe(time.perf_counter() - t0)

    async def handle(self, site: Site, request: Request) -> Response:
        session = request.cookies.get(COOKIE) or ""
        new_cookie = not valid_session_id(session)  # a missing or malformed cookie gets a fresh session
        if new_cookie:
            session = self.store.new_session_id()
        st = self.store.get(session, site.host, self.state_factory(site))
        form: dict[str, str] = {}
        if request.method == "POST":
            body = (await request.body()).decode("utf-8", "replace")
            form = {k: v[-1] for k, v in parse_qs(body, keep_blank_values=True).items()}
        ctx = Ctx(site, session, st, request, form)
        response = self.route(ctx)
        if new_cookie:
            response.set_cookie(COOKIE, session, path="/", httponly=True, samesite="lax")
        return response

    # --- routing --------------------------------------------------------------------------------
    def route(self, ctx: Ctx) -> Response:
        site, req = ctx.site, ctx.request
        path = req.scope["path"].rstrip("/") or "/"  # scope, not req.url: no URL object per request
        fam = site.family
        parts = path.strip("/").split("/")
        post = req.method == "POST"
        if path == "/":
            show_popup = bool(site.look["popup"]) and "popup_dismissed" not in req.cookies
            return ctx.page("Home", pages.home(site, show_popup=show_popup, signed_in=ctx.user is not None))
        if path == "/login":
            return self.login(ctx)
        if path == "/logout":
            ctx.st["auth"] = {"logged_in": False, "user": None}
            return RedirectResponse("/", status_code=303)
        if path == "/help":
            return ctx.page("Help", pages.help_page(site))
        if path == "/about":
            return ctx.page("About", pages.about(site, req.query_params.get("ref", "")))
        if parts[0] == fam.path or path.startswith(("/cart", "/checkout", "/orders", "/account", "/done")):
            if fam.login_required and ctx.user is None:
                return RedirectResponse("/login?next=" + quote(str(req.url.path) + ("?" + req.url.query if req.url.query else "")),
                                        status_code=303)
        if path == "/account":
            if ctx.user is None:
                return RedirectResponse("/login?next=/account", status_code=303)
            return ctx.page("Account", pages.account(site, ctx.st, ctx.user))
        if parts[0] == fam.path:
            if len(parts) == 1:
                return self.listing(ctx)
            item = site.by_id.get(parts[1])
            if item is None or len(parts) > 3 or (len(parts) == 3 and parts[2] != "act"):
                return ctx.page("Not found", pages.not_found(f"No {fam.noun} at {path}"), 404)
            if len(parts) == 3:
                if not post or fam.action is None:
                    return RedirectResponse(f"/{fam.path}/{item.id}", status_code=303)
                return self.act(ctx, item)
            return ctx.page(item.title, pages.detail(site, item))
        if fam.name == "shop":
            if path == "/cart":
                added = site.by_id.get(req.query_params.get("added", ""))
                return ctx.page("Cart", pages.cart(site, ctx.st, added))
            if path == "/cart/add" and post:
                return self.cart_add(ctx)
            if path == "/cart/remove" and post:
                sku = ctx.form.get("sku", "")
                ctx.st["cart"]["items"] = [x for x in ctx.st["cart"]["items"] if x["sku"] != sku]
                return RedirectResponse("/cart", status_code=303)
            if path == "/checkout":
                return self.checkout(ctx)
            if parts[0] == "orders" and len(parts) == 2:
                order = next((o for o in ctx.st["orders"] if o["order_id"] == parts[1]), None)
                if order is None:
                    return ctx.page("Not found", pages.not_found(f"No order {parts[1]}"), 404)
                lines = [(ln["title"], f'{ln["qty"]} x ${ln["price"]:,.2f}') for ln in order["items"]]
                lines.append(("Ship to", ", ".join(order["shipping"].values())))
                return ctx.page("Order placed", pages.done(site, "Thank you for your order", order["order_id"], lines))
        if parts[0] == "done" and len(parts) == 2 and fam.action is not None:
            recs = ctx.st[fam.action.key]
            rec = next((r for r in recs if r["id"] == parts[1]), None)
            if rec is None:
                return ctx.page("Not found", pages.not_found(f"No record {parts[1]}"), 404)
            lines = [(k, str(v)) for k, v in rec.items() if k != "id"]
            return ctx.page(fam.action.done_text, pages.done(site, fam.action.done_text, rec["id"], lines))
        return ctx.page("Not found", pages.not_found(f"Nothing at {path}"), 404)

    def listing(self, ctx: Ctx) -> Response:
        qp = ctx.request.query_params
        q = qp.get("q", "")[:200]
        category = qp.get("category", "")
        if category not in ctx.site.category_labels:
            category = ""
        sort = qp.get("sort", "relevance")
        if sort not in SORTS:
            sort = "relevance"
        try:
            page = max(1, int(qp.get("page", "1")))
        except ValueError:
            page = 1
        found = search(ctx.site, q, category, sort)
        shown = found[(page - 1) * PAGE_SIZE: page * PAGE_SIZE]
        body = pages.listing(ctx.site, shown, q=q, category=category, sort=sort, page=page, total=len(found))
        return ctx.page(ctx.site.family.plural.capitalize(), body)

    def login(self, ctx: Ctx) -> Response:
        nxt = ctx.form.get("next") or ctx.request.query_params.get("next", "/")
        if not nxt.startswith("/") or nxt.startswith("//"):
            nxt = "/"
        if ctx.request.method != "POST":
            return ctx.page("Log in", pages.login(ctx.site, next_url=nxt))
        username, password = ctx.form.get("username", "").strip(), ctx.form.get("password", "")
        user = next((u for u in ctx.site.users if u.username == username and u.password == password), None)
        if user is None:
            FORM_ERRORS.labels(ctx.site.family.name).inc()
            msg = "Enter your username and password." if not username or not password else "Wrong username or password."
            return ctx.page("Log in", pages.login(ctx.site, next_url=nxt, error=msg), 401)
        ctx.st["auth"] = {"logged_in": True, "user": user.username}
        return RedirectResponse(nxt, status_code=303)

    def act(self, ctx: Ctx, item: Item) -> Response:
        spec = ctx.site.family.action
        assert spec is not None
        values, errors = validate(spec.fields, ctx.form)
        if errors:
            FORM_ERRORS.labels(ctx.site.family.name).inc()
            body = pages.detail(ctx.site, item, form_values=ctx.form, errors=errors)
            return ctx.page(item.title, body, 422)
        recs = ctx.st[spec.key]
        rec = {"id": f"{spec.key[:3].upper()}-{len(recs) + 1:04d}", spec.item_field: item.id, **values}
        if ctx.user:
            rec["user"] = ctx.user
        recs.append(rec)
        TRANSACTIONS.labels(ctx.site.family.name).inc()
        return RedirectResponse(f"/done/{rec['id']}", status_code=303)

    def cart_add(self, ctx: Ctx) -> Response:
        item = ctx.site.by_id.get(ctx.form.get("sku", ""))
        if item is None:
            return ctx.page("Not found", pages.not_found("No such product"), 404)
        try:
            qty = int(ctx.form.get("qty", "1"))
        except ValueError:
            qty = 0
        if not 1 <= qty <= 10:
            FORM_ERRORS.labels("shop").inc()
            return ctx.page(item.title, pages.detail(ctx.site, item) +
                            '<p class="error" id="qty-error" role="alert">Quantity must be between 1 and 10.</p>', 422)
        lines = ctx.st["cart"]["items"]
        line = next((x for x in lines if x["sku"] == item.id), None)
        if line is None:
            lines.append({"sku": item.id, "title": item.title, "qty": qty, "price": item.value})
        else:
            line["qty"] = min(10, line["qty"] + qty)
        return RedirectResponse(f"/cart?added={item.id}", status_code=303)

    def checkout(self, ctx: Ctx) -> Response:
        if ctx.request.method != "POST":
            if not ctx.st["cart"]["items"]:
                return RedirectResponse("/cart", status_code=303)
            return ctx.page("Checkout", pages.checkout(ctx.site, {}, {}))
        values, errors = validate(pages.CHECKOUT_FIELDS, ctx.form)
        if not ctx.st["cart"]["items"]:
            errors["cart"] = "Your cart is empty."
        if errors:
            FORM_ERRORS.labels("shop").inc()
            return ctx.page("Checkout", pages.checkout(ctx.site, ctx.form, errors), 422)
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
        return RedirectResponse(f"/orders/{order['order_id']}", status_code=303)

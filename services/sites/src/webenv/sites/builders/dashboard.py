"""The `dashboard` builder: an admin console built on a data-grid kit. JSON:API-style query strings
(`/app/<list>?filter[category]=books&sort=-value&page[number]=2`), a sidebar of sections, listings as a grid whose
column headers sort, a filter panel with Apply, "Go to page" instead of page links, records in tabs (Overview,
Specifications, Reviews: the hidden panels shown by script), choices as ARIA comboboxes filled by script, a
privacy panel in a corner and a "What's new" dialog."""

from __future__ import annotations

from functools import lru_cache
from html import escape

from starlette.responses import HTMLResponse
from webenv.sites.builders.base import (
    CHECKOUT_FIELDS,
    Builder,
    Ctx,
    Scheme,
    cart_lines,
    click,
    css_str,
    fill,
    pages_of,
    select,
)
from webenv.sites.catalog import THEMES, Site
from webenv.sites.families.base import FieldSpec, Item
from webenv.v1 import common_pb2 as pb

COLUMNS = (("title", "Name", None), ("value", "{v}", ("value_asc", "value_desc")), ("author", "{a}", None),
           ("date", "{d}", ("date_desc", "date_desc")), ("rating", "Rating", ("rating_desc", "rating_desc")))
SCRIPT = """<script>(function(){
function ck(n){document.cookie=n+"=1; path=/; max-age=31536000";}
var pv=document.querySelector(".db-privacy .db-accept");if(pv){pv.addEventListener("click",function(){ck("cookie_consent");document.querySelector(".db-privacy").remove();});}
var wn=document.querySelector(".db-whatsnew .db-dismiss");if(wn){wn.addEventListener("click",function(){ck("popup_dismissed");document.querySelector(".db-whatsnew").remove();});}
document.querySelectorAll(".db-tabs [role=tab]").forEach(function(t){t.addEventListener("click",function(){
 document.querySelectorAll(".db-tabs [role=tab]").forEach(function(o){o.setAttribute("aria-selected","false");});
 document.querySelectorAll(".db-panel").forEach(function(p){p.hidden=true;});
 t.setAttribute("aria-selected","true");document.getElementById(t.getAttribute("aria-controls")).hidden=false;});});
document.querySelectorAll("[role=combobox]").forEach(function(cb){var lb=document.getElementById(cb.getAttribute("aria-controls"));
 var hid=cb.parentNode.querySelector("input[type=hidden]");
 cb.addEventListener("click",function(){lb.hidden=false;cb.setAttribute("aria-expanded","true");});
 lb.querySelectorAll("[role=option]").forEach(function(o){o.addEventListener("click",function(){
  cb.value=o.textContent;hid.value=o.getAttribute("aria-label");lb.hidden=true;cb.setAttribute("aria-expanded","false");
  lb.querySelectorAll("[role=option]").forEach(function(x){x.setAttribute("aria-selected",x===o?"true":"false");});});});});
var t=document.querySelector(".db-toast");if(t){setTimeout(function(){t.remove();},5000);}
})();</script>"""


class Dashboard(Builder):
    name = "dashboard"
    summary = "an admin console: JSON:API query strings, a sortable data grid, Go to page, tabs, ARIA comboboxes"
    scheme = Scheme(
        routes={
            "home": "/", "listing": "/app/{base}", "record": "/app/{base}/{id}/overview",
            "act": "/app/{base}/{id}/actions", "login": "/auth/login", "logout": "/auth/logout", "help": "/app/help",
            "about": "/app/about", "account": "/app/settings", "cart": "/app/cart", "cart_add": "/app/cart/lines",
            "cart_remove": "/app/cart/lines/delete", "checkout": "/app/cart/checkout", "order": "/app/orders/{id}",
            "done": "/app/activity/{id}",
        },
        q="filter[search]", category="filter[category]", sort="sort", page="page[number]",
        sort_values={"value_asc": "value", "value_desc": "-value", "date_desc": "-date", "rating_desc": "-rating"},
    )
    words = {
        "send": ("Save", "Submit request", "Create record"),
        "add_cart": ("Add line", "Add to order"),
        "checkout": ("Create order", "Checkout"),
        "place": ("Submit order", "Confirm"),
        "accept": ("Accept all", "Allow"),
        "close": ("Dismiss", "Got it"),
        "login": ("Sign in", "Log in to console"),
        "apply": ("Apply", "Filter"),
        "go": ("Go", "Jump"),
    }

    def page(self, ctx: Ctx, title: str, body: str, status: int = 200) -> HTMLResponse:
        site = ctx.site
        privacy = ""
        if ctx.show_banner:
            privacy = (f'<aside class="db-privacy" aria-label="Privacy preferences" style="position:fixed;bottom:12px;left:'
                       f'12px;width:260px;background:#fff;border:1px solid #ccd;box-shadow:0 4px 12px #0003;padding:12px;'
                       f'z-index:30"><p>{escape(site.words["cookie"])}</p><button class="db-accept" type="button">'
                       f'{escape(self.word(site, "accept"))}</button></aside>')
        user = (f'<span class="db-user">{escape(ctx.user)}</span> <a href="{escape(self.url(site, "logout"))}">Sign out</a>'
                if ctx.user else f'<a class="db-signin" href="{escape(self.url(site, "login"))}">{escape(self.word(site, "login"))}</a>')
        html = (f'<!doctype html><html lang="en"><head><meta charset="utf-8"><title>{escape(site.name)} console · '
                f'{escape(title)}</title><link rel="icon" href="data:,"><style>{_css(site)}</style></head><body>'
                f'<div class="db-layout">{_sidebar(self, site, ctx.cart_count() if site.family.name == "shop" else -1)}'
                f'<div class="db-content"><div class="db-topbar">{_search(self, site)}<span>{user}</span></div>'
                f'<main class="db-main">{body}</main></div></div>{privacy}{SCRIPT}</body></html>')
        return HTMLResponse(html, status_code=status)

    def render_home(self, ctx: Ctx) -> str:
        site = ctx.site
        modal = ""
        if ctx.show_popup:
            modal = (f'<div class="db-whatsnew" role="dialog" aria-modal="true" aria-labelledby="db-wn-h" style="position:'
                     f'fixed;inset:0;background:#0008;display:flex;align-items:center;justify-content:center;z-index:40">'
                     f'<div style="background:#fff;padding:24px;max-width:420px"><h2 id="db-wn-h">What\'s new</h2>'
                     f'<p>{escape(site.words["popup"])}</p><button class="db-dismiss" type="button">'
                     f'{escape(self.word(site, "close"))}</button></div></div>')
        if site.family.login_required and ctx.user is None:
            return f'<h1>Console</h1><p>Sign in to view {escape(site.family.plural)}.</p>{modal}'
        return _overview(self, site) + modal

    def render_listing(self, ctx: Ctx, items: list[Item], *, q: str, category: str, sort: str, page: int, total: int,
                       found: list[Item]) -> str:
        site, fam = ctx.site, ctx.site.family
        heads = ""
        for key, label, sorts in COLUMNS:
            text = escape(label.format(v=fam.value_label, a=fam.author_label, d=fam.date_label))
            if sorts is None:
                heads += f'<th scope="col">{text}</th>'
                continue
            active = sort in sorts
            nxt = sorts[1] if sort == sorts[0] else sorts[0]
            aria = ' aria-sort="ascending"' if sort == "value_asc" and key == "value" else \
                ' aria-sort="descending"' if active else ""
            heads += (f'<th scope="col"{aria}><a class="db-sort" href="{escape(self.url_listing(site, q, category, nxt))}">'
                      f"{text}</a></th>")
        rows = "".join(_grid_row(self, site, it.id) for it in items) or \
            '<tr><td colspan="5" class="db-empty">No rows match the filters.</td></tr>'
        opts = '<option value="">All</option>' + "".join(
            f'<option value="{slug}"{" selected" if slug == category else ""}>{escape(label)}</option>'
            for slug, label in site.category_labels.items())
        keep = "".join(f'<input type="hidden" name="{escape(k)}" value="{escape(v)}">' for k, v in
                       ((self.scheme.q, q), (self.scheme.sort, self.scheme.sort_values.get(sort, ""))) if v)
        n = pages_of(total)
        start = (page - 1) * 10
        return (f'<h1>{escape(fam.plural.capitalize())}</h1><form class="db-filters" method="get" '
                f'action="{escape(self.url_listing(site))}">{keep}<label>Category <select name="filter[category]">{opts}'
                f'</select></label> <button class="db-apply" type="submit">{escape(self.word(site, "apply"))}</button></form>'
                f'<table class="db-grid" role="grid"><thead><tr>{heads}</tr></thead><tbody>{rows}</tbody></table>'
                f'<div class="db-pager">Rows {start + 1 if items else 0}–{start + len(items)} of {total} · page {page} of {n}'
                f'<form class="db-jump" method="get" action="{escape(self.url_listing(site))}">'
                + "".join(f'<input type="hidden" name="{escape(k)}" value="{escape(v)}">' for k, v in
                          ((self.scheme.q, q), (self.scheme.category, category),
                           (self.scheme.sort, self.scheme.sort_values.get(sort, ""))) if v)
                + f'<label>Go to page <input name="page[number]" type="number" min="1" max="{n}" value="{page}"></label>'
                f'<button type="submit">{escape(self.word(site, "go"))}</button></form></div>')

    def render_record(self, ctx: Ctx, item: Item, values: dict[str, str], errors: dict[str, str]) -> str:
        site, fam = ctx.site, ctx.site.family
        out = _tabs(self, site, item.id)
        if fam.action is None:
            err = f'<p class="db-invalid">{escape(errors["qty"])}</p>' if "qty" in errors else ""
            return out + (f'<form class="db-line" method="post" action="{escape(self.url(site, "cart_add"))}">{err}'
                          f'<input type="hidden" name="sku" value="{item.id}"><label>Quantity <input name="qty" '
                          f'type="number" min="1" max="10" value="1"></label><button class="db-primary" type="submit">'
                          f'{escape(self.word(site, "add_cart"))}</button></form>')
        err = f'<p class="db-invalid" role="alert">The request has {len(errors)} invalid field(s).</p>' if errors else ""
        fields = "".join(_control(f, values.get(f.name, ""), errors.get(f.name)) for f in fam.action.fields)
        return out + (f'<section class="db-card"><h2>{escape(str(site.look["action_button"]))}</h2>{err}<form class="db-action" '
                      f'method="post" action="{escape(self.url(site, "act", id=item.id))}">{fields}'
                      f'<button class="db-primary" type="submit">{escape(self.word(site, "send"))}</button></form></section>')

    def render_login(self, ctx: Ctx, nxt: str, error: str) -> str:
        err = f'<p class="db-invalid" role="alert">{escape(error)}</p>' if error else ""
        return (f'<section class="db-card db-auth"><h1>{escape(self.word(ctx.site, "login"))}</h1>{err}<form method="post" '
                f'action="{escape(self.url(ctx.site, "login"))}"><input type="hidden" name="next" value="{escape(nxt)}">'
                f'<label>Username <input name="username"></label><label>Password <input name="password" type="password">'
                f'</label><button class="db-primary" type="submit">Continue</button></form></section>')

    def render_cart(self, ctx: Ctx, added: Item | None) -> str:
        site = ctx.site
        toast = f'<div class="db-toast" role="status">Line added: {escape(added.title)}</div>' if added else ""
        lines, total = cart_lines(ctx)
        if not lines:
            return f"{toast}<h1>Order draft</h1><p>No lines yet.</p>"
        rows = "".join(f"<tr><td>{escape(it.title)}</td><td>{qty}</td><td>{escape(it.value_text)}</td></tr>"
                       for it, qty in lines)
        return (f'{toast}<h1>Order draft</h1><table class="db-grid"><tr><th>Item</th><th>Qty</th><th>Unit</th></tr>{rows}'
                f'</table><p>Total ${total:,.2f}</p><a class="db-primary db-create" href="{escape(self.url(site, "checkout"))}">'
                f'{escape(self.word(site, "checkout"))}</a>')

    def render_checkout(self, ctx: Ctx, values: dict[str, str], errors: dict[str, str]) -> str:
        err = f'<p class="db-invalid" role="alert">{escape(errors.get("cart", "Fix the invalid fields."))}</p>' if errors else ""
        fields = "".join(_control(f, values.get(f.name, ""), errors.get(f.name)) for f in CHECKOUT_FIELDS)
        return (f'<section class="db-card"><h1>Shipping</h1>{err}<form class="db-ship" method="post" '
                f'action="{escape(self.url(ctx.site, "checkout"))}">{fields}<button class="db-primary" type="submit">'
                f'{escape(self.word(ctx.site, "place"))}</button></form></section>')

    # --- oracle -----------------------------------------------------------------------------------------------
    popup_close, cookie_accept = ".db-whatsnew .db-dismiss", ".db-privacy .db-accept"
    login_steps = (".db-signin", '.db-auth input[name="username"]', '.db-auth input[name="password"]', ".db-auth .db-primary")
    search_box, results = (".db-search input", ".db-search button"), ".db-grid"
    details_tab = '.db-tabs [aria-controls="db-p-specs"]'

    def browse(self, site: Site, *, category: str = "", sort: str = "relevance", page: int = 1) -> list[pb.Action]:
        acts = [click(f".db-nav a[href={css_str(self.url_listing(site))}]")]
        if category:
            acts += [select(".db-filters select", category), click(".db-filters .db-apply")]
        if sort != "relevance":
            first = "value_asc" if sort in ("value_asc", "value_desc") else sort
            acts.append(click(f".db-grid a[href={css_str(self.url_listing(site, '', category, first))}]"))
            if sort == "value_desc":  # a second click on the header reverses it
                acts.append(click(f".db-grid a[href={css_str(self.url_listing(site, '', category, sort))}]"))
        if page > 1:
            acts += [fill('.db-jump input[name="page[number]"]', str(page)), click(".db-jump button")]
        return acts

    def submit_record(self, site: Site, item: Item, values: dict[str, object]) -> list[pb.Action]:
        spec = site.family.action
        assert spec is not None
        acts: list[pb.Action] = []
        for f in spec.fields:
            v = values[f.name]
            if f.kind == "select":
                acts += [click(f"#db-cb-{f.name}"), click(f"#db-opt-{f.name}-{f.options.index(str(v))}")]
            elif f.kind == "checkbox":
                if v:
                    acts.append(click(f'.db-action input[name="{f.name}"]'))
            else:
                acts.append(fill(f'.db-action [name="{f.name}"]', str(v)))
        return acts + [click(".db-action .db-primary")]

    def add_to_cart(self, site: Site, item: Item, qty: int) -> list[pb.Action]:
        return [fill('.db-line input[name="qty"]', str(qty)), click(".db-line .db-primary")]

    def check_out(self, site: Site, address: dict[str, str]) -> list[pb.Action]:
        return ([click(".db-create")] + [fill(f'.db-ship input[name="{k}"]', address[k]) for k in ("name", "street", "city", "zip")]
                + [click(".db-ship .db-primary")])


def _control(f: FieldSpec, value: str, error: str | None) -> str:
    err = f'<span class="db-invalid">{escape(error)}</span>' if error else ""
    if f.kind == "select":
        opts = "".join(f'<li role="option" id="db-opt-{f.name}-{i}" aria-label="{escape(o)}" '
                       f'aria-selected="{"true" if o == value else "false"}">{escape(o)}</li>' for i, o in enumerate(f.options))
        return (f'<div class="db-field db-combo"><label for="db-cb-{f.name}">{escape(f.label)}</label>'
                f'<input type="hidden" name="{f.name}" value="{escape(value)}"><input id="db-cb-{f.name}" role="combobox" '
                f'aria-expanded="false" aria-controls="db-lb-{f.name}" readonly value="{escape(value)}" placeholder="Select…">'
                f'<ul id="db-lb-{f.name}" role="listbox" hidden>{opts}</ul>{err}</div>')
    if f.kind == "checkbox":
        return (f'<div class="db-field"><label><input type="checkbox" name="{f.name}" value="on"'
                f'{" checked" if value == "on" else ""}> {escape(f.label)}</label>{err}</div>')
    if f.kind == "textarea":
        return (f'<div class="db-field"><label>{escape(f.label)}<textarea name="{f.name}" rows="4">{escape(value)}</textarea>'
                f"</label>{err}</div>")
    kind = {"number": "number", "email": "email"}.get(f.kind, "text")
    return (f'<div class="db-field"><label>{escape(f.label)}<input type="{kind}" name="{f.name}" value="{escape(value)}">'
            f"</label>{err}</div>")


@lru_cache(maxsize=8192)
def _css(site: Site) -> str:
    accent = THEMES[(int(site.look["theme"]) + 1) % len(THEMES)][0]
    return (f"body{{margin:0;font:14px/1.4 system-ui,sans-serif;background:#f3f4f8}}.db-layout{{display:flex;min-height:100vh}}"
            f".db-sidebar{{width:210px;background:#1e2233;color:#cfd3e6;padding:16px}}.db-sidebar a{{color:#cfd3e6;display:block;"
            f"padding:6px 0}}.db-content{{flex:1}}.db-topbar{{display:flex;justify-content:space-between;padding:10px 20px;"
            f"background:#fff;border-bottom:1px solid #dde}}.db-main{{padding:20px}}.db-grid{{width:100%;background:#fff;"
            f"border-collapse:collapse}}.db-grid td,.db-grid th{{border-bottom:1px solid #eef;padding:6px 8px;text-align:left}}"
            f".db-primary{{background:{accent};color:#fff;border:0;border-radius:4px;padding:7px 14px}}.db-card{{background:"
            f"#fff;padding:16px;margin:12px 0;border-radius:6px}}.db-invalid{{color:#c00}}.db-field{{margin:10px 0}}"
            f"[role=listbox]{{list-style:none;border:1px solid #ccd;padding:0;margin:0;background:#fff;max-width:280px}}"
            f"[role=option]{{padding:4px 8px;cursor:pointer}}[role=option]:hover{{background:#eef}}.db-tabs [aria-selected=true]"
            f"{{border-bottom:2px solid {accent}}}.db-toast{{position:fixed;bottom:16px;right:16px;background:#1e2233;color:"
            f"#fff;padding:10px 14px}}[hidden]{{display:none!important}}")


@lru_cache(maxsize=8192)
def _sidebar(b: Dashboard, site: Site, cart: int) -> str:
    cart_link = f'<a href="{escape(b.url(site, "cart"))}">Order draft ({cart})</a>' if cart >= 0 else ""
    return (f'<nav class="db-sidebar" aria-label="Sections"><a class="db-brand" href="/"><b>{escape(site.name)}</b></a>'
            f'<div class="db-nav"><a href="/">Overview</a><a href="{escape(b.url_listing(site))}">'
            f'{escape(site.family.plural.capitalize())}</a>{cart_link}<a href="{escape(b.url(site, "help"))}">Help</a></div></nav>')


@lru_cache(maxsize=8192)
def _search(b: Dashboard, site: Site) -> str:
    return (f'<form class="db-search" method="get" action="{escape(b.url_listing(site))}" role="search">'
            f'<input name="filter[search]" placeholder="{escape(site.words["search_placeholder"])}" aria-label="Search">'
            f'<button type="submit">Search</button></form>')


@lru_cache(maxsize=8192)
def _overview(b: Dashboard, site: Site) -> str:
    fam = site.family
    counts = "".join(f"<li>{escape(label)}: {sum(1 for it in site.items if it.category == slug)}</li>"
                     for slug, label in site.category_labels.items())
    return (f"<h1>Overview</h1><div class=\"db-card\"><p>{len(site.items)} {escape(fam.plural)} in "
            f"{len(site.category_labels)} categories.</p><ul>{counts}</ul></div>")


@lru_cache(maxsize=131072)
def _grid_row(b: Dashboard, site: Site, item_id: str) -> str:
    it = site.by_id[item_id]
    return (f'<tr><td><a href="{escape(b.url_record(site, it))}">{escape(it.title)}</a></td><td>{escape(it.value_text)}</td>'
            f"<td>{escape(it.author)}</td><td>{escape(site.fmt_date(it.date))}</td><td>{it.rating:.1f}</td></tr>")


@lru_cache(maxsize=65536)
def _tabs(b: Dashboard, site: Site, item_id: str) -> str:
    it = site.by_id[item_id]
    fam = site.family
    cat = site.category_labels.get(it.category, it.category)
    cards = "".join(f'<div class="db-stat"><span>{escape(k)}</span>: <strong>{escape(v)}</strong></div>' for k, v in (
        (fam.value_label, it.value_text), (fam.author_label, it.author), ("Category", cat),
        (fam.date_label, site.fmt_date(it.date)), ("Rating", f"{it.rating:.1f} / 5")))
    specs = "".join(f"<tr><th>{escape(k)}</th><td>{escape(v)}</td></tr>" for k, v in it.attrs)
    reviews = "".join(f"<li>{r['stars']}/5 by {escape(str(r['author']))}: {escape(str(r['text']))}</li>" for r in it.reviews)
    return (f'<p><a href="{escape(b.url_listing(site))}">{escape(fam.plural.capitalize())}</a> / {escape(it.id)}</p>'
            f"<h1>{escape(it.title)}</h1>"
            f'<div class="db-tabs" role="tablist"><button role="tab" aria-selected="true" aria-controls="db-p-overview">'
            f'Overview</button><button role="tab" aria-selected="false" aria-controls="db-p-specs">Specifications</button>'
            f'<button role="tab" aria-selected="false" aria-controls="db-p-reviews">Reviews ({len(it.reviews)})</button></div>'
            f'<section class="db-panel db-card" id="db-p-overview" role="tabpanel">{cards}<p>{escape(it.body)}</p></section>'
            f'<section class="db-panel db-card" id="db-p-specs" role="tabpanel" hidden><table>{specs}</table></section>'
            f'<section class="db-panel db-card" id="db-p-reviews" role="tabpanel" hidden><ul>{reviews or "<li>No reviews.</li>"}'
            f"</ul></section>")

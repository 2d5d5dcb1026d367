"""The `platform` builder: the synthetic web as it was first built, every site one platform wearing a theme.

HTML as plain f-strings (fast: no template engine per request). Its ids and data- attributes are the same on
every site it builds; layout (3 variants), theme, order of blocks and wording differ per site. Its markup is kept
unchanged, so the single-platform catalog (`WEBENV_SITES_BUILDERS=platform`) stays loadable for comparison.
"""

from __future__ import annotations

import json
from functools import lru_cache
from html import escape
from urllib.parse import urlencode

from starlette.responses import HTMLResponse
from webenv.sites.builders.base import (
    CHECKOUT_FIELDS,
    PAGE_SIZE,
    SORTS,
    Builder,
    Ctx,
    Scheme,
    click,
    fill,
    select,
)
from webenv.sites.catalog import LAYOUTS, THEMES, Site
from webenv.sites.families.base import FieldSpec, Item
from webenv.v1 import common_pb2 as pb

SORT_LABELS = {
    "relevance": "Best match",
    "value_asc": "{value}: low to high",
    "value_desc": "{value}: high to low",
    "date_desc": "Newest first",
    "rating_desc": "Top rated",
}

SCRIPT = """
(function(){
  function $(s){return document.querySelector(s);}
  function setCookie(k){document.cookie=k+"=1; path=/; max-age=31536000";}
  var acc=$("#cookie-accept"); if(acc){acc.addEventListener("click",function(){setCookie("cookie_consent");var b=$("#cookie-banner");if(b){b.remove();}});}
  var pc=$("#popup-close"); if(pc){pc.addEventListener("click",function(){setCookie("popup_dismissed");var p=$("#popup");if(p){p.remove();}});}
  var mc=$("#modal-close"); if(mc){mc.addEventListener("click",function(){var m=$("#modal");if(m){m.remove();}});}
  document.querySelectorAll("[role=tab]").forEach(function(t){t.addEventListener("click",function(){
    document.querySelectorAll("[role=tab]").forEach(function(o){o.setAttribute("aria-selected","false");});
    document.querySelectorAll("[role=tabpanel]").forEach(function(p){p.hidden=true;});
    t.setAttribute("aria-selected","true"); var p=document.getElementById(t.getAttribute("aria-controls")); if(p){p.hidden=false;}});});
  var data=$("#item-data");
  if(data){var d=JSON.parse(data.textContent); var r=$("#item-rating");
    if(r){r.textContent=d.rating.toFixed(1)+" / 5 ("+d.reviews.length+" reviews)";}
    var list=$("#reviews"); if(list){d.reviews.forEach(function(rv){var li=document.createElement("li");li.className="review";
      li.textContent=rv.stars+"\u2605 "+rv.author+": "+rv.text; list.appendChild(li);});
      if(!d.reviews.length){var e=document.createElement("li");e.id="no-reviews";e.textContent="No reviews yet.";list.appendChild(e);}}}
  var pick=$("#todays-pick"); var pd=$("#pick-data");
  if(pick&&pd){var x=JSON.parse(pd.textContent); var a=document.createElement("a"); a.href=x.href; a.textContent=x.title; a.id="pick-link"; pick.appendChild(a);}
  document.querySelectorAll(".quick-view").forEach(function(b){b.addEventListener("click",function(){
    var q=$("#quick-modal"); if(!q){return;} $("#quick-title").textContent=b.dataset.title; $("#quick-value").textContent=b.dataset.value; q.hidden=false;});});
  var qc=$("#quick-close"); if(qc){qc.addEventListener("click",function(){$("#quick-modal").hidden=true;});}
})();
"""


# Rendered fragments that depend only on the site (and an item) are cached: most of a page is static per site.
@lru_cache(maxsize=8192)
def css(site: Site) -> str:
    accent, bg, fg, font = THEMES[int(site.look["theme"])]
    layout = LAYOUTS[int(site.look["layout"])]
    grid = {
        "classic": "grid-template-columns: 220px 1fr; grid-template-areas: 'side main';",
        "compact": "grid-template-columns: 1fr; grid-template-areas: 'main' 'side';",
        "magazine": "grid-template-columns: 1fr 260px; grid-template-areas: 'main side';",
    }[layout]
    return (
        f"body{{margin:0;font-family:{font};background:{bg};color:{fg}}}"
        f"header{{background:{accent};color:#fff;padding:10px 16px;display:flex;gap:16px;align-items:center;flex-wrap:wrap}}"
        "header a{color:#fff}"
        f".wrap{{display:grid;{grid}gap:16px;padding:16px}}main{{grid-area:main}}aside{{grid-area:side}}"
        f"button,.btn{{background:{accent};color:#fff;border:0;padding:6px 12px;border-radius:4px;cursor:pointer}}"
        ".result{margin:6px 0;padding:8px;background:#fff;border:1px solid #ddd;list-style:none}"
        "#cookie-banner{position:fixed;bottom:0;left:0;right:0;background:#222;color:#fff;padding:12px;z-index:50}"
        ".overlay{position:fixed;inset:0;background:rgba(0,0,0,.45);z-index:60;display:flex;align-items:center;justify-content:center}"
        ".overlay .box{background:#fff;color:#111;padding:24px;border-radius:8px;min-width:280px}"
        ".field-error{color:#b00020}.error{color:#b00020}label{display:block;margin-top:8px}"
        "footer{padding:16px;font-size:12px;opacity:.7}[hidden]{display:none !important}"
    )


def _nav(site: Site, user: str | None, cart_count: int) -> str:
    fam = site.family
    w = site.words
    parts = [
        f'<a id="home-link" href="/"><strong>{escape(site.name)}</strong></a>',
        f'<a id="nav-list" href="/{fam.path}">{escape(fam.plural.capitalize())}</a>',
        '<a id="nav-help" href="/help">Help</a>',
        '<a id="nav-about" href="/about" target="_blank" rel="noopener">About us</a>',
    ]
    if fam.name == "shop":
        parts.append(f'<a id="cart-link" href="/cart">Cart (<span id="cart-count">{cart_count}</span>)</a>')
    if user:
        parts.append(f'<a id="account-link" href="/account">{escape(user)}</a><a id="logout-link" href="/logout">Log out</a>')
    else:
        parts.append(f'<a id="login-link" href="/login">{escape(w["login"])}</a>')
    search = (
        f'<form id="search-form" role="search" action="/{fam.path}" method="get">'
        f'<input id="search-q" name="q" type="search" aria-label="{escape(w["search"])}" placeholder="{escape(w["search_placeholder"])}">'
        f'<button id="search-btn" type="submit">{escape(w["search"])}</button></form>'
    )
    if LAYOUTS[int(site.look["layout"])] == "compact":
        return "<header>" + search + "".join(parts) + "</header>"
    return "<header>" + "".join(parts) + search + "</header>"


@lru_cache(maxsize=8192)
def _side(site: Site) -> str:
    links = "".join(
        f'<li><a class="cat-link" data-category="{slug}" href="/{site.family.path}?category={slug}">{escape(label)}</a></li>'
        for slug, label in site.category_labels.items()
    )
    return f'<aside><h2>Categories</h2><ul id="categories">{links}</ul></aside>'


def layout(site: Site, title: str, body: str, *, user: str | None, cart_count: int = 0,
           show_banner: bool = False, extra: str = "") -> str:
    w = site.words
    banner = ""
    if show_banner:
        banner = (f'<div id="cookie-banner" role="region" aria-label="Cookie notice">{escape(w["cookie"])} '
                  f'<button id="cookie-accept" type="button">{escape(w["accept"])}</button></div>')
    return (
        f'<!doctype html><html lang="en"><head><meta charset="utf-8"><title>{escape(title)} | {escape(site.name)}</title>'
        f'<meta name="viewport" content="width=device-width, initial-scale=1"><link rel="icon" href="data:,"><style>{css(site)}</style></head>'
        f'<body class="layout-{LAYOUTS[int(site.look["layout"])]}">{_nav(site, user, cart_count)}'
        f'<div class="wrap"><main>{body}</main>{_side(site)}</div>'
        f'<footer>&copy; 2026 {escape(site.name)} &middot; {escape(str(site.look["tagline"]))}</footer>'
        f"{banner}{extra}<script>{SCRIPT}</script></body></html>"
    )


def home(site: Site, *, show_popup: bool, signed_in: bool = True) -> str:
    return _home(site, show_popup, signed_in or not site.family.login_required)


@lru_cache(maxsize=8192)
def _home(site: Site, show_popup: bool, show_items: bool) -> str:
    fam = site.family
    top = sorted(site.items, key=lambda it: (-it.rating, it.id))[:6]
    cards = "".join(_result(site, it) for it in top)
    pick = top[0]
    popup = ""
    if show_popup:
        popup = (f'<div id="popup" class="overlay" role="dialog" aria-modal="true" aria-label="Newsletter"><div class="box">'
                 f'<p>{escape(site.words["popup"])}</p><input aria-label="Email" placeholder="you@example.com">'
                 f'<button id="popup-close" type="button">{escape(site.words["close"])}</button></div></div>')
    pick_json = json.dumps({"href": f"/{fam.path}/{pick.id}", "title": pick.title}).replace("<", "\\u003c")
    body = (
        f'<h1 id="site-title">{escape(site.name)}</h1><p class="tagline">{escape(str(site.look["tagline"]))}</p>'
        f'<section><h2>Today\'s pick</h2><div id="todays-pick"></div>'
        f'<script type="application/json" id="pick-data">{pick_json}</script></section>'
        f'<section><h2>Popular {escape(fam.plural)}</h2><ul id="featured">{cards}</ul></section>'
    )
    if not show_items:  # portals behind a login show no account data to visitors
        body = (f'<h1 id="site-title">{escape(site.name)}</h1><p class="tagline">{escape(str(site.look["tagline"]))}</p>'
                f'<section id="signin-prompt"><p>Please sign in to see your {escape(fam.plural)}.</p>'
                f'<a id="signin-cta" class="btn" href="/login">{escape(site.words["login"])}</a></section>')
    return body + popup


def _result(site: Site, it: Item) -> str:
    return _result_cached(site, it.id)


@lru_cache(maxsize=131072)
def _result_cached(site: Site, item_id: str) -> str:
    it = site.by_id[item_id]
    quick = ""
    if site.family.name == "shop":
        quick = (f' <button type="button" class="quick-view" data-title="{escape(it.title)}" '
                 f'data-value="{escape(it.value_text)}">Quick view</button>')
    return (
        f'<li class="result" data-item="{it.id}"><a class="item-link" data-item="{it.id}" '
        f'href="/{site.family.path}/{it.id}">{escape(it.title)}</a> &middot; '
        f'<span class="value{" price" if site.family.name == "shop" else ""}">{escape(it.value_text)}</span> &middot; <span class="author">{escape(it.author)}</span>'
        f' &middot; <time datetime="{it.date}">{escape(site.fmt_date(it.date))}</time>{quick}</li>'
    )


def listing(site: Site, items: list[Item], *, q: str, category: str, sort: str, page: int, total: int) -> str:
    fam = site.family
    w = site.words
    opts = f'<option value="">{escape(w["all"])}</option>' + "".join(
        f'<option value="{slug}"{" selected" if slug == category else ""}>{escape(label)}</option>'
        for slug, label in site.category_labels.items()
    )
    sorts = "".join(
        f'<option value="{s}"{" selected" if s == sort else ""}>'
        f'{escape(SORT_LABELS[s].format(value=fam.value_label))}</option>'
        for s in SORTS
    )
    form = (
        f'<form id="filter-form" action="/{fam.path}" method="get"><input type="hidden" name="q" value="{escape(q)}">'
        f'<label>Category <select id="filter-category" name="category">{opts}</select></label>'
        f'<label>Sort by <select id="sort" name="sort">{sorts}</select></label>'
        f'<button id="apply-filters" type="submit">{escape(w["apply"])}</button></form>'
    )
    pages = max(1, -(-total // PAGE_SIZE))

    base = escape(f"/{fam.path}?" + urlencode({"q": q, "category": category, "sort": sort}) + "&page=")

    def link(p: int) -> str:  # already escaped for an attribute
        return f"{base}{p}"

    nav = ""
    if page > 1:
        nav += f'<a id="prev-page" href="{link(page - 1)}">{escape(w["prev"])}</a> '
    nav += " ".join(
        f'<a class="page-link" data-page="{p}" href="{link(p)}"'
        f'{" aria-current=page" if p == page else ""}>{p}</a>'
        for p in range(1, pages + 1)
    )
    if page < pages:
        nav += f' <a id="next-page" href="{link(page + 1)}">{escape(w["next"])}</a>'
    heading = site.category_labels.get(category, fam.plural.capitalize())
    results = "".join(_result(site, it) for it in items) or '<li id="no-results">Nothing found.</li>'
    quick = ""
    if fam.name == "shop":
        quick = ('<div id="quick-modal" class="overlay" role="dialog" aria-label="Quick view" hidden><div class="box">'
                 '<h3 id="quick-title"></h3><p id="quick-value"></p><button id="quick-close" type="button">Close</button></div></div>')
    return (
        f'<h1 id="list-title">{escape(heading)}</h1>{form}'
        f'<p id="result-count">{total} {escape(fam.plural)}{" for &quot;" + escape(q) + "&quot;" if q else ""}'
        f' &middot; page <span id="page-number">{page}</span> of {pages}</p>'
        f'<ul id="results">{results}</ul><nav id="pagination" aria-label="Pages">{nav}</nav>{quick}'
    )


def field_html(f: FieldSpec, value: str, error: str | None) -> str:
    fid = f"f-{f.name}"
    err = f'<span class="field-error" id="err-{f.name}">{escape(error)}</span>' if error else ""
    req = " required" if f.required and f.kind != "checkbox" else ""
    if f.kind == "textarea":
        ctl = f'<textarea id="{fid}" name="{f.name}"{req}>{escape(value)}</textarea>'
    elif f.kind == "select":
        ctl = f'<select id="{fid}" name="{f.name}">' + "".join(
            f'<option value="{escape(o)}"{" selected" if o == value else ""}>{escape(o)}</option>' for o in f.options
        ) + "</select>"
    elif f.kind == "checkbox":
        ctl = f'<input id="{fid}" name="{f.name}" type="checkbox" value="on"{" checked" if value == "on" else ""}>'
    else:
        typ = {"number": "number", "email": "email"}.get(f.kind, "text")
        ctl = f'<input id="{fid}" name="{f.name}" type="{typ}" value="{escape(value)}"{req}>'
    return f'<label for="{fid}">{escape(f.label)}</label>{ctl}{err}'


def detail(site: Site, it: Item, *, form_values: dict[str, str] | None = None,
           errors: dict[str, str] | None = None) -> str:
    if not form_values and not errors:
        return _detail_cached(site, it.id)
    return _detail(site, it, form_values, errors)


@lru_cache(maxsize=65536)
def _detail_cached(site: Site, item_id: str) -> str:
    return _detail(site, site.by_id[item_id], None, None)


def _detail(site: Site, it: Item, form_values: dict[str, str] | None, errors: dict[str, str] | None) -> str:
    fam = site.family
    w = site.words
    form_values = form_values or {}
    errors = errors or {}
    rows = "".join(
        f'<tr data-attr="{escape(k)}"><th>{escape(k)}</th><td class="attr-value">{escape(v)}</td></tr>' for k, v in it.attrs
    )
    data = json.dumps({"rating": it.rating, "reviews": list(it.reviews)}).replace("<", "\\u003c")
    if fam.action is None:  # shop
        action = (
            f'<form id="cart-form" method="post" action="/cart/add"><input type="hidden" name="sku" value="{it.id}">'
            f'<label for="qty">Quantity</label><input id="qty" name="qty" type="number" min="1" max="10" value="1">'
            f'<button id="add-to-cart" type="submit">{escape(w["add_cart"])}</button></form>'
        )
    else:
        fields = "".join(field_html(f, form_values.get(f.name, ""), errors.get(f.name)) for f in fam.action.fields)
        summary = ""
        if errors:
            summary = f'<p class="error" id="form-errors" role="alert">Please fix {len(errors)} error(s) below.</p>'
        action = (
            f'<section id="action"><h2>{escape(str(site.look["action_button"]))}</h2>{summary}'
            f'<form id="action-form" method="post" action="/{fam.path}/{it.id}/act">{fields}'
            f'<button id="action-submit" type="submit">{escape(str(site.look["action_button"]))}</button></form></section>'
        )
    cat_label = site.category_labels.get(it.category, it.category)
    return (
        f'<nav aria-label="Breadcrumb"><a href="/">Home</a> / <a id="crumb-category" href="/{fam.path}?category={it.category}">'
        f'{escape(cat_label)}</a></nav>'
        f'<h1 id="item-title" data-item="{it.id}">{escape(it.title)}</h1>'
        f'<dl id="summary"><dt>{escape(fam.value_label)}</dt><dd id="item-value">{escape(it.value_text)}</dd>'
        f'<dt>{escape(fam.author_label)}</dt><dd id="item-author">{escape(it.author)}</dd>'
        f'<dt>Category</dt><dd id="item-category">{escape(cat_label)}</dd>'
        f'<dt>{escape(fam.date_label)}</dt><dd id="item-date"><time datetime="{it.date}">{escape(site.fmt_date(it.date))}</time></dd>'
        f'<dt>Rating</dt><dd id="item-rating"></dd></dl>'
        f'<p id="item-body">{escape(it.body)}</p>'
        f'<div role="tablist"><button id="tab-details" role="tab" aria-selected="true" aria-controls="panel-details">'
        f'{escape(w["details"])}</button><button id="tab-reviews" role="tab" aria-selected="false" aria-controls="panel-reviews">'
        f'{escape(w["reviews"])}</button></div>'
        f'<div id="panel-details" role="tabpanel"><table id="attrs">{rows}</table></div>'
        f'<div id="panel-reviews" role="tabpanel" hidden><ul id="reviews"></ul></div>'
        f'<script type="application/json" id="item-data">{data}</script>'
        f'<p><a id="share-link" href="/about?ref={it.id}" target="_blank" rel="noopener">Share this {escape(fam.noun)}</a></p>'
        f"{action}"
    )


def login(site: Site, *, next_url: str, error: str = "") -> str:
    err = f'<p id="login-error" class="error" role="alert">{escape(error)}</p>' if error else ""
    return (
        f'<h1>{escape(site.words["login"])}</h1>{err}<form id="login-form" method="post" action="/login">'
        f'<input type="hidden" name="next" value="{escape(next_url)}">'
        '<label for="username">Username</label><input id="username" name="username" autocomplete="username">'
        '<label for="password">Password</label><input id="password" name="password" type="password">'
        f'<button id="login-submit" type="submit">{escape(site.words["login"])}</button></form>'
    )


def help_page(site: Site) -> str:
    fam = site.family
    faqs = [
        (f"How do I find a {fam.noun}?", f"Use the search box or browse the categories on the {fam.plural} page."),
        ("Do I need an account?", "Some features need you to log in." if fam.login_required else "No, browsing is open to all."),
        ("How do you use cookies?", "Only to remember your session and preferences."),
    ]
    items = "".join(
        f'<details class="faq" id="faq-{i}"><summary>{escape(q)}</summary><p>{escape(a)}</p></details>'
        for i, (q, a) in enumerate(faqs)
    )
    return f'<h1>Help</h1><section id="faq" aria-label="Frequently asked questions">{items}</section>'


def about(site: Site, ref: str) -> str:
    extra = f'<p id="shared-ref">Shared item: {escape(ref)}</p>' if ref else ""
    return f'<h1>About {escape(site.name)}</h1><p>{escape(str(site.look["tagline"]))}</p>{extra}'


def cart(site: Site, st: dict, added: Item | None) -> str:
    rows = ""
    total = 0.0
    for line in st["cart"]["items"]:
        it = site.by_id.get(line["sku"])
        if it is None:
            continue
        total += it.value * line["qty"]
        rows += (
            f'<tr class="cart-row" data-sku="{it.id}"><td>{escape(it.title)}</td><td class="qty">{line["qty"]}</td>'
            f'<td>{escape(it.value_text)}</td><td><form method="post" action="/cart/remove">'
            f'<input type="hidden" name="sku" value="{it.id}"><button class="remove" type="submit">Remove</button></form></td></tr>'
        )
    modal = ""
    if added is not None:
        modal = (f'<div id="modal" class="overlay" role="dialog" aria-modal="true" aria-label="Added to cart"><div class="box">'
                 f'<p id="modal-text">Added {escape(added.title)} to your cart.</p>'
                 f'<button id="modal-close" type="button">Continue shopping</button></div></div>')
    body = (
        f'<h1>Your cart</h1><table id="cart"><tr><th>Item</th><th>Qty</th><th>Price</th><th></th></tr>{rows}</table>'
        f'<p>Total: <span id="cart-total">${total:,.2f}</span></p>'
    )
    if rows:
        body += f'<a id="checkout-btn" class="btn" href="/checkout">{escape(site.words["checkout"])}</a>'
    else:
        body += '<p id="cart-empty">Your cart is empty.</p>'
    return body + modal


def checkout(site: Site, values: dict[str, str], errors: dict[str, str]) -> str:
    fields = "".join(
        field_html(f, values.get(f.name, ""), errors.get(f.name)).replace(f'id="f-{f.name}"', f'id="ship-{f.name}"')
        .replace(f'for="f-{f.name}"', f'for="ship-{f.name}"')
        for f in CHECKOUT_FIELDS
    )
    summary = f'<p class="error" id="form-errors" role="alert">Please fix {len(errors)} error(s) below.</p>' if errors else ""
    return (f'<h1>Checkout</h1>{summary}<form id="checkout-form" method="post" action="/checkout">{fields}'
            f'<button id="place-order" type="submit">{escape(site.words["checkout"])}</button></form>')


def done(site: Site, heading: str, record_id: str, lines: list[tuple[str, str]]) -> str:
    rows = "".join(f"<tr><th>{escape(k)}</th><td>{escape(v)}</td></tr>" for k, v in lines)
    return (f'<h1 id="done-title">{escape(heading)}</h1><p>Reference: <span id="confirmation-id">{escape(record_id)}</span></p>'
            f'<table id="confirmation">{rows}</table><a id="continue-link" href="/">Continue</a>')


def account(site: Site, st: dict, user: str) -> str:
    key = site.family.action.key if site.family.action else "orders"
    recs = st.get(key, [])
    items = "".join(f'<li class="record">{escape(json.dumps(r, sort_keys=True))}</li>' for r in recs)
    return f'<h1>Your account</h1><p id="account-user">Signed in as {escape(user)}</p><h2>History</h2><ul id="history">{items}</ul>'


def not_found(what: str) -> str:
    return f'<h1 id="not-found">Not found</h1><p>{escape(what)}</p>'


class Platform(Builder):
    """The original template: top header with search, category sidebar, `#results` list, tabs on detail pages."""

    name = "platform"
    summary = "the original single platform: one set of ids and data- attributes, three layouts, six themes"
    scheme = Scheme(routes={
        "home": "/", "listing": "/{base}", "record": "/{base}/{id}", "act": "/{base}/{id}/act", "login": "/login",
        "logout": "/logout", "help": "/help", "about": "/about", "account": "/account", "cart": "/cart",
        "cart_add": "/cart/add", "cart_remove": "/cart/remove", "checkout": "/checkout", "order": "/orders/{id}",
        "done": "/done/{id}"})

    def page(self, ctx: Ctx, title: str, body: str, status: int = 200) -> HTMLResponse:
        html = layout(ctx.site, title, body, user=ctx.user, cart_count=ctx.cart_count(), show_banner=ctx.show_banner)
        return HTMLResponse(html, status_code=status)

    def render_home(self, ctx: Ctx) -> str:
        return home(ctx.site, show_popup=ctx.show_popup, signed_in=ctx.user is not None)

    def render_listing(self, ctx: Ctx, items: list[Item], *, q: str, category: str, sort: str, page: int, total: int,
                       found: list[Item]) -> str:
        return listing(ctx.site, items, q=q, category=category, sort=sort, page=page, total=total)

    def render_record(self, ctx: Ctx, item: Item, values: dict[str, str], errors: dict[str, str]) -> str:
        if "qty" in errors:
            return (detail(ctx.site, item) +
                    f'<p class="error" id="qty-error" role="alert">{escape(errors["qty"])}</p>')
        return detail(ctx.site, item, form_values=values, errors=errors)

    def render_login(self, ctx: Ctx, nxt: str, error: str) -> str:
        return login(ctx.site, next_url=nxt, error=error)

    def render_cart(self, ctx: Ctx, added: Item | None) -> str:
        return cart(ctx.site, ctx.st, added)

    def render_checkout(self, ctx: Ctx, values: dict[str, str], errors: dict[str, str]) -> str:
        return checkout(ctx.site, values, errors)

    def render_done(self, ctx: Ctx, heading: str, ref: str, lines: list[tuple[str, str]]) -> str:
        return done(ctx.site, heading, ref, lines)

    def render_help(self, ctx: Ctx) -> str:
        return help_page(ctx.site)

    def render_about(self, ctx: Ctx, ref: str) -> str:
        return about(ctx.site, ref)

    def render_account(self, ctx: Ctx) -> str:
        return account(ctx.site, ctx.st, ctx.user or "")

    def render_not_found(self, ctx: Ctx, what: str) -> str:
        return not_found(what)

    # oracle
    def dismiss(self, site: Site) -> list[pb.Action]:
        return ([click("#popup-close")] if site.look["popup"] else []) + \
            ([click("#cookie-accept")] if site.look["cookie_banner"] else [])

    def log_in(self, site: Site, username: str, password: str) -> list[pb.Action]:
        return [click("#login-link"), fill("#username", username), fill("#password", password), click("#login-submit")]

    def open_record(self, site: Site, item: Item) -> list[pb.Action]:
        return [fill("#search-q", item.title), click("#search-btn"),
                click(f'#results a.item-link[data-item="{item.id}"]')]

    def browse(self, site: Site, *, category: str = "", sort: str = "relevance", page: int = 1) -> list[pb.Action]:
        acts = [click(f'a.cat-link[data-category="{category}"]')] if category else [click("#nav-list")]
        if sort != "relevance":
            acts += [select("#sort", sort), click("#apply-filters")]
        if page > 1:
            acts.append(click(f'#pagination a.page-link[data-page="{page}"]'))
        return acts

    def open_listed(self, site: Site, item: Item) -> list[pb.Action]:
        return [click(f'#results a.item-link[data-item="{item.id}"]')]

    def submit_record(self, site: Site, item: Item, values: dict[str, object]) -> list[pb.Action]:
        spec = site.family.action
        assert spec is not None
        acts: list[pb.Action] = []
        for f in spec.fields:
            v = values[f.name]
            if f.kind == "select":
                acts.append(select(f"#f-{f.name}", str(v)))
            elif f.kind == "checkbox":
                if v:
                    acts.append(click(f"#f-{f.name}"))
            else:
                acts.append(fill(f"#f-{f.name}", str(v)))
        return acts + [click("#action-submit")]

    def add_to_cart(self, site: Site, item: Item, qty: int) -> list[pb.Action]:
        return [fill("#qty", str(qty)), click("#add-to-cart"), click("#modal-close")]

    def check_out(self, site: Site, address: dict[str, str]) -> list[pb.Action]:
        return ([click("#checkout-btn")] + [fill(f"#ship-{k}", address[k]) for k in ("name", "street", "city", "zip")]
                + [click("#place-order")])

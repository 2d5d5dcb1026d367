"""The `storefront` builder: a modern component-library front end. Slug URLs (`/p/<slug>`), the category in the
path (`/<list>/c/<category>`), listings drawn as cards by script after load from inline JSON, records as a key-facts
definition list and accordions, forms made of ARIA widgets (radio cards, a number stepper, switches), a two-step
checkout wizard, a cookie toast and a modal with an icon close button."""

from __future__ import annotations

import json
from functools import lru_cache
from html import escape

from starlette.responses import HTMLResponse
from webenv.sites.builders.base import (
    CHECKOUT_FIELDS,
    Builder,
    Ctx,
    Scheme,
    click,
    css_str,
    fill,
    pages_of,
)
from webenv.sites.catalog import THEMES, Site
from webenv.sites.families.base import FieldSpec, Item
from webenv.v1 import common_pb2 as pb

SORT_NAMES = {"relevance": "Featured", "value_asc": "{v}: low to high", "value_desc": "{v}: high to low",
              "date_desc": "Newest", "rating_desc": "Top rated"}
SCRIPT = """<script>(function(){
function k(n){document.cookie=n+"=1; path=/; max-age=31536000";}
var t=document.querySelector(".sf-toast-consent button");if(t){t.addEventListener("click",function(){k("cookie_consent");t.closest(".sf-toast-consent").remove();});}
var m=document.querySelector(".sf-modal [aria-label=Close]");if(m){m.addEventListener("click",function(){k("popup_dismissed");m.closest(".sf-modal").remove();});}
var g=document.getElementById("sf-grid-data");
if(g){var d=JSON.parse(g.textContent),root=document.querySelector(".sf-grid");
 d.forEach(function(x){var a=document.createElement("article");a.className="sf-card";
  var h=document.createElement("h3");var l=document.createElement("a");l.href=x.href;l.textContent=x.title;h.appendChild(l);a.appendChild(h);
  var p=document.createElement("p");p.textContent=x.value+" \\u00b7 "+x.author+" \\u00b7 "+x.date;a.appendChild(p);root.appendChild(a);});
 if(!d.length){root.textContent="No matches. Try another search.";}}
document.querySelectorAll(".sf-stepper").forEach(function(s){var i=s.querySelector("input");
 s.querySelectorAll("button").forEach(function(b){b.addEventListener("click",function(){var v=parseInt(i.value||"0",10)||0;
  v+=b.getAttribute("aria-label").indexOf("Increase")===0?1:-1;var lo=parseInt(i.min||"0",10),hi=parseInt(i.max||"99",10);
  i.value=Math.max(lo,Math.min(hi,v));});});});
document.querySelectorAll("[role=switch]").forEach(function(s){s.addEventListener("click",function(){
 var on=s.getAttribute("aria-checked")!=="true";s.setAttribute("aria-checked",on?"true":"false");
 document.getElementsByName(s.getAttribute("aria-controls"))[0].value=on?"on":"";});});
var w=document.querySelector(".sf-wizard");
if(w){w.querySelectorAll(".sf-next").forEach(function(b){b.addEventListener("click",function(){
 var cur=b.closest("fieldset");cur.hidden=true;cur.nextElementSibling.hidden=false;});});}
var toast=document.querySelector(".sf-toast-note");if(toast){setTimeout(function(){toast.remove();},4000);}
})();</script>"""


class Storefront(Builder):
    name = "storefront"
    summary = "a component-library front end: slugs, script-rendered cards, accordions, ARIA widgets, a wizard"
    scheme = Scheme(
        routes={
            "home": "/", "listing": "/{base}", "record": "/p/{slug}", "act": "/p/{slug}/respond",
            "login": "/account/sign-in", "logout": "/account/sign-out", "help": "/support", "about": "/our-story",
            "account": "/account", "cart": "/bag", "cart_add": "/bag/items", "cart_remove": "/bag/items/remove",
            "checkout": "/bag/checkout", "order": "/orders/{id}/confirmation", "done": "/confirmation/{id}",
        },
        base="{plural}", q="query", sort="sortBy", page="pageNumber", category_path="/{base}/c/{category}",
        sort_values={"relevance": "featured", "value_asc": "lowest", "value_desc": "highest", "date_desc": "newest",
                     "rating_desc": "top-rated"},
    )
    words = {
        "search": ("Search", "Search the catalog"),
        "send": ("Continue", "Send", "Confirm", "Done"),
        "add_cart": ("Add to bag", "Add to cart"),
        "checkout": ("Go to checkout", "Check out"),
        "place": ("Place order", "Pay now", "Complete purchase"),
        "accept": ("Got it", "Accept all", "Sounds good"),
        "login": ("Sign in", "Log in"),
        "apply": ("Apply", "Update"),
        "next": ("Next step", "Continue"),
    }

    def page(self, ctx: Ctx, title: str, body: str, status: int = 200) -> HTMLResponse:
        site = ctx.site
        toast = ""
        if ctx.show_banner:
            toast = (f'<div class="sf-toast-consent" role="status" style="position:fixed;left:16px;bottom:16px;'
                     f'background:#222;color:#fff;padding:12px 16px;border-radius:12px;z-index:40">'
                     f'{escape(site.words["cookie"])} <button type="button">{escape(self.word(site, "accept"))}</button></div>')
        user = ctx.user
        acct = (f'<a href="{escape(self.url(site, "account"))}">Hi, {escape(user)}</a> '
                f'<a href="{escape(self.url(site, "logout"))}">Sign out</a>') if user else \
            f'<a class="sf-signin" href="{escape(self.url(site, "login"))}">{escape(self.word(site, "login"))}</a>'
        bag = (f' <a href="{escape(self.url(site, "cart"))}" aria-label="Bag">&#128717; {ctx.cart_count()}</a>'
               if site.family.name == "shop" else "")
        html = (
            f'<!doctype html><html lang="en"><head><meta charset="utf-8"><meta name="viewport" '
            f'content="width=device-width, initial-scale=1"><title>{escape(title)} — {escape(site.name)}</title>'
            f'<link rel="icon" href="data:,"><style>{_style(site)}</style></head><body>'
            f'<div class="sf-shell"><div class="sf-bar"><a class="sf-brand" href="/">{escape(site.name)}</a>'
            f"{_nav(self, site)}<span>{acct}{bag}</span></div>{_searchbar(self, site)}"
            f'<main class="sf-main">{body}</main><div class="sf-foot">{escape(str(site.look["tagline"]))} '
            f'&middot; <a href="{escape(self.url(site, "help"))}">Support</a> &middot; '
            f'<a href="{escape(self.url(site, "about"))}">Our story</a></div></div>{toast}{SCRIPT}</body></html>'
        )
        return HTMLResponse(html, status_code=status)

    def render_home(self, ctx: Ctx) -> str:
        site = ctx.site
        modal = ""
        if ctx.show_popup:
            modal = (f'<div class="sf-modal" role="dialog" aria-modal="true" aria-label="Newsletter" style="position:fixed;'
                     f'inset:0;background:rgba(20,20,30,.6);display:grid;place-items:center;z-index:60"><div '
                     f'style="background:#fff;padding:28px;border-radius:16px;position:relative"><button type="button" '
                     f'aria-label="Close" style="position:absolute;right:8px;top:8px">&times;</button>'
                     f'<p>{escape(site.words["popup"])}</p></div></div>')
        if site.family.login_required and ctx.user is None:
            return f"<section><h1>{escape(site.name)}</h1><p>Sign in to manage your {escape(site.family.plural)}.</p></section>{modal}"
        return _home(self, site) + modal

    def render_listing(self, ctx: Ctx, items: list[Item], *, q: str, category: str, sort: str, page: int, total: int,
                       found: list[Item]) -> str:
        site, fam = ctx.site, ctx.site.family
        cards = json.dumps([{"href": self.url_record(site, it), "title": it.title, "value": it.value_text,
                             "author": it.author, "date": site.fmt_date(it.date)} for it in items]).replace("<", "\\u003c")
        chips = "".join(
            f'<a class="sf-chip" href="{escape(self.url_listing(site, q, slug, sort))}"'
            f'{" aria-current=true" if slug == category else ""}>{escape(label)}</a>'
            for slug, label in site.category_labels.items())
        sorts = "".join(f'<option value="{self.scheme.sort_values[s]}"{" selected" if s == sort else ""}>'
                        f'{escape(SORT_NAMES[s].format(v=fam.value_label))}</option>' for s in SORT_NAMES)
        action = self.url_listing(site, "", category)
        form = (f'<form class="sf-sort" method="get" action="{escape(action)}">'
                + (f'<input type="hidden" name="query" value="{escape(q)}">' if q else "")
                + f'<label>Sort <select name="sortBy" aria-label="Sort">{sorts}</select></label> '
                f'<button class="sf-apply" type="submit">{escape(self.word(site, "apply"))}</button></form>')
        n = pages_of(total)
        pager = "".join(
            f'<a class="sf-pg" href="{escape(self.url_listing(site, q, category, sort, p))}" aria-label="Page {p}"'
            f'{" aria-current=page" if p == page else ""}>{p}</a>' for p in range(1, n + 1))
        title = site.category_labels.get(category, f"All {fam.plural}")
        return (f'<h1>{escape(title)}</h1><nav class="sf-chips" aria-label="Categories">{chips}</nav>{form}'
                f'<p>Showing {len(items)} of {total}{" for “" + escape(q) + "”" if q else ""}</p>'
                f'<div class="sf-grid"></div><script type="application/json" id="sf-grid-data">{cards}</script>'
                f'<nav class="sf-pager" aria-label="Pagination">{pager}</nav>')

    def render_record(self, ctx: Ctx, item: Item, values: dict[str, str], errors: dict[str, str]) -> str:
        site, fam = ctx.site, ctx.site.family
        out = _record(self, site, item.id)
        if fam.action is None:
            err = f'<p role="alert" class="sf-err">{escape(errors["qty"])}</p>' if "qty" in errors else ""
            return out + (f'<form class="sf-buy" method="post" action="{escape(self.url(site, "cart_add"))}">{err}'
                          f'<input type="hidden" name="sku" value="{item.id}">'
                          f'{_stepper("qty", "Quantity", "1", 1, 10)}<button class="sf-primary" type="submit">'
                          f'{escape(self.word(site, "add_cart"))}</button></form>')
        fields = "".join(_widget(f, values.get(f.name, ""), errors.get(f.name)) for f in fam.action.fields)
        alert = '<p role="alert" class="sf-err">Check the highlighted fields.</p>' if errors else ""
        return out + (f'<section class="sf-panel"><h2>{escape(str(site.look["action_button"]))}</h2>{alert}'
                      f'<form method="post" action="{escape(self.url(site, "act", id=item.id))}">{fields}'
                      f'<button class="sf-primary" type="submit">{escape(self.word(site, "send"))}</button></form></section>')

    def render_login(self, ctx: Ctx, nxt: str, error: str) -> str:
        err = f'<p role="alert" class="sf-err">{escape(error)}</p>' if error else ""
        return (f'<section class="sf-panel"><h1>{escape(self.word(ctx.site, "login"))}</h1>{err}<form method="post" '
                f'action="{escape(self.url(ctx.site, "login"))}"><input type="hidden" name="next" value="{escape(nxt)}">'
                f'<label>Username<input name="username" autocomplete="username"></label>'
                f'<label>Password<input name="password" type="password" autocomplete="current-password"></label>'
                f'<button class="sf-primary" type="submit">{escape(self.word(ctx.site, "login"))}</button></form></section>')

    def render_cart(self, ctx: Ctx, added: Item | None) -> str:
        site = ctx.site
        note = (f'<div class="sf-toast-note" role="status">Added “{escape(added.title)}” to your bag</div>'
                if added else "")
        lines, total = "", 0.0
        for line in ctx.st["cart"]["items"]:
            it = site.by_id.get(line["sku"])
            if it is None:
                continue
            total += it.value * line["qty"]
            lines += (f'<li>{escape(it.title)} — {line["qty"]} × {escape(it.value_text)} <form method="post" '
                      f'action="{escape(self.url(site, "cart_remove"))}" style="display:inline"><input type="hidden" '
                      f'name="sku" value="{it.id}"><button type="submit" aria-label="Remove {escape(it.title)}">✕</button>'
                      f"</form></li>")
        if not lines:
            return f"{note}<h1>Your bag</h1><p>Your bag is empty.</p>"
        return (f'{note}<h1>Your bag</h1><ul class="sf-lines">{lines}</ul><p>Subtotal ${total:,.2f}</p>'
                f'<a class="sf-primary sf-go" href="{escape(self.url(site, "checkout"))}">'
                f'{escape(self.word(site, "checkout"))}</a>')

    def render_checkout(self, ctx: Ctx, values: dict[str, str], errors: dict[str, str]) -> str:
        site = ctx.site
        a, b = CHECKOUT_FIELDS[:2], CHECKOUT_FIELDS[2:]
        step1 = "".join(_widget(f, values.get(f.name, ""), errors.get(f.name)) for f in a)
        step2 = "".join(_widget(f, values.get(f.name, ""), errors.get(f.name)) for f in b)
        err = f'<p role="alert" class="sf-err">{escape(errors.get("cart", "Check the highlighted fields."))}</p>' if errors else ""
        return (f'<h1>Checkout</h1>{err}<form class="sf-wizard" method="post" action="{escape(self.url(site, "checkout"))}">'
                f'<fieldset><legend>Step 1 of 2 · Who</legend>{step1}<button class="sf-next" type="button">'
                f'{escape(self.word(site, "next"))}</button></fieldset>'
                f'<fieldset hidden><legend>Step 2 of 2 · Where</legend>{step2}<button class="sf-primary" type="submit">'
                f'{escape(self.word(site, "place"))}</button></fieldset></form>')

    # --- oracle -----------------------------------------------------------------------------------------------
    popup_close, cookie_accept = ".sf-modal button[aria-label=Close]", ".sf-toast-consent button"
    login_steps = (".sf-signin", 'main input[name="username"]', 'main input[name="password"]', "main button.sf-primary")
    search_box, results = (".sf-search input", ".sf-search button"), ".sf-grid"

    def browse(self, site: Site, *, category: str = "", sort: str = "relevance", page: int = 1) -> list[pb.Action]:
        acts = [click(f".sf-nav a[href={css_str(self.url_listing(site))}]")]
        if category:
            acts.append(click(f".sf-chips a[href={css_str(self.url_listing(site, '', category))}]"))
        if sort != "relevance":
            acts += [pb.Action(select=pb.SelectAction(target=pb.ElementTarget(selector=".sf-sort select"),
                                                      options=[self.scheme.sort_values[sort]])),
                     click(".sf-sort .sf-apply")]
        if page > 1:
            acts.append(click(f".sf-pager a[href={css_str(self.url_listing(site, '', category, sort, page))}]"))
        return acts

    def submit_record(self, site: Site, item: Item, values: dict[str, object]) -> list[pb.Action]:
        spec = site.family.action
        assert spec is not None
        acts: list[pb.Action] = []
        for f in spec.fields:
            v = values[f.name]
            if f.kind == "select":
                acts.append(click(f"label[for={css_str(_opt_id(f, str(v)))}]"))
            elif f.kind == "checkbox":
                if v:
                    acts.append(click(f'[role=switch][aria-controls="{f.name}"]'))
            elif f.kind == "number":
                start = f.min if f.min is not None else 0
                n = int(v) - start  # type: ignore[call-overload]
                if 0 <= n <= 4:
                    acts += [click(f'.sf-stepper button[aria-label="Increase {f.label}"]')] * n
                else:
                    acts.append(fill(f'.sf-stepper input[name="{f.name}"]', str(v)))
            else:
                acts.append(fill(f'.sf-panel [name="{f.name}"]', str(v)))
        return acts + [click(".sf-panel button.sf-primary")]

    def add_to_cart(self, site: Site, item: Item, qty: int) -> list[pb.Action]:
        return [click('.sf-stepper button[aria-label="Increase Quantity"]')] * (qty - 1) + [click(".sf-buy .sf-primary")]

    def check_out(self, site: Site, address: dict[str, str]) -> list[pb.Action]:
        return ([click(".sf-go"), fill('.sf-wizard input[name="name"]', address["name"]),
                 fill('.sf-wizard input[name="street"]', address["street"]), click(".sf-wizard .sf-next"),
                 fill('.sf-wizard input[name="city"]', address["city"]), fill('.sf-wizard input[name="zip"]', address["zip"]),
                 click(".sf-wizard button.sf-primary")])


def _opt_id(f: FieldSpec, option: str) -> str:
    return f"sf-{f.name}-{f.options.index(option)}" if option in f.options else f"sf-{f.name}-x"


def _stepper(name: str, label: str, value: str, lo: int, hi: int) -> str:
    return (f'<div class="sf-stepper" role="group" aria-label="{escape(label)}"><span>{escape(label)}</span>'
            f'<button type="button" aria-label="Decrease {escape(label)}">−</button>'
            f'<input name="{name}" inputmode="numeric" min="{lo}" max="{hi}" value="{escape(value)}" size="3" '
            f'aria-label="{escape(label)}"><button type="button" aria-label="Increase {escape(label)}">+</button></div>')


def _widget(f: FieldSpec, value: str, error: str | None) -> str:
    err = f'<span class="sf-err">{escape(error)}</span>' if error else ""
    if f.kind == "select":
        cards = "".join(
            f'<input type="radio" id="{_opt_id(f, o)}" name="{f.name}" value="{escape(o)}"{" checked" if o == value else ""}'
            f' style="position:absolute;opacity:0;width:1px;height:1px;pointer-events:none"><label class="sf-radio-card" for="{_opt_id(f, o)}">{escape(o)}</label>'
            for o in f.options)
        return f'<div class="sf-field" role="radiogroup" aria-label="{escape(f.label)}"><p>{escape(f.label)}</p>{cards}{err}</div>'
    if f.kind == "checkbox":
        on = value == "on"
        return (f'<div class="sf-field"><input type="hidden" name="{f.name}" value="{"on" if on else ""}">'
                f'<button type="button" role="switch" aria-checked="{"true" if on else "false"}" aria-controls="{f.name}">'
                f'{escape(f.label)}</button>{err}</div>')
    if f.kind == "number":
        return _stepper(f.name, f.label, value or str(f.min if f.min is not None else 0), f.min or 0, f.max or 99) + err
    if f.kind == "textarea":
        return f'<label class="sf-field">{escape(f.label)}<textarea name="{f.name}" rows="3">{escape(value)}</textarea>{err}</label>'
    typ = "email" if f.kind == "email" else "text"
    return f'<label class="sf-field">{escape(f.label)}<input type="{typ}" name="{f.name}" value="{escape(value)}">{err}</label>'


@lru_cache(maxsize=8192)
def _style(site: Site) -> str:
    accent, bg, fg, font = THEMES[(int(site.look["theme"]) + 2) % len(THEMES)]
    return (f"body{{margin:0;font-family:{font};background:{bg};color:{fg}}}.sf-bar{{display:flex;gap:18px;"
            f"align-items:center;padding:14px 24px;box-shadow:0 1px 4px #0002}}.sf-main{{padding:24px;max-width:960px;"
            f"margin:auto}}.sf-grid{{display:grid;grid-template-columns:repeat(auto-fill,minmax(200px,1fr));gap:16px}}"
            f".sf-card{{background:#fff;border-radius:12px;padding:12px;box-shadow:0 1px 3px #0003}}.sf-primary{{"
            f"background:{accent};color:#fff;border:0;border-radius:999px;padding:8px 18px;display:inline-block}}"
            f".sf-chip{{display:inline-block;border:1px solid {accent};border-radius:999px;padding:2px 10px;margin:2px}}"
            f".sf-radio-card{{display:inline-block;border:1px solid #999;border-radius:8px;padding:8px 12px;margin:4px}}"
            f"input:checked+.sf-radio-card{{border:2px solid {accent}}}.sf-err{{color:#b00020}}.sf-pg{{margin:0 4px}}"
            f".sf-field{{display:block;margin:10px 0}}[role=switch][aria-checked=true]{{background:{accent};color:#fff}}"
            f".sf-toast-note{{position:fixed;right:16px;top:16px;background:#333;color:#fff;padding:10px;border-radius:8px}}"
            f"[hidden]{{display:none!important}}")


@lru_cache(maxsize=8192)
def _nav(b: Storefront, site: Site) -> str:
    return (f'<nav class="sf-nav" aria-label="Main"><a href="{escape(b.url_listing(site))}">'
            f"{escape(site.family.plural.capitalize())}</a></nav>")


@lru_cache(maxsize=8192)
def _searchbar(b: Storefront, site: Site) -> str:
    return (f'<form class="sf-search" role="search" method="get" action="{escape(b.url_listing(site))}">'
            f'<input name="query" type="search" placeholder="{escape(site.words["search_placeholder"])}" '
            f'aria-label="{escape(b.word(site, "search"))}"><button type="submit" aria-label="{escape(b.word(site, "search"))}">'
            f"&#128269;</button></form>")


@lru_cache(maxsize=8192)
def _home(b: Storefront, site: Site) -> str:
    top = sorted(site.items, key=lambda it: (-it.rating, it.id))[:4]
    cards = "".join(f'<article class="sf-card"><h3><a href="{escape(b.url_record(site, it))}">{escape(it.title)}</a></h3>'
                    f"<p>{escape(it.value_text)}</p></article>" for it in top)
    return (f'<section><h1>{escape(site.name)}</h1><p>{escape(str(site.look["tagline"]))}</p></section>'
            f'<h2>Trending {escape(site.family.plural)}</h2><div class="sf-row">{cards}</div>')


@lru_cache(maxsize=65536)
def _record(b: Storefront, site: Site, item_id: str) -> str:
    it = site.by_id[item_id]
    fam = site.family
    cat = site.category_labels.get(it.category, it.category)
    specs = "".join(f"<dt>{escape(k)}</dt><dd>{escape(v)}</dd>" for k, v in it.attrs)
    reviews = "".join(f"<blockquote>“{escape(str(r['text']))}” — {escape(str(r['author']))}, {r['stars']}★</blockquote>"
                      for r in it.reviews) or "<p>No reviews yet.</p>"
    return (f'<nav aria-label="Breadcrumb"><a href="{escape(b.url_listing(site))}">{escape(fam.plural.capitalize())}</a> › '
            f'<a href="{escape(b.url_listing(site, "", it.category))}">{escape(cat)}</a></nav>'
            f"<h1>{escape(it.title)}</h1><p>{escape(it.body)}</p>"
            f"<dl><dt>{escape(fam.value_label)}</dt><dd>{escape(it.value_text)}</dd><dt>{escape(fam.author_label)}</dt>"
            f"<dd>{escape(it.author)}</dd><dt>Category</dt><dd>{escape(cat)}</dd><dt>{escape(fam.date_label)}</dt>"
            f"<dd>{escape(site.fmt_date(it.date))}</dd><dt>Rating</dt><dd>{it.rating:.1f} out of 5</dd></dl>"
            f"<details open><summary>Specifications</summary><dl>{specs}</dl></details>"
            f"<details><summary>Reviews ({len(it.reviews)})</summary>{reviews}</details>")

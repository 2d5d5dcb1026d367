"""The `facetgrid` builder: a Bootstrap shop / catalog theme. A navbar with a search group, categories in the path
(`/c/<category>?sort=price-desc&p=2`), records at `/p/<number>-<slug>`, listings as a grid of cards with a facets
sidebar of checkboxes (brand, rating) applied client-side by script, a sort <select> that submits its form on
change, "Show more" pagination (page N shows the first N pages' cards), record pages with a price block, a
quantity stepper and tabs (description, specifications, reviews), forms as Bootstrap controls (switches, selects,
steppers) with `is-invalid` feedback, toasts for "added to cart", a cookie bar and a newsletter modal."""

from __future__ import annotations

from functools import lru_cache
from html import escape

from starlette.responses import HTMLResponse
from webenv.sites.builders.base import (
    CHECKOUT_FIELDS,
    PAGE_SIZE,
    Builder,
    Ctx,
    Scheme,
    cart_lines,
    click,
    css_str,
    fill,
    fill_native,
    native_control,
    pages_of,
    select,
)
from webenv.sites.catalog import THEMES, Site
from webenv.sites.families.base import FieldSpec, Item
from webenv.v1 import common_pb2 as pb

SORT_NAMES = {"relevance": "Default sorting", "value_asc": "Sort by {v}: low to high",
              "value_desc": "Sort by {v}: high to low", "date_desc": "Sort by latest", "rating_desc": "Sort by rating"}
SCRIPT = """<script>(function(){
function k(n){document.cookie=n+"=1; path=/; max-age=31536000";}
function q(s){return document.querySelector(s);}
var c=q(".fg-cookie .fg-btn-accept");if(c){c.addEventListener("click",function(){k("cookie_consent");q(".fg-cookie").remove();});}
var m=q(".fg-modal .fg-btn-close");if(m){m.addEventListener("click",function(){k("popup_dismissed");q(".fg-modal").remove();q(".fg-modal-backdrop").remove();document.body.classList.remove("fg-modal-open");});}
var t=q(".fg-toast .fg-btn-close");if(t){t.addEventListener("click",function(){q(".fg-toast").classList.remove("fg-show");});}
var s=q(".fg-sort select");if(s){s.addEventListener("change",function(){s.form.submit();});}
document.querySelectorAll(".fg-qty").forEach(function(g){var i=g.querySelector("input");
 g.querySelectorAll("button").forEach(function(b){b.addEventListener("click",function(){
  var v=(parseInt(i.value,10)||0)+(b.classList.contains("fg-qty-plus")?1:-1);
  i.value=Math.max(parseInt(i.min||"0",10),Math.min(parseInt(i.max||"99",10),v));});});});
document.querySelectorAll(".fg-nav-tabs button").forEach(function(b){b.addEventListener("click",function(){
 document.querySelectorAll(".fg-nav-tabs button").forEach(function(o){o.classList.remove("fg-active");o.setAttribute("aria-selected","false");});
 document.querySelectorAll(".fg-tab-pane").forEach(function(p){p.classList.remove("fg-show");});
 b.classList.add("fg-active");b.setAttribute("aria-selected","true");document.getElementById(b.getAttribute("aria-controls")).classList.add("fg-show");});});
var boxes=document.querySelectorAll(".fg-facet input");
function facets(){var on={};boxes.forEach(function(b){if(b.checked){(on[b.name]=on[b.name]||[]).push(b.value);}});var n=0;
 document.querySelectorAll(".fg-grid > .fg-col").forEach(function(col){
  var ok=(!on.brand||on.brand.indexOf(col.getAttribute("data-fg-brand"))>=0)&&
   (!on.rating||parseFloat(col.getAttribute("data-fg-rating"))>=Math.min.apply(null,on.rating.map(Number)));
  col.hidden=!ok;if(ok){n++;}});
 var out=q(".fg-shown");if(out){out.textContent=n;}}
boxes.forEach(function(b){b.addEventListener("change",facets);});
})();</script>"""


class FacetGrid(Builder):
    name = "facetgrid"
    summary = "a Bootstrap shop theme: card grids, client-side facets, sort select on change, Show more, tabs, toasts"
    scheme = Scheme(
        routes={
            "home": "/", "listing": "/shop", "record": "/p/{num}-{slug}", "act": "/p/{num}-{slug}/send",
            "login": "/my-account/login", "logout": "/my-account/logout", "help": "/faq", "about": "/about-us",
            "account": "/my-account", "cart": "/cart", "cart_add": "/cart/add", "cart_remove": "/cart/remove",
            "checkout": "/checkout", "order": "/checkout/order-received/{id}", "done": "/thank-you/{id}",
        },
        q="s", sort="sort", page="p", category_path="/c/{category}",
        sort_values={"relevance": "popularity", "value_asc": "price-asc", "value_desc": "price-desc",
                     "date_desc": "latest", "rating_desc": "rating"},
    )
    words = {
        "search": ("Search", "Go"),
        "shop": ("Shop", "Browse", "Catalog"),
        "send": ("Submit", "Send", "Save"),
        "add_cart": ("Add to cart", "Add to basket", "Buy now"),
        "checkout": ("Proceed to checkout", "Checkout"),
        "place": ("Place order", "Complete order"),
        "accept": ("Accept", "Allow cookies", "I agree"),
        "login": ("Login", "Sign in", "My account"),
        "more": ("Show more", "Load more"),
    }

    def page(self, ctx: Ctx, title: str, body: str, status: int = 200) -> HTMLResponse:
        site = ctx.site
        user = ctx.user
        acct = (f'<a class="fg-nav-link" href="{escape(self.url(site, "account"))}">{escape(user)}</a>'
                f'<a class="fg-nav-link" href="{escape(self.url(site, "logout"))}">Logout</a>') if user else \
            f'<a class="fg-nav-link fg-login" href="{escape(self.url(site, "login"))}">{escape(self.word(site, "login"))}</a>'
        cart = (f'<a class="fg-nav-link fg-cart-link" href="{escape(self.url(site, "cart"))}">Cart <span '
                f'class="fg-badge">{ctx.cart_count()}</span></a>') if site.family.name == "shop" else ""
        bar = ""
        if ctx.show_banner:
            bar = (f'<div class="fg-cookie fg-fixed-bottom fg-bg-dark fg-text-white fg-p-3" role="region" aria-label='
                   f'"Cookie consent"><div class="fg-container fg-d-flex"><span>{escape(site.words["cookie"])}</span>'
                   f'<button type="button" class="fg-btn fg-btn-light fg-btn-accept">{escape(self.word(site, "accept"))}'
                   f"</button></div></div>")
        html = (
            f'<!doctype html><html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, '
            f'initial-scale=1"><title>{escape(title)} | {escape(site.name)}</title><link rel="icon" href="data:,">'
            f'<style>{_style(site)}</style></head><body>{_navbar(self, site)}{acct}{cart}</div></nav>'
            f'<main class="fg-container fg-py-4">{body}</main>{_footer(self, site)}{bar}{SCRIPT}</body></html>'
        )
        return HTMLResponse(html, status_code=status)

    def render_home(self, ctx: Ctx) -> str:
        site = ctx.site
        modal = ""
        if ctx.show_popup:
            modal = (f'<div class="fg-modal-backdrop"></div><div class="fg-modal" role="dialog" aria-modal="true" '
                     f'aria-labelledby="fg-modal-title"><div class="fg-modal-dialog"><div class="fg-modal-content"><div '
                     f'class="fg-modal-header"><h5 class="fg-modal-title" id="fg-modal-title">Newsletter</h5><button '
                     f'type="button" class="fg-btn-close" aria-label="Close">&times;</button></div><div class="fg-modal-body">'
                     f'<p>{escape(site.words["popup"])}</p></div></div></div></div>')
        if site.family.login_required and ctx.user is None:
            return (f'<div class="fg-p-5 fg-bg-light fg-rounded"><h1 class="fg-display-5">{escape(site.name)}</h1>'
                    f'<p class="fg-lead">Login to see your {escape(site.family.plural)}.</p></div>{modal}')
        return _home(self, site) + modal

    def render_listing(self, ctx: Ctx, items: list[Item], *, q: str, category: str, sort: str, page: int, total: int,
                       found: list[Item]) -> str:
        site, fam = ctx.site, ctx.site.family
        shown = found[: page * PAGE_SIZE]  # "Show more": page N shows the cards of pages 1..N
        cards = "".join(_card(self, site, it.id) for it in shown) or \
            '<div class="fg-col-12"><div class="fg-alert fg-alert-info">No products were found matching your selection.</div></div>'
        sorts = "".join(f'<option value="{self.scheme.sort_values[s]}"{" selected" if s == sort else ""}>'
                        f'{escape(SORT_NAMES[s].format(v=fam.value_label.lower()))}</option>' for s in SORT_NAMES)
        keep = f'<input type="hidden" name="s" value="{escape(q)}">' if q else ""
        sorter = (f'<form class="fg-sort" method="get" action="{escape(self.url_listing(site, "", category))}">{keep}'
                  f'<select class="fg-form-select" name="sort" aria-label="Sort">{sorts}</select></form>')
        brands = sorted({it.author for it in shown})
        facets = "".join(
            f'<div class="fg-form-check"><input class="fg-form-check-input" type="checkbox" name="brand" '
            f'value="{escape(b)}" id="fg-brand-{i}"><label class="fg-form-check-label" for="fg-brand-{i}">{escape(b)}'
            f"</label></div>" for i, b in enumerate(brands))
        stars = "".join(
            f'<div class="fg-form-check"><input class="fg-form-check-input" type="checkbox" name="rating" value="{n}" '
            f'id="fg-rating-{n}"><label class="fg-form-check-label" for="fg-rating-{n}">{n}&#9733; &amp; up</label></div>'
            for n in (4, 3))
        more = ""
        if page < pages_of(total):
            more = (f'<div class="fg-more fg-text-center fg-my-4"><a class="fg-btn fg-btn-outline-primary" href="'
                    f'{escape(self.url_listing(site, q, category, sort, page + 1))}">{escape(self.word(site, "more"))}</a></div>')
        head = site.category_labels.get(category, f"Search results for “{q}”" if q else self.word(site, "shop"))
        return (
            f'{_crumbs(self, site, category)}<h1 class="fg-h3 fg-mb-3">{escape(head)}</h1><div class="fg-row">'
            f'<aside class="fg-col-md-3">{_cats(self, site)}<div class="fg-facet fg-card fg-mb-3"><div class="fg-card-header">'
            f'{escape(fam.author_label)}</div><div class="fg-card-body">{facets}</div></div><div class="fg-facet fg-card">'
            f'<div class="fg-card-header">Rating</div><div class="fg-card-body">{stars}</div></div></aside>'
            f'<section class="fg-col-md-9"><div class="fg-d-flex fg-toolbar"><p class="fg-text-muted">Showing '
            f'<span class="fg-shown">{len(shown)}</span> of {total} results</p>{sorter}</div>'
            f'<div class="fg-row fg-grid">{cards}</div>{more}</section></div>'
        )

    def render_record(self, ctx: Ctx, item: Item, values: dict[str, str], errors: dict[str, str]) -> str:
        site, fam = ctx.site, ctx.site.family
        top, tabs = _record(self, site, item.id)
        if fam.action is None:
            err = f'<div class="fg-invalid-feedback fg-d-block">{escape(errors["qty"])}</div>' if "qty" in errors else ""
            buy = (f'<form class="fg-buy fg-d-flex" method="post" action="{escape(self.url(site, "cart_add"))}">'
                   f'<input type="hidden" name="sku" value="{item.id}">{_qty("qty", "fg-qty-input", values.get("qty", "1"), 1, 10)}'
                   f'<button class="fg-btn fg-btn-primary fg-add-cart" type="submit">{escape(self.word(site, "add_cart"))}'
                   f"</button></form>{err}")
            return top.replace("<!--fg-buy-->", buy) + tabs
        fields = "".join(_control(f, values.get(f.name, ""), errors.get(f.name)) for f in fam.action.fields)
        alert = '<div class="fg-alert fg-alert-danger" role="alert">Please correct the errors below.</div>' if errors else ""
        form = (f'<div class="fg-card fg-action-card fg-mt-3"><div class="fg-card-header">{escape(str(site.look["action_button"]))}'
                f'</div><div class="fg-card-body">{alert}<form class="fg-action-form" method="post" novalidate '
                f'action="{escape(self.url(site, "act", id=item.id))}">{fields}<button class="fg-btn fg-btn-primary" '
                f'type="submit">{escape(self.word(site, "send"))}</button></form></div></div>')
        return top.replace("<!--fg-buy-->", form) + tabs

    def render_login(self, ctx: Ctx, nxt: str, error: str) -> str:
        site = ctx.site
        err = f'<div class="fg-alert fg-alert-danger" role="alert">{escape(error)}</div>' if error else ""
        return (f'<div class="fg-row fg-justify-content-center"><div class="fg-col-md-5"><div class="fg-card"><div '
                f'class="fg-card-body"><h1 class="fg-h4 fg-mb-3">{escape(self.word(site, "login"))}</h1>{err}<form '
                f'class="fg-login-form" method="post" action="{escape(self.url(site, "login"))}"><input type="hidden" '
                f'name="next" value="{escape(nxt)}"><div class="fg-form-floating fg-mb-3"><input class="fg-form-control" '
                f'id="fg-username" name="username" placeholder="Username" autocomplete="username"><label for="fg-username">'
                f'Username or email</label></div><div class="fg-form-floating fg-mb-3"><input class="fg-form-control" '
                f'id="fg-password" name="password" type="password" placeholder="Password" autocomplete="current-password">'
                f'<label for="fg-password">Password</label></div><button class="fg-btn fg-btn-primary fg-w-100" type="submit">'
                f"Log in</button></form></div></div></div></div>")

    def render_cart(self, ctx: Ctx, added: Item | None) -> str:
        site = ctx.site
        toast = ""
        if added:
            toast = (f'<div class="fg-toast fg-show" role="status" aria-live="polite"><div class="fg-toast-header">'
                     f'<strong>Cart updated</strong><button type="button" class="fg-btn-close" aria-label="Close">&times;'
                     f'</button></div><div class="fg-toast-body">“{escape(added.title)}” has been added to your cart.</div></div>')
        lines, total = cart_lines(ctx)
        rows = "".join(
            f'<tr><td><a href="{escape(self.url_record(site, it))}">{escape(it.title)}</a></td><td>{escape(it.value_text)}'
            f'</td><td>{qty}</td><td><form method="post" action="{escape(self.url(site, "cart_remove"))}"><input '
            f'type="hidden" name="sku" value="{it.id}"><button class="fg-btn fg-btn-sm fg-btn-outline-danger" '
            f'type="submit" aria-label="Remove {escape(it.title)}">&times;</button></form></td></tr>' for it, qty in lines)
        if not rows:
            return f'{toast}<h1 class="fg-h3">Cart</h1><div class="fg-alert fg-alert-info">Your cart is currently empty.</div>'
        return (f'{toast}<h1 class="fg-h3">Cart</h1><table class="fg-table fg-table-striped"><thead><tr><th>Product</th>'
                f'<th>Price</th><th>Quantity</th><th></th></tr></thead><tbody>{rows}</tbody></table><div class="fg-card '
                f'fg-cart-totals"><div class="fg-card-body"><p>Total <strong>${total:,.2f}</strong></p><a class="fg-btn '
                f'fg-btn-primary fg-checkout-btn" href="{escape(self.url(site, "checkout"))}">'
                f'{escape(self.word(site, "checkout"))}</a></div></div>')

    def render_checkout(self, ctx: Ctx, values: dict[str, str], errors: dict[str, str]) -> str:
        site = ctx.site
        err = f'<div class="fg-alert fg-alert-danger" role="alert">{escape(errors["cart"])}</div>' if "cart" in errors else ""
        fields = "".join(_control(f, values.get(f.name, ""), errors.get(f.name)) for f in CHECKOUT_FIELDS)
        return (f'<h1 class="fg-h3">Checkout</h1>{err}<div class="fg-row"><div class="fg-col-md-7"><h2 class="fg-h5">Billing '
                f'&amp; shipping</h2><form class="fg-checkout-form" method="post" novalidate action="'
                f'{escape(self.url(site, "checkout"))}">{fields}<button class="fg-btn fg-btn-primary fg-btn-lg fg-place-order" '
                f'type="submit">{escape(self.word(site, "place"))}</button></form></div></div>')

    # --- oracle -----------------------------------------------------------------------------------------------
    details_tab = "#fg-tab-specs"

    def dismiss(self, site: Site) -> list[pb.Action]:
        return ([click(".fg-modal .fg-btn-close")] if site.look["popup"] else []) + \
            ([click(".fg-cookie .fg-btn-accept")] if site.look["cookie_banner"] else [])

    def log_in(self, site: Site, username: str, password: str) -> list[pb.Action]:
        return [click(".fg-navbar .fg-login"), fill("#fg-username", username), fill("#fg-password", password),
                click(".fg-login-form button[type=submit]")]

    def open_record(self, site: Site, item: Item) -> list[pb.Action]:
        return [fill(".fg-navbar-search input", item.title), click(".fg-navbar-search button")] + self.open_listed(site, item)

    def open_listed(self, site: Site, item: Item) -> list[pb.Action]:
        return [click(f".fg-grid a.fg-card-title[href={css_str(self.url_record(site, item))}]")]

    def browse(self, site: Site, *, category: str = "", sort: str = "relevance", page: int = 1) -> list[pb.Action]:
        acts = [click(".fg-navbar .fg-nav-shop")]
        if category:
            acts.append(click(f".fg-cats a[href={css_str(self.url_listing(site, '', category))}]"))
        if sort != "relevance":
            acts.append(select(".fg-sort select", self.scheme.sort_values[sort]))
        for p in range(2, page + 1):
            acts.append(click(f".fg-more a[href={css_str(self.url_listing(site, '', category, sort, p))}]"))
        return acts

    def submit_record(self, site: Site, item: Item, values: dict[str, object]) -> list[pb.Action]:
        spec = site.family.action
        assert spec is not None
        acts = fill_native(spec.fields, values, "#fg-f-{name}")
        return acts + [click(".fg-action-form button[type=submit]")]

    def add_to_cart(self, site: Site, item: Item, qty: int) -> list[pb.Action]:
        return [fill("#fg-qty-input", str(qty)), click(".fg-buy .fg-add-cart"), click(".fg-toast .fg-btn-close")]

    def check_out(self, site: Site, address: dict[str, str]) -> list[pb.Action]:
        return ([click(".fg-checkout-btn")] + [fill(f"#fg-f-{k}", address[k]) for k in ("name", "street", "city", "zip")]
                + [click(".fg-place-order")])


def _qty(name: str, ident: str, value: str, lo: int, hi: int) -> str:
    return (f'<div class="fg-input-group fg-qty"><button type="button" class="fg-btn fg-btn-outline-secondary fg-qty-minus" '
            f'aria-label="Decrease">&minus;</button><input class="fg-form-control fg-text-center" type="number" id="{ident}" '
            f'name="{name}" value="{escape(value)}" min="{lo}" max="{hi}"><button type="button" class="fg-btn '
            f'fg-btn-outline-secondary fg-qty-plus" aria-label="Increase">+</button></div>')


def _control(f: FieldSpec, value: str, error: str | None) -> str:
    """One Bootstrap form control with its label and invalid feedback."""
    bad = " fg-is-invalid" if error else ""
    fb = f'<div class="fg-invalid-feedback">{escape(error)}</div>' if error else ""
    ident = f"fg-f-{f.name}"
    if f.kind == "checkbox":
        ctl = native_control(f, value, ident, attrs=f'class="fg-form-check-input{bad}" role="switch"')
        return (f'<div class="fg-form-check fg-form-switch fg-mb-3">{ctl}<label class="fg-form-check-label" '
                f'for="{ident}">{escape(f.label)}</label>{fb}</div>')
    label = f'<label class="fg-form-label" for="{ident}">{escape(f.label)}</label>'
    if f.kind == "number":
        lo = f.min if f.min is not None else 0
        ctl = _qty(f.name, ident, value or str(lo), lo, f.max if f.max is not None else 99)
    else:
        cls = "fg-form-select" if f.kind == "select" else "fg-form-control"
        ctl = native_control(f, value, ident, "Choose...", f'class="{cls}{bad}"' + (' rows="4"' if f.kind == "textarea" else ""))
    return f'<div class="fg-mb-3">{label}{ctl}{fb}</div>'


@lru_cache(maxsize=8192)
def _style(site: Site) -> str:
    accent = THEMES[(int(site.look["theme"]) + 4) % len(THEMES)][0]
    return (
        "*{box-sizing:border-box}body{margin:0;font-family:system-ui,-apple-system,'Segoe UI',Roboto,sans-serif;"
        "color:#212529;background:#fff}a{color:" + accent + "}.fg-container{max-width:1140px;margin:auto;padding:0 12px}"
        ".fg-py-4{padding-top:24px;padding-bottom:24px}.fg-navbar{background:#212529;padding:8px 0}.fg-navbar .fg-container{"
        "display:flex;flex-wrap:wrap;gap:16px;align-items:center}.fg-navbar a{color:#fff;text-decoration:none}"
        ".fg-navbar-brand{font-size:20px;font-weight:600}.fg-nav-link{margin-right:12px}.fg-navbar-search{display:flex;"
        "margin-left:auto}.fg-row{display:flex;flex-wrap:wrap;gap:16px 0;margin:0 -8px}.fg-row>*{padding:0 8px}"
        ".fg-col-md-3{flex:0 0 25%}.fg-col-md-9{flex:0 0 75%}.fg-col-md-5{flex:0 0 42%}.fg-col-md-7{flex:0 0 58%}"
        ".fg-col-12{flex:0 0 100%}.fg-grid>.fg-col{flex:0 0 33.33%}.fg-justify-content-center{justify-content:center}"
        ".fg-card{border:1px solid #dee2e6;border-radius:6px;background:#fff;overflow:hidden}.fg-card-header{"
        "background:#f8f9fa;padding:8px 12px;border-bottom:1px solid #dee2e6;font-weight:600}.fg-card-body{padding:12px}"
        ".fg-card-img{height:120px;background:" + accent + "22;display:flex;align-items:center;justify-content:center;"
        "font-size:32px;color:" + accent + "}.fg-btn{display:inline-block;border:1px solid transparent;border-radius:6px;"
        "padding:6px 12px;cursor:pointer;text-decoration:none;font-size:15px;background:#e9ecef}.fg-btn-primary{background:"
        + accent + ";color:#fff}.fg-btn-outline-primary{border-color:" + accent + ";color:" + accent + ";background:#fff}"
        ".fg-btn-outline-secondary{border-color:#6c757d;background:#fff}.fg-btn-light{background:#f8f9fa}"
        ".fg-form-control,.fg-form-select{display:block;width:100%;padding:6px 10px;border:1px solid #ced4da;"
        "border-radius:6px;font-size:15px}.fg-is-invalid{border-color:#dc3545}.fg-invalid-feedback{color:#dc3545;"
        "font-size:14px}.fg-d-block{display:block}.fg-mb-3{margin-bottom:16px}.fg-mt-3{margin-top:16px}"
        ".fg-input-group{display:flex;max-width:160px}.fg-input-group input{text-align:center;border-radius:0}"
        ".fg-d-flex{display:flex;gap:12px;align-items:center;justify-content:space-between}.fg-toolbar .fg-sort{"
        "max-width:260px}.fg-alert{padding:12px;border-radius:6px;margin-bottom:16px}.fg-alert-info{background:#cff4fc}"
        ".fg-alert-danger{background:#f8d7da}.fg-badge{background:#dc3545;border-radius:999px;padding:0 6px;font-size:12px}"
        ".fg-fixed-bottom{position:fixed;left:0;right:0;bottom:0;z-index:1030}.fg-bg-dark{background:#212529}"
        ".fg-text-white{color:#fff}.fg-p-3{padding:16px}.fg-p-5{padding:48px}.fg-bg-light{background:#f8f9fa}"
        ".fg-modal-backdrop{position:fixed;inset:0;background:#000;opacity:.5;z-index:1050}.fg-modal{position:fixed;"
        "inset:0;z-index:1055;display:flex;align-items:flex-start;justify-content:center;padding-top:80px}"
        ".fg-modal-content{background:#fff;border-radius:8px;min-width:320px}.fg-modal-header{display:flex;"
        "justify-content:space-between;padding:12px 16px;border-bottom:1px solid #dee2e6}.fg-modal-body{padding:16px}"
        ".fg-btn-close{border:0;background:none;font-size:22px;cursor:pointer}.fg-toast{position:fixed;right:16px;"
        "bottom:16px;z-index:1090;background:#fff;border:1px solid #dee2e6;border-radius:6px;min-width:280px;display:none;"
        "box-shadow:0 4px 12px #0003}.fg-toast.fg-show{display:block}.fg-toast-header{display:flex;"
        "justify-content:space-between;padding:6px 12px;border-bottom:1px solid #dee2e6}.fg-toast-body{padding:12px}"
        ".fg-nav-tabs{display:flex;gap:4px;border-bottom:1px solid #dee2e6;margin-top:24px}.fg-nav-tabs button{border:1px "
        "solid transparent;background:none;padding:8px 14px;cursor:pointer}.fg-nav-tabs .fg-active{border-color:#dee2e6 "
        "#dee2e6 #fff;background:#fff}.fg-tab-pane{display:none;padding:16px 0}.fg-tab-pane.fg-show{display:block}"
        ".fg-table{width:100%;border-collapse:collapse}.fg-table td,.fg-table th{padding:8px;border-top:1px solid #dee2e6;"
        "text-align:left}.fg-table-striped tbody tr:nth-of-type(odd){background:#f8f9fa}.fg-text-muted{color:#6c757d}"
        ".fg-price{font-size:24px;font-weight:600;color:" + accent + "}.fg-breadcrumb{display:flex;gap:8px;list-style:none;"
        "padding:0;font-size:14px}.fg-breadcrumb li+li:before{content:'/ ';color:#6c757d}.fg-list-group{list-style:none;"
        "padding:0;margin:0}.fg-list-group a{display:block;padding:6px 12px;border-bottom:1px solid #dee2e6}"
        ".fg-footer{background:#f8f9fa;padding:24px 0;margin-top:40px;font-size:14px}[hidden]{display:none!important}"
    )


@lru_cache(maxsize=8192)
def _navbar(b: FacetGrid, site: Site) -> str:
    """The navbar up to its right-hand links (the account and cart links, per request, close it)."""
    return (f'<nav class="fg-navbar"><div class="fg-container"><a class="fg-navbar-brand" href="/">{escape(site.name)}</a>'
            f'<a class="fg-nav-link fg-nav-shop" href="{escape(b.url_listing(site))}">{escape(b.word(site, "shop"))}</a>'
            f'<a class="fg-nav-link" href="{escape(b.url(site, "help"))}">FAQ</a>'
            f'<form class="fg-navbar-search" role="search" method="get" action="{escape(b.url_listing(site))}"><input '
            f'class="fg-form-control" type="search" name="s" placeholder="{escape(site.words["search_placeholder"])}" '
            f'aria-label="Search"><button class="fg-btn fg-btn-primary" type="submit">{escape(b.word(site, "search"))}'
            "</button></form>")


@lru_cache(maxsize=8192)
def _footer(b: FacetGrid, site: Site) -> str:
    return (f'<footer class="fg-footer"><div class="fg-container">{escape(str(site.look["tagline"]))} &middot; <a href="'
            f'{escape(b.url(site, "about"))}">About us</a> &middot; <a href="{escape(b.url(site, "help"))}">FAQ</a> '
            f"&middot; &copy; {escape(site.name)}</div></footer>")


@lru_cache(maxsize=8192)
def _cats(b: FacetGrid, site: Site) -> str:
    links = "".join(f'<li><a href="{escape(b.url_listing(site, "", slug))}">{escape(label)}</a></li>'
                    for slug, label in site.category_labels.items())
    return (f'<div class="fg-card fg-mb-3"><div class="fg-card-header">Categories</div><ul class="fg-list-group fg-cats">'
            f"{links}</ul></div>")


@lru_cache(maxsize=8192)
def _crumbs(b: FacetGrid, site: Site, category: str) -> str:
    last = (f'<li><a href="{escape(b.url_listing(site, "", category))}">{escape(site.category_labels[category])}</a></li>'
            if category in site.category_labels else "")
    return (f'<nav aria-label="breadcrumb"><ol class="fg-breadcrumb"><li><a href="/">Home</a></li><li><a href="'
            f'{escape(b.url_listing(site))}">{escape(b.word(site, "shop"))}</a></li>{last}</ol></nav>')


@lru_cache(maxsize=8192)
def _home(b: FacetGrid, site: Site) -> str:
    top = sorted(site.items, key=lambda it: (-it.rating, it.id))[:6]
    cards = "".join(_card(b, site, it.id) for it in top)
    return (f'<div class="fg-p-5 fg-bg-light fg-mb-3"><h1>{escape(site.name)}</h1><p class="fg-lead">'
            f'{escape(str(site.look["tagline"]))}</p><a class="fg-btn fg-btn-primary" href="{escape(b.url_listing(site))}">'
            f'{escape(b.word(site, "shop"))} {escape(site.family.plural)}</a></div><h2 class="fg-h4">Featured</h2>'
            f'<div class="fg-row fg-featured">{cards}</div>')


@lru_cache(maxsize=131072)
def _card(b: FacetGrid, site: Site, item_id: str) -> str:
    it = site.by_id[item_id]
    return (f'<div class="fg-col" data-fg-brand="{escape(it.author)}" data-fg-rating="{it.rating:.1f}"><div class="fg-card '
            f'fg-h-100"><div class="fg-card-img" aria-hidden="true">{escape(it.title[:1])}</div><div class="fg-card-body">'
            f'<a class="fg-card-title" href="{escape(b.url_record(site, it))}">{escape(it.title)}</a><p class="fg-text-muted '
            f'fg-small">{escape(it.author)} &middot; {escape(site.fmt_date(it.date))}</p><p class="fg-price">'
            f'{escape(it.value_text)}</p><p class="fg-small" aria-label="Rated {it.rating:.1f} out of 5">'
            f'{"&#9733;" * round(it.rating)}{"&#9734;" * (5 - round(it.rating))}</p></div></div></div>')


@lru_cache(maxsize=65536)
def _record(b: FacetGrid, site: Site, item_id: str) -> tuple[str, str]:
    """The record's top (with a `<!--fg-buy-->` slot for its form) and its tabs."""
    it = site.by_id[item_id]
    fam = site.family
    cat = site.category_labels.get(it.category, it.category)
    specs = "".join(f"<tr><th>{escape(k)}</th><td>{escape(v)}</td></tr>" for k, v in
                    [("Category", cat), (fam.date_label, site.fmt_date(it.date)), *it.attrs])
    reviews = "".join(f'<div class="fg-review fg-mb-3"><strong>{escape(str(r["author"]))}</strong> '
                      f'{"&#9733;" * int(r["stars"])}<p>{escape(str(r["text"]))}</p></div>' for r in it.reviews) or \
        '<p class="fg-text-muted">There are no reviews yet.</p>'
    tabs = [("desc", "Description", f"<p>{escape(it.body)}</p>"),
            ("specs", "Specifications", f'<table class="fg-table fg-table-striped"><tbody>{specs}</tbody></table>'),
            ("reviews", f"Reviews ({len(it.reviews)})", reviews)]
    heads = "".join(f'<button type="button" role="tab" id="fg-tab-{k}" aria-controls="fg-pane-{k}" aria-selected='
                    f'"{"true" if i == 0 else "false"}"{" class=fg-active" if i == 0 else ""}>{escape(label)}</button>'
                    for i, (k, label, _) in enumerate(tabs))
    panes = "".join(f'<div class="fg-tab-pane{" fg-show" if i == 0 else ""}" id="fg-pane-{k}" role="tabpanel" '
                    f'aria-labelledby="fg-tab-{k}">{body}</div>' for i, (k, _, body) in enumerate(tabs))
    crumbs = _crumbs(b, site, it.category).replace("</ol>", f'<li aria-current="page">{escape(it.title)}</li></ol>')
    top = (f'{crumbs}<div class="fg-row"><div class="fg-col-md-5"><div class="fg-card-img fg-rounded" aria-hidden="true" '
           f'style="height:280px">{escape(it.title[:1])}</div></div><div class="fg-col-md-7"><h1 class="fg-h2">'
           f'{escape(it.title)}</h1><p class="fg-text-muted">{escape(fam.author_label)}: {escape(it.author)} &middot; '
           f'Rated {it.rating:.1f} out of 5</p><p class="fg-price">{escape(it.value_text)}</p><p>{escape(fam.value_label)}'
           f' &middot; {escape(cat)}</p><!--fg-buy--></div></div>')
    return top, f'<div class="fg-nav-tabs" role="tablist">{heads}</div><div class="fg-tab-content">{panes}</div>'

"""The `forumware` builder: forum software's conventions. Topics at `/t/<slug>/<number>`, the list at `/latest`
with categories at `/c/<category>`, rows of a topic list with a "Load more" link that keeps the earlier rows (page N
shows the first N pages), records as an opening post with "label — value" lines and replies under it, a reply
composer, a cookie consent dialog in the middle of the screen and a sign-up bar at the bottom."""

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
    click,
    css_str,
    fill,
    select,
)
from webenv.sites.catalog import THEMES, Site
from webenv.sites.families.base import FieldSpec, Item
from webenv.v1 import common_pb2 as pb

ORDERS = {"relevance": "Latest activity", "value_asc": "{v} ↑", "value_desc": "{v} ↓", "date_desc": "Created",
          "rating_desc": "Likes"}
JS = """<script>
(function(){function ck(n){document.cookie=n+"=1; path=/; max-age=31536000";}
var cd=document.querySelector(".fw-consent .fw-agree");if(cd){cd.addEventListener("click",function(){ck("cookie_consent");document.querySelector(".fw-consent").remove();});}
var sb=document.querySelector(".fw-signup-bar .fw-dismiss");if(sb){sb.addEventListener("click",function(){ck("popup_dismissed");document.querySelector(".fw-signup-bar").remove();});}
document.querySelectorAll(".fw-relative-date").forEach(function(t){t.title=t.getAttribute("datetime");});
})();
</script>"""


class Forumware(Builder):
    name = "forumware"
    summary = "forum software: /t/slug/number topics, a topic list with Load more, posts, a reply composer"
    scheme = Scheme(
        routes={
            "home": "/", "listing": "/latest", "record": "/t/{slug}/{num}", "act": "/t/{slug}/{num}/reply",
            "login": "/session/new", "logout": "/session/destroy", "help": "/faq", "about": "/about",
            "account": "/my/activity", "cart": "/my/cart", "cart_add": "/my/cart/add", "cart_remove": "/my/cart/drop",
            "checkout": "/my/cart/checkout", "order": "/my/orders/{id}", "done": "/my/posts/{id}",
        },
        q="term", category="c", sort="order", page="page", category_path="/c/{category}",
        sort_values={"value_asc": "value-asc", "value_desc": "value", "date_desc": "created", "rating_desc": "likes"},
    )
    words = {
        "send": ("Reply", "Post", "Create"),
        "add_cart": ("Add to cart", "Get it"),
        "checkout": ("Checkout", "Continue"),
        "place": ("Complete order", "Order now"),
        "accept": ("Agree", "Accept", "Continue"),
        "close": ("Not now", "Dismiss"),
        "login": ("Log In", "Sign In"),
        "more": ("Load more", "Show more topics", "More"),
    }

    def page(self, ctx: Ctx, title: str, body: str, status: int = 200) -> HTMLResponse:
        site = ctx.site
        consent = ""
        if ctx.show_banner:
            consent = (f'<div class="fw-consent" role="alertdialog" aria-label="Cookies" style="position:fixed;top:30%;'
                       f'left:25%;right:25%;background:#fff;border:2px solid #888;padding:18px;z-index:99">'
                       f'<p>{escape(site.words["cookie"])}</p><button class="fw-agree" type="button">'
                       f'{escape(self.word(site, "accept"))}</button></div>')
        me = (f'<a class="fw-me" href="{escape(self.url(site, "account"))}">@{escape(ctx.user)}</a> '
              f'<a href="{escape(self.url(site, "logout"))}">Log Out</a>') if ctx.user else \
            f'<a class="fw-login-btn" href="{escape(self.url(site, "login"))}">{escape(self.word(site, "login"))}</a>'
        cart = (f' <a class="fw-cart" href="{escape(self.url(site, "cart"))}">Cart {ctx.cart_count()}</a>'
                if site.family.name == "shop" else "")
        html = (f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>{escape(title)} - {escape(site.name)}'
                f'</title><link rel="icon" href="data:,"><style>{_css(site)}</style></head><body><section class="fw-wrap">'
                f'<header class="fw-header"><a class="fw-logo" href="/">{escape(site.name)}</a>{_finder(self, site)}'
                f'<span class="fw-panel">{me}{cart}</span></header>{_tabs(self, site)}<main>{body}</main>'
                f'<footer class="fw-footer"><a href="{escape(self.url(site, "help"))}">FAQ</a> · '
                f'<a href="{escape(self.url(site, "about"))}">About</a></footer></section>{consent}{JS}</body></html>')
        return HTMLResponse(html, status_code=status)

    def render_home(self, ctx: Ctx) -> str:
        site = ctx.site
        bar = ""
        if ctx.show_popup:
            bar = (f'<div class="fw-signup-bar" style="position:fixed;bottom:0;left:0;right:0;background:#fffbe0;'
                   f'padding:14px;z-index:50">{escape(site.words["popup"])} <button class="fw-dismiss" type="button">'
                   f'{escape(self.word(site, "close"))}</button></div>')
        if site.family.login_required and ctx.user is None:
            return f'<div class="fw-private"><h2>Private community</h2><p>Log in to continue.</p></div>{bar}'
        return _categories_page(self, site) + bar

    def render_listing(self, ctx: Ctx, items: list[Item], *, q: str, category: str, sort: str, page: int, total: int,
                       found: list[Item]) -> str:
        site, fam = ctx.site, ctx.site.family
        shown = found[: page * PAGE_SIZE]  # Load more keeps what was above
        rows = "".join(_row(self, site, it.id) for it in shown) or '<tr><td colspan="3">No topics found.</td></tr>'
        tabs = "".join(
            f'<li class="fw-order{" fw-active" if s == sort else ""}"><a href="{escape(self.url_listing(site, q, category, s))}">'
            f'{escape(label.format(v=fam.value_label))}</a></li>' for s, label in ORDERS.items())
        more = ""
        if page * PAGE_SIZE < total:
            more = (f'<a class="fw-load-more" href="{escape(self.url_listing(site, q, category, sort, page + 1))}">'
                    f'{escape(self.word(site, "more"))}</a>')
        head = (f'<h2 class="fw-search-head">{total} results for <q>{escape(q)}</q></h2>' if q else
                f'<h2>{escape(site.category_labels.get(category, "Latest"))}</h2>')
        return (f'{head}<ul class="fw-orders">{tabs}</ul><table class="fw-topic-list"><thead><tr><th>Topic</th>'
                f'<th>{escape(fam.author_label)}</th><th>{escape(fam.value_label)}</th></tr></thead><tbody>{rows}</tbody>'
                f"</table>{more}")

    def render_record(self, ctx: Ctx, item: Item, values: dict[str, str], errors: dict[str, str]) -> str:
        site, fam = ctx.site, ctx.site.family
        out = _topic(self, site, item.id)
        if fam.action is None:
            err = f'<div class="fw-flash">{escape(errors["qty"])}</div>' if "qty" in errors else ""
            return out + (f'<form class="fw-buy" method="post" action="{escape(self.url(site, "cart_add"))}">{err}'
                          f'<input type="hidden" name="sku" value="{item.id}"><label>How many? <select name="qty">'
                          + "".join(f"<option>{n}</option>" for n in range(1, 11))
                          + f'</select></label> <button class="fw-btn" type="submit">{escape(self.word(site, "add_cart"))}'
                          f"</button></form>")
        err = f'<div class="fw-flash">Sorry, {len(errors)} thing(s) need fixing.</div>' if errors else ""
        fields = "".join(_composer_field(f, values.get(f.name, ""), errors.get(f.name)) for f in fam.action.fields)
        return out + (f'<div class="fw-composer"><h3>{escape(str(site.look["action_button"]))}</h3>{err}<form method="post" '
                      f'action="{escape(self.url(site, "act", id=item.id))}">{fields}<button class="fw-btn fw-create" '
                      f'type="submit">{escape(self.word(site, "send"))}</button></form></div>')

    def render_login(self, ctx: Ctx, nxt: str, error: str) -> str:
        err = f'<div class="fw-flash">{escape(error)}</div>' if error else ""
        return (f'<div class="fw-login-modal"><h2>Welcome back</h2>{err}<form method="post" '
                f'action="{escape(self.url(ctx.site, "login"))}"><input type="hidden" name="next" value="{escape(nxt)}">'
                f'<input name="username" placeholder="Username" aria-label="Username">'
                f'<input name="password" type="password" placeholder="Password" aria-label="Password">'
                f'<button class="fw-btn" type="submit">{escape(self.word(ctx.site, "login"))}</button></form></div>')

    def render_cart(self, ctx: Ctx, added: Item | None) -> str:
        site = ctx.site
        lines, total = "", 0.0
        for line in ctx.st["cart"]["items"]:
            it = site.by_id.get(line["sku"])
            if it is not None:
                total += it.value * line["qty"]
                lines += f"<tr><td>{escape(it.title)}</td><td>× {line['qty']}</td><td>{escape(it.value_text)}</td></tr>"
        flash = f'<div class="fw-flash fw-ok">Added {escape(added.title)}.</div>' if added else ""
        if not lines:
            return f"{flash}<p>Nothing in your cart yet.</p>"
        return (f'{flash}<table class="fw-cart-table">{lines}</table><p>Total ${total:,.2f}</p>'
                f'<a class="fw-btn fw-to-checkout" href="{escape(self.url(site, "checkout"))}">{escape(self.word(site, "checkout"))}</a>')

    def render_checkout(self, ctx: Ctx, values: dict[str, str], errors: dict[str, str]) -> str:
        err = f'<div class="fw-flash">{escape(errors.get("cart", "Some fields need fixing."))}</div>' if errors else ""
        fields = "".join(_composer_field(f, values.get(f.name, ""), errors.get(f.name)) for f in CHECKOUT_FIELDS)
        return (f'<h2>Shipping</h2>{err}<form class="fw-ship" method="post" action="{escape(self.url(ctx.site, "checkout"))}">'
                f'{fields}<button class="fw-btn" type="submit">{escape(self.word(ctx.site, "place"))}</button></form>')

    # --- oracle -----------------------------------------------------------------------------------------------
    login_steps = (".fw-login-btn", '.fw-login-modal input[name="username"]', '.fw-login-modal input[name="password"]',
                   ".fw-login-modal .fw-btn")
    search_box, results = (".fw-finder input", ".fw-finder button"), ".fw-topic-list"

    def dismiss(self, site: Site) -> list[pb.Action]:
        # the consent dialog sits over everything, the sign-up bar only over the bottom of the page
        return ([click(".fw-consent .fw-agree")] if site.look["cookie_banner"] else []) + \
            ([click(".fw-signup-bar .fw-dismiss")] if site.look["popup"] else [])

    def browse(self, site: Site, *, category: str = "", sort: str = "relevance", page: int = 1) -> list[pb.Action]:
        acts = [click(f".fw-nav a[href={css_str(self.url_listing(site, '', category))}]")]
        if sort != "relevance":
            acts.append(click(f".fw-orders a[href={css_str(self.url_listing(site, '', category, sort))}]"))
        acts += [click(".fw-load-more")] * (page - 1)
        return acts

    def submit_record(self, site: Site, item: Item, values: dict[str, object]) -> list[pb.Action]:
        spec = site.family.action
        assert spec is not None
        acts: list[pb.Action] = []
        for f in spec.fields:
            v = values[f.name]
            target = f'.fw-composer [name="{f.name}"]'
            if f.kind == "select":
                acts.append(select(target, str(v)))
            elif f.kind == "checkbox":
                if v:
                    acts.append(click(target))
            else:
                acts.append(fill(target, str(v)))
        return acts + [click(".fw-composer .fw-create")]

    def add_to_cart(self, site: Site, item: Item, qty: int) -> list[pb.Action]:
        return [select('.fw-buy select[name="qty"]', str(qty)), click(".fw-buy .fw-btn")]

    def check_out(self, site: Site, address: dict[str, str]) -> list[pb.Action]:
        return ([click(".fw-to-checkout")] + [fill(f'.fw-ship [name="{k}"]', address[k]) for k in ("name", "street", "city", "zip")]
                + [click(".fw-ship .fw-btn")])


def _composer_field(f: FieldSpec, value: str, error: str | None) -> str:
    err = f'<em class="fw-field-error">{escape(error)}</em>' if error else ""
    if f.kind == "textarea":
        return f'<textarea name="{f.name}" placeholder="{escape(f.label)}" aria-label="{escape(f.label)}" rows="6">{escape(value)}</textarea>{err}'
    if f.kind == "select":
        opts = "".join(f'<option value="{escape(o)}"{" selected" if o == value else ""}>{escape(o)}</option>' for o in f.options)
        return f'<label>{escape(f.label)} <select name="{f.name}"><option value="">…</option>{opts}</select></label>{err}'
    if f.kind == "checkbox":
        return f'<label><input type="checkbox" name="{f.name}" value="on"{" checked" if value == "on" else ""}> {escape(f.label)}</label>{err}'
    kind = {"number": "number", "email": "email"}.get(f.kind, "text")
    return f'<input type="{kind}" name="{f.name}" value="{escape(value)}" placeholder="{escape(f.label)}" aria-label="{escape(f.label)}">{err}'


@lru_cache(maxsize=8192)
def _css(site: Site) -> str:
    accent = THEMES[(int(site.look["theme"]) + 4) % len(THEMES)][0]
    return (f"body{{margin:0;font-family:Arial,sans-serif;background:#fff}}.fw-wrap{{max-width:1100px;margin:auto}}"
            f".fw-header{{display:flex;gap:20px;align-items:center;padding:10px;border-bottom:3px solid {accent}}}"
            f".fw-nav li,.fw-orders li{{display:inline-block;margin-right:14px}}.fw-active a{{font-weight:bold}}"
            f".fw-topic-list{{width:100%;border-collapse:collapse}}.fw-topic-list td{{border-bottom:1px solid #eee;"
            f"padding:8px}}.fw-btn{{background:{accent};color:#fff;border:0;padding:7px 14px}}.fw-flash{{background:"
            f"#fdd;padding:8px}}.fw-ok{{background:#dfd}}.fw-post{{border-top:1px solid #ddd;padding:12px 0}}"
            f"textarea{{width:100%}}.fw-footer{{padding:20px;color:#777}}")


@lru_cache(maxsize=8192)
def _finder(b: Forumware, site: Site) -> str:
    return (f'<form class="fw-finder" action="{escape(b.url_listing(site))}" method="get" role="search">'
            f'<input name="term" placeholder="{escape(site.words["search_placeholder"])}" aria-label="Search">'
            f'<button type="submit" aria-label="Search">🔍</button></form>')


@lru_cache(maxsize=8192)
def _tabs(b: Forumware, site: Site) -> str:
    cats = "".join(f'<li><a href="{escape(b.url_listing(site, "", slug))}">{escape(label)}</a></li>'
                   for slug, label in site.category_labels.items())
    return f'<nav class="fw-nav"><ul><li><a href="{escape(b.url_listing(site))}">Latest</a></li>{cats}</ul></nav>'


@lru_cache(maxsize=8192)
def _categories_page(b: Forumware, site: Site) -> str:
    rows = "".join(
        f'<tr><td><a href="{escape(b.url_listing(site, "", slug))}">{escape(label)}</a></td><td>'
        f"{sum(1 for it in site.items if it.category == slug)} topics</td></tr>"
        for slug, label in site.category_labels.items())
    return f'<table class="fw-categories"><tr><th>Category</th><th>Topics</th></tr>{rows}</table>'


@lru_cache(maxsize=131072)
def _row(b: Forumware, site: Site, item_id: str) -> str:
    it = site.by_id[item_id]
    return (f'<tr><td><a class="fw-title" href="{escape(b.url_record(site, it))}">{escape(it.title)}</a> '
            f'<span class="fw-badge">{escape(site.category_labels.get(it.category, ""))}</span></td>'
            f"<td>{escape(it.author)}</td><td>{escape(it.value_text)}</td></tr>")


@lru_cache(maxsize=65536)
def _topic(b: Forumware, site: Site, item_id: str) -> str:
    it = site.by_id[item_id]
    fam = site.family
    lines = [(fam.value_label, it.value_text), (fam.author_label, it.author),
             ("Category", site.category_labels.get(it.category, it.category)), (fam.date_label, site.fmt_date(it.date)),
             ("Rating", f"{it.rating:.1f}/5"), *it.attrs]
    facts = "<br>".join(f"<strong>{escape(k)}</strong> — {escape(v)}" for k, v in lines)
    replies = "".join(f'<div class="fw-post"><b>{escape(str(r["author"]))}</b>: {escape(str(r["text"]))} '
                      f"({r['stars']}★)</div>" for r in it.reviews)
    return (f'<h1 class="fw-topic-title">{escape(it.title)}</h1><div class="fw-post fw-op"><p>{escape(it.body)}</p>'
            f"<p>{facts}</p></div>{replies}")

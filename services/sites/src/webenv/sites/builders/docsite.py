"""The `docsite` builder: a documentation site built with Sphinx and the Read the Docs theme. Versioned `.html` paths
(`/en/latest/<list>/<slug>.html`, section indexes at `/en/latest/<category>/index.html`, `genindex.html?q=`), a
fixed left column with the project, a "Search docs" box and a toctree whose current section unfolds, breadcrumbs
("Docs » Section » Page") with an edit link, listings as Sphinx search results ("Search finished, found N pages")
sorted by a field list of links and paged by Previous / Next footer buttons, records as a page with a field list,
a docutils table and note admonitions, forms as a plain feedback form under a rubric, the cookie notice as an
announcement bar and the pop-up as a native <dialog> opened by script."""

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
    fill_native,
    native_control,
    pages_of,
)
from webenv.sites.catalog import Site
from webenv.sites.families.base import FieldSpec, Item
from webenv.v1 import common_pb2 as pb

SORT_WORDS = {"relevance": "relevance", "value_asc": "{v} (ascending)", "value_desc": "{v} (descending)",
              "date_desc": "most recent", "rating_desc": "best rated"}
SCRIPT = """<script>(function(){
function k(n){document.cookie=n+"=1; path=/; max-age=31536000";}
var a=document.querySelector(".ds-announcement button");if(a){a.addEventListener("click",function(){k("cookie_consent");a.closest(".ds-announcement").remove();});}
var d=document.querySelector("dialog.ds-dialog");if(d){d.showModal();d.querySelector(".ds-dialog-close").addEventListener("click",function(){k("popup_dismissed");d.close();d.remove();});}
})();</script>"""


class DocSite(Builder):
    name = "docsite"
    summary = "a Sphinx / Read the Docs documentation site: .html paths, toctree sidebar, field lists, Previous / Next"
    scheme = Scheme(
        routes={
            "home": "/", "listing": "/en/latest/genindex.html", "record": "/en/latest/{base}/{slug}.html",
            "act": "/_/feedback/{id}", "login": "/accounts/login/", "logout": "/accounts/logout/",
            "help": "/en/latest/faq.html", "about": "/en/latest/about.html", "account": "/accounts/profile/",
            "cart": "/_/cart/", "cart_add": "/_/cart/add/", "cart_remove": "/_/cart/remove/",
            "checkout": "/_/cart/checkout/", "order": "/_/orders/{id}/", "done": "/_/feedback/{id}/thanks/",
        },
        category_path="/en/latest/{category}/index.html",
        sort_values={"relevance": "relevance", "value_asc": "asc", "value_desc": "desc", "date_desc": "recent",
                     "rating_desc": "rated"},
    )
    words = {
        "search": ("Go", "Search"),
        "send": ("Send feedback", "Submit", "Send"),
        "add_cart": ("Add to cart", "Order"),
        "checkout": ("Check out", "Proceed to checkout"),
        "place": ("Place order", "Order now"),
        "accept": ("Dismiss", "OK", "Got it"),
        "close": ("Close", "Not now"),
        "login": ("Log in", "Sign in"),
    }

    def page(self, ctx: Ctx, title: str, body: str, status: int = 200) -> HTMLResponse:
        site = ctx.site
        here = self.scheme.match(site, ctx.request.scope["path"], dict(ctx.request.query_params))
        item = site.by_id.get(here.get("id")) if here.kind == "record" else None
        section = item.category if item else here.get("category") if here.kind == "listing" else ""
        user = ctx.user
        acct = (f'<a href="{escape(self.url(site, "account"))}">{escape(user)}</a> &middot; '
                f'<a href="{escape(self.url(site, "logout"))}">Log out</a>') if user else \
            f'<a class="ds-login" href="{escape(self.url(site, "login"))}">{escape(self.word(site, "login"))}</a>'
        if site.family.name == "shop":
            acct += f' &middot; <a href="{escape(self.url(site, "cart"))}">Cart ({ctx.cart_count()})</a>'
        bar = ""
        if ctx.show_banner:
            bar = (f'<div class="ds-announcement" role="region" aria-label="Announcement">{escape(site.words["cookie"])} '
                   f'<button type="button">{escape(self.word(site, "accept"))}</button></div>')
        html = (
            f'<!DOCTYPE html><html class="ds-writer-html5" lang="en"><head><meta charset="utf-8"><meta name="viewport" '
            f'content="width=device-width, initial-scale=1.0"><title>{escape(title)} &mdash; {escape(site.name)} '
            f'documentation</title><link rel="icon" href="data:,"><style>{_style(site)}</style></head>'
            f'<body class="ds-body">{bar}<div class="ds-grid">{_side(self, site, section)}<section class="ds-content">'
            f'<div class="ds-topbar">{acct}</div><div class="ds-document" role="main">{body}</div>{_foot(site)}'
            f"</section></div>{SCRIPT}</body></html>"
        )
        return HTMLResponse(html, status_code=status)

    def render_home(self, ctx: Ctx) -> str:
        site = ctx.site
        dialog = ""
        if ctx.show_popup:
            dialog = (f'<dialog class="ds-dialog" aria-label="Release notes"><p>{escape(site.words["popup"])}</p>'
                      f'<button type="button" class="ds-dialog-close">{escape(self.word(site, "close"))}</button></dialog>')
        if site.family.login_required and ctx.user is None:
            return (f'<h1>{escape(site.name)}</h1><div class="ds-admonition ds-warning"><p class="ds-admonition-title">'
                    f'Warning</p><p>Log in to read the {escape(site.family.plural)}.</p></div>{dialog}')
        return _home(self, site) + dialog

    def render_listing(self, ctx: Ctx, items: list[Item], *, q: str, category: str, sort: str, page: int, total: int,
                       found: list[Item]) -> str:
        site, fam = ctx.site, ctx.site.family
        sorts = ", ".join(
            f"<strong>{escape(SORT_WORDS[s].format(v=fam.value_label.lower()))}</strong>" if s == sort else
            f'<a href="{escape(self.url_listing(site, q, category, s))}">'
            f'{escape(SORT_WORDS[s].format(v=fam.value_label.lower()))}</a>' for s in SORT_WORDS)
        results = "".join(_result(self, site, it.id) for it in items)
        head = site.category_labels.get(category, "Search results" if q else "Index")
        found_line = (f"<p>Search finished, found {total} page{'s' if total != 1 else ''} matching the search query.</p>"
                      if q else f"<p>{total} page{'s' if total != 1 else ''} in this section.</p>")
        buttons = ""
        if page > 1:
            buttons += (f'<a class="ds-btn ds-btn-neutral ds-float-left" rel="prev" href="'
                        f'{escape(self.url_listing(site, q, category, sort, page - 1))}">&larr; Previous</a>')
        if page < pages_of(total):
            buttons += (f'<a class="ds-btn ds-btn-neutral ds-float-right" rel="next" href="'
                        f'{escape(self.url_listing(site, q, category, sort, page + 1))}">Next &rarr;</a>')
        return (f'{_crumbs(self, site, category, "")}<h1>{escape(head)}</h1>{found_line}<dl class="ds-field-list ds-sort">'
                f"<dt>Sort by</dt><dd><p>{sorts}</p></dd></dl><ul class=\"ds-results\">{results}</ul>"
                f'<p>Page {page} of {pages_of(total)}</p><div class="ds-footer-buttons" role="navigation" '
                f'aria-label="Pages">{buttons}</div>')

    def render_record(self, ctx: Ctx, item: Item, values: dict[str, str], errors: dict[str, str]) -> str:
        site, fam = ctx.site, ctx.site.family
        out = _record(self, site, item.id)
        if fam.action is None:
            err = f'<p class="ds-error">{escape(errors["qty"])}</p>' if "qty" in errors else ""
            return out + (f'<p class="ds-rubric">Order</p><form class="ds-buy" method="post" action="'
                          f'{escape(self.url(site, "cart_add"))}">{err}<input type="hidden" name="sku" value="{item.id}">'
                          f'<label for="ds-qty">Quantity</label> <input id="ds-qty" name="qty" type="number" min="1" '
                          f'max="10" value="{escape(values.get("qty", "1"))}"> <button type="submit">'
                          f'{escape(self.word(site, "add_cart"))}</button></form>')
        rows = "".join(_field(f, values.get(f.name, ""), errors.get(f.name)) for f in fam.action.fields)
        err = '<p class="ds-error">Please correct the marked fields.</p>' if errors else ""
        return out + (f'<p class="ds-rubric">{escape(str(site.look["action_button"]))}</p>{err}<form class="ds-feedback" '
                      f'method="post" action="{escape(self.url(site, "act", id=item.id))}">{rows}<button type="submit">'
                      f'{escape(self.word(site, "send"))}</button></form>')

    def render_login(self, ctx: Ctx, nxt: str, error: str) -> str:
        site = ctx.site
        err = f'<p class="ds-error">{escape(error)}</p>' if error else ""
        return (f'<h1>{escape(self.word(site, "login"))}</h1>{err}<form class="ds-login-form" method="post" '
                f'action="{escape(self.url(site, "login"))}"><input type="hidden" name="next" value="{escape(nxt)}">'
                f'<p><label for="ds-username">Username</label><br><input id="ds-username" name="username"></p>'
                f'<p><label for="ds-password">Password</label><br><input id="ds-password" name="password" type="password">'
                f'</p><button type="submit">{escape(self.word(site, "login"))}</button></form>')

    def render_cart(self, ctx: Ctx, added: Item | None) -> str:
        site = ctx.site
        note = (f'<div class="ds-admonition ds-tip"><p class="ds-admonition-title">Tip</p><p>{escape(added.title)} is in '
                f"your cart.</p></div>") if added else ""
        lines, total = cart_lines(ctx)
        rows = "".join(
            f'<tr><td>{escape(it.title)}</td><td>{qty}</td><td>{escape(it.value_text)}</td><td><form method="post" '
            f'action="{escape(self.url(site, "cart_remove"))}"><input type="hidden" name="sku" value="{it.id}">'
            f'<button type="submit">Remove</button></form></td></tr>' for it, qty in lines)
        if not rows:
            return f"{note}<h1>Cart</h1><p>Your cart is empty.</p>"
        return (f'{note}<h1>Cart</h1><table class="ds-docutils"><thead><tr><th>Item</th><th>Qty</th><th>Price</th><th>'
                f'</th></tr></thead><tbody>{rows}</tbody></table><p>Total: <strong>${total:,.2f}</strong></p><p><a '
                f'class="ds-btn ds-checkout-link" href="{escape(self.url(site, "checkout"))}">'
                f'{escape(self.word(site, "checkout"))}</a></p>')

    def render_checkout(self, ctx: Ctx, values: dict[str, str], errors: dict[str, str]) -> str:
        site = ctx.site
        err = f'<p class="ds-error">{escape(errors["cart"])}</p>' if "cart" in errors else ""
        rows = "".join(_field(f, values.get(f.name, ""), errors.get(f.name)) for f in CHECKOUT_FIELDS)
        return (f'<h1>Checkout</h1>{err}<form class="ds-checkout-form" method="post" action="'
                f'{escape(self.url(site, "checkout"))}">{rows}<button type="submit">{escape(self.word(site, "place"))}'
                f"</button></form>")

    # --- oracle -----------------------------------------------------------------------------------------------
    def dismiss(self, site: Site) -> list[pb.Action]:
        return ([click("dialog.ds-dialog .ds-dialog-close")] if site.look["popup"] else []) + \
            ([click(".ds-announcement button")] if site.look["cookie_banner"] else [])

    def log_in(self, site: Site, username: str, password: str) -> list[pb.Action]:
        return [click(".ds-topbar .ds-login"), fill("#ds-username", username), fill("#ds-password", password),
                click(".ds-login-form button")]

    def open_record(self, site: Site, item: Item) -> list[pb.Action]:
        return [fill('.ds-search input[name="q"]', item.title), click(".ds-search button")] + self.open_listed(site, item)

    def open_listed(self, site: Site, item: Item) -> list[pb.Action]:
        return [click(f".ds-results a[href={css_str(self.url_record(site, item))}]")]

    def browse(self, site: Site, *, category: str = "", sort: str = "relevance", page: int = 1) -> list[pb.Action]:
        acts = [click(f".ds-toctree a[href={css_str(self.url_listing(site, '', category))}]")]
        if sort != "relevance":
            acts.append(click(f".ds-sort a[href={css_str(self.url_listing(site, '', category, sort))}]"))
        for p in range(2, page + 1):
            acts.append(click(f".ds-footer-buttons a[href={css_str(self.url_listing(site, '', category, sort, p))}]"))
        return acts

    def submit_record(self, site: Site, item: Item, values: dict[str, object]) -> list[pb.Action]:
        spec = site.family.action
        assert spec is not None
        return fill_native(spec.fields, values, "#ds-f-{name}") + [click(".ds-feedback button")]

    def add_to_cart(self, site: Site, item: Item, qty: int) -> list[pb.Action]:
        return [fill("#ds-qty", str(qty)), click(".ds-buy button")]

    def check_out(self, site: Site, address: dict[str, str]) -> list[pb.Action]:
        return ([click(".ds-checkout-link")] + fill_native(CHECKOUT_FIELDS, address, "#ds-f-{name}")
                + [click(".ds-checkout-form button")])


def _field(f: FieldSpec, value: str, error: str | None) -> str:
    err = f' <span class="ds-error">{escape(error)}</span>' if error else ""
    ctl = native_control(f, value, f"ds-f-{f.name}", "(choose one)", 'rows="5" cols="60"' if f.kind == "textarea" else "")
    if f.kind == "checkbox":
        return f'<p>{ctl} <label for="ds-f-{f.name}">{escape(f.label)}</label>{err}</p>'
    return f'<p><label for="ds-f-{f.name}">{escape(f.label)}</label><br>{ctl}{err}</p>'


@lru_cache(maxsize=8192)
def _style(site: Site) -> str:
    side = ("#343131", "#2c3e50", "#263238", "#3b3b3b")[int(site.look["theme"]) % 4]
    return (
        "body{margin:0;font-family:Lato,'Helvetica Neue',Arial,sans-serif;color:#404040;background:#edf0f2}"
        ".ds-grid{display:flex;min-height:100vh}.ds-nav-side{width:300px;background:" + side + ";color:#d9d9d9;"
        "flex:none}.ds-side-search{background:#2980b9;padding:12px;text-align:center}.ds-side-search a{color:#fff;"
        "font-size:20px;font-weight:700;text-decoration:none}.ds-version{display:block;color:#fffc;font-size:13px}"
        ".ds-search input{width:70%;border-radius:50px;border:1px solid #2472a4;padding:6px 12px}.ds-toctree{"
        "padding:0 0 0 12px}.ds-toctree p{color:#55a5d9;font-weight:700;text-transform:uppercase;font-size:13px}"
        ".ds-toctree ul{list-style:none;padding:0;margin:0}.ds-toctree a{color:#d9d9d9;display:block;padding:5px 12px;"
        "text-decoration:none}.ds-toctree .ds-current>a{background:#fcfcfc;color:#404040}.ds-toctree ul ul a{"
        "padding-left:28px;font-size:13px}.ds-content{flex:1;background:#fcfcfc;max-width:800px;padding:24px 36px}"
        ".ds-topbar{text-align:right;font-size:13px}.ds-breadcrumbs{list-style:none;padding:0;display:flex;gap:6px;"
        "font-size:14px}.ds-breadcrumbs-aside{margin-left:auto}a{color:#2980b9}.ds-field-list{display:grid;"
        "grid-template-columns:max-content auto;gap:4px 16px}.ds-field-list dt{font-weight:700}.ds-field-list dd{margin:0}"
        ".ds-field-list p{margin:0}.ds-docutils{border-collapse:collapse;margin:12px 0}.ds-docutils td,.ds-docutils th{"
        "border:1px solid #e1e4e5;padding:8px 16px}.ds-docutils tr:nth-child(odd) td{background:#f3f6f6}"
        ".ds-admonition{padding:12px;margin:12px 0;background:#e7f2fa}.ds-admonition-title{font-weight:700;"
        "background:#6ab0de;color:#fff;margin:-12px -12px 8px;padding:6px 12px}.ds-warning{background:#ffedcc}"
        ".ds-tip{background:#dbfaf4}.ds-rubric{font-weight:700;margin-top:24px}.ds-btn{display:inline-block;padding:6px "
        "12px;border:1px solid #0003;border-radius:2px;background:#f3f6f6;text-decoration:none;color:#404040}"
        ".ds-footer-buttons{overflow:hidden;margin:24px 0}.ds-float-left{float:left}.ds-float-right{float:right}"
        ".ds-error{color:#e74c3c}.ds-results li{margin-bottom:12px}.ds-context{margin:2px 0;color:#777;font-size:14px}"
        ".ds-announcement{background:#ffd;padding:8px 16px;border-bottom:1px solid #ddb}.ds-headerlink{visibility:hidden;"
        "text-decoration:none;margin-left:6px}h1:hover .ds-headerlink{visibility:visible}footer{border-top:1px solid "
        "#e1e4e5;margin-top:24px;padding-top:12px;font-size:13px;color:#777}dialog.ds-dialog::backdrop{"
        "background:#0008}"
    )


@lru_cache(maxsize=65536)
def _side(b: DocSite, site: Site, section: str) -> str:
    """The fixed left column: project, search, and the toctree with the current section unfolded."""
    def entry(slug: str, label: str) -> str:
        sub = ""
        if slug == section:
            sub = "<ul>" + "".join(f'<li class="ds-toctree-l2"><a href="{escape(b.url_record(site, it))}">'
                                   f"{escape(it.title)}</a></li>" for it in site.items if it.category == slug) + "</ul>"
        cur = " ds-current" if slug == section else ""
        return (f'<li class="ds-toctree-l1{cur}"><a href="{escape(b.url_listing(site, "", slug))}">{escape(label)}</a>'
                f"{sub}</li>")
    sections = "".join(entry(slug, label) for slug, label in site.category_labels.items())
    return (f'<nav class="ds-nav-side" aria-label="Navigation menu"><div class="ds-side-search"><a href="/">'
            f'{escape(site.name)}</a><span class="ds-version">latest</span><form class="ds-search" role="search" '
            f'method="get" action="{escape(b.url_listing(site))}"><input type="text" name="q" placeholder="Search docs" '
            f'aria-label="{escape(site.words["search_placeholder"])}"> <button type="submit">{escape(b.word(site, "search"))}'
            f'</button></form></div><div class="ds-toctree"><p>Contents</p><ul><li class="ds-toctree-l1"><a class="'
            f'ds-genindex" href="{escape(b.url_listing(site))}">All {escape(site.family.plural)}</a></li>{sections}'
            f'<li class="ds-toctree-l1"><a href="{escape(b.url(site, "help"))}">FAQ</a></li><li class="ds-toctree-l1">'
            f'<a href="{escape(b.url(site, "about"))}">About</a></li></ul></div></nav>')


@lru_cache(maxsize=8192)
def _foot(site: Site) -> str:
    return (f'<footer role="contentinfo"><p>&copy; Copyright {escape(site.name)}. {escape(str(site.look["tagline"]))}</p>'
            f"<p>Built with Sphinx using a theme provided by Read the Docs.</p></footer>")


@lru_cache(maxsize=65536)
def _crumbs(b: DocSite, site: Site, category: str, title: str) -> str:
    mid = (f'<li>&raquo; <a href="{escape(b.url_listing(site, "", category))}">{escape(site.category_labels[category])}'
           f"</a></li>" if category in site.category_labels else "")
    last = f"<li>&raquo; {escape(title)}</li>" if title else ""
    return (f'<div role="navigation" aria-label="Page navigation"><ul class="ds-breadcrumbs"><li><a href="/">Docs</a></li>'
            f'{mid}{last}<li class="ds-breadcrumbs-aside"><a href="{escape(b.url(site, "about"))}">Edit on GitHub</a>'
            f"</li></ul><hr></div>")


@lru_cache(maxsize=8192)
def _home(b: DocSite, site: Site) -> str:
    fam = site.family
    toc = "".join(f'<li><a href="{escape(b.url_listing(site, "", slug))}">{escape(label)}</a><ul>'
                  + "".join(f'<li><a href="{escape(b.url_record(site, it))}">{escape(it.title)}</a></li>'
                            for it in sorted((i for i in site.items if i.category == slug), key=lambda i: i.id)[:3])
                  + "</ul></li>" for slug, label in site.category_labels.items())
    return (f'{_crumbs(b, site, "", "")}<h1>Welcome to {escape(site.name)}<a class="ds-headerlink" href="#">&para;</a>'
            f'</h1><p>{escape(str(site.look["tagline"]))}</p><div class="ds-toctree-wrapper"><p class="ds-caption">'
            f"Contents:</p><ul>{toc}</ul></div><h2>Indices and tables</h2><ul><li><a href=\""
            f'{escape(b.url_listing(site))}">Index of all {escape(fam.plural)}</a></li></ul>')


@lru_cache(maxsize=131072)
def _result(b: DocSite, site: Site, item_id: str) -> str:
    it = site.by_id[item_id]
    fam = site.family
    return (f'<li><a href="{escape(b.url_record(site, it))}">{escape(it.title)}</a><p class="ds-context">'
            f"{escape(fam.value_label)}: {escape(it.value_text)} &middot; {escape(it.author)} &middot; "
            f"{escape(site.fmt_date(it.date))}</p></li>")


@lru_cache(maxsize=65536)
def _record(b: DocSite, site: Site, item_id: str) -> str:
    it = site.by_id[item_id]
    fam = site.family
    cat = site.category_labels.get(it.category, it.category)
    fields = [(fam.value_label, it.value_text), (fam.author_label, it.author), ("Section", cat),
              (fam.date_label, site.fmt_date(it.date)), ("Rating", f"{it.rating:.1f} out of 5")]
    dl = "".join(f"<dt>{escape(k)}</dt><dd><p>{escape(v)}</p></dd>" for k, v in fields)
    table = "".join(f"<tr><td>{escape(k)}</td><td>{escape(v)}</td></tr>" for k, v in it.attrs)
    notes = "".join(f'<div class="ds-admonition ds-note"><p class="ds-admonition-title">Note</p><p>{escape(str(r["text"]))}'
                    f' &mdash; {escape(str(r["author"]))} ({r["stars"]}/5)</p></div>' for r in it.reviews)
    return (f'{_crumbs(b, site, it.category, it.title)}<h1>{escape(it.title)}<a class="ds-headerlink" href="#">&para;</a>'
            f'</h1><dl class="ds-field-list">{dl}</dl><p>{escape(it.body)}</p>'
            + (f'<h2>Details</h2><table class="ds-docutils"><tbody>{table}</tbody></table>' if table else "")
            + (f"<h2>Comments</h2>{notes}" if notes else ""))

"""The `boardroom` builder: phpBB-style forum software. Numeric ids in PHP query strings (`viewforum.php?f=...`,
`viewtopic.php?t=1003`), a board index of forums, breadcrumbs, listings as a table of topics with a "Sort by" select
and a Go button, records as the topic's first post whose facts are "label: value" lines in the post body with the
reviews as replies, search at `search.php?keywords=`, pages by `start=` offsets with Previous / Next only, a cookie
consent modal and a dismissible board announcement. Server-rendered, native forms."""

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
    options_html,
    pages_of,
    select,
)
from webenv.sites.catalog import THEMES, Site
from webenv.sites.families.base import FieldSpec, Item
from webenv.v1 import common_pb2 as pb

SORT_KEYS = {"relevance": "Subject", "value_asc": "{v} (lowest first)", "value_desc": "{v} (highest first)",
             "date_desc": "Post time", "rating_desc": "Rating"}
SCRIPT = (
    "<script>(function(){function k(n){document.cookie=n+'=1; path=/; max-age=31536000';}"
    "var a=document.getElementById('bb-cookie-allow');if(a){a.addEventListener('click',function(){k('cookie_consent');"
    "document.getElementById('bb-cookie-modal').remove();});}"
    "var b=document.getElementById('bb-announce-close');if(b){b.addEventListener('click',function(e){e.preventDefault();"
    "k('popup_dismissed');document.getElementById('bb-announcement').remove();});}})();</script>"
)


class Boardroom(Builder):
    name = "boardroom"
    summary = "phpBB-style forum software: viewforum.php?f= / viewtopic.php?t= ids, topic tables, label: value posts"
    scheme = Scheme(
        routes={
            "home": "/", "listing": "/search.php", "record": "/viewtopic.php?t={num}",
            "act": "/posting.php?mode=reply&t={num}", "login": "/ucp.php?mode=login", "logout": "/ucp.php?mode=logout",
            "help": "/faq.php", "about": "/memberlist.php?mode=team", "account": "/ucp.php?i=ucp_main",
            "cart": "/cart.php", "cart_add": "/cart.php?mode=add", "cart_remove": "/cart.php?mode=remove",
            "checkout": "/cart.php?mode=checkout", "order": "/cart.php?mode=order&o={id}",
            "done": "/posting.php?mode=posted&p={id}",
        },
        q="keywords", category="f", sort="sk", page="start", page_step=PAGE_SIZE,
        category_path="/viewforum.php?f={category}",
        sort_values={"relevance": "s", "value_asc": "va", "value_desc": "vd", "date_desc": "t", "rating_desc": "r"},
    )
    words = {
        "search": ("Search", "Go"),
        "send": ("Submit", "Post reply", "Send"),
        "add_cart": ("Add to cart", "Buy"),
        "checkout": ("Checkout", "Proceed"),
        "place": ("Submit order", "Confirm"),
        "accept": ("Allow cookies", "Accept", "OK"),
        "login": ("Login", "Log in"),
        "go": ("Go", "Sort", "Display"),
        "board": ("Board index", "Forum index", "Index"),
    }

    # --- chrome -----------------------------------------------------------------------------------------------
    def page(self, ctx: Ctx, title: str, body: str, status: int = 200) -> HTMLResponse:
        site = ctx.site
        user = ctx.user
        if user:
            links = (f'<a href="{escape(self.url(site, "account"))}">User Control Panel</a> &bull; '
                     f'<a href="{escape(self.url(site, "logout"))}">Logout [ {escape(user)} ]</a>')
        else:
            links = f'<a id="bb-login-link" href="{escape(self.url(site, "login"))}">{escape(self.word(site, "login"))}</a>'
        if site.family.name == "shop":
            links = f'<a href="{escape(self.url(site, "cart"))}">Cart ({ctx.cart_count()})</a> &bull; ' + links
        modal = ""
        if ctx.show_banner:
            modal = (f'<div id="bb-cookie-modal" role="dialog" aria-modal="true" aria-label="Cookie consent" '
                     f'style="position:fixed;inset:0;background:rgba(0,0,0,.55);z-index:90;display:flex;'
                     f'align-items:center;justify-content:center"><div class="bb-panel" style="max-width:420px">'
                     f'<h3>Cookies</h3><p>{escape(site.words["cookie"])}</p><button id="bb-cookie-allow" type="button">'
                     f'{escape(self.word(site, "accept"))}</button></div></div>')
        announce = ""
        if ctx.show_popup:
            announce = (f'<div id="bb-announcement" class="bb-panel"><a id="bb-announce-close" href="#" '
                        f'title="Close announcement">[x]</a> <strong>Announcement:</strong> '
                        f'{escape(site.words["popup"])}</div>')
        html = (
            f'<!DOCTYPE html><html dir="ltr" lang="en-gb"><head><meta charset="utf-8"><title>{escape(title)} - '
            f'{escape(site.name)}</title><link rel="icon" href="data:,"><style>{_style(site)}</style></head><body>'
            f'<div id="bb-wrap"><div class="bb-headerbar"><h1><a href="/">{escape(site.name)}</a></h1>'
            f'<p>{escape(str(site.look["tagline"]))}</p>{_quicksearch(self, site)}</div>'
            f'<div class="bb-navbar"><a href="{escape(self.url(site, "help"))}">FAQ</a> &bull; '
            f'<a href="{escape(self.url(site, "about"))}">The team</a><span class="bb-right">{links}</span></div>'
            f'{announce}<div id="bb-page-body">{body}</div><div class="bb-footer"><a href="/">'
            f'{escape(self.word(site, "board"))}</a> &bull; Powered by BoardKit &copy; {escape(site.name)}</div></div>'
            f"{modal}{SCRIPT}</body></html>"
        )
        return HTMLResponse(html, status_code=status)

    def _crumbs(self, site: Site, *trail: tuple[str, str]) -> str:
        links = [f'<a href="/">{escape(self.word(site, "board"))}</a>'] + [
            f'<a href="{escape(href)}">{escape(label)}</a>' if href else escape(label) for label, href in trail]
        return f'<p class="bb-breadcrumbs">{" &lsaquo; ".join(links)}</p>'

    # --- pages ------------------------------------------------------------------------------------------------
    def render_home(self, ctx: Ctx) -> str:
        site = ctx.site
        if site.family.login_required and ctx.user is None:
            return (f'{self._crumbs(site)}<div class="bb-panel"><h2>Login required</h2><p>The board requires you to be '
                    f'registered and logged in to view its {escape(site.family.plural)}.</p>'
                    f'<a href="{escape(self.url(site, "login"))}">{escape(self.word(site, "login"))}</a></div>')
        return _index(self, site)

    def render_listing(self, ctx: Ctx, items: list[Item], *, q: str, category: str, sort: str, page: int, total: int,
                       found: list[Item]) -> str:
        site, fam = ctx.site, ctx.site.family
        here = self.url_listing
        n = pages_of(total)
        nav = [f'<a rel="prev" href="{escape(here(site, q, category, sort, page - 1))}">Previous</a>'] if page > 1 else []
        if page < n:
            nav.append(f'<a rel="next" href="{escape(here(site, q, category, sort, page + 1))}">Next</a>')
        pagination = (f'<div class="bb-pagination">{total} topics &bull; Page <strong>{page}</strong> of '
                      f'<strong>{n}</strong> {" ".join(nav)}</div>')
        rows = "".join(_topic_row(self, site, it.id) for it in items) or \
            '<tr><td colspan="4"><strong>No suitable matches were found.</strong></td></tr>'
        options = options_html(((self.scheme.sort_values[s], SORT_KEYS[s].format(v=fam.value_label)) for s in SORT_KEYS),
                               self.scheme.sort_values[sort])
        hidden = (f'<input type="hidden" name="f" value="{escape(category)}">' if category else "") + \
            (f'<input type="hidden" name="keywords" value="{escape(q)}">' if q else "")
        action = "/viewforum.php" if category else self.url_listing(site)
        sorter = (f'<form class="bb-sortform" method="get" action="{action}">{hidden}<label>Sort by <select '
                  f'name="sk">{options}</select></label> <button type="submit">{escape(self.word(site, "go"))}</button>'
                  f"</form>")
        if category:
            label = site.category_labels[category]
            head = f"<h2>{escape(label)}</h2>"
            crumbs = self._crumbs(site, (label, ""))
            box = (f'<form class="bb-forumsearch" method="get" action="/viewforum.php"><input type="hidden" name="f" '
                   f'value="{escape(category)}"><input name="keywords" placeholder="Search this forum…" '
                   f'value="{escape(q)}"> <button type="submit">{escape(self.word(site, "search"))}</button></form>')
        else:
            head = f"<h2>Search found {total} matches{': ' + escape(q) if q else ''}</h2>" if q else \
                f"<h2>All {escape(fam.plural)}</h2>"
            crumbs = self._crumbs(site, ("Search", ""))
            box = ""
        return (f'{crumbs}{head}{box}{pagination}<table class="bb-topiclist"><thead><tr><th>Topics</th><th>Replies</th>'
                f"<th>{escape(fam.value_label)}</th><th>Rating</th></tr></thead><tbody>{rows}</tbody></table>"
                f"{sorter}{pagination}")

    def render_record(self, ctx: Ctx, item: Item, values: dict[str, str], errors: dict[str, str]) -> str:
        site, fam = ctx.site, ctx.site.family
        out = _topic(self, site, item.id)
        if fam.action is None:
            err = f'<p class="bb-error">{escape(errors["qty"])}</p>' if "qty" in errors else ""
            return out + (f'<div class="bb-panel"><h3>Buy this</h3>{err}<form method="post" '
                          f'action="{escape(self.url(site, "cart_add"))}"><input type="hidden" name="sku" value="{item.id}">'
                          f'<label for="bb-qty">Quantity:</label> <input id="bb-qty" name="qty" size="3" value="1"> '
                          f'<input id="bb-buy" type="submit" value="{escape(self.word(site, "add_cart"))}"></form></div>')
        rows = "".join(_postfield(f, values.get(f.name, ""), errors.get(f.name)) for f in fam.action.fields)
        err = '<p class="bb-error">Your post could not be submitted: see below.</p>' if errors else ""
        return out + (f'<div class="bb-panel" id="bb-postform"><h3>{escape(str(site.look["action_button"]))}</h3>{err}'
                      f'<form method="post" action="{escape(self.url(site, "act", id=item.id))}"><dl class="bb-fields">'
                      f'{rows}</dl><input id="bb-post" class="bb-button1" type="submit" '
                      f'value="{escape(self.word(site, "send"))}"></form></div>')

    def render_login(self, ctx: Ctx, nxt: str, error: str) -> str:
        site = ctx.site
        err = f'<p class="bb-error">{escape(error)}</p>' if error else ""
        return (f'{self._crumbs(site, ("Login", ""))}<div class="bb-panel"><h2>Login</h2>{err}<form method="post" '
                f'action="{escape(self.url(site, "login"))}"><input type="hidden" name="next" value="{escape(nxt)}">'
                f'<dl class="bb-fields"><dt><label for="bb-username">Username:</label></dt><dd><input id="bb-username" '
                f'name="username" size="25"></dd><dt><label for="bb-password">Password:</label></dt><dd><input '
                f'id="bb-password" name="password" type="password" size="25"></dd></dl><input id="bb-login" '
                f'class="bb-button1" type="submit" value="Login"></form></div>')

    def render_cart(self, ctx: Ctx, added: Item | None) -> str:
        site = ctx.site
        note = f'<p class="bb-success">{escape(added.title)} has been added to your cart.</p>' if added else ""
        lines, total = cart_lines(ctx)
        rows = "".join(
            f'<tr><td><a href="{escape(self.url_record(site, it))}">{escape(it.title)}</a></td><td>{qty}</td>'
            f'<td>{escape(it.value_text)}</td><td><form method="post" action="{escape(self.url(site, "cart_remove"))}">'
            f'<input type="hidden" name="sku" value="{it.id}"><input type="submit" value="Delete"></form></td></tr>'
            for it, qty in lines)
        if not rows:
            return f"{note}<h2>Your cart</h2><p>Your cart is empty.</p>"
        return (f'{note}<h2>Your cart</h2><table class="bb-topiclist"><tr><th>Item</th><th>Qty</th><th>Price</th><th></th>'
                f'</tr>{rows}</table><p>Total: <strong>${total:,.2f}</strong></p><p><a id="bb-checkout" '
                f'href="{escape(self.url(site, "checkout"))}">{escape(self.word(site, "checkout"))}</a></p>')

    def render_checkout(self, ctx: Ctx, values: dict[str, str], errors: dict[str, str]) -> str:
        rows = "".join(_postfield(f, values.get(f.name, ""), errors.get(f.name)) for f in CHECKOUT_FIELDS)
        err = f'<p class="bb-error">{escape(errors["cart"])}</p>' if "cart" in errors else ""
        return (f'<div class="bb-panel"><h2>Checkout</h2>{err}<form method="post" '
                f'action="{escape(self.url(ctx.site, "checkout"))}"><dl class="bb-fields">{rows}</dl><input id="bb-order" '
                f'class="bb-button1" type="submit" value="{escape(self.word(ctx.site, "place"))}"></form></div>')

    # --- oracle -----------------------------------------------------------------------------------------------
    def dismiss(self, site: Site) -> list[pb.Action]:
        return ([click("#bb-cookie-allow")] if site.look["cookie_banner"] else []) + \
            ([click("#bb-announce-close")] if site.look["popup"] else [])

    def log_in(self, site: Site, username: str, password: str) -> list[pb.Action]:
        return [click("#bb-login-link"), fill("#bb-username", username), fill("#bb-password", password),
                click("#bb-login")]

    def open_record(self, site: Site, item: Item) -> list[pb.Action]:
        return [fill("#bb-keywords", item.title), click("#bb-search-go")] + self.open_listed(site, item)

    def open_listed(self, site: Site, item: Item) -> list[pb.Action]:
        return [click(f".bb-topiclist a[href={css_str(self.url_record(site, item))}]")]

    def browse(self, site: Site, *, category: str = "", sort: str = "relevance", page: int = 1) -> list[pb.Action]:
        acts = [click(f".bb-forumlist a[href={css_str(self.url_listing(site, '', category))}]")] if category else \
            [click("#bb-all-topics")]
        if sort != "relevance":
            acts += [select(".bb-sortform select", self.scheme.sort_values[sort]), click(".bb-sortform button")]
        return acts + [click(".bb-pagination a[rel=next]")] * (page - 1)

    def submit_record(self, site: Site, item: Item, values: dict[str, object]) -> list[pb.Action]:
        spec = site.family.action
        assert spec is not None
        return fill_native(spec.fields, values, "#bb-field-{name}") + [click("#bb-post")]

    def add_to_cart(self, site: Site, item: Item, qty: int) -> list[pb.Action]:
        return [fill("#bb-qty", str(qty)), click("#bb-buy")]

    def check_out(self, site: Site, address: dict[str, str]) -> list[pb.Action]:
        return [click("#bb-checkout")] + fill_native(CHECKOUT_FIELDS, address, "#bb-field-{name}") + [click("#bb-order")]


def _postfield(f: FieldSpec, value: str, error: str | None) -> str:
    """One posting-form row: <dt> label, <dd> native control and its error."""
    ident = f"bb-field-{f.name}"
    err = f'<br><span class="bb-error">{escape(error)}</span>' if error else ""
    if f.kind == "checkbox":
        return f'<dt></dt><dd><label>{native_control(f, value, ident)} {escape(f.label)}</label>{err}</dd>'
    attrs = {"textarea": 'rows="6" cols="70" class="bb-inputbox"', "select": ""}.get(f.kind, 'class="bb-inputbox" size="35"')
    return f'<dt><label for="{ident}">{escape(f.label)}:</label></dt><dd>{native_control(f, value, ident, "Select…", attrs)}{err}</dd>'


@lru_cache(maxsize=8192)
def _style(site: Site) -> str:
    accent = THEMES[(int(site.look["theme"]) + 3) % len(THEMES)][0]
    return (f"body{{background:#f5f7fa;font-family:Verdana,Helvetica,Arial,sans-serif;font-size:11px;margin:0}}"
            f"#bb-wrap{{max-width:1050px;margin:10px auto;background:#fff;padding:12px;border:1px solid #e6e9ed}}"
            f".bb-headerbar{{background:{accent};color:#fff;padding:8px;border-radius:7px}}.bb-headerbar a{{color:#fff}}"
            f".bb-navbar{{background:#cadceb;padding:6px;border-radius:7px;margin:4px 0}}.bb-right{{float:right}}"
            f".bb-panel{{background:#ecf1f3;padding:8px 10px;border-radius:7px;margin:6px 0}}.bb-topiclist{{width:100%;"
            f"border-collapse:collapse}}.bb-topiclist th{{background:{accent};color:#fff;text-align:left;padding:4px}}"
            f".bb-topiclist td{{border-bottom:1px solid #fff;background:#eef1f5;padding:5px}}.bb-error{{color:#b00}}"
            f".bb-success{{color:#080}}.bb-post{{background:#e1ebf2;margin:6px 0;padding:8px;border-radius:7px}}"
            f".bb-postprofile{{float:right;width:150px;border-left:1px solid #fff;padding-left:8px}}"
            f".bb-pagination{{text-align:right;margin:6px 0}}.bb-fields dt{{font-weight:bold;margin-top:6px}}")


@lru_cache(maxsize=8192)
def _quicksearch(b: Boardroom, site: Site) -> str:
    return (f'<form class="bb-search-header" method="get" action="{escape(b.url_listing(site))}">'
            f'<input id="bb-keywords" name="keywords" type="search" title="{escape(site.words["search_placeholder"])}" '
            f'placeholder="Search…"> <button id="bb-search-go" type="submit">{escape(b.word(site, "search"))}</button>'
            f"</form>")


@lru_cache(maxsize=8192)
def _index(b: Boardroom, site: Site) -> str:
    fam = site.family
    newest: dict[str, Item] = {}
    counts: dict[str, int] = {}
    for it in site.items:
        counts[it.category] = counts.get(it.category, 0) + 1
        if it.category not in newest or (it.date, it.id) > (newest[it.category].date, newest[it.category].id):
            newest[it.category] = it
    rows = "".join(
        f'<tr><td><a href="{escape(b.url_listing(site, "", slug))}"><strong>{escape(label)}</strong></a><br>'
        f"{escape(fam.plural.capitalize())} about {escape(label.lower())}</td><td>{counts.get(slug, 0)}</td><td>"
        + (f'<a href="{escape(b.url_record(site, newest[slug]))}">{escape(newest[slug].title)}</a><br>by '
           f"{escape(newest[slug].author)} &raquo; {escape(site.fmt_date(newest[slug].date))}" if slug in newest else "No posts")
        + "</td></tr>" for slug, label in site.category_labels.items())
    return (f'{b._crumbs(site)}<p><a id="bb-all-topics" href="{escape(b.url_listing(site))}">View all '
            f'{escape(fam.plural)}</a></p><table class="bb-topiclist bb-forumlist"><thead><tr><th>Forum</th><th>Topics</th>'
            f"<th>Last post</th></tr></thead><tbody>{rows}</tbody></table>"
            f"<p>Total {escape(fam.plural)}: <strong>{len(site.items)}</strong></p>")


@lru_cache(maxsize=131072)
def _topic_row(b: Boardroom, site: Site, item_id: str) -> str:
    it = site.by_id[item_id]
    return (f'<tr><td><a class="bb-topictitle" href="{escape(b.url_record(site, it))}">{escape(it.title)}</a><br>'
            f"by {escape(it.author)} &raquo; {escape(site.fmt_date(it.date))}</td><td>{len(it.reviews)}</td>"
            f"<td>{escape(it.value_text)}</td><td>{it.rating:.1f}</td></tr>")


@lru_cache(maxsize=65536)
def _topic(b: Boardroom, site: Site, item_id: str) -> str:
    it = site.by_id[item_id]
    fam = site.family
    cat = site.category_labels.get(it.category, it.category)
    facts = [(fam.value_label, it.value_text), (fam.author_label, it.author), ("Category", cat),
             (fam.date_label, site.fmt_date(it.date)), ("Rating", f"{it.rating:.1f} / 5"), *it.attrs]
    lines = "<br>".join(f"<strong>{escape(k)}:</strong> {escape(v)}" for k, v in facts)
    replies = "".join(
        f'<div class="bb-post"><div class="bb-postprofile"><strong>{escape(str(r["author"]))}</strong></div>'
        f"<h3>Re: {escape(it.title)}</h3><div class=\"bb-content\">{r['stars']} of 5 &mdash; {escape(str(r['text']))}"
        f"</div></div>" for r in it.reviews)
    return (f"{b._crumbs(site, (cat, b.url_listing(site, '', it.category)))}"
            f'<h2 class="bb-topic-title"><a href="{escape(b.url_record(site, it))}">{escape(it.title)}</a></h2>'
            f'<div class="bb-post"><div class="bb-postprofile"><strong>{escape(it.author)}</strong></div>'
            f'<h3>{escape(it.title)}</h3><p class="bb-author">by <strong>{escape(it.author)}</strong> &raquo; '
            f'{escape(site.fmt_date(it.date))}</p><div class="bb-content">{lines}<br><br>{escape(it.body)}</div></div>'
            f"{replies}")

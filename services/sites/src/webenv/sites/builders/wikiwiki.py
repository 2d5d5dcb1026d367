"""The `wikiwiki` builder: a MediaWiki-style site. Records are articles at `/wiki/Title_With_Underscores` with an
infobox table and their main facts in prose sentences, listings are plain bulleted `Category:` pages (or the
`Special:Search` results page: `/index.php?search=...&title=Special:Search`), pages are numbered by `offset=`,
the left sidebar holds the navigation and a tree of categories, forms are native HTMLForm-like controls, and the
cookie notice and the pop-up are dismissible site notices above the article, never a banner or a modal."""

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
)
from webenv.sites.catalog import THEMES, Site
from webenv.sites.families.base import FieldSpec, Item
from webenv.v1 import common_pb2 as pb

SORT_WORDS = {"relevance": "relevance", "value_asc": "lowest {v} first", "value_desc": "highest {v} first",
              "date_desc": "most recent", "rating_desc": "best rated"}
SCRIPT = (
    "<script>(function(){function k(n){document.cookie=n+'=1; path=/; max-age=31536000';}"
    "[['ww-notice-dismiss','cookie_consent','ww-sitenotice'],['ww-central-dismiss','popup_dismissed','ww-centralnotice']]"
    ".forEach(function(x){var a=document.getElementById(x[0]);if(a){a.addEventListener('click',function(e){"
    "e.preventDefault();k(x[1]);document.getElementById(x[2]).remove();});}});})();</script>"
)


def wiki_title(title: str) -> str:
    """MediaWiki's page name for a title: spaces (and anything not URL-plain) become underscores, case kept."""
    out = "".join(ch if ch.isascii() and (ch.isalnum() or ch in "-.") else "_" for ch in title)
    while "__" in out:
        out = out.replace("__", "_")
    return out.strip("_")


class WikiWiki(Builder):
    name = "wikiwiki"
    summary = "a MediaWiki-style wiki: /wiki/Title_With_Underscores, infobox articles, Category: pages, site notices"
    scheme = Scheme(
        routes={
            "home": "/", "listing": "/index.php?title=Special:Search", "record": "/wiki/{slug}",
            "act": "/index.php?title={slug}&action=submit", "login": "/index.php?title=Special:UserLogin",
            "logout": "/index.php?title=Special:UserLogout", "help": "/wiki/Help:Contents",
            "about": "/wiki/Project:About", "account": "/wiki/Special:Preferences",
            "cart": "/index.php?title=Special:Basket", "cart_add": "/index.php?title=Special:Basket&action=add",
            "cart_remove": "/index.php?title=Special:Basket&action=remove",
            "checkout": "/index.php?title=Special:Checkout", "order": "/index.php?title=Special:Order&id={id}",
            "done": "/index.php?title=Special:Contributions&id={id}",
        },
        q="search", category="category", sort="sort", page="offset", page_step=PAGE_SIZE,
        category_path="/wiki/Category:{category}", slugify=wiki_title,
        sort_values={"value_asc": "value_asc", "value_desc": "value_desc", "date_desc": "create_timestamp_desc",
                     "rating_desc": "rating_desc"},
    )
    words = {
        "search": ("Search", "Go"),
        "send": ("Save changes", "Submit", "Publish changes"),
        "add_cart": ("Add to basket", "Buy this"),
        "checkout": ("Proceed to checkout", "Check out"),
        "place": ("Confirm order", "Place order"),
        "accept": ("dismiss", "hide"),
        "close": ("hide", "close"),
        "login": ("Log in", "Log in / create account"),
        "all": ("All {plural}", "Index of {plural}", "Every {noun}"),
    }

    # --- chrome -----------------------------------------------------------------------------------------------
    def page(self, ctx: Ctx, title: str, body: str, status: int = 200) -> HTMLResponse:
        site = ctx.site
        notices = ""
        if ctx.show_banner:
            notices += (f'<div id="ww-sitenotice"><p>{escape(site.words["cookie"])} [<a href="#" id="ww-notice-dismiss">'
                        f'{escape(self.word(site, "accept"))}</a>]</p></div>')
        if ctx.show_popup:
            notices += (f'<div id="ww-centralnotice"><p><b>{escape(site.words["popup"])}</b> [<a href="#" '
                        f'id="ww-central-dismiss">{escape(self.word(site, "close"))}</a>]</p></div>')
        user = ctx.user
        if user:
            tools = (f'<li><a href="{escape(self.url(site, "account"))}">{escape(user)}</a></li>'
                     f'<li><a href="{escape(self.url(site, "logout"))}">Log out</a></li>')
        else:
            tools = (f'<li><a id="ww-pt-login" href="{escape(self.url(site, "login"))}">'
                     f'{escape(self.word(site, "login"))}</a></li>')
        if site.family.name == "shop":
            tools = f'<li><a href="{escape(self.url(site, "cart"))}">Basket ({ctx.cart_count()})</a></li>' + tools
        html = (
            f'<!DOCTYPE html><html lang="en" dir="ltr"><head><meta charset="UTF-8"><title>{escape(title)} - '
            f'{escape(site.name)}</title><link rel="icon" href="data:,"><style>{_style(site)}</style></head>'
            f'<body class="ww-skin"><div id="ww-panel">{_sidebar(self, site)}</div>'
            f'<div id="ww-head"><ul id="ww-p-personal">{tools}</ul>{_searchbox(self, site)}</div>'
            f'<div id="ww-content">{notices}<main>{body}</main></div>'
            f'<div id="ww-footer"><p>Content is available under the {escape(site.name)} licence unless otherwise '
            f'noted.</p><ul><li><a href="{escape(self.url(site, "about"))}">About {escape(site.name)}</a></li>'
            f'<li><a href="{escape(self.url(site, "help"))}">Help</a></li></ul></div>{SCRIPT}</body></html>'
        )
        return HTMLResponse(html, status_code=status)

    # --- pages ------------------------------------------------------------------------------------------------
    def render_home(self, ctx: Ctx) -> str:
        site = ctx.site
        if site.family.login_required and ctx.user is None:
            return (f'<h1 class="ww-firstHeading">Main Page</h1><p>Welcome to {escape(site.name)}. You must '
                    f'<a href="{escape(self.url(site, "login"))}">log in</a> to view the {escape(site.family.plural)}.</p>')
        return _home(self, site)

    def render_listing(self, ctx: Ctx, items: list[Item], *, q: str, category: str, sort: str, page: int, total: int,
                       found: list[Item]) -> str:
        site, fam = ctx.site, ctx.site.family
        here = self.url_listing
        sorts = " | ".join(
            f"<b>{escape(SORT_WORDS[s].format(v=fam.value_label.lower()))}</b>" if s == sort else
            f'<a href="{escape(here(site, q, category, s))}">{escape(SORT_WORDS[s].format(v=fam.value_label.lower()))}</a>'
            for s in SORT_WORDS)
        n = pages_of(total)
        prev = (f'<a href="{escape(here(site, q, category, sort, page - 1))}">previous {PAGE_SIZE}</a>' if page > 1
                else f"previous {PAGE_SIZE}")
        nxt = (f'<a href="{escape(here(site, q, category, sort, page + 1))}">next {PAGE_SIZE}</a>' if page < n
               else f"next {PAGE_SIZE}")
        numbers = " ".join(f"<b>{p}</b>" if p == page else f'<a href="{escape(here(site, q, category, sort, p))}">{p}</a>'
                           for p in range(1, n + 1))
        pager = f'<p class="ww-pager">({prev} | {nxt}) &middot; Page: {numbers}</p>'
        first = (page - 1) * PAGE_SIZE
        if category and not q:
            label = site.category_labels[category]
            lis = "".join(_cat_li(self, site, it.id) for it in items) or "<li><i>This category is empty.</i></li>"
            return (f'<h1 class="ww-firstHeading">Category:{escape(label)}</h1><p class="ww-sorts">Sort: {sorts}</p>'
                    f'<h2>Pages in category "{escape(label)}"</h2><p>The following {len(items)} pages are in this '
                    f"category, out of {total} total.</p><ul>{lis}</ul>{pager}")
        lis = "".join(_result_li(self, site, it.id) for it in items)
        head = "Search results" if q else self.word(site, "all").format(plural=fam.plural, noun=fam.noun)
        where = f' in <a href="{escape(self.url_listing(site, "", category))}">Category:' \
                f'{escape(site.category_labels[category])}</a>' if category else ""
        found_line = (f"<p>Results {first + 1} &ndash; {first + len(items)} of {total}{where}"
                      f'{" for <b>" + escape(q) + "</b>" if q else ""}.</p>' if items else
                      f'<p>There were no results matching the query{where}.</p>')
        return (f'<h1 class="ww-firstHeading">{escape(head)}</h1>{found_line}<p class="ww-sorts">Sort: {sorts}</p>'
                f'<ul class="ww-results">{lis}</ul>{pager}')

    def render_record(self, ctx: Ctx, item: Item, values: dict[str, str], errors: dict[str, str]) -> str:
        site, fam = ctx.site, ctx.site.family
        out = _article(self, site, item.id)
        if fam.action is None:
            err = f'<div class="ww-error">{escape(errors["qty"])}</div>' if "qty" in errors else ""
            return out + (f'<h2>Buy</h2>{err}<form method="post" action="{escape(self.url(site, "cart_add"))}">'
                          f'<input type="hidden" name="sku" value="{item.id}"><label for="ww-qty">Quantity</label> '
                          f'<input id="ww-qty" name="qty" type="number" min="1" max="10" value="1"> '
                          f'<button id="ww-buy" type="submit">{escape(self.word(site, "add_cart"))}</button></form>')
        rows = "".join(_control(f, values.get(f.name, ""), errors.get(f.name)) for f in fam.action.fields)
        err = '<div class="ww-error">Please correct the errors below.</div>' if errors else ""
        return out + (f'<h2>{escape(str(site.look["action_button"]))}</h2>{err}<form class="ww-htmlform" method="post" '
                      f'action="{escape(self.url(site, "act", id=item.id))}"><fieldset><legend>'
                      f'{escape(item.title)}</legend>{rows}</fieldset><button id="ww-save" type="submit">'
                      f'{escape(self.word(site, "send"))}</button></form>')

    def render_login(self, ctx: Ctx, nxt: str, error: str) -> str:
        site = ctx.site
        err = f'<div class="ww-error">{escape(error)}</div>' if error else ""
        return (f'<h1 class="ww-firstHeading">Log in</h1>{err}<form class="ww-htmlform" method="post" '
                f'action="{escape(self.url(site, "login"))}"><input type="hidden" name="next" value="{escape(nxt)}">'
                f'<div><label for="ww-wpName">Username</label><br><input id="ww-wpName" name="username" size="20"></div>'
                f'<div><label for="ww-wpPassword">Password</label><br><input id="ww-wpPassword" name="password" '
                f'type="password" size="20"></div><button id="ww-wpLogin" type="submit">Log in</button></form>')

    def render_cart(self, ctx: Ctx, added: Item | None) -> str:
        site = ctx.site
        note = f'<div class="ww-success">"{escape(added.title)}" was added to your basket.</div>' if added else ""
        lines, total = cart_lines(ctx)
        rows = "".join(
            f'<tr><td><a href="{escape(self.url_record(site, it))}">{escape(it.title)}</a></td><td>{qty}</td><td>'
            f'{escape(it.value_text)}</td><td><form method="post" action="{escape(self.url(site, "cart_remove"))}">'
            f'<input type="hidden" name="sku" value="{it.id}"><button type="submit">remove</button></form></td></tr>'
            for it, qty in lines)
        if not rows:
            return f'{note}<h1 class="ww-firstHeading">Special:Basket</h1><p>Your basket is empty.</p>'
        return (f'{note}<h1 class="ww-firstHeading">Special:Basket</h1><table class="ww-wikitable"><tr><th>Page</th>'
                f'<th>Quantity</th><th>Price</th><th></th></tr>{rows}</table><p>Total: ${total:,.2f}</p>'
                f'<p><a id="ww-checkout" href="{escape(self.url(site, "checkout"))}">{escape(self.word(site, "checkout"))}'
                f"</a></p>")

    def render_checkout(self, ctx: Ctx, values: dict[str, str], errors: dict[str, str]) -> str:
        rows = "".join(_control(f, values.get(f.name, ""), errors.get(f.name)) for f in CHECKOUT_FIELDS)
        err = f'<div class="ww-error">{escape(errors["cart"])}</div>' if "cart" in errors else ""
        return (f'<h1 class="ww-firstHeading">Special:Checkout</h1>{err}<form class="ww-htmlform" method="post" '
                f'action="{escape(self.url(ctx.site, "checkout"))}"><fieldset><legend>Delivery address</legend>{rows}'
                f'</fieldset><button id="ww-place" type="submit">{escape(self.word(ctx.site, "place"))}</button></form>')

    # --- oracle -----------------------------------------------------------------------------------------------
    def dismiss(self, site: Site) -> list[pb.Action]:
        return ([click("#ww-central-dismiss")] if site.look["popup"] else []) + \
            ([click("#ww-notice-dismiss")] if site.look["cookie_banner"] else [])

    def log_in(self, site: Site, username: str, password: str) -> list[pb.Action]:
        return [click("#ww-pt-login"), fill("#ww-wpName", username), fill("#ww-wpPassword", password),
                click("#ww-wpLogin")]

    def open_record(self, site: Site, item: Item) -> list[pb.Action]:
        return [fill("#ww-searchInput", item.title), click("#ww-searchButton")] + self.open_listed(site, item)

    def browse(self, site: Site, *, category: str = "", sort: str = "relevance", page: int = 1) -> list[pb.Action]:
        acts = [click(f"#ww-panel .ww-tree a[href={css_str(self.url_listing(site, '', category))}]")]
        if sort != "relevance":
            acts.append(click(f"main .ww-sorts a[href={css_str(self.url_listing(site, '', category, sort))}]"))
        if page > 1:
            acts.append(click(f"main .ww-pager a[href={css_str(self.url_listing(site, '', category, sort, page))}]"))
        return acts

    def submit_record(self, site: Site, item: Item, values: dict[str, object]) -> list[pb.Action]:
        spec = site.family.action
        assert spec is not None
        return fill_native(spec.fields, values, "#ww-f-{name}") + [click("#ww-save")]

    def add_to_cart(self, site: Site, item: Item, qty: int) -> list[pb.Action]:
        return [fill("#ww-qty", str(qty)), click("#ww-buy")]

    def check_out(self, site: Site, address: dict[str, str]) -> list[pb.Action]:
        return [click("#ww-checkout")] + fill_native(CHECKOUT_FIELDS, address, "#ww-f-{name}") + [click("#ww-place")]


def _control(f: FieldSpec, value: str, error: str | None) -> str:
    """One HTMLForm row: label above a native control, the error below it."""
    ident = f"ww-f-{f.name}"
    err = f'<div class="ww-error">{escape(error)}</div>' if error else ""
    if f.kind == "checkbox":
        return f'<div class="ww-field">{native_control(f, value, ident)} <label for="{ident}">{escape(f.label)}</label>{err}</div>'
    size = {"textarea": 'rows="5" cols="60"', "number": f'min="{f.min}" max="{f.max}"', "select": ""}.get(f.kind, 'size="40"')
    attrs = f'{size}{" required" if f.required else ""}'.strip()
    return (f'<div class="ww-field"><label for="{ident}">{escape(f.label)}</label><br>'
            f'{native_control(f, value, ident, "(choose)", attrs)}{err}</div>')


@lru_cache(maxsize=8192)
def _style(site: Site) -> str:
    accent = THEMES[(int(site.look["theme"]) + 1) % len(THEMES)][0]
    return ("body{margin:0;font-family:sans-serif;background:#f6f6f6;color:#202122}#ww-panel{position:absolute;top:0;"
            "left:0;width:176px;padding:12px;font-size:13px}#ww-head{margin-left:200px;padding:8px;display:flex;"
            "justify-content:space-between}#ww-p-personal{list-style:none;display:flex;gap:12px;margin:0;padding:0}"
            "#ww-content{margin-left:200px;background:#fff;border:1px solid #a7d7f9;padding:16px 24px;min-height:400px}"
            ".ww-firstHeading{font-family:serif;font-weight:normal;border-bottom:1px solid #a2a9b1}"
            f"a{{color:{accent}}}.ww-infobox{{float:right;clear:right;border:1px solid #a2a9b1;background:#f8f9fa;"
            "margin:0 0 8px 16px;width:280px;font-size:90%}.ww-infobox th{text-align:left;vertical-align:top}"
            "#ww-sitenotice,#ww-centralnotice{border:1px solid #c8ccd1;background:#eaf3ff;padding:4px 10px;"
            "margin-bottom:10px;font-size:90%}.ww-error{color:#d33}.ww-success{color:#14866d}.ww-wikitable{"
            "border-collapse:collapse}.ww-wikitable td,.ww-wikitable th{border:1px solid #a2a9b1;padding:4px}"
            ".ww-catlinks{border:1px solid #a2a9b1;background:#f8f9fa;padding:4px;margin-top:16px;clear:both}"
            "#ww-footer{margin-left:200px;font-size:80%;padding:8px}.ww-tree ul{padding-left:14px}")


@lru_cache(maxsize=8192)
def _sidebar(b: WikiWiki, site: Site) -> str:
    fam = site.family
    cats = "".join(f'<li><a href="{escape(b.url_listing(site, "", slug))}">{escape(label)}</a></li>'
                   for slug, label in site.category_labels.items())
    return (f'<a class="ww-logo" href="/"><b>{escape(site.name)}</b></a><h3>Navigation</h3><ul>'
            f'<li><a href="/">Main page</a></li><li><a href="{escape(b.url(site, "help"))}">Help</a></li>'
            f'<li><a href="{escape(b.url(site, "about"))}">About</a></li></ul><h3>Categories</h3><ul class="ww-tree"><li>'
            f'<a id="ww-n-all" href="{escape(b.url_listing(site))}">'
            f'{escape(b.word(site, "all").format(plural=fam.plural, noun=fam.noun))}</a><ul>{cats}</ul></li></ul>')


@lru_cache(maxsize=8192)
def _searchbox(b: WikiWiki, site: Site) -> str:
    return (f'<form id="ww-searchform" role="search" method="get" action="/index.php"><input id="ww-searchInput" '
            f'name="search" type="search" placeholder="Search {escape(site.name)}" title="'
            f'{escape(site.words["search_placeholder"])}"><input type="hidden" name="title" value="Special:Search">'
            f'<button id="ww-searchButton" type="submit">{escape(b.word(site, "search"))}</button></form>')


@lru_cache(maxsize=8192)
def _home(b: WikiWiki, site: Site) -> str:
    fam = site.family
    featured = max(site.items, key=lambda it: (it.rating, it.id))
    recent = sorted(site.items, key=lambda it: (it.date, it.id), reverse=True)[:5]
    news = "".join(f'<li><a href="{escape(b.url_record(site, it))}">{escape(it.title)}</a> ({escape(site.fmt_date(it.date))})'
                   f"</li>" for it in recent)
    return (f'<h1 class="ww-firstHeading">Main Page</h1><p>Welcome to <b>{escape(site.name)}</b>, '
            f'{escape(str(site.look["tagline"]))} It has {len(site.items)} articles about {escape(fam.plural)}.</p>'
            f'<h2>Featured article</h2><p><a href="{escape(b.url_record(site, featured))}">{escape(featured.title)}</a>: '
            f"{escape(featured.body[:160])}</p><h2>Recent changes</h2><ul>{news}</ul>")


@lru_cache(maxsize=131072)
def _cat_li(b: WikiWiki, site: Site, item_id: str) -> str:
    it = site.by_id[item_id]
    return f'<li><a href="{escape(b.url_record(site, it))}">{escape(it.title)}</a> ({escape(it.value_text)})</li>'


@lru_cache(maxsize=131072)
def _result_li(b: WikiWiki, site: Site, item_id: str) -> str:
    it = site.by_id[item_id]
    return (f'<li><div class="ww-result-heading"><a href="{escape(b.url_record(site, it))}">{escape(it.title)}</a></div>'
            f'<div class="ww-snippet">{escape(it.body[:120])}&hellip;</div><div class="ww-result-data">'
            f"{escape(it.value_text)} - {escape(it.author)} - {escape(site.fmt_date(it.date))}</div></li>")


@lru_cache(maxsize=65536)
def _article(b: WikiWiki, site: Site, item_id: str) -> str:
    it = site.by_id[item_id]
    fam = site.family
    cat = site.category_labels.get(it.category, it.category)
    cat_link = f'<a href="{escape(b.url_listing(site, "", it.category))}">{escape(cat)}</a>'
    box = "".join(f"<tr><th>{escape(k)}</th><td>{escape(v)}</td></tr>" for k, v in it.attrs)
    reviews = "".join(f"<li>{escape(str(r['author']))} gave it {r['stars']} of 5: &ldquo;{escape(str(r['text']))}&rdquo;"
                      f"</li>" for r in it.reviews)
    return (
        f'<h1 class="ww-firstHeading">{escape(it.title)}</h1><p class="ww-tagline">From {escape(site.name)}</p>'
        f'<table class="ww-infobox"><caption><b>{escape(it.title)}</b></caption><tr><th>Category</th><td>{cat_link}'
        f"</td></tr>{box}</table>"
        f"<p><b>{escape(it.title)}</b> is a {escape(fam.noun)} in the {cat_link} category. Its "
        f"{escape(fam.author_label.lower())} is {escape(it.author)} and its {escape(fam.value_label.lower())} is "
        f"{escape(it.value_text)}. Its {escape(fam.date_label.lower())} date is {escape(site.fmt_date(it.date))}, and "
        f"readers rate it {it.rating:.1f} out of 5.</p><h2>Description</h2><p>{escape(it.body)}</p>"
        + (f"<h2>Reception</h2><ul>{reviews}</ul>" if reviews else "")
        + f'<div class="ww-catlinks">Categories: {cat_link}</div>'
    )

"""The `classic` builder: early-web classifieds (Craigslist-like). CGI links (`/list.cgi?cat=books&sort=pricedsc&s=20`,
`/view.cgi?id=P1003`), minimal markup with almost no classes: a <table> layout with a category list on the left,
listings as a plain list of one-line postings, sort links, "next 10 / prev 10" by offset, records with their facts
in sentences, native forms in tables with plain submit buttons, a banner ad at the top and no interruptions (no
cookie notice, no pop-up: the site's own look asks for them, this builder never draws them)."""

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
from webenv.sites.catalog import Site
from webenv.sites.families.base import FieldSpec, Item
from webenv.v1 import common_pb2 as pb

SORT_WORDS = {"relevance": "relevant", "date_desc": "newest", "value_asc": "{v} &uarr;", "value_desc": "{v} &darr;",
              "rating_desc": "best rated"}
ADS = ("Buy local. Sell local. Post your ad today!", "Moving? Find movers in your area.",
       "Free stuff near you: see the free section.", "Jobs, housing, for sale: all in one place.")


class Classic(Builder):
    name = "classic"
    summary = "early-web classifieds: CGI links, table layout, one-line postings, facts in sentences, native forms"
    scheme = Scheme(
        routes={
            "home": "/", "listing": "/list.cgi", "record": "/view.cgi?id={id}", "act": "/reply.cgi?id={id}",
            "login": "/login.cgi", "logout": "/login.cgi?logout=1", "help": "/help.html", "about": "/about.html",
            "account": "/account.cgi", "cart": "/cart.cgi", "cart_add": "/cart.cgi?do=add",
            "cart_remove": "/cart.cgi?do=remove", "checkout": "/checkout.cgi", "order": "/order.cgi?id={id}",
            "done": "/thanks.cgi?id={id}",
        },
        q="query", category="cat", sort="sort", page="s", page_step=PAGE_SIZE,
        sort_values={"relevance": "rel", "value_asc": "priceasc", "value_desc": "pricedsc", "date_desc": "date",
                     "rating_desc": "rating"},
    )
    words = {
        "search": ("search", "find"),
        "send": ("send", "submit", "reply"),
        "add_cart": ("add to cart", "buy"),
        "checkout": ("check out", "proceed"),
        "place": ("place order", "buy now"),
        "login": ("log in", "my account"),
    }

    def page(self, ctx: Ctx, title: str, body: str, status: int = 200) -> HTMLResponse:
        site = ctx.site
        user = ctx.user
        acct = (f'[ <a href="{escape(self.url(site, "account"))}">{escape(user)}</a> | '
                f'<a href="{escape(self.url(site, "logout"))}">log out</a> ]') if user else \
            f'[ <a id="cl-login" href="{escape(self.url(site, "login"))}">{escape(self.word(site, "login"))}</a> ]'
        cart = (f' [ <a href="{escape(self.url(site, "cart"))}">cart: {ctx.cart_count()}</a> ]'
                if site.family.name == "shop" else "")
        html = (
            f"<!DOCTYPE HTML PUBLIC \"-//W3C//DTD HTML 4.01 Transitional//EN\"><html><head><title>{escape(site.name)} "
            f"&gt; {escape(title)}</title><link rel=\"icon\" href=\"data:,\"><style>{_style(site)}</style></head>"
            f'<body>{_ad(site)}<table width="100%" cellpadding="4" cellspacing="0"><tr><td valign="top" width="170" '
            f'bgcolor="#eeeeee">{_left(self, site)}</td><td valign="top"><div align="right"><small>{acct}{cart}</small>'
            f"</div>{body}</td></tr></table><hr>{_foot(self, site)}</body></html>"
        )
        return HTMLResponse(html, status_code=status)

    def render_home(self, ctx: Ctx) -> str:
        site = ctx.site
        if site.family.login_required and ctx.user is None:
            return (f"<h2>{escape(site.name)}</h2><p>You must log in to see your {escape(site.family.plural)}. "
                    f'<a href="{escape(self.url(site, "login"))}">log in</a></p>')
        return _home(self, site)

    def render_listing(self, ctx: Ctx, items: list[Item], *, q: str, category: str, sort: str, page: int, total: int,
                       found: list[Item]) -> str:
        site, fam = ctx.site, ctx.site.family
        sorts = " | ".join(
            f"<b>{SORT_WORDS[s].format(v=escape(fam.value_label.lower()))}</b>" if s == sort else
            f'<a href="{escape(self.url_listing(site, q, category, s))}">'
            f"{SORT_WORDS[s].format(v=escape(fam.value_label.lower()))}</a>" for s in SORT_WORDS)
        lines = "".join(_line(self, site, it.id) for it in items) or "<li><i>nothing found</i></li>"
        first = (page - 1) * PAGE_SIZE + 1 if items else 0
        nav = []
        if page > 1:
            nav.append(f'<a href="{escape(self.url_listing(site, q, category, sort, page - 1))}">&lt;&lt; prev {PAGE_SIZE}</a>')
        nav.append(f"{first} - {(page - 1) * PAGE_SIZE + len(items)} of {total}")
        if page < pages_of(total):
            nav.append(f'<a href="{escape(self.url_listing(site, q, category, sort, page + 1))}">next {PAGE_SIZE} &gt;&gt;</a>')
        head = site.category_labels.get(category, f"all {fam.plural}")
        found_for = f' for "{escape(q)}"' if q else ""
        return (f'<h2>{escape(head)}{found_for}</h2>{_searchform(self, site, q, category)}<p><small>sort by: {sorts}'
                f'</small></p><p align="center">{" &nbsp; ".join(nav)}</p><ul>{lines}</ul>'
                f'<p align="center">{" &nbsp; ".join(nav)}</p>')

    def render_record(self, ctx: Ctx, item: Item, values: dict[str, str], errors: dict[str, str]) -> str:
        site, fam = ctx.site, ctx.site.family
        out = _record(self, site, item.id)
        if fam.action is None:
            err = f'<p><font color="red">{escape(errors["qty"])}</font></p>' if "qty" in errors else ""
            return out + (f'<hr><form method="post" action="{escape(self.url(site, "cart_add"))}">{err}<input type="hidden" '
                          f'name="sku" value="{item.id}">how many: <input name="qty" size="2" value="'
                          f'{escape(values.get("qty", "1"))}"> <input type="submit" value="{escape(self.word(site, "add_cart"))}">'
                          f"</form>")
        rows = "".join(_field(f, values.get(f.name, ""), errors.get(f.name)) for f in fam.action.fields)
        err = '<p><font color="red">please fix the errors below.</font></p>' if errors else ""
        return out + (f'<hr><h3>{escape(str(site.look["action_button"]).lower())}</h3>{err}<form method="post" '
                      f'action="{escape(self.url(site, "act", id=item.id))}"><table>{rows}<tr><td></td><td><input '
                      f'type="submit" value="{escape(self.word(site, "send"))}"></td></tr></table></form>')

    def render_login(self, ctx: Ctx, nxt: str, error: str) -> str:
        site = ctx.site
        err = f'<p><font color="red">{escape(error)}</font></p>' if error else ""
        return (f'<h2>log in</h2>{err}<form method="post" action="{escape(self.url(site, "login"))}"><input type="hidden" '
                f'name="next" value="{escape(nxt)}"><table><tr><td>handle:</td><td><input name="username" size="20"></td>'
                f'</tr><tr><td>password:</td><td><input name="password" type="password" size="20"></td></tr><tr><td></td>'
                f'<td><input type="submit" value="log in"></td></tr></table></form>')

    def render_cart(self, ctx: Ctx, added: Item | None) -> str:
        site = ctx.site
        note = f"<p><b>added:</b> {escape(added.title)}</p>" if added else ""
        lines, total = cart_lines(ctx)
        rows = "".join(
            f'<tr><td>{escape(it.title)}</td><td align="right">{qty}</td><td align="right">{escape(it.value_text)}</td>'
            f'<td><form method="post" action="{escape(self.url(site, "cart_remove"))}"><input type="hidden" name="sku" '
            f'value="{it.id}"><input type="submit" value="remove"></form></td></tr>' for it, qty in lines)
        if not rows:
            return f"{note}<h2>your cart</h2><p>your cart is empty.</p>"
        return (f'{note}<h2>your cart</h2><table border="1" cellpadding="3" cellspacing="0"><tr><th>item</th><th>qty</th>'
                f"<th>price</th><th></th></tr>{rows}</table><p>total: ${total:,.2f}</p><p>"
                f'<a href="{escape(self.url(site, "checkout"))}">{escape(self.word(site, "checkout"))} &gt;&gt;</a></p>')

    def render_checkout(self, ctx: Ctx, values: dict[str, str], errors: dict[str, str]) -> str:
        site = ctx.site
        err = f'<p><font color="red">{escape(errors["cart"])}</font></p>' if "cart" in errors else ""
        rows = "".join(_field(f, values.get(f.name, ""), errors.get(f.name)) for f in CHECKOUT_FIELDS)
        return (f'<h2>check out</h2>{err}<p>ship to:</p><form method="post" action="{escape(self.url(site, "checkout"))}">'
                f'<table>{rows}<tr><td></td><td><input type="submit" value="{escape(self.word(site, "place"))}"></td></tr>'
                f"</table></form>")

    # --- oracle -----------------------------------------------------------------------------------------------
    def dismiss(self, site: Site) -> list[pb.Action]:
        return []  # nothing covers a page here

    def log_in(self, site: Site, username: str, password: str) -> list[pb.Action]:
        return [click("#cl-login"), fill('input[name="username"]', username), fill('input[name="password"]', password),
                click('form[action="/login.cgi"] input[type="submit"]')]

    def open_record(self, site: Site, item: Item) -> list[pb.Action]:
        return [fill('#cl-left input[name="query"]', item.title), click('#cl-left input[type="submit"]')] + \
            self.open_listed(site, item)

    def open_listed(self, site: Site, item: Item) -> list[pb.Action]:
        return [click(f"ul a[href={css_str(self.url_record(site, item))}]")]

    def browse(self, site: Site, *, category: str = "", sort: str = "relevance", page: int = 1) -> list[pb.Action]:
        acts = [click(f"#cl-left a[href={css_str(self.url_listing(site, '', category))}]")]
        if sort != "relevance":
            acts.append(click(f"small a[href={css_str(self.url_listing(site, '', category, sort))}]"))
        for p in range(2, page + 1):
            acts.append(click(f"p a[href={css_str(self.url_listing(site, '', category, sort, p))}]"))
        return acts

    def submit_record(self, site: Site, item: Item, values: dict[str, object]) -> list[pb.Action]:
        spec = site.family.action
        assert spec is not None
        acts = fill_native(spec.fields, values, '[name="{name}"]')
        return acts + [click(f"form[action={css_str(self.url(site, 'act', id=item.id))}] input[type=\"submit\"]")]

    def add_to_cart(self, site: Site, item: Item, qty: int) -> list[pb.Action]:
        return [fill('input[name="qty"]', str(qty)), click(f"form[action={css_str(self.url(site, 'cart_add'))}] "
                                                           f'input[type="submit"]')]

    def check_out(self, site: Site, address: dict[str, str]) -> list[pb.Action]:
        return ([click(f"a[href={css_str(self.url(site, 'checkout'))}]")]
                + [fill(f'input[name="{k}"]', address[k]) for k in ("name", "street", "city", "zip")]
                + [click('form[action="/checkout.cgi"] input[type="submit"]')])


def _field(f: FieldSpec, value: str, error: str | None) -> str:
    err = f' <font color="red">{escape(error)}</font>' if error else ""
    size = {"textarea": 'rows="6" cols="50"', "number": 'size="4"', "text": 'size="30"', "email": 'size="30"'}
    ctl = native_control(f, value, f"cl-{f.name}", "--", size.get(f.kind, ""))
    return f'<tr><td valign="top"><label for="cl-{f.name}">{escape(f.label.lower())}</label>:</td><td>{ctl}{err}</td></tr>'


@lru_cache(maxsize=8192)
def _style(site: Site) -> str:
    font = ("Times New Roman", "Georgia", "Verdana", "Courier New")[int(site.look["theme"]) % 4]
    return f"body{{font-family:'{font}',serif;margin:4px}}a{{color:#00e}}a:visited{{color:#551a8b}}li{{margin:3px 0}}"


@lru_cache(maxsize=8192)
def _ad(site: Site) -> str:
    return (f'<div id="cl-ad" align="center" style="border:1px solid #999;background:#ffc;padding:6px;margin-bottom:4px">'
            f"<small>advertisement</small><br><b>{escape(ADS[int(site.look['theme']) % len(ADS)])}</b></div>")


def _searchform(b: Classic, site: Site, q: str, category: str) -> str:
    cats = "".join(f'<option value="{escape(slug)}"{" selected" if slug == category else ""}>{escape(label)}</option>'
                   for slug, label in site.category_labels.items())
    return (f'<form method="get" action="{escape(b.url_listing(site))}"><input name="query" size="18" value="{escape(q)}">'
            f'<br><select name="cat"><option value="">all</option>{cats}</select> '
            f'<input type="submit" value="{escape(b.word(site, "search"))}"></form>')


@lru_cache(maxsize=8192)
def _left(b: Classic, site: Site) -> str:
    cats = "".join(f'<li><a href="{escape(b.url_listing(site, "", slug))}">{escape(label.lower())}</a></li>'
                   for slug, label in site.category_labels.items())
    return (f'<div id="cl-left"><a href="/"><b>{escape(site.name.lower())}</b></a><p>{_searchform(b, site, "", "")}</p>'
            f'<p><a href="{escape(b.url_listing(site))}">all {escape(site.family.plural)}</a></p><ul>{cats}</ul>'
            f'<p><a href="{escape(b.url(site, "help"))}">help</a><br><a href="{escape(b.url(site, "about"))}">about</a>'
            f"</p></div>")


@lru_cache(maxsize=8192)
def _foot(b: Classic, site: Site) -> str:
    return (f'<p align="center"><small>&copy; {escape(site.name.lower())} &middot; {escape(str(site.look["tagline"]))} '
            f'&middot; <a href="{escape(b.url(site, "help"))}">help</a></small></p>')


@lru_cache(maxsize=8192)
def _home(b: Classic, site: Site) -> str:
    fam = site.family
    cols = "".join(f'<td valign="top"><a href="{escape(b.url_listing(site, "", slug))}"><b>{escape(label.lower())}</b></a>'
                   f"<br><small>{sum(1 for it in site.items if it.category == slug)} {escape(fam.plural)}</small></td>"
                   for slug, label in site.category_labels.items())
    latest = sorted(site.items, key=lambda it: (it.date, it.id), reverse=True)[:5]
    return (f'<h2>{escape(site.name.lower())}</h2><table cellpadding="8"><tr>{cols}</tr></table><p>latest:</p><ul>'
            + "".join(_line(b, site, it.id) for it in latest) + "</ul>")


@lru_cache(maxsize=131072)
def _line(b: Classic, site: Site, item_id: str) -> str:
    it = site.by_id[item_id]
    return (f'<li>{escape(site.fmt_date(it.date))} - <a href="{escape(b.url_record(site, it))}">{escape(it.title)}</a> - '
            f"{escape(it.value_text)} <small>({escape(it.author)})</small></li>")


@lru_cache(maxsize=65536)
def _record(b: Classic, site: Site, item_id: str) -> str:
    it = site.by_id[item_id]
    fam = site.family
    cat = site.category_labels.get(it.category, it.category).lower()
    facts = (f"{escape(fam.author_label)} {escape(it.author)} posted this in {escape(cat)} on "
             f"{escape(site.fmt_date(it.date))}. The {escape(fam.value_label.lower())} is {escape(it.value_text)}. "
             f"It is rated {it.rating:.1f} out of 5.")
    more = " ".join(f"The {escape(k.lower())} is {escape(v)}." for k, v in it.attrs)
    said = "".join(f"<li>{escape(str(r['author']))} said ({r['stars']}/5): {escape(str(r['text']))}</li>" for r in it.reviews)
    return (f'<p><small><a href="{escape(b.url_listing(site))}">{escape(fam.plural)}</a> &gt; <a href="'
            f'{escape(b.url_listing(site, "", it.category))}">{escape(cat)}</a></small></p><h2>{escape(it.title)} - '
            f"{escape(it.value_text)}</h2><p>{facts}</p><p>{escape(it.body)}</p><p>{more}</p>"
            + (f"<p>what people said:</p><ul>{said}</ul>" if said else "")
            + f"<p><small>post id: {escape(it.id)}</small></p>")

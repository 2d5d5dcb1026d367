"""The `ledger` builder: an old-school PHP portal. Every page is `/index.php?view=...`, listings are HTML tables
sorted by links in a "Sort by" line, records are a label/value table, forms are native controls in a fieldset, the
cookie notice is a bar on top and the newsletter a centred dialog. Server-rendered, almost no script."""

from __future__ import annotations

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
    select,
)
from webenv.sites.catalog import Site
from webenv.sites.families.base import FieldSpec, Item
from webenv.v1 import common_pb2 as pb

SORT_WORDS = {"relevance": "relevance", "value_asc": "{v} (ascending)", "value_desc": "{v} (descending)",
              "date_desc": "date", "rating_desc": "rating"}
SCRIPT = (
    "<script>(function(){function k(n){document.cookie=n+'=1; path=/; max-age=31536000';}"
    "var a=document.getElementById('lg-consent-ok');if(a){a.onclick=function(){k('cookie_consent');"
    "document.getElementById('lg-consent').remove();};}"
    "var b=document.getElementById('lg-news-no');if(b){b.onclick=function(){k('popup_dismissed');"
    "document.getElementById('lg-news').remove();};}})();</script>"
)


class Ledger(Builder):
    name = "ledger"
    summary = "an old PHP portal: /index.php?view=..., table listings with sort links, label/value record tables"
    scheme = Scheme(
        routes={
            "home": "/", "listing": "/index.php?view=list", "record": "/index.php?view=item&id={id}",
            "act": "/index.php?view=item&id={id}&do=send", "login": "/index.php?view=login",
            "logout": "/index.php?view=logout", "help": "/index.php?view=faq", "about": "/index.php?view=about",
            "account": "/index.php?view=profile", "cart": "/index.php?view=basket",
            "cart_add": "/index.php?view=basket&do=add", "cart_remove": "/index.php?view=basket&do=remove",
            "checkout": "/index.php?view=checkout", "order": "/index.php?view=order&id={id}",
            "done": "/index.php?view=receipt&id={id}",
        },
        q="search", category="cat", sort="order", page="p",
        sort_values={"value_asc": "value", "value_desc": "value-desc", "date_desc": "newest", "rating_desc": "stars"},
    )
    words = {
        "search": ("Search", "Go", "Find"),
        "menu_list": ("Browse {plural}", "All {plural}", "{Plural} index"),
        "send": ("Send", "Submit", "Save"),
        "add_cart": ("Add to basket", "Put in basket"),
        "checkout": ("Proceed to checkout", "Checkout"),
        "place": ("Confirm order", "Place order"),
        "accept": ("OK", "Accept cookies", "Fine by me"),
        "close": ("No thanks", "Close window"),
        "login": ("Member login", "Log in", "Login"),
    }

    # --- chrome -----------------------------------------------------------------------------------------------
    def page(self, ctx: Ctx, title: str, body: str, status: int = 200) -> HTMLResponse:
        site = ctx.site
        user = ctx.user
        menu = ['<a href="/">Home</a>', f'<a href="{escape(self.url_listing(site))}">{escape(self._list_word(site))}</a>',
                f'<a href="{escape(self.url(site, "help"))}">FAQ</a>']
        if site.family.name == "shop":
            menu.append(f'<a href="{escape(self.url(site, "cart"))}">Basket ({ctx.cart_count()})</a>')
        if user:
            menu.append(f'<a href="{escape(self.url(site, "account"))}">{escape(user)}</a> '
                        f'<a href="{escape(self.url(site, "logout"))}">Logout</a>')
        else:
            menu.append(f'<a id="lg-login" href="{escape(self.url(site, "login"))}">{escape(self.word(site, "login"))}</a>')
        banner = ""
        if ctx.show_banner:
            banner = (f'<div id="lg-consent" style="background:#ffd;padding:6px;border-bottom:1px solid #cc9">'
                      f'{escape(site.words["cookie"])} <button id="lg-consent-ok" type="button">'
                      f'{escape(self.word(site, "accept"))}</button></div>')
        html = (
            f'<!DOCTYPE html><html><head><meta charset="utf-8"><title>{escape(site.name)} :: {escape(title)}</title>'
            f'<link rel="icon" href="data:,"><style>{_style(site)}</style></head><body>{banner}'
            f'<table width="100%" cellpadding="6"><tr><td><b>{escape(site.name)}</b><br><small>'
            f'{escape(str(site.look["tagline"]))}</small></td><td align="right">{_search(self, site)}</td></tr></table>'
            f'<div class="lg-menu">{" | ".join(menu)}</div><hr>'
            f'<table width="100%"><tr><td valign="top" width="190">{_cats(self, site)}</td>'
            f'<td valign="top"><main>{body}</main></td></tr></table><hr>'
            f'<small>Powered by PortalKit 4.2 &middot; {escape(site.name)}</small>{SCRIPT}</body></html>'
        )
        return HTMLResponse(html, status_code=status)

    def _list_word(self, site: Site) -> str:
        fam = site.family
        return self.word(site, "menu_list").format(plural=fam.plural, Plural=fam.plural.capitalize())

    # --- pages ------------------------------------------------------------------------------------------------
    def render_home(self, ctx: Ctx) -> str:
        site = ctx.site
        popup = ""
        if ctx.show_popup:
            popup = (f'<div id="lg-news" role="dialog" aria-modal="true" aria-label="Newsletter" style="position:fixed;'
                     f'inset:0;background:rgba(0,0,0,.5);display:flex;align-items:center;justify-content:center">'
                     f'<div style="background:#fff;padding:20px"><p>{escape(site.words["popup"])}</p>'
                     f'<button id="lg-news-no" type="button">{escape(self.word(site, "close"))}</button></div></div>')
        if site.family.login_required and ctx.user is None:
            return (f"<h2>Welcome to {escape(site.name)}</h2><p>Please log in to see your {escape(site.family.plural)}."
                    f"</p>{popup}")
        return _home(self, site) + popup

    def render_listing(self, ctx: Ctx, items: list[Item], *, q: str, category: str, sort: str, page: int, total: int,
                       found: list[Item]) -> str:
        site, fam = ctx.site, ctx.site.family
        sorts = " &middot; ".join(
            f"<b>{escape(SORT_WORDS[s].format(v=fam.value_label.lower()))}</b>" if s == sort else
            f'<a href="{escape(self.url_listing(site, q, category, s))}">'
            f'{escape(SORT_WORDS[s].format(v=fam.value_label.lower()))}</a>'
            for s in SORT_WORDS)
        rows = "".join(_row(self, site, it.id) for it in items)
        if not rows:
            rows = '<tr><td colspan="4"><i>No entries.</i></td></tr>'
        n = pages_of(total)
        pager = " ".join(
            f"[{p}]" if p == page else f'<a href="{escape(self.url_listing(site, q, category, sort, p))}">{p}</a>'
            for p in range(1, n + 1))
        if page > 1:
            pager = f'<a href="{escape(self.url_listing(site, q, category, sort, page - 1))}">&laquo; prev</a> ' + pager
        if page < n:
            pager += f' <a href="{escape(self.url_listing(site, q, category, sort, page + 1))}">next &raquo;</a>'
        head = site.category_labels.get(category, fam.plural.capitalize())
        found_for = f' matching "{escape(q)}"' if q else ""
        return (
            f"<h2>{escape(head)}</h2><p>{total} entries{found_for}. Page {page} of {n}.</p>"
            f"<p>Sort by: {sorts}</p>"
            f'<table border="1" cellpadding="4" cellspacing="0" width="100%"><tr><th>{escape(fam.noun.capitalize())}</th>'
            f"<th>{escape(fam.value_label)}</th><th>{escape(fam.author_label)}</th><th>{escape(fam.date_label)}</th></tr>"
            f"{rows}</table><p>Pages: {pager}</p>"
        )

    def render_record(self, ctx: Ctx, item: Item, values: dict[str, str], errors: dict[str, str]) -> str:
        site, fam = ctx.site, ctx.site.family
        out = _record(self, site, item.id)
        if fam.action is None:
            err = f'<p style="color:red">{escape(errors["qty"])}</p>' if "qty" in errors else ""
            out += (f'<form method="post" action="{escape(self.url(site, "cart_add"))}"><fieldset><legend>Order</legend>'
                    f'{err}<input type="hidden" name="sku" value="{item.id}">Quantity: <input id="lg-qty" name="qty" '
                    f'size="3" value="1"> <input id="lg-add" type="submit" value="{escape(self.word(site, "add_cart"))}">'
                    f"</fieldset></form>")
            return out
        rows = "".join(_field(f, values.get(f.name, ""), errors.get(f.name)) for f in fam.action.fields)
        summary = f'<p style="color:red">{len(errors)} field(s) need attention.</p>' if errors else ""
        return out + (
            f'<form method="post" action="{escape(self.url(site, "act", id=item.id))}"><fieldset>'
            f'<legend>{escape(str(site.look["action_button"]))}</legend>{summary}<table>{rows}</table>'
            f'<input id="lg-send" type="submit" value="{escape(self.word(site, "send"))}"></fieldset></form>'
        )

    def render_login(self, ctx: Ctx, nxt: str, error: str) -> str:
        err = f'<p style="color:red">{escape(error)}</p>' if error else ""
        return (f'<h2>{escape(self.word(ctx.site, "login"))}</h2>{err}<form method="post" '
                f'action="{escape(self.url(ctx.site, "login"))}"><input type="hidden" name="next" value="{escape(nxt)}">'
                f'<table><tr><td>User:</td><td><input id="lg-user" name="username"></td></tr><tr><td>Password:</td>'
                f'<td><input id="lg-pass" name="password" type="password"></td></tr></table>'
                f'<input id="lg-login-go" type="submit" value="Login"></form>')

    def render_cart(self, ctx: Ctx, added: Item | None) -> str:
        site = ctx.site
        note = f'<p style="background:#efe;padding:4px">"{escape(added.title)}" was added to your basket.</p>' if added else ""
        rows, total = "", 0.0
        for line in ctx.st["cart"]["items"]:
            it = site.by_id.get(line["sku"])
            if it is None:
                continue
            total += it.value * line["qty"]
            rows += (f'<tr><td>{escape(it.title)}</td><td>{line["qty"]}</td><td>{escape(it.value_text)}</td><td>'
                     f'<form method="post" action="{escape(self.url(site, "cart_remove"))}"><input type="hidden" '
                     f'name="sku" value="{it.id}"><input type="submit" value="remove"></form></td></tr>')
        if not rows:
            return f"{note}<h2>Basket</h2><p>Your basket is empty.</p>"
        return (f'{note}<h2>Basket</h2><table border="1" cellpadding="4" cellspacing="0"><tr><th>Item</th><th>Qty</th>'
                f'<th>Price</th><th></th></tr>{rows}</table><p>Total: ${total:,.2f}</p>'
                f'<p><a id="lg-checkout" href="{escape(self.url(site, "checkout"))}">{escape(self.word(site, "checkout"))}'
                f"</a></p>")

    def render_checkout(self, ctx: Ctx, values: dict[str, str], errors: dict[str, str]) -> str:
        rows = "".join(_field(f, values.get(f.name, ""), errors.get(f.name)) for f in CHECKOUT_FIELDS)
        err = f'<p style="color:red">{escape(errors["cart"])}</p>' if "cart" in errors else ""
        return (f'<h2>Checkout</h2>{err}<form method="post" action="{escape(self.url(ctx.site, "checkout"))}"><fieldset>'
                f'<legend>Delivery address</legend><table>{rows}</table><input id="lg-place" type="submit" '
                f'value="{escape(self.word(ctx.site, "place"))}"></fieldset></form>')

    # --- oracle -----------------------------------------------------------------------------------------------
    popup_close, cookie_accept = "#lg-news-no", "#lg-consent-ok"
    login_steps = ("#lg-login", "#lg-user", "#lg-pass", "#lg-login-go")
    search_box = ('input[name="search"]', "#lg-search-go")

    def browse(self, site: Site, *, category: str = "", sort: str = "relevance", page: int = 1) -> list[pb.Action]:
        acts = [click(f".lg-cats a[href={css_str(self.url_listing(site, '', category))}]")] if category else \
            [click(f".lg-menu a[href={css_str(self.url_listing(site))}]")]
        if sort != "relevance":
            acts.append(click(f"main a[href={css_str(self.url_listing(site, '', category, sort))}]"))
        if page > 1:
            acts.append(click(f"main a[href={css_str(self.url_listing(site, '', category, sort, page))}]"))
        return acts

    def submit_record(self, site: Site, item: Item, values: dict[str, object]) -> list[pb.Action]:
        spec = site.family.action
        assert spec is not None
        acts: list[pb.Action] = []
        for f in spec.fields:
            v = values[f.name]
            if f.kind == "select":
                acts.append(select(f'select[name="{f.name}"]', str(v)))
            elif f.kind == "checkbox":
                if v:
                    acts.append(click(f'input[name="{f.name}"]'))
            else:
                acts.append(fill(f'[name="{f.name}"]', str(v)))
        return acts + [click("#lg-send")]

    def add_to_cart(self, site: Site, item: Item, qty: int) -> list[pb.Action]:
        return [fill("#lg-qty", str(qty)), click("#lg-add")]

    def check_out(self, site: Site, address: dict[str, str]) -> list[pb.Action]:
        return ([click("#lg-checkout")] + [fill(f'input[name="{k}"]', address[k]) for k in ("name", "street", "city", "zip")]
                + [click("#lg-place")])


def _field(f: FieldSpec, value: str, error: str | None) -> str:
    err = f'<br><small style="color:red">{escape(error)}</small>' if error else ""
    if f.kind == "textarea":
        ctl = f'<textarea name="{f.name}" rows="4" cols="40">{escape(value)}</textarea>'
    elif f.kind == "select":
        ctl = f'<select name="{f.name}"><option value="">-- choose --</option>' + "".join(
            f'<option{" selected" if o == value else ""}>{escape(o)}</option>' for o in f.options) + "</select>"
    elif f.kind == "checkbox":
        ctl = f'<input name="{f.name}" type="checkbox" value="on"{" checked" if value == "on" else ""}>'
    else:
        ctl = f'<input name="{f.name}" value="{escape(value)}" size="30">'
    return f"<tr><td>{escape(f.label)}:</td><td>{ctl}{err}</td></tr>"


@lru_cache(maxsize=8192)
def _style(site: Site) -> str:
    font = ("Verdana", "Arial", "Times New Roman", "Tahoma")[int(site.look["theme"]) % 4]
    return f"body{{font-family:{font};font-size:13px;margin:8px}}th{{background:#ddd;text-align:left}}"


@lru_cache(maxsize=8192)
def _search(b: Ledger, site: Site) -> str:
    return (f'<form method="get" action="/index.php"><input type="hidden" name="view" value="list">'
            f'<input name="search" size="24" title="{escape(site.words["search_placeholder"])}"> '
            f'<input id="lg-search-go" type="submit" value="{escape(b.word(site, "search"))}"></form>')


@lru_cache(maxsize=8192)
def _cats(b: Ledger, site: Site) -> str:
    links = "".join(f'<li><a href="{escape(b.url_listing(site, "", slug))}">{escape(label)}</a></li>'
                    for slug, label in site.category_labels.items())
    return f'<b>Categories</b><ul class="lg-cats">{links}</ul>'


@lru_cache(maxsize=8192)
def _home(b: Ledger, site: Site) -> str:
    top = sorted(site.items, key=lambda it: (-it.rating, it.id))[:5]
    rows = "".join(f'<li><a href="{escape(b.url_record(site, it))}">{escape(it.title)}</a> ({escape(it.value_text)})</li>'
                   for it in top)
    return f"<h2>Welcome to {escape(site.name)}</h2><p>Highest rated {escape(site.family.plural)}:</p><ol>{rows}</ol>"


@lru_cache(maxsize=131072)
def _row(b: Ledger, site: Site, item_id: str) -> str:
    it = site.by_id[item_id]
    return (f'<tr><td><a href="{escape(b.url_record(site, it))}">{escape(it.title)}</a></td><td>{escape(it.value_text)}'
            f"</td><td>{escape(it.author)}</td><td>{escape(site.fmt_date(it.date))}</td></tr>")


@lru_cache(maxsize=65536)
def _record(b: Ledger, site: Site, item_id: str) -> str:
    it = site.by_id[item_id]
    fam = site.family
    facts = [(fam.value_label, it.value_text), (fam.author_label, it.author),
             ("Category", site.category_labels.get(it.category, it.category)), (fam.date_label, site.fmt_date(it.date)),
             ("Rating", f"{it.rating:.1f} of 5"), *it.attrs]
    rows = "".join(f"<tr><th>{escape(k)}:</th><td>{escape(v)}</td></tr>" for k, v in facts)
    reviews = "".join(f"<li>{escape(str(r['author']))} ({r['stars']}/5): {escape(str(r['text']))}</li>" for r in it.reviews)
    return (f'<p><a href="{escape(b.url_listing(site))}">{escape(fam.plural.capitalize())}</a> &gt; '
            f"{escape(site.category_labels.get(it.category, ''))}</p><h2>{escape(it.title)}</h2>"
            f'<table border="1" cellpadding="4" cellspacing="0">{rows}</table><p>{escape(it.body)}</p>'
            + (f"<h3>Reviews</h3><ul>{reviews}</ul>" if reviews else ""))

"""The `pressroom` builder: a WordPress blog theme. Records are posts at dated permalinks (`/2024/03/<slug>/`) whose
facts are sentences plus a definition list, with the reviews as comments and the family's form as the "Leave a
reply" comment form; listings are the blog's excerpts with "Read more" links and "Older posts" / "Newer posts"
(`?paged=`), search is `?s=`, categories live at `/category/<slug>/`; the primary menu hides behind a hamburger
button, a sidebar holds the search, category, ordering and meta widgets, the footer its own menu; a newsletter
modal and a cookie bar at the bottom. Server-rendered, native forms."""

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
from webenv.sites.catalog import THEMES, Site
from webenv.sites.families.base import FieldSpec, Item
from webenv.v1 import common_pb2 as pb

ORDER_WORDS = {"relevance": "Default order", "value_asc": "{v}, lowest first", "value_desc": "{v}, highest first",
               "date_desc": "Latest first", "rating_desc": "Most liked"}
SCRIPT = (
    "<script>(function(){function k(n){document.cookie=n+'=1; path=/; max-age=31536000';}"
    "var t=document.querySelector('.pr-menu-toggle'),m=document.getElementById('pr-primary-menu');"
    "if(t&&m){t.addEventListener('click',function(){var o=t.getAttribute('aria-expanded')!=='true';"
    "t.setAttribute('aria-expanded',o?'true':'false');m.hidden=!o;});}"
    "[['pr-cookie-accept','cookie_consent','pr-cookie-bar'],['pr-newsletter-close','popup_dismissed','pr-newsletter']]"
    ".forEach(function(x){var b=document.getElementById(x[0]);if(b){b.addEventListener('click',function(){k(x[1]);"
    "document.getElementById(x[2]).remove();});}});})();</script>"
)


class Pressroom(Builder):
    name = "pressroom"
    summary = "a WordPress blog theme: /YYYY/MM/slug/ permalinks, excerpts with Read more, ?s= search, older/newer posts"
    scheme = Scheme(
        routes={
            "home": "/", "listing": "/{base}/", "record": "/{yyyy}/{mm}/{slug}/",
            "act": "/wp-comments-post.php?comment_post_ID={num}", "login": "/wp-login.php",
            "logout": "/wp-login.php?action=logout", "help": "/faq/", "about": "/about/",
            "account": "/wp-admin/profile.php", "cart": "/cart/", "cart_add": "/cart/add/", "cart_remove": "/cart/remove/",
            "checkout": "/checkout/", "order": "/checkout/order-received/{id}/", "done": "/thank-you/{id}/",
        },
        base="{plural}", q="s", category="category_name", sort="orderby", page="paged",
        category_path="/category/{category}/",
        sort_values={"relevance": "menu_order", "value_asc": "value", "value_desc": "value-desc", "date_desc": "date",
                     "rating_desc": "likes"},
    )
    words = {
        "search": ("Search", "Go"),
        "send": ("Post Comment", "Submit", "Send"),
        "add_cart": ("Add to cart", "Buy now"),
        "checkout": ("Proceed to checkout", "Checkout"),
        "place": ("Place order", "Complete order"),
        "accept": ("Accept", "I understand", "Okay"),
        "close": ("No thanks", "Close"),
        "login": ("Log in", "Sign in"),
        "more": ("Read more", "Continue reading", "Keep reading"),
        "menu": ("Menu", "Navigation"),
    }

    # --- chrome -----------------------------------------------------------------------------------------------
    def page(self, ctx: Ctx, title: str, body: str, status: int = 200) -> HTMLResponse:
        site = ctx.site
        user = ctx.user
        meta = (f'<li><a href="{escape(self.url(site, "account"))}">Profile ({escape(user)})</a></li>'
                f'<li><a href="{escape(self.url(site, "logout"))}">Log out</a></li>' if user else
                f'<li><a id="pr-loginlink" href="{escape(self.url(site, "login"))}">{escape(self.word(site, "login"))}'
                f"</a></li>")
        if site.family.name == "shop":
            meta = f'<li><a href="{escape(self.url(site, "cart"))}">Cart ({ctx.cart_count()})</a></li>' + meta
        extra = ""
        if ctx.show_banner:
            extra += (f'<div id="pr-cookie-bar" style="position:fixed;left:0;right:0;bottom:0;background:#1d2327;'
                      f'color:#fff;padding:10px 20px;z-index:30">{escape(site.words["cookie"])} <button '
                      f'id="pr-cookie-accept" type="button">{escape(self.word(site, "accept"))}</button></div>')
        if ctx.show_popup:
            extra += (f'<div id="pr-newsletter" role="dialog" aria-modal="true" aria-labelledby="pr-newsletter-title" '
                      f'style="position:fixed;inset:0;background:rgba(0,0,0,.6);z-index:60;display:flex;'
                      f'align-items:center;justify-content:center"><div class="pr-modal-box"><h2 id="pr-newsletter-title">'
                      f'Newsletter</h2><p>{escape(site.words["popup"])}</p><form onsubmit="return false"><input '
                      f'type="email" placeholder="Your email" aria-label="Email"> <button type="submit">Subscribe</button>'
                      f'</form><button id="pr-newsletter-close" type="button">{escape(self.word(site, "close"))}</button>'
                      f"</div></div>")
        html = (
            f'<!DOCTYPE html><html lang="en-US"><head><meta charset="UTF-8"><meta name="viewport" content="width='
            f'device-width, initial-scale=1"><title>{escape(title)} &#8211; {escape(site.name)}</title><link rel="icon" '
            f'href="data:,"><style>{_style(site)}</style></head><body class="pr-blog">'
            f'<a class="pr-skip-link" href="#pr-content">Skip to content</a><header class="pr-site-header">'
            f'<p class="pr-site-title"><a href="/" rel="home">{escape(site.name)}</a></p><p class="pr-site-description">'
            f'{escape(str(site.look["tagline"]))}</p>{_menu(self, site)}</header><div class="pr-wrap">'
            f'<main id="pr-content">{body}</main><aside class="pr-widget-area">{_search_widget(self, site)}'
            f'{_cat_widget(self, site)}<section class="pr-widget"><h2 class="pr-widget-title">Meta</h2><ul>{meta}</ul>'
            f'</section></aside></div>{_footer(self, site)}{extra}{SCRIPT}</body></html>'
        )
        return HTMLResponse(html, status_code=status)

    # --- pages ------------------------------------------------------------------------------------------------
    def render_home(self, ctx: Ctx) -> str:
        site = ctx.site
        if site.family.login_required and ctx.user is None:
            return (f'<article class="pr-page"><h1 class="pr-entry-title">Private</h1><p>This content is password '
                    f'protected. Please <a href="{escape(self.url(site, "login"))}">log in</a> to read the '
                    f'{escape(site.family.plural)}.</p></article>')
        latest = sorted(site.items, key=lambda it: (it.date, it.id), reverse=True)[:3]
        return ("".join(_excerpt(self, site, it.id) for it in latest)
                + f'<p><a class="pr-button" href="{escape(self.url_listing(site))}">View all posts</a></p>')

    def render_listing(self, ctx: Ctx, items: list[Item], *, q: str, category: str, sort: str, page: int, total: int,
                       found: list[Item]) -> str:
        site, fam = ctx.site, ctx.site.family
        here = self.url_listing
        if q:
            head = f'Search Results for: <span>{escape(q)}</span>'
        elif category:
            head = f"Category: <span>{escape(site.category_labels[category])}</span>"
        else:
            head = f"All {escape(fam.plural)}"
        order = "".join(
            f'<li class="pr-current">{escape(ORDER_WORDS[s].format(v=fam.value_label))}</li>' if s == sort else
            f'<li><a href="{escape(here(site, q, category, s))}">{escape(ORDER_WORDS[s].format(v=fam.value_label))}'
            f"</a></li>" for s in ORDER_WORDS)
        posts = "".join(_excerpt(self, site, it.id) for it in items) or \
            ('<section class="pr-no-results"><h2>Nothing Found</h2><p>Sorry, but nothing matched your search terms. '
             "Please try again with some different keywords.</p></section>")
        links = []
        if page < pages_of(total):
            links.append(f'<div class="pr-nav-previous"><a href="{escape(here(site, q, category, sort, page + 1))}">'
                         f"&larr; Older posts</a></div>")
        if page > 1:
            links.append(f'<div class="pr-nav-next"><a href="{escape(here(site, q, category, sort, page - 1))}">'
                         f"Newer posts &rarr;</a></div>")
        return (f'<header class="pr-page-header"><h1 class="pr-page-title">{head}</h1><p>{total} posts'
                f'{f" &middot; page {page}" if page > 1 else ""}</p></header><details class="pr-sortwidget" open>'
                f"<summary>Order posts</summary><ul>{order}</ul></details>{posts}"
                f'<nav class="pr-posts-navigation" aria-label="Posts">{"".join(links)}</nav>')

    def render_record(self, ctx: Ctx, item: Item, values: dict[str, str], errors: dict[str, str]) -> str:
        site, fam = ctx.site, ctx.site.family
        out = _single(self, site, item.id)
        if fam.action is None:
            err = f'<p class="pr-notice-error">{escape(errors["qty"])}</p>' if "qty" in errors else ""
            return out + (f'<form class="pr-cart-form" method="post" action="{escape(self.url(site, "cart_add"))}">{err}'
                          f'<input type="hidden" name="sku" value="{item.id}"><label for="pr-quantity">Quantity</label> '
                          f'<input id="pr-quantity" name="qty" type="number" min="1" max="10" value="1"> <button '
                          f'id="pr-add-to-cart" type="submit">{escape(self.word(site, "add_cart"))}</button></form>')
        rows = "".join(_comment_field(f, values.get(f.name, ""), errors.get(f.name)) for f in fam.action.fields)
        err = '<p class="pr-notice-error">Your comment could not be posted. Check the fields below.</p>' if errors else ""
        return out + (f'<div id="pr-respond"><h3 class="pr-reply-title">{escape(str(site.look["action_button"]))}</h3>'
                      f'{err}<form method="post" action="{escape(self.url(site, "act", id=item.id))}" '
                      f'class="pr-comment-form"><p class="pr-comment-notes">Required fields are marked *</p>{rows}'
                      f'<p class="pr-form-submit"><input id="pr-submit" type="submit" '
                      f'value="{escape(self.word(site, "send"))}"></p></form></div>')

    def render_login(self, ctx: Ctx, nxt: str, error: str) -> str:
        err = f'<div id="pr-login-error"><strong>Error:</strong> {escape(error)}</div>' if error else ""
        return (f'<div id="pr-login"><h1>{escape(ctx.site.name)}</h1>{err}<form name="loginform" method="post" '
                f'action="{escape(self.url(ctx.site, "login"))}"><p><label for="pr-user-login">Username or Email '
                f'Address</label><input id="pr-user-login" name="username" size="20"></p><p><label for="pr-user-pass">'
                f'Password</label><input id="pr-user-pass" name="password" type="password" size="20"></p>'
                f'<input type="hidden" name="next" value="{escape(nxt)}"><p><input id="pr-wp-submit" type="submit" '
                f'value="{escape(self.word(ctx.site, "login"))}"></p></form></div>')

    def render_cart(self, ctx: Ctx, added: Item | None) -> str:
        site = ctx.site
        note = (f'<div class="pr-message" role="alert">&ldquo;{escape(added.title)}&rdquo; has been added to your cart.'
                f"</div>" if added else "")
        lines, total = cart_lines(ctx)
        if not lines:
            return f'{note}<h1 class="pr-entry-title">Cart</h1><p class="pr-cart-empty">Your cart is currently empty.</p>'
        rows = "".join(
            f'<tr><td><form method="post" action="{escape(self.url(site, "cart_remove"))}"><input type="hidden" '
            f'name="sku" value="{it.id}"><button type="submit" aria-label="Remove {escape(it.title)} from cart">&times;'
            f'</button></form></td><td><a href="{escape(self.url_record(site, it))}">{escape(it.title)}</a></td>'
            f"<td>{escape(it.value_text)}</td><td>{qty}</td></tr>" for it, qty in lines)
        return (f'{note}<h1 class="pr-entry-title">Cart</h1><table class="pr-shop-table"><thead><tr><th></th><th>Product'
                f"</th><th>Price</th><th>Quantity</th></tr></thead><tbody>{rows}</tbody></table><h2>Cart totals</h2>"
                f'<p>Total <strong>${total:,.2f}</strong></p><a id="pr-checkout-button" class="pr-button" '
                f'href="{escape(self.url(site, "checkout"))}">{escape(self.word(site, "checkout"))}</a>')

    def render_checkout(self, ctx: Ctx, values: dict[str, str], errors: dict[str, str]) -> str:
        rows = "".join(_comment_field(f, values.get(f.name, ""), errors.get(f.name)) for f in CHECKOUT_FIELDS)
        err = f'<p class="pr-notice-error">{escape(errors["cart"])}</p>' if "cart" in errors else ""
        return (f'<h1 class="pr-entry-title">Checkout</h1>{err}<form class="pr-checkout" method="post" '
                f'action="{escape(self.url(ctx.site, "checkout"))}"><h3>Billing details</h3>{rows}<button '
                f'id="pr-place-order" type="submit">{escape(self.word(ctx.site, "place"))}</button></form>')

    # --- oracle -----------------------------------------------------------------------------------------------
    def dismiss(self, site: Site) -> list[pb.Action]:
        return ([click("#pr-newsletter-close")] if site.look["popup"] else []) + \
            ([click("#pr-cookie-accept")] if site.look["cookie_banner"] else [])

    def log_in(self, site: Site, username: str, password: str) -> list[pb.Action]:
        return [click("#pr-loginlink"), fill("#pr-user-login", username), fill("#pr-user-pass", password),
                click("#pr-wp-submit")]

    def open_record(self, site: Site, item: Item) -> list[pb.Action]:
        return [fill("#pr-s", item.title), click("#pr-searchsubmit")] + self.open_listed(site, item)

    def open_listed(self, site: Site, item: Item) -> list[pb.Action]:
        return [click(f".pr-entry-title a[href={css_str(self.url_record(site, item))}]")]

    def browse(self, site: Site, *, category: str = "", sort: str = "relevance", page: int = 1) -> list[pb.Action]:
        acts = [click(".pr-menu-toggle"), click(f"#pr-primary-menu a[href={css_str(self.url_listing(site, '', category))}]")]
        if sort != "relevance":
            acts.append(click(f".pr-sortwidget a[href={css_str(self.url_listing(site, '', category, sort))}]"))
        return acts + [click(".pr-nav-previous a")] * (page - 1)

    def submit_record(self, site: Site, item: Item, values: dict[str, object]) -> list[pb.Action]:
        spec = site.family.action
        assert spec is not None
        return fill_native(spec.fields, values, "#pr-comment-{name}") + [click("#pr-submit")]

    def add_to_cart(self, site: Site, item: Item, qty: int) -> list[pb.Action]:
        return [fill("#pr-quantity", str(qty)), click("#pr-add-to-cart")]

    def check_out(self, site: Site, address: dict[str, str]) -> list[pb.Action]:
        return ([click("#pr-checkout-button")] + fill_native(CHECKOUT_FIELDS, address, "#pr-comment-{name}")
                + [click("#pr-place-order")])


def _comment_field(f: FieldSpec, value: str, error: str | None) -> str:
    """One comment-form paragraph: label (a star when required) then the native control, the error after."""
    ident = f"pr-comment-{f.name}"
    err = f'<span class="pr-field-error">{escape(error)}</span>' if error else ""
    if f.kind == "checkbox":
        return (f'<p class="pr-comment-form-cookies-consent">{native_control(f, value, ident)} '
                f'<label for="{ident}">{escape(f.label)}</label>{err}</p>')
    star = ' <span class="pr-required">*</span>' if f.required else ""
    attrs = {"textarea": 'cols="45" rows="6"', "select": ""}.get(f.kind, 'size="30"')
    return (f'<p class="pr-comment-form-{f.name}"><label for="{ident}">{escape(f.label)}{star}</label> '
            f'{native_control(f, value, ident, "— Select —", attrs)}{err}</p>')


@lru_cache(maxsize=8192)
def _style(site: Site) -> str:
    accent, bg, fg, font = THEMES[(int(site.look["theme"]) + 5) % len(THEMES)]
    return (f"body{{margin:0;font-family:Georgia,{font};background:{bg};color:{fg};line-height:1.6}}.pr-site-header{{"
            f"padding:24px 32px;border-bottom:1px solid #ddd;position:relative}}.pr-site-title{{font-size:1.8em;margin:0}}"
            f".pr-site-title a{{color:{fg};text-decoration:none}}.pr-menu-toggle{{position:absolute;right:32px;top:28px}}"
            f"#pr-primary-menu{{position:absolute;right:32px;top:64px;background:#fff;border:1px solid #ccc;z-index:20;"
            f"padding:8px 16px}}#pr-primary-menu ul{{list-style:none;padding:0;margin:0}}[hidden]{{display:none!important}}"
            f".pr-wrap{{display:flex;gap:40px;max-width:1100px;margin:auto;padding:24px}}#pr-content{{flex:3}}"
            f".pr-widget-area{{flex:1}}.pr-post{{border-bottom:1px solid #eee;padding-bottom:16px;margin-bottom:24px}}"
            f".pr-entry-meta{{font-size:.85em;color:#666}}a{{color:{accent}}}.pr-button{{background:{accent};color:#fff;"
            f"padding:8px 16px;display:inline-block;text-decoration:none}}.pr-modal-box{{background:#fff;padding:24px;"
            f"max-width:380px}}.pr-notice-error,.pr-field-error{{color:#d63638;display:block}}.pr-skip-link{{position:"
            f"absolute;left:-9999px}}.pr-site-footer{{border-top:1px solid #ddd;padding:24px 32px;margin-bottom:60px}}"
            f".pr-footer-menu{{list-style:none;display:flex;gap:16px;padding:0}}.pr-specs dt{{font-weight:bold}}")


@lru_cache(maxsize=8192)
def _menu(b: Pressroom, site: Site) -> str:
    cats = "".join(f'<li><a href="{escape(b.url_listing(site, "", slug))}">{escape(label)}</a></li>'
                   for slug, label in site.category_labels.items())
    return (f'<button class="pr-menu-toggle" type="button" aria-controls="pr-primary-menu" aria-expanded="false">'
            f'&#9776; {escape(b.word(site, "menu"))}</button><nav id="pr-primary-menu" aria-label="Primary" hidden><ul>'
            f'<li><a href="/">Home</a></li><li><a href="{escape(b.url_listing(site))}">All '
            f'{escape(site.family.plural)}</a></li>{cats}</ul></nav>')


@lru_cache(maxsize=8192)
def _search_widget(b: Pressroom, site: Site) -> str:
    return (f'<section class="pr-widget"><form role="search" method="get" class="pr-search-form" '
            f'action="{escape(b.url_listing(site))}"><label for="pr-s">Search for:</label> <input id="pr-s" type="search" '
            f'name="s" placeholder="{escape(site.words["search_placeholder"])}"> <input id="pr-searchsubmit" '
            f'type="submit" value="{escape(b.word(site, "search"))}"></form></section>')


@lru_cache(maxsize=8192)
def _cat_widget(b: Pressroom, site: Site) -> str:
    counts: dict[str, int] = {}
    for it in site.items:
        counts[it.category] = counts.get(it.category, 0) + 1
    lis = "".join(f'<li><a href="{escape(b.url_listing(site, "", slug))}">{escape(label)}</a> ({counts.get(slug, 0)})</li>'
                  for slug, label in site.category_labels.items())
    return f'<section class="pr-widget"><h2 class="pr-widget-title">Categories</h2><ul>{lis}</ul></section>'


@lru_cache(maxsize=8192)
def _footer(b: Pressroom, site: Site) -> str:
    return (f'<footer class="pr-site-footer"><nav aria-label="Footer"><ul class="pr-footer-menu"><li><a href="/">Home</a>'
            f'</li><li><a href="{escape(b.url(site, "about"))}">About</a></li><li><a href="{escape(b.url(site, "help"))}">'
            f'FAQ</a></li></ul></nav><p>Proudly powered by PressKit &middot; {escape(site.name)}</p></footer>')


def _posted(site: Site, it: Item) -> str:
    cat = site.category_labels.get(it.category, it.category)
    return (f'<div class="pr-entry-meta">Posted on <time datetime="{it.date}">{escape(site.fmt_date(it.date))}</time> '
            f"by {escape(it.author)} in {escape(cat)}</div>")


@lru_cache(maxsize=131072)
def _excerpt(b: Pressroom, site: Site, item_id: str) -> str:
    it = site.by_id[item_id]
    link = escape(b.url_record(site, it))
    return (f'<article class="pr-post"><h2 class="pr-entry-title"><a href="{link}" rel="bookmark">{escape(it.title)}</a>'
            f"</h2>{_posted(site, it)}<div class=\"pr-entry-summary\"><p>{escape(site.family.value_label)}: "
            f"{escape(it.value_text)}. {escape(it.body[:180])}&hellip;</p><a class=\"pr-more-link\" href=\"{link}\">"
            f'{escape(b.word(site, "more"))}<span class="pr-screen-reader-text"> &ldquo;{escape(it.title)}&rdquo;</span>'
            f"</a></div></article>")


@lru_cache(maxsize=65536)
def _single(b: Pressroom, site: Site, item_id: str) -> str:
    it = site.by_id[item_id]
    fam = site.family
    cat = site.category_labels.get(it.category, it.category)
    specs = "".join(f"<dt>{escape(k)}</dt><dd>{escape(v)}</dd>" for k, v in
                    ((f"{fam.date_label} date", site.fmt_date(it.date)), *it.attrs))
    comments = "".join(
        f'<li class="pr-comment"><article><footer class="pr-comment-meta"><b>{escape(str(r["author"]))}</b> says:'
        f"</footer><p>{escape(str(r['text']))} ({r['stars']} of 5 stars)</p></article></li>" for r in it.reviews)
    n = len(it.reviews)
    return (f'<article class="pr-post pr-single"><header><h1 class="pr-entry-title">{escape(it.title)}</h1>'
            f"{_posted(site, it)}</header><div class=\"pr-entry-content\"><p>{escape(it.title)} is a "
            f"{escape(fam.noun)} by {escape(it.author)}, filed under <a href=\"{escape(b.url_listing(site, '', it.category))}\""
            f' rel="category tag">{escape(cat)}</a>. Its {escape(fam.value_label.lower())} is {escape(it.value_text)}, '
            f"and readers rate it {it.rating:.1f} out of 5.</p><p>{escape(it.body)}</p><dl class=\"pr-specs\">{specs}</dl>"
            f'</div></article><section id="pr-comments"><h2 class="pr-comments-title">'
            f"{n or 'No'} thought{'' if n == 1 else 's'} on &ldquo;{escape(it.title)}&rdquo;</h2>"
            f'<ol class="pr-comment-list">{comments}</ol></section>')

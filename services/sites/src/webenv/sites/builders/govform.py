"""The `govform` builder: a government design-system service (GOV.UK-like). Slug URLs (`/<list>/<slug>`), a
finder page (`/browse/<list>?keywords=&topic=&order=&page=`) with a filter column (topic radios, a sort select and
an "Apply filters" button), results as a plain ordered list of links with short metadata lines, numbered
pagination, breadcrumbs, records as a summary list (`<dl>` of key/value rows) under a "Start now" button, and forms
as a multi-step "Continue" wizard: one question per page, the answers so far carried in hidden inputs of GET forms,
each answer checked as it is given, then "Check your answers" with "Change" links and the one POST. A cookie banner
with Accept / Reject that turns into a confirmation to hide, a survey dialog, a phase banner. Server-rendered; the
script only handles the banner and the dialog.

No family's form asks for a date, so no question here is split into day / month / year inputs.
"""

from __future__ import annotations

from functools import lru_cache
from html import escape
from urllib.parse import urlencode

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
    pages_of,
    select,
    validate,
)
from webenv.sites.catalog import Site
from webenv.sites.families.base import FieldSpec, Item
from webenv.v1 import common_pb2 as pb

SORT_NAMES = {"relevance": "Relevance", "value_asc": "{v} (lowest)", "value_desc": "{v} (highest)",
              "date_desc": "Updated (newest)", "rating_desc": "Rating (highest)"}
SCRIPT = """<script>(function(){document.body.className+=" gv-js-enabled";
function k(n,v){document.cookie=n+"="+v+"; path=/; max-age=31536000";}
var cb=document.querySelector(".gv-cookie-banner");
if(cb){cb.querySelectorAll("button[value]").forEach(function(b){b.addEventListener("click",function(){
 k("cookie_consent",b.value);cb.querySelector(".gv-cookie-banner__question").hidden=true;
 document.getElementById("gv-cookies-"+b.value+"ed").hidden=false;});});
 cb.querySelectorAll(".gv-cookie-hide").forEach(function(h){h.addEventListener("click",function(){cb.remove();});});}
var s=document.querySelector(".gv-survey");
if(s){s.querySelector(".gv-survey__close").addEventListener("click",function(){k("popup_dismissed","1");s.remove();});}
})();</script>"""
#: The checkout wizard: one question (a group of fields for the address) per page.
CHECKOUT_STEPS = (("What is your full name?", CHECKOUT_FIELDS[:1]),
                  ("What is your delivery address?", CHECKOUT_FIELDS[1:]))

Steps = tuple[tuple[str, tuple[FieldSpec, ...]], ...]


class GovForm(Builder):
    name = "govform"
    summary = "a government design-system service: summary lists, a finder with filters, one-question-per-page wizards"
    scheme = Scheme(
        routes={
            "home": "/", "listing": "/browse/{base}", "record": "/{base}/{slug}", "act": "/{base}/{slug}/send",
            "login": "/sign-in", "logout": "/sign-out", "help": "/help", "about": "/about-this-service",
            "account": "/your-account", "cart": "/basket", "cart_add": "/basket/add", "cart_remove": "/basket/remove",
            "checkout": "/basket/check-out", "order": "/orders/{id}/confirmation", "done": "/application-complete/{id}",
        },
        q="keywords", category="topic", sort="order", page="page",
        sort_values={"relevance": "relevance", "value_asc": "value-lowest", "value_desc": "value-highest",
                     "date_desc": "updated-newest", "rating_desc": "rating-highest"},
    )
    words = {
        "search": ("Search",),
        "start": ("Start now",),
        "continue": ("Continue", "Save and continue"),
        "send": ("Accept and send", "Submit", "Confirm and send"),
        "add_cart": ("Add to basket", "Add to your order"),
        "checkout": ("Continue to checkout", "Check out"),
        "place": ("Accept and place order", "Confirm order"),
        "accept": ("Accept additional cookies", "Accept analytics cookies"),
        "reject": ("Reject additional cookies", "Reject analytics cookies"),
        "close": ("No thanks", "Not now"),
        "login": ("Sign in",),
        "apply": ("Apply filters", "Update results"),
    }

    # --- chrome -----------------------------------------------------------------------------------------------
    def page(self, ctx: Ctx, title: str, body: str, status: int = 200) -> HTMLResponse:
        site = ctx.site
        user = ctx.user
        acct = (f'<a class="gv-header__link" href="{escape(self.url(site, "account"))}">{escape(user)}</a> '
                f'<a class="gv-header__link" href="{escape(self.url(site, "logout"))}">Sign out</a>') if user else \
            f'<a class="gv-header__link gv-sign-in" href="{escape(self.url(site, "login"))}">{escape(self.word(site, "login"))}</a>'
        basket = (f' <a class="gv-header__link" href="{escape(self.url(site, "cart"))}">Basket ({ctx.cart_count()})</a>'
                  if site.family.name == "shop" else "")
        banner = _cookie_banner(self, site) if ctx.show_banner else ""
        html = (
            f'<!DOCTYPE html><html lang="en" class="gv-template"><head><meta charset="utf-8"><title>{escape(title)} - '
            f'{escape(site.name)}</title><meta name="viewport" content="width=device-width, initial-scale=1">'
            f'<link rel="icon" href="data:,"><style>{_style(site)}</style></head><body class="gv-template__body">'
            f'<a href="#main-content" class="gv-skip-link">Skip to main content</a>{banner}'
            f'<header class="gv-header" role="banner"><div class="gv-width-container gv-header__container">'
            f'{_header(self, site)}<span class="gv-header__account">{acct}{basket}</span></div></header>'
            f'{_service_nav(self, site)}<div class="gv-width-container">{_phase(site)}'
            f'<main class="gv-main-wrapper" id="main-content" role="main">{body}</main></div>'
            f"{_footer(self, site)}{SCRIPT}</body></html>"
        )
        return HTMLResponse(html, status_code=status)

    # --- pages ------------------------------------------------------------------------------------------------
    def render_home(self, ctx: Ctx) -> str:
        site = ctx.site
        survey = ""
        if ctx.show_popup:
            survey = (f'<div class="gv-survey" role="dialog" aria-modal="true" aria-labelledby="gv-survey-title" '
                      f'style="position:fixed;inset:0;background:rgba(11,12,12,.6);display:flex;align-items:center;'
                      f'justify-content:center;z-index:50"><div class="gv-survey__box" style="background:#fff;'
                      f'padding:30px;max-width:480px"><h2 id="gv-survey-title">Help us improve {escape(site.name)}</h2>'
                      f'<p>{escape(site.words["popup"])}</p><button type="button" class="gv-button gv-survey__close">'
                      f'{escape(self.word(site, "close"))}</button></div></div>')
        if site.family.login_required and ctx.user is None:
            return (f'<h1 class="gv-heading-xl">{escape(site.name)}</h1><p class="gv-body-l">Sign in to see your '
                    f'{escape(site.family.plural)}.</p><a class="gv-button gv-button--start" href="'
                    f'{escape(self.url(site, "login"))}">{escape(self.word(site, "login"))} &#8594;</a>{survey}')
        return _home(self, site) + survey

    def render_listing(self, ctx: Ctx, items: list[Item], *, q: str, category: str, sort: str, page: int, total: int,
                       found: list[Item]) -> str:
        site, fam = ctx.site, ctx.site.family
        topics = _radio("topic", "gv-topic-all", "", "All topics", category == "") + "".join(
            _radio("topic", f"gv-topic-{slug}", slug, label, slug == category) for slug, label in site.category_labels.items())
        sorts = "".join(f'<option value="{self.scheme.sort_values[s]}"{" selected" if s == sort else ""}>'
                        f'{escape(SORT_NAMES[s].format(v=fam.value_label))}</option>' for s in SORT_NAMES)
        filters = (
            f'<form class="gv-filters" method="get" action="{escape(self.url_listing(site))}">'
            f'<div class="gv-form-group"><label class="gv-label" for="gv-keywords">Search {escape(fam.plural)}</label>'
            f'<input class="gv-input" id="gv-keywords" name="keywords" type="search" value="{escape(q)}"></div>'
            f'<div class="gv-form-group"><fieldset class="gv-fieldset"><legend class="gv-fieldset__legend">Topic</legend>'
            f'<div class="gv-radios gv-radios--small">{topics}</div></fieldset></div>'
            f'<div class="gv-form-group"><label class="gv-label" for="gv-order">Sort by</label>'
            f'<select class="gv-select" id="gv-order" name="order">{sorts}</select></div>'
            f'<button class="gv-button gv-button--secondary" type="submit">{escape(self.word(site, "apply"))}</button></form>')
        rows = "".join(_row(self, site, it.id) for it in items) or \
            '<li><p class="gv-body">There are no matching results.</p></li>'
        n = pages_of(total)
        head = site.category_labels.get(category, fam.plural.capitalize())
        crumbs = _crumbs([("Home", "/"), (fam.plural.capitalize(), self.url_listing(site))] if category else [("Home", "/")])
        return (
            f'{crumbs}<h1 class="gv-heading-xl">{escape(head)}</h1><div class="gv-grid-row">'
            f'<div class="gv-grid-column-one-third">{filters}</div><div class="gv-grid-column-two-thirds">'
            f'<p class="gv-result-count" role="status">{total} result{"s" if total != 1 else ""}'
            f'{" for “" + escape(q) + "”" if q else ""}</p><ol class="gv-document-list">{rows}</ol>'
            f"{self._pagination(site, q, category, sort, page, n)}</div></div>"
        )

    def _pagination(self, site: Site, q: str, category: str, sort: str, page: int, n: int) -> str:
        if n <= 1:
            return ""

        def link(p: int) -> str:
            return escape(self.url_listing(site, q, category, sort, p))

        nums = "".join(
            f'<li class="gv-pagination__item gv-pagination__item--current"><a class="gv-pagination__link" href="{link(p)}" '
            f'aria-label="Page {p}" aria-current="page">{p}</a></li>' if p == page else
            f'<li class="gv-pagination__item"><a class="gv-pagination__link" href="{link(p)}" aria-label="Page {p}">{p}</a></li>'
            for p in range(1, n + 1))
        prev = (f'<div class="gv-pagination__prev"><a href="{link(page - 1)}" rel="prev">Previous'
                f'<span class="gv-visually-hidden"> page</span></a></div>') if page > 1 else ""
        nxt = (f'<div class="gv-pagination__next"><a href="{link(page + 1)}" rel="next">Next'
               f'<span class="gv-visually-hidden"> page</span></a></div>') if page < n else ""
        return f'<nav class="gv-pagination" aria-label="Pagination">{prev}<ul class="gv-pagination__list">{nums}</ul>{nxt}</nav>'

    def render_record(self, ctx: Ctx, item: Item, values: dict[str, str], errors: dict[str, str]) -> str:
        site, fam = ctx.site, ctx.site.family
        here = self.url_record(site, item)
        query = dict(ctx.request.query_params)
        if fam.action is None:
            err = _error_summary({"qty": errors["qty"]}) if "qty" in errors else ""
            return _record(self, site, item.id) + (
                f'<form class="gv-add-basket" method="post" action="{escape(self.url(site, "cart_add"))}" novalidate>'
                f'{err}<input type="hidden" name="sku" value="{item.id}"><div class="gv-form-group">'
                f'<label class="gv-label gv-label--m" for="gv-qty">How many do you need?</label>'
                f'<div class="gv-hint">Enter a number from 1 to 10</div><input class="gv-input gv-input--width-2" '
                f'id="gv-qty" name="qty" inputmode="numeric" value="{escape(values.get("qty", "1"))}"></div>'
                f'<button class="gv-button" type="submit">{escape(self.word(site, "add_cart"))}</button></form>')
        steps: Steps = tuple((f.label, (f,)) for f in fam.action.fields)
        if not errors and not query.get("step", "").isdigit():  # the start page: what the item is, and Start now
            return _record(self, site, item.id) + (
                f'<h2 class="gv-heading-m">{escape(str(site.look["action_button"]))}</h2><p class="gv-body">It takes '
                f'{len(steps)} question{"s" if len(steps) != 1 else ""}.</p><a class="gv-button gv-button--start gv-start" '
                f'role="button" href="{escape(here + "?step=1")}">{escape(self.word(site, "start"))} &#8594;</a>')
        return self._wizard(site, here, self.url(site, "act", id=item.id), steps, values or query, errors,
                            self.word(site, "send"), item.title, here)

    def _wizard(self, site: Site, here: str, post: str, steps: Steps, vals: dict[str, str], errors: dict[str, str],
                send: str, caption: str, first_back: str) -> str:
        """One page of a one-question-per-page form: question `step` (GET to `here`, the answers so far in hidden
        inputs; each answer is checked when the next page is asked for) or, after the last, "Check your answers"
        (the POST to `post`). After a refused POST, the first question with an error."""
        fields = [f for _, group in steps for f in group]
        asked = vals.get("step", "")
        vals = {f.name: vals[f.name] for f in fields if vals.get(f.name)}
        if errors:
            step = next((i for i, (_, g) in enumerate(steps) if any(f.name in errors for f in g)), 0)
        else:
            step = min(int(asked) - 1, len(steps)) if asked.isdigit() and int(asked) > 0 else 0
            for i, (_, group) in enumerate(steps[:step]):
                errs = validate(group, vals)[1]
                if errs:
                    step, errors = i, errs
                    break
        cap = f'<span class="gv-caption-l">{escape(caption)}</span>'
        if step == len(steps):  # check your answers
            rows = "".join(
                f'<div class="gv-summary-list__row"><dt class="gv-summary-list__key">{escape(f.label)}</dt>'
                f'<dd class="gv-summary-list__value">{escape(_shown(f, vals.get(f.name, "")))}</dd>'
                f'<dd class="gv-summary-list__actions"><a class="gv-link" href="{escape(_step_url(here, i, vals))}">'
                f'Change<span class="gv-visually-hidden"> {escape(f.label.lower())}</span></a></dd></div>'
                for i, (_, group) in enumerate(steps) for f in group)
            return (f'{_back(_step_url(here, step - 1, vals))}{cap}<h1 class="gv-heading-l">Check your answers</h1>'
                    f'<dl class="gv-summary-list">{rows}</dl><form class="gv-check-answers" method="post" '
                    f'action="{escape(post)}" novalidate>{_hidden(fields, vals, ())}<button class="gv-button" '
                    f'type="submit">{escape(send)}</button></form>')
        heading, group = steps[step]
        back = _back(_step_url(here, step - 1, vals) if step else first_back)
        if len(group) == 1 and group[0].kind not in ("select", "checkbox"):
            f = group[0]
            body = _control(f, vals.get(f.name, ""), errors.get(f.name), heading=f'{cap}<h1 class="gv-label-wrapper">'
                            f'<label class="gv-label gv-label--l" for="gv-f-{f.name}">{escape(heading)}</label></h1>')
        else:
            inner = "".join(_control(f, vals.get(f.name, ""), errors.get(f.name)) for f in group)
            body = (f'<fieldset class="gv-fieldset"><legend class="gv-fieldset__legend gv-fieldset__legend--l">{cap}'
                    f'<h1 class="gv-fieldset__heading">{escape(heading)}</h1></legend>{inner}</fieldset>')
        return (f'{back}{_error_summary(errors)}<form class="gv-question" method="get" action="{escape(here)}" novalidate>'
                f'<input type="hidden" name="step" value="{step + 2}">{_hidden(fields, vals, group)}{body}'
                f'<button class="gv-button" type="submit">{escape(self.word(site, "continue"))}</button></form>')

    def render_login(self, ctx: Ctx, nxt: str, error: str) -> str:
        site = ctx.site
        err = _error_summary({"username": error}) if error else ""
        return (f'{err}<h1 class="gv-heading-l">{escape(self.word(site, "login"))}</h1><form class="gv-sign-in-form" '
                f'method="post" action="{escape(self.url(site, "login"))}" novalidate><input type="hidden" name="next" '
                f'value="{escape(nxt)}"><div class="gv-form-group"><label class="gv-label" for="gv-username">Username'
                f'</label><input class="gv-input gv-input--width-20" id="gv-username" name="username" autocomplete="username">'
                f'</div><div class="gv-form-group"><label class="gv-label" for="gv-password">Password</label><input '
                f'class="gv-input gv-input--width-20" id="gv-password" name="password" type="password" '
                f'autocomplete="current-password"></div><button class="gv-button" type="submit">Continue</button></form>')

    def render_cart(self, ctx: Ctx, added: Item | None) -> str:
        site = ctx.site
        note = (f'<div class="gv-notification-banner gv-notification-banner--success" role="alert"><div '
                f'class="gv-notification-banner__header"><h2 class="gv-notification-banner__title">Success</h2></div>'
                f'<p class="gv-notification-banner__heading">{escape(added.title)} has been added to your basket</p>'
                f"</div>") if added else ""
        lines, total = cart_lines(ctx)
        rows = "".join(
            f'<div class="gv-summary-list__row"><dt class="gv-summary-list__key">{escape(it.title)}</dt>'
            f'<dd class="gv-summary-list__value">{qty} at {escape(it.value_text)}</dd><dd '
            f'class="gv-summary-list__actions"><form method="post" action="{escape(self.url(site, "cart_remove"))}">'
            f'<input type="hidden" name="sku" value="{it.id}"><button class="gv-button gv-button--warning" '
            f'type="submit">Remove<span class="gv-visually-hidden"> {escape(it.title)}</span></button></form></dd></div>'
            for it, qty in lines)
        if not rows:
            return f'{note}<h1 class="gv-heading-l">Your basket</h1><p class="gv-body">Your basket is empty.</p>'
        return (f'{note}<h1 class="gv-heading-l">Your basket</h1><dl class="gv-summary-list">{rows}</dl>'
                f'<p class="gv-body">Total: <strong>${total:,.2f}</strong></p><a class="gv-button gv-basket-go" '
                f'role="button" href="{escape(self.url(site, "checkout"))}">{escape(self.word(site, "checkout"))}</a>')

    def render_checkout(self, ctx: Ctx, values: dict[str, str], errors: dict[str, str]) -> str:
        site = ctx.site
        if "cart" in errors:
            return (f'{_error_summary({"cart": errors["cart"]})}<p class="gv-body"><a class="gv-link" '
                    f'href="{escape(self.url(site, "cart"))}">Go to your basket</a></p>')
        here = self.url(site, "checkout")
        return self._wizard(site, here, here, CHECKOUT_STEPS, values or dict(ctx.request.query_params), errors,
                            self.word(site, "place"), "Checkout", self.url(site, "cart"))

    def render_done(self, ctx: Ctx, heading: str, ref: str, lines: list[tuple[str, str]]) -> str:
        rows = "".join(f'<div class="gv-summary-list__row"><dt class="gv-summary-list__key">{escape(k)}</dt>'
                       f'<dd class="gv-summary-list__value">{escape(v)}</dd></div>' for k, v in lines)
        return (f'<div class="gv-panel gv-panel--confirmation"><h1 class="gv-panel__title">{escape(heading)}</h1>'
                f'<div class="gv-panel__body">Your reference number<br><strong>{escape(ref)}</strong></div></div>'
                f'<h2 class="gv-heading-m">What you told us</h2><dl class="gv-summary-list">{rows}</dl>'
                f'<h2 class="gv-heading-m">What happens next</h2><p class="gv-body">We have sent you a confirmation. '
                f'<a class="gv-link" href="/">Return to the start</a></p>')

    # --- oracle -----------------------------------------------------------------------------------------------
    def dismiss(self, site: Site) -> list[pb.Action]:
        return ([click(".gv-survey .gv-survey__close")] if site.look["popup"] else []) + \
            ([click('.gv-cookie-banner button[value="accept"]'), click("#gv-cookies-accepted .gv-cookie-hide")]
             if site.look["cookie_banner"] else [])

    def log_in(self, site: Site, username: str, password: str) -> list[pb.Action]:
        return [click(".gv-header .gv-sign-in"), fill("#gv-username", username), fill("#gv-password", password),
                click(".gv-sign-in-form .gv-button")]

    def open_record(self, site: Site, item: Item) -> list[pb.Action]:
        return [fill(".gv-site-search input", item.title), click(".gv-site-search button")] + self.open_listed(site, item)

    def open_listed(self, site: Site, item: Item) -> list[pb.Action]:
        return [click(f".gv-document-list a[href={css_str(self.url_record(site, item))}]")]

    def browse(self, site: Site, *, category: str = "", sort: str = "relevance", page: int = 1) -> list[pb.Action]:
        acts = [click(f".gv-service-nav a[href={css_str(self.url_listing(site))}]")]
        if category or sort != "relevance":
            if category:
                acts.append(click(f"label[for={css_str('gv-topic-' + category)}]"))
            acts += [select("#gv-order", self.scheme.sort_values[sort]), click(".gv-filters .gv-button")]
        if page > 1:
            acts.append(click(f".gv-pagination__list a[href={css_str(self.url_listing(site, '', category, sort, page))}]"))
        return acts

    def submit_record(self, site: Site, item: Item, values: dict[str, object]) -> list[pb.Action]:
        spec = site.family.action
        assert spec is not None
        acts = [click(".gv-start")]
        for f in spec.fields:
            acts += _answer(f, values[f.name]) + [click(".gv-question .gv-button")]
        return acts + [click(".gv-check-answers .gv-button")]

    def add_to_cart(self, site: Site, item: Item, qty: int) -> list[pb.Action]:
        return [fill("#gv-qty", str(qty)), click(".gv-add-basket .gv-button")]

    def check_out(self, site: Site, address: dict[str, str]) -> list[pb.Action]:
        acts = [click(".gv-basket-go")]
        for _, group in CHECKOUT_STEPS:
            acts += [a for f in group for a in _answer(f, address[f.name])] + [click(".gv-question .gv-button")]
        return acts + [click(".gv-check-answers .gv-button")]


# --- form pieces ----------------------------------------------------------------------------------------------


def _shown(f: FieldSpec, value: str) -> str:
    if f.kind == "checkbox":
        return "Yes" if value == "on" else "No"
    return value


def _step_url(here: str, index: int, vals: dict[str, str]) -> str:
    return here + "?" + urlencode({"step": index + 1, **vals})


def _hidden(fields: list[FieldSpec], vals: dict[str, str], asked: tuple[FieldSpec, ...]) -> str:
    """The answers given so far, except the ones this page asks again."""
    return "".join(f'<input type="hidden" name="{f.name}" value="{escape(vals[f.name])}">'
                   for f in fields if f not in asked and vals.get(f.name))


def _back(href: str) -> str:
    return f'<a class="gv-back-link" href="{escape(href)}">Back</a>'


def _error_summary(errors: dict[str, str]) -> str:
    if not errors:
        return ""
    items = "".join(f'<li><a href="#gv-f-{escape(k)}">{escape(v)}</a></li>' for k, v in errors.items())
    return (f'<div class="gv-error-summary" role="alert" tabindex="-1"><h2 class="gv-error-summary__title">There is a '
            f'problem</h2><ul class="gv-list gv-error-summary__list">{items}</ul></div>')


def _radio(name: str, rid: str, value: str, label: str, checked: bool) -> str:
    return (f'<div class="gv-radios__item"><input class="gv-radios__input" id="{escape(rid)}" name="{name}" type="radio" '
            f'value="{escape(value)}"{" checked" if checked else ""}><label class="gv-label gv-radios__label" '
            f'for="{escape(rid)}">{escape(label)}</label></div>')


def _control(f: FieldSpec, value: str, error: str | None, heading: str = "") -> str:
    """One question's control, the GOV.UK way: label (or the page's heading), hint, error message, input."""
    err = (f'<p class="gv-error-message" id="gv-f-{f.name}-error"><span class="gv-visually-hidden">Error:</span> '
           f'{escape(error)}</p>') if error else ""
    group = "gv-form-group gv-form-group--error" if error else "gv-form-group"
    label = heading or f'<label class="gv-label" for="gv-f-{f.name}">{escape(f.label)}</label>'
    if f.kind == "select":
        radios = "".join(_radio(f.name, f"gv-f-{f.name}-{i}", o, o, o == value) for i, o in enumerate(f.options))
        return f'<div class="{group}" id="gv-f-{f.name}">{err}<div class="gv-radios">{radios}</div></div>'
    if f.kind == "checkbox":
        return (f'<div class="{group}">{err}<div class="gv-checkboxes__item"><input class="gv-checkboxes__input" '
                f'id="gv-f-{f.name}" name="{f.name}" type="checkbox" value="on"{" checked" if value == "on" else ""}>'
                f'<label class="gv-label gv-checkboxes__label" for="gv-f-{f.name}">{escape(f.label)}</label></div></div>')
    hint = ""
    if f.kind == "number" and f.min is not None and f.max is not None:
        hint = f'<div class="gv-hint">Enter a number from {f.min} to {f.max}</div>'
    elif f.min_len > 1 and f.kind == "textarea":
        hint = f'<div class="gv-hint">Use at least {f.min_len} characters</div>'
    if f.kind == "textarea":
        ctl = f'<textarea class="gv-textarea" id="gv-f-{f.name}" name="{f.name}" rows="5">{escape(value)}</textarea>'
    else:
        extra = {"number": ' inputmode="numeric" spellcheck="false"', "email": ' type="email" spellcheck="false"'}.get(f.kind, "")
        width = " gv-input--width-3" if f.kind == "number" else (" gv-input--width-10" if f.name == "zip" else "")
        ctl = f'<input class="gv-input{width}" id="gv-f-{f.name}" name="{f.name}" value="{escape(value)}"{extra}>'
    return f'<div class="{group}">{label}{hint}{err}{ctl}</div>'


def _answer(f: FieldSpec, value: object) -> list[pb.Action]:
    """The oracle's answer to one question."""
    if f.kind == "select":
        return [click(f"label[for={css_str(f'gv-f-{f.name}-{f.options.index(str(value))}')}]")]
    if f.kind == "checkbox":
        return [click(f"label[for={css_str(f'gv-f-{f.name}')}]")] if value else []
    return [fill(f"#gv-f-{f.name}", str(value))]


# --- cached fragments -----------------------------------------------------------------------------------------


@lru_cache(maxsize=8192)
def _style(site: Site) -> str:
    accent = ("#1d70b8", "#00703c", "#4c2c92", "#d4351c")[int(site.look["theme"]) % 4]
    return (
        "body{margin:0;font-family:Arial,sans-serif;color:#0b0c0c;font-size:19px;line-height:1.3}"
        ".gv-skip-link{position:absolute;left:-9999px}.gv-skip-link:focus{left:0}"
        ".gv-header{background:#0b0c0c;color:#fff;border-bottom:10px solid " + accent + "}"
        ".gv-header__container{display:flex;flex-wrap:wrap;gap:20px;align-items:center;padding:10px 0}"
        ".gv-header a,.gv-header__link{color:#fff}.gv-header__logotype{font-weight:700;font-size:24px;"
        "text-decoration:none}.gv-width-container{max-width:960px;margin:0 15px}"
        "@media(min-width:990px){.gv-width-container{margin:0 auto}}"
        ".gv-service-nav{border-bottom:1px solid #b1b4b6;background:#f3f2f1}.gv-service-nav ul{display:flex;gap:24px;"
        "list-style:none;margin:0 auto;max-width:960px;padding:12px 15px}.gv-phase-banner{padding:10px 0;"
        "border-bottom:1px solid #b1b4b6;font-size:16px}.gv-tag{background:" + accent + ";color:#fff;padding:2px 8px;"
        "font-weight:700;margin-right:8px}.gv-main-wrapper{display:block;padding:30px 0}.gv-grid-row{display:flex;"
        "flex-wrap:wrap;gap:30px}.gv-grid-column-one-third{flex:1 1 260px}.gv-grid-column-two-thirds{flex:2 1 400px}"
        ".gv-button{background:#00703c;color:#fff;border:0;box-shadow:0 2px 0 #002d18;padding:8px 12px;font-size:19px;"
        "cursor:pointer;display:inline-block;text-decoration:none;margin:0 0 22px}.gv-button--secondary{background:#f3f2f1;"
        "color:#0b0c0c;box-shadow:0 2px 0 #929191}.gv-button--warning{background:#d4351c;font-size:16px;margin:0}"
        ".gv-button--start{font-weight:700;font-size:24px}.gv-input,.gv-select,.gv-textarea{border:2px solid #0b0c0c;"
        "padding:5px;font-size:19px;width:100%;box-sizing:border-box;max-width:30em}.gv-input--width-2{width:5.4ex}"
        ".gv-input--width-3{width:7.2ex}.gv-input--width-10{width:23ex}.gv-form-group{margin-bottom:30px}"
        ".gv-form-group--error{border-left:5px solid #d4351c;padding-left:15px}.gv-label{display:block;margin-bottom:5px}"
        ".gv-label--l,.gv-heading-l{font-size:36px;font-weight:700}.gv-label--m,.gv-heading-m{font-size:24px;"
        "font-weight:700}.gv-heading-xl{font-size:48px;font-weight:700}.gv-caption-l{color:#505a5f;font-size:24px;"
        "display:block}.gv-hint{color:#505a5f;margin-bottom:15px}.gv-error-message{color:#d4351c;font-weight:700}"
        ".gv-error-summary{border:5px solid #d4351c;padding:20px;margin-bottom:30px}.gv-error-summary a{color:#d4351c}"
        ".gv-radios__item,.gv-checkboxes__item{position:relative;padding-left:40px;min-height:40px;margin-bottom:10px}"
        ".gv-radios__input,.gv-checkboxes__input{position:absolute;left:0;top:0;width:40px;height:40px;margin:0;"
        "opacity:0;cursor:pointer}.gv-radios__label,.gv-checkboxes__label{padding:8px 15px;cursor:pointer;"
        "display:inline-block}.gv-radios__label:before,.gv-checkboxes__label:before{content:'';position:absolute;left:0;"
        "top:0;width:34px;height:34px;border:2px solid #0b0c0c;background:#fff}.gv-radios__label:before{border-radius:50%}"
        ".gv-radios__input:checked+.gv-radios__label:before,.gv-checkboxes__input:checked+.gv-checkboxes__label:before{"
        "background:#0b0c0c;box-shadow:inset 0 0 0 8px #fff}.gv-fieldset{border:0;padding:0;margin:0}"
        ".gv-summary-list{display:table;width:100%;margin:0 0 30px}.gv-summary-list__row{display:table-row;"
        "border-bottom:1px solid #b1b4b6}.gv-summary-list__key,.gv-summary-list__value,.gv-summary-list__actions{"
        "display:table-cell;padding:10px 20px 10px 0;border-bottom:1px solid #b1b4b6;margin:0}.gv-summary-list__key{"
        "font-weight:700;width:30%}.gv-document-list{list-style:none;padding:0}.gv-document-list__item{"
        "border-top:1px solid #b1b4b6;padding:15px 0}.gv-document-list__item-metadata{list-style:none;padding:0;"
        "color:#505a5f;font-size:16px}.gv-document-list__item-metadata li{display:inline;margin-right:20px}"
        ".gv-breadcrumbs__list{list-style:none;padding:0;display:flex;gap:10px;font-size:16px}"
        ".gv-breadcrumbs__list-item+.gv-breadcrumbs__list-item:before{content:'\\203a  '}"
        ".gv-pagination{display:flex;gap:15px;align-items:center}.gv-pagination__list{display:flex;gap:5px;"
        "list-style:none;padding:0}.gv-pagination__link{padding:5px 10px;display:inline-block}"
        ".gv-pagination__item--current{background:" + accent + "}.gv-pagination__item--current a{color:#fff}"
        ".gv-panel--confirmation{background:#00703c;color:#fff;text-align:center;padding:35px}"
        ".gv-notification-banner--success{border:5px solid #00703c;margin-bottom:30px}.gv-notification-banner__header{"
        "background:#00703c;color:#fff;padding:2px 15px}.gv-notification-banner__heading{padding:0 15px;font-weight:700}"
        ".gv-cookie-banner{background:#f3f2f1;padding:20px 15px}.gv-footer{background:#f3f2f1;border-top:1px solid "
        "#b1b4b6;padding:25px 15px;font-size:16px}.gv-footer ul{list-style:none;padding:0;display:flex;gap:20px}"
        ".gv-visually-hidden{position:absolute!important;width:1px;height:1px;overflow:hidden;clip:rect(0 0 0 0)}"
        ".gv-back-link{display:inline-block;margin-bottom:15px;color:#0b0c0c}.gv-inset-text{border-left:10px solid "
        "#b1b4b6;padding:15px;margin:20px 0}[hidden]{display:none!important}"
    )


@lru_cache(maxsize=8192)
def _cookie_banner(b: GovForm, site: Site) -> str:
    done = "".join(
        f'<div class="gv-cookie-banner__message" id="gv-cookies-{v}ed" role="alert" hidden><p class="gv-body">You’ve '
        f'{v}ed additional cookies. You can change your cookie settings at any time.</p><button class="gv-button '
        f'gv-cookie-hide" type="button">Hide cookie message</button></div>' for v in ("accept", "reject"))
    return (f'<div class="gv-cookie-banner" role="region" aria-label="Cookies on {escape(site.name)}">'
            f'<div class="gv-cookie-banner__question"><h2 class="gv-heading-m">Cookies on {escape(site.name)}</h2>'
            f'<p class="gv-body">{escape(site.words["cookie"])} We’d also like to use analytics cookies so we can '
            f'understand how you use the service and make improvements.</p><div class="gv-button-group">'
            f'<button class="gv-button" type="button" value="accept">{escape(b.word(site, "accept"))}</button> '
            f'<button class="gv-button" type="button" value="reject">{escape(b.word(site, "reject"))}</button> '
            f'<a class="gv-link" href="{escape(b.url(site, "help"))}">View cookies</a></div></div>{done}</div>')


@lru_cache(maxsize=8192)
def _header(b: GovForm, site: Site) -> str:
    return (f'<a class="gv-header__logotype" href="/">&#9813; {escape(site.name)}</a>'
            f'<form class="gv-site-search" role="search" method="get" action="{escape(b.url_listing(site))}">'
            f'<label class="gv-visually-hidden" for="gv-site-search-input">{escape(site.words["search_placeholder"])}'
            f'</label><input class="gv-input" id="gv-site-search-input" name="keywords" type="search">'
            f'<button class="gv-button gv-site-search__submit" type="submit">{escape(b.word(site, "search"))}</button></form>')


@lru_cache(maxsize=8192)
def _service_nav(b: GovForm, site: Site) -> str:
    fam = site.family
    return (f'<nav class="gv-service-nav" aria-label="Menu"><ul><li><a class="gv-link" href="/">Home</a></li>'
            f'<li><a class="gv-link" href="{escape(b.url_listing(site))}">{escape(fam.plural.capitalize())}</a></li>'
            f'<li><a class="gv-link" href="{escape(b.url(site, "help"))}">Help</a></li></ul></nav>')


@lru_cache(maxsize=8192)
def _phase(site: Site) -> str:
    return ('<div class="gv-phase-banner"><strong class="gv-tag">Beta</strong>This is a new service – your '
            'feedback will help us to improve it.</div>')


@lru_cache(maxsize=8192)
def _footer(b: GovForm, site: Site) -> str:
    return (f'<footer class="gv-footer" role="contentinfo"><h2 class="gv-visually-hidden">Support links</h2><ul>'
            f'<li><a class="gv-link" href="{escape(b.url(site, "help"))}">Help</a></li><li><a class="gv-link" '
            f'href="{escape(b.url(site, "help"))}">Cookies</a></li><li><a class="gv-link" href="{escape(b.url(site, "about"))}">'
            f'About this service</a></li></ul><p>{escape(str(site.look["tagline"]))} &middot; &copy; {escape(site.name)}'
            f"</p></footer>")


def _crumbs(trail: list[tuple[str, str]]) -> str:
    items = "".join(f'<li class="gv-breadcrumbs__list-item"><a class="gv-breadcrumbs__link" href="{escape(href)}">'
                    f"{escape(label)}</a></li>" for label, href in trail)
    return f'<nav class="gv-breadcrumbs" aria-label="Breadcrumb"><ol class="gv-breadcrumbs__list">{items}</ol></nav>'


@lru_cache(maxsize=8192)
def _home(b: GovForm, site: Site) -> str:
    fam = site.family
    topics = "".join(f'<li><a class="gv-link" href="{escape(b.url_listing(site, "", slug))}">{escape(label)}</a></li>'
                     for slug, label in site.category_labels.items())
    top = sorted(site.items, key=lambda it: (-it.rating, it.id))[:5]
    popular = "".join(f'<li><a class="gv-link" href="{escape(b.url_record(site, it))}">{escape(it.title)}</a></li>'
                      for it in top)
    return (f'<h1 class="gv-heading-xl">{escape(site.name)}</h1><p class="gv-body-l">{escape(str(site.look["tagline"]))}'
            f'</p><div class="gv-grid-row"><div class="gv-grid-column-two-thirds"><h2 class="gv-heading-m">Browse by '
            f'topic</h2><ul class="gv-list">{topics}</ul><p class="gv-body"><a class="gv-link" '
            f'href="{escape(b.url_listing(site))}">See all {escape(fam.plural)}</a></p></div><div '
            f'class="gv-grid-column-one-third"><h2 class="gv-heading-m">Popular</h2><ul class="gv-list">{popular}</ul>'
            f"</div></div>")


@lru_cache(maxsize=131072)
def _row(b: GovForm, site: Site, item_id: str) -> str:
    it = site.by_id[item_id]
    fam = site.family
    return (f'<li class="gv-document-list__item"><a class="gv-link gv-document-list__item-title" '
            f'href="{escape(b.url_record(site, it))}">{escape(it.title)}</a><p class="gv-document-list__item-description">'
            f'{escape(fam.value_label)}: {escape(it.value_text)}</p><ul class="gv-document-list__item-metadata"><li>'
            f"{escape(fam.author_label)}: {escape(it.author)}</li><li>{escape(fam.date_label)}: "
            f"{escape(site.fmt_date(it.date))}</li></ul></li>")


@lru_cache(maxsize=65536)
def _record(b: GovForm, site: Site, item_id: str) -> str:
    it = site.by_id[item_id]
    fam = site.family
    cat = site.category_labels.get(it.category, it.category)
    facts = [(fam.value_label, it.value_text), (fam.author_label, it.author), ("Topic", cat),
             (fam.date_label, site.fmt_date(it.date)), ("Rating", f"{it.rating:.1f} out of 5"), *it.attrs]
    rows = "".join(f'<div class="gv-summary-list__row"><dt class="gv-summary-list__key">{escape(k)}</dt>'
                   f'<dd class="gv-summary-list__value">{escape(v)}</dd></div>' for k, v in facts)
    reviews = "".join(f'<div class="gv-inset-text">“{escape(str(r["text"]))}” – {escape(str(r["author"]))}, '
                      f'{r["stars"]} out of 5</div>' for r in it.reviews)
    return (_crumbs([("Home", "/"), (fam.plural.capitalize(), b.url_listing(site)), (cat, b.url_listing(site, "", it.category))])
            + f'<span class="gv-caption-xl">{escape(cat)}</span><h1 class="gv-heading-xl">{escape(it.title)}</h1>'
            f'<p class="gv-body-l">{escape(it.body)}</p><dl class="gv-summary-list">{rows}</dl>'
            + (f'<h2 class="gv-heading-m">What people said</h2>{reviews}' if reviews else ""))

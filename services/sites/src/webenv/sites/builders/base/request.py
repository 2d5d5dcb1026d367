"""One request: `Ctx` (the site, the session, its state, the form posted) and what every builder's handler shares:
the page kinds, sorts and page size, form validation, search, paging, the cart's lines, and the counters of accepted
and rejected submissions."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from prometheus_client import Counter
from starlette.requests import Request
from webenv.sites.families.base import FieldSpec, Item

if TYPE_CHECKING:
    from webenv.sites.catalog import Site
    from webenv.sites.state import State



TRANSACTIONS = Counter("webenv_sites_transactions_total", "State-changing form submissions accepted", ["family"])
FORM_ERRORS = Counter("webenv_sites_form_errors_total", "Form submissions rejected by validation", ["family"])

SORTS = ("relevance", "value_asc", "value_desc", "date_desc", "rating_desc")
PAGE_SIZE = 10
#: Page kinds a URL can mean (Meaning.kind). POST-only kinds: act, cart_add, cart_remove (and login/checkout posts).
PAGE_KINDS = ("home", "listing", "record", "act", "login", "logout", "help", "about", "account", "cart", "cart_add",
              "cart_remove", "checkout", "order", "done")
#: Kinds a login-required portal (bank, mail) shows only to a signed-in user.
PRIVATE = frozenset({"listing", "record", "act", "account", "cart", "cart_add", "cart_remove", "checkout", "order",
                     "done"})
#: The checkout form of every shop (the field names are the site state's shipping keys).
CHECKOUT_FIELDS = (
    FieldSpec("name", "Full name", "text", min_len=3),
    FieldSpec("street", "Street address", "text", min_len=3),
    FieldSpec("city", "City", "text", min_len=2),
    FieldSpec("zip", "ZIP code", "text", min_len=5),
)


class Ctx:
    """One request on one site: the site, its session id, that session's state for the site, the form posted."""

    def __init__(self, site: Site, session: str, st: State, request: Request, form: dict[str, str]) -> None:
        self.site, self.session, self.st, self.request, self.form = site, session, st, request, form

    @property
    def user(self) -> str | None:
        return self.st["auth"]["user"] if self.st["auth"]["logged_in"] else None

    def cart_count(self) -> int:
        return sum(x["qty"] for x in self.st.get("cart", {}).get("items", []))

    @property
    def show_banner(self) -> bool:
        return bool(self.site.look["cookie_banner"]) and "cookie_consent" not in self.request.cookies

    @property
    def show_popup(self) -> bool:
        return bool(self.site.look["popup"]) and "popup_dismissed" not in self.request.cookies


def validate(fields: tuple[FieldSpec, ...], form: dict[str, str]) -> tuple[dict[str, Any], dict[str, str]]:
    """Typed values and per-field error messages, as the server would check them."""
    values: dict[str, Any] = {}
    errors: dict[str, str] = {}
    for f in fields:
        raw = form.get(f.name, "").strip()
        if f.kind == "checkbox":
            values[f.name] = raw == "on"
            continue
        if f.required and not raw:
            errors[f.name] = f"{f.label} is required."
            continue
        if f.kind == "number":
            try:
                n = int(raw)
            except ValueError:
                errors[f.name] = f"{f.label} must be a whole number."
                continue
            if (f.min is not None and n < f.min) or (f.max is not None and n > f.max):
                errors[f.name] = f"{f.label} must be between {f.min} and {f.max}."
                continue
            values[f.name] = n
        elif f.kind == "select":
            if raw not in f.options:
                errors[f.name] = f"Choose a valid {f.label.lower()}."
                continue
            values[f.name] = raw
        else:
            if len(raw) < f.min_len:
                errors[f.name] = f"{f.label} must be at least {f.min_len} characters."
                continue
            if f.kind == "email" and ("@" not in raw or "." not in raw.split("@")[-1]):
                errors[f.name] = f"{f.label} must be a valid email address."
                continue
            if f.name == "zip" and not (raw.isdigit() and len(raw) == 5):
                errors[f.name] = "ZIP code must be 5 digits."
                continue
            values[f.name] = raw
    return values, errors


def search(site: Site, q: str, category: str, sort: str) -> list[Item]:
    """Items matching every word of q (title, author, body), exact title matches first."""
    items = site.items
    if category:
        items = [it for it in items if it.category == category]
    ql = q.strip().lower()
    if ql:
        words = ql.split()
        items = [it for it in items if all(w in f"{it.title} {it.author} {it.body}".lower() for w in words)]
    if sort == "value_asc":
        items = sorted(items, key=lambda it: (it.value, it.id))
    elif sort == "value_desc":
        items = sorted(items, key=lambda it: (-it.value, it.id))
    elif sort == "date_desc":
        items = sorted(items, key=lambda it: (it.date, it.id), reverse=True)
    elif sort == "rating_desc":
        items = sorted(items, key=lambda it: (-it.rating, it.id))
    elif ql:
        items = sorted(items, key=lambda it: (it.title.lower() != ql, it.id))
    return items


def pages_of(total: int) -> int:
    return max(1, -(-total // PAGE_SIZE))


def cart_lines(ctx: Ctx) -> tuple[list[tuple[Item, int]], float]:
    """The cart's (product, quantity) lines whose product the site still has, and their total price."""
    lines = [(ctx.site.by_id[x["sku"]], int(x["qty"])) for x in ctx.st["cart"]["items"] if x["sku"] in ctx.site.by_id]
    return lines, sum(it.value * qty for it, qty in lines)

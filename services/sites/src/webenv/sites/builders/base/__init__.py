"""The builder interface: what every site builder provides, and the request handling they all share.

A builder is one way a team builds a website: its URL scheme (`Scheme`), the markup of each page kind (the
`render_*` methods), and how a user performs each abstract step on it (the oracle methods: `dismiss`, `log_in`,
`open_record`, `browse`, `submit_record`, `add_to_cart`, `check_out`). What a request *does* is the same on every
builder and lives here, in `Builder.route`: the builder's scheme parses the URL into a `Meaning` (page kind +
parameters), the shared handler reads or changes the site state (state.py: carts, orders, records, logins) with
the same validation, and the builder renders the result. So any family's content renders through any builder,
and a rubric that grades the site state, the answer or the URL's meaning grades the same fact on every builder.

The package's layout is its map:

- `oracle`: the oracle's actions (click, fill, select, answer by CSS selector) and their URL and selector helpers;
- `urls`: what a URL means (`Meaning`) and a builder's URL scheme (`Scheme`), slugs;
- `request`: one request (`Ctx`) and what every handler shares: page kinds, sorts, page size, the checkout form,
  validation, search, paging, the cart's lines, the submission counters;
- `builder`: `Builder`, the interface and `Builder.route`, the one request handler;
- `controls`: native form controls as builders render them, and how the oracle fills them.

Builders import what they use from here (`from webenv.sites.builders.base import Builder, Ctx, ...`).
"""

from webenv.sites.builders.base.builder import Builder
from webenv.sites.builders.base.controls import fill_native, native_control, options_html
from webenv.sites.builders.base.oracle import answer, click, css_str, fill, select, with_query
from webenv.sites.builders.base.request import (
    CHECKOUT_FIELDS,
    FORM_ERRORS,
    PAGE_KINDS,
    PAGE_SIZE,
    PRIVATE,
    SORTS,
    TRANSACTIONS,
    Ctx,
    cart_lines,
    pages_of,
    search,
    validate,
)
from webenv.sites.builders.base.urls import Meaning, Scheme, site_slugs

__all__ = ["CHECKOUT_FIELDS", "FORM_ERRORS", "PAGE_KINDS", "PAGE_SIZE", "PRIVATE", "SORTS", "TRANSACTIONS", "Builder",
           "Ctx", "Meaning", "Scheme", "answer", "cart_lines", "click", "css_str", "fill", "fill_native",
           "native_control", "options_html", "pages_of", "search", "select", "site_slugs", "validate", "with_query"]

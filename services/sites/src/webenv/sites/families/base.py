"""What a site family is: its vocabulary, how it makes items, and the one transaction its detail pages offer.

Every family renders through the same page templates (web.py), so a family module only states data:
nouns, labels, categories, an item generator and an ActionSpec. Layout and wording variants come on top,
per site, from catalog.Site.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Item:
    """One listable thing on a site (product, thread, article, flight, job, recipe, transaction, message)."""

    id: str
    title: str
    category: str  # category slug
    value: float  # the numeric attribute lists sort by (price, replies, views, fare, salary...)
    value_text: str  # value as the site shows it
    author: str  # brand / author / airline / company / chef / merchant / sender
    date: str  # ISO date
    rating: float  # 1.0-5.0, shown by JavaScript
    attrs: tuple[tuple[str, str], ...]  # (label, value) rows of the "details" tab
    body: str
    reviews: tuple[dict[str, object], ...] = ()

    def attr(self, label: str) -> str:
        return dict(self.attrs)[label]


@dataclass(frozen=True)
class FieldSpec:
    """One input of a family's transaction form, with its server-side validation."""

    name: str
    label: str
    kind: str  # text | textarea | number | select | email | checkbox
    options: tuple[str, ...] = ()
    required: bool = True
    min: int | None = None
    max: int | None = None
    min_len: int = 0


@dataclass(frozen=True)
class ActionSpec:
    """The transaction a detail page offers; each submit appends one record to state[key]."""

    key: str  # state list, e.g. "bookings"
    item_field: str  # record field holding the item id, e.g. "flight"
    button: tuple[str, ...]  # submit button wording variants
    done_text: str  # confirmation heading
    fields: tuple[FieldSpec, ...]
    # values for a task: (rng, item) -> {field name: value}
    make_values: Callable[[random.Random, Item], dict[str, object]]
    # instruction phrase for one record: (values, item, noun) -> text
    describe: Callable[[dict[str, object], Item], str]


@dataclass(frozen=True)
class FamilySpec:
    """A kind of website."""

    name: str
    noun: str
    plural: str
    path: str  # list URL segment: /<path>, detail /<path>/<id>
    id_prefix: str
    value_label: str
    author_label: str
    date_label: str
    categories: tuple[str, ...]
    site_names: tuple[str, ...]  # templates with {a} adjective and {n} noun
    taglines: tuple[str, ...]
    make_item: Callable[[random.Random, int, str], Item]
    action: ActionSpec | None  # None for shop (cart + checkout is built in)
    login_required: bool = False
    value_sort_words: tuple[str, str] = ("lowest", "highest")
    extra_pages: tuple[str, ...] = field(default_factory=tuple)


def money(v: float) -> str:
    return f"${v:,.2f}"

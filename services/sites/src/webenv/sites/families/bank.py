"""Bank portal (login required): statement transactions; the transaction is disputing one."""

from __future__ import annotations

import random

from webenv.sites import content as c
from webenv.sites.families.base import ActionSpec, FamilySpec, FieldSpec, Item, money

MERCHANTS = {
    "Groceries": ("FreshMart", "Green Basket", "Corner Grocer", "Daily Foods"),
    "Travel": ("CityRail", "SkyHop Airlines", "Metro Cabs", "Harbor Ferries"),
    "Utilities": ("Bright Power", "AquaWorks", "NetStream", "Gas & Co"),
    "Dining": ("Luna Bistro", "Noodle Bar", "Cafe Aroma", "Pizza Forno"),
    "Shopping": ("Mega Mall", "BookNook", "Gadget Hub", "Style Loft"),
}
REASONS = ("Unrecognised charge", "Charged twice", "Wrong amount", "Item not received")


def make_item(rng: random.Random, idx: int, category: str) -> Item:
    merchant = rng.choice(MERCHANTS[category])
    amount = c.price(rng, 2, 900)
    ref = f"{rng.randrange(100000, 999999)}"
    return Item(
        id=f"X{1000 + idx}",
        title=f"{merchant} #{ref}",
        category=c.slugify(category),
        value=amount,
        value_text=money(amount),
        author=merchant,
        date=c.date(rng).isoformat(),
        rating=round(1 + 4 * rng.random(), 1),
        attrs=(("Reference", ref), ("Card", f"**** {rng.randrange(1000, 9999)}"),
               ("Status", rng.choice(("Posted", "Pending"))), ("Channel", rng.choice(("Online", "In store", "Contactless")))),
        body=f"Payment to {merchant}.",
    )


ACTION = ActionSpec(
    key="disputes",
    item_field="transaction",
    button=("Dispute transaction", "Report a problem", "Open dispute"),
    done_text="Dispute opened",
    fields=(FieldSpec("reason", "Reason", "select", options=REASONS),
            FieldSpec("note", "Details", "textarea", min_len=5)),
    make_values=lambda rng, it: {"reason": rng.choice(REASONS), "note": f"Case note {rng.randrange(1000, 9999)}"},
    describe=lambda v, it: f'dispute the transaction "{it.title}" for reason "{v["reason"]}" with the note "{v["note"]}"',
)

FAMILY = FamilySpec(
    name="bank", noun="transaction", plural="transactions", path="transactions", id_prefix="X",
    value_label="Amount", author_label="Merchant", date_label="Date",
    categories=tuple(MERCHANTS),
    site_names=("{a} {n} Bank", "{a} {n} Credit Union", "{a} {n} Savings", "First {a} {n} Bank"),
    taglines=("Banking made simple.", "Your money, secured.", "Online banking, any time."),
    make_item=make_item, action=ACTION, login_required=True, value_sort_words=("smallest", "largest"),
)

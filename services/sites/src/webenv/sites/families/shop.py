"""Online shop: products with prices, brands and specs; cart and checkout are built into web.py."""

from __future__ import annotations

import random

from webenv.sites import content as c
from webenv.sites.families.base import FamilySpec, Item, money

KINDS = {
    "Electronics": ("Headphones", "Charger", "Speaker", "Keyboard", "Webcam", "Monitor", "Router"),
    "Home & Garden": ("Lamp", "Planter", "Kettle", "Rug", "Shelf", "Blender", "Hose"),
    "Sports": ("Yoga Mat", "Water Bottle", "Helmet", "Backpack", "Tent", "Racket", "Jump Rope"),
    "Books": ("Cookbook", "Novel", "Atlas", "Field Guide", "Notebook", "Biography", "Anthology"),
    "Toys": ("Puzzle", "Kite", "Robot Kit", "Board Game", "Plush Bear", "Train Set", "Yo-Yo"),
    "Fashion": ("Scarf", "Sneakers", "Jacket", "Watch", "Sunglasses", "Belt", "Beanie"),
}
COLORS = ("Black", "White", "Red", "Blue", "Green", "Grey", "Orange", "Teal")


def make_item(rng: random.Random, idx: int, category: str) -> Item:
    kind = rng.choice(KINDS[category])
    brand = c.brand(rng)
    title = f"{brand} {rng.choice(c.ADJECTIVES)} {kind}"
    p = c.price(rng)
    return Item(
        id=f"P{1000 + idx}",
        title=title,
        category=c.slugify(category),
        value=p,
        value_text=money(p),
        author=brand,
        date=c.date(rng).isoformat(),
        rating=round(1 + 4 * rng.random(), 1),
        attrs=(
            ("Color", rng.choice(COLORS)),
            ("Weight", f"{rng.randrange(100, 5000)} g"),
            ("Warranty", f"{rng.choice((1, 2, 3, 5))} years"),
            ("In stock", str(rng.randrange(0, 60))),
        ),
        body=c.sentence(rng, f"The {title}"),
        reviews=tuple(c.reviews(rng, rng.randrange(1, 5))),
    )


FAMILY = FamilySpec(
    name="shop",
    noun="product",
    plural="products",
    path="products",
    id_prefix="P",
    value_label="Price",
    author_label="Brand",
    date_label="Listed",
    categories=tuple(KINDS),
    site_names=("{a} {n} Store", "{a} {n} Market", "The {a} {n} Shop", "{a}{n} Outlet"),
    taglines=("Everything you need, delivered.", "Quality goods at fair prices.", "Shop smarter today."),
    make_item=make_item,
    action=None,
    value_sort_words=("cheapest", "most expensive"),
)

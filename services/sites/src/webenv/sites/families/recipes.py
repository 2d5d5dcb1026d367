"""Recipe site: recipes with cooking times; the transaction is rating a recipe."""

from __future__ import annotations

import random

from webenv.sites import content as c
from webenv.sites.families.base import ActionSpec, FamilySpec, FieldSpec, Item

DISHES = {
    "Breakfast": ("Pancakes", "Granola", "Omelette", "Porridge", "Shakshuka"),
    "Soups": ("Lentil Soup", "Minestrone", "Miso Soup", "Gazpacho", "Chowder"),
    "Mains": ("Risotto", "Curry", "Stir Fry", "Lasagne", "Tacos"),
    "Desserts": ("Brownies", "Tiramisu", "Apple Pie", "Panna Cotta", "Cheesecake"),
    "Vegan": ("Buddha Bowl", "Falafel", "Chili", "Tofu Scramble", "Dal"),
}
INGREDIENTS = ("garlic", "lemon", "basil", "ginger", "paprika", "coconut", "honey", "thyme", "chickpeas", "spinach")


def make_item(rng: random.Random, idx: int, category: str) -> Item:
    minutes = rng.randrange(10, 180)
    ing = rng.sample(INGREDIENTS, 2)
    return Item(
        id=f"R{1000 + idx}",
        title=f"{ing[0].capitalize()} {rng.choice(DISHES[category])} {rng.choice(('Deluxe', 'Classic', 'Easy', 'Family', 'Quick'))}",
        category=c.slugify(category),
        value=minutes,
        value_text=f"{minutes} min",
        author=c.person(rng),
        date=c.date(rng).isoformat(),
        rating=round(1 + 4 * rng.random(), 1),
        attrs=(("Servings", str(rng.randrange(1, 9))), ("Calories", f"{rng.randrange(120, 950)} kcal"),
               ("Main ingredient", ing[1]), ("Level", rng.choice(("Easy", "Medium", "Advanced")))),
        body=c.sentence(rng, "This recipe"),
        reviews=tuple(c.reviews(rng, rng.randrange(1, 5))),
    )


ACTION = ActionSpec(
    key="ratings",
    item_field="recipe",
    button=("Rate recipe", "Save rating", "Submit review"),
    done_text="Thanks for rating",
    fields=(FieldSpec("stars", "Stars", "select", options=("1", "2", "3", "4", "5")),
            FieldSpec("comment", "Comment", "textarea", min_len=5), FieldSpec("save", "Save to my cookbook", "checkbox", required=False)),
    make_values=lambda rng, it: {"stars": str(rng.randrange(1, 6)), "comment": f"{rng.choice(c.REVIEW_PHRASES)} #{rng.randrange(10, 99)}",
                                 "save": rng.random() < 0.5},
    describe=lambda v, it: (f'rate "{it.title}" {v["stars"]} stars with the comment "{v["comment"]}"'
                            + (" and save it to your cookbook" if v["save"] else "")),
)

FAMILY = FamilySpec(
    name="recipes", noun="recipe", plural="recipes", path="recipes", id_prefix="R",
    value_label="Time", author_label="Chef", date_label="Published",
    categories=tuple(DISHES),
    site_names=("{a} {n} Kitchen", "{a}{n} Eats", "Cook{a}{n}", "The {a} {n} Table"),
    taglines=("Cook something good tonight.", "Recipes tested at home.", "Simple food, done well."),
    make_item=make_item, action=ACTION, value_sort_words=("quickest", "slowest"),
)

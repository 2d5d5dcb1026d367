"""Wiki / documentation: articles with word counts; the transaction is suggesting an edit."""

from __future__ import annotations

import random

from webenv.sites import content as c
from webenv.sites.families.base import ActionSpec, FamilySpec, FieldSpec, Item

SUBJECTS = {
    "Getting started": ("Installation", "First steps", "Quick tour", "Configuration basics"),
    "Guides": ("Backups", "Migrations", "Scaling out", "Monitoring"),
    "Reference": ("Command line", "Settings file", "Error codes", "HTTP API"),
    "History": ("Origins", "Release timeline", "Founders", "Naming"),
    "Geography": ("Rivers", "Mountains", "Islands", "Climate"),
}
SECTIONS = ("Introduction", "Details", "Examples", "See also")


def make_item(rng: random.Random, idx: int, category: str) -> Item:
    title = f"{rng.choice(SUBJECTS[category])} of {rng.choice(c.NOUNS)} {rng.choice(('Core', 'Lab', 'Project', 'Valley'))}"
    words = rng.randrange(200, 9000)
    return Item(
        id=f"A{1000 + idx}",
        title=title,
        category=c.slugify(category),
        value=words,
        value_text=f"{words} words",
        author=c.person(rng),
        date=c.date(rng).isoformat(),
        rating=round(1 + 4 * rng.random(), 1),
        attrs=(("Version", f"{rng.randrange(1, 9)}.{rng.randrange(0, 20)}"), ("Editors", str(rng.randrange(1, 80))),
               ("License", rng.choice(("CC BY", "CC BY-SA", "MIT", "Public domain")))),
        body=c.sentence(rng, f"{title}"),
        reviews=tuple(c.reviews(rng, rng.randrange(1, 4))),
    )


ACTION = ActionSpec(
    key="edits",
    item_field="article",
    button=("Suggest edit", "Submit suggestion", "Propose change"),
    done_text="Thank you, your suggestion was recorded",
    fields=(FieldSpec("section", "Section", "select", options=SECTIONS),
            FieldSpec("text", "Suggested text", "textarea", min_len=10)),
    make_values=lambda rng, it: {"section": rng.choice(SECTIONS),
                                 "text": f"Please clarify the {rng.choice(c.LOREM)} part (note {rng.randrange(10, 99)})"},
    describe=lambda v, it: f'suggest the edit "{v["text"]}" for the {v["section"]} section of "{it.title}"',
)

FAMILY = FamilySpec(
    name="wiki", noun="article", plural="articles", path="wiki", id_prefix="A",
    value_label="Length", author_label="Last editor", date_label="Updated",
    categories=tuple(SUBJECTS),
    site_names=("{a}{n}pedia", "{a} {n} Docs", "{n} {a} Wiki", "The {a} {n} Handbook"),
    taglines=("The free knowledge base.", "Documentation you can trust.", "Written by the community."),
    make_item=make_item, action=ACTION, value_sort_words=("shortest", "longest"),
)

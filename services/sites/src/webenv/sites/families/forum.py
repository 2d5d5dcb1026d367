"""Discussion forum: threads with reply counts; the transaction is posting a reply."""

from __future__ import annotations

import random

from webenv.sites import content as c
from webenv.sites.families.base import ActionSpec, FamilySpec, FieldSpec, Item

TOPICS = {
    "General": ("Welcome thread", "Favourite tools", "Weekend plans", "Introduce yourself"),
    "Help": ("Cannot log in", "Slow downloads", "Reset my settings", "Error on startup"),
    "Hardware": ("Best budget laptop", "Keyboard switches", "Fan noise", "Second monitor"),
    "Gaming": ("Speedrun tips", "Co-op partners", "Retro consoles", "Patch notes"),
    "Off-topic": ("Coffee or tea", "Book club", "Travel stories", "Pet photos"),
}


def make_item(rng: random.Random, idx: int, category: str) -> Item:
    title = f"{rng.choice(TOPICS[category])}: {rng.choice(c.ADJECTIVES).lower()} {rng.choice(c.NOUNS).lower()}"
    replies = rng.randrange(0, 400)
    author = c.person(rng)
    return Item(
        id=f"T{1000 + idx}",
        title=title,
        category=c.slugify(category),
        value=replies,
        value_text=str(replies),
        author=author,
        date=c.date(rng).isoformat(),
        rating=round(1 + 4 * rng.random(), 1),
        attrs=(("Views", str(replies * rng.randrange(3, 40))), ("Status", rng.choice(("Open", "Solved", "Pinned"))),
               ("Tag", rng.choice(("question", "discussion", "guide", "news")))),
        body=f"{author} writes: {c.sentence(rng, 'This topic')}",
        reviews=tuple(c.reviews(rng, rng.randrange(1, 5))),
    )


def _values(rng: random.Random, item: Item) -> dict[str, object]:
    return {"body": f"Thanks, {rng.choice(c.REVIEW_PHRASES).lower()[:-1]} (ref {rng.randrange(100, 999)})",
            "notify": rng.random() < 0.5}


ACTION = ActionSpec(
    key="posts",
    item_field="thread",
    button=("Post reply", "Reply", "Send reply"),
    done_text="Your reply was posted",
    fields=(FieldSpec("body", "Your reply", "textarea", min_len=10),
            FieldSpec("notify", "Email me about new replies", "checkbox", required=False)),
    make_values=_values,
    describe=lambda v, it: (f'reply "{v["body"]}" to the thread "{it.title}"'
                            + (" and subscribe to notifications" if v["notify"] else " without subscribing")),
)

FAMILY = FamilySpec(
    name="forum", noun="thread", plural="threads", path="threads", id_prefix="T",
    value_label="Replies", author_label="Started by", date_label="Started",
    categories=tuple(TOPICS),
    site_names=("{a} {n} Forum", "{a}{n} Community", "{n} {a} Talk", "{a} {n} Boards"),
    taglines=("Ask, answer, share.", "A friendly place to talk.", "Conversations that matter."),
    make_item=make_item, action=ACTION, value_sort_words=("fewest replies", "most replies"),
)

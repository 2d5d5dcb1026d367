"""Webmail (login required): messages in folders; the transaction is replying to a message."""

from __future__ import annotations

import random

from webenv.sites import content as c
from webenv.sites.families.base import ActionSpec, FamilySpec, FieldSpec, Item

FOLDERS = {
    "Inbox": ("Meeting notes", "Invoice attached", "Lunch on Friday?", "Project update"),
    "Work": ("Quarterly plan", "Design review", "Budget draft", "Hiring sync"),
    "Family": ("Holiday photos", "Birthday plans", "Recipe from grandma", "Moving day"),
    "Newsletters": ("Weekly digest", "New features", "Your summary", "Event invitation"),
    "Receipts": ("Order shipped", "Payment received", "Your ticket", "Subscription renewed"),
}


def make_item(rng: random.Random, idx: int, category: str) -> Item:
    sender = c.person(rng)
    size = rng.randrange(2, 900)
    return Item(
        id=f"M{1000 + idx}",
        title=f"{rng.choice(FOLDERS[category])} ({rng.choice(c.NOUNS)} {rng.randrange(10, 99)})",
        category=c.slugify(category),
        value=size,
        value_text=f"{size} KB",
        author=sender,
        date=c.date(rng).isoformat(),
        rating=round(1 + 4 * rng.random(), 1),
        attrs=(("From", c.email_for(sender)), ("Attachments", str(rng.choice((0, 0, 1, 2, 3)))),
               ("Priority", rng.choice(("Normal", "High", "Low")))),
        body=f"Hi, {c.sentence(rng, 'The plan')} Best, {sender.split()[0]}",
    )


ACTION = ActionSpec(
    key="sent",
    item_field="in_reply_to",
    button=("Send reply", "Reply", "Send"),
    done_text="Message sent",
    fields=(FieldSpec("to", "To", "email"), FieldSpec("body", "Message", "textarea", min_len=5)),
    make_values=lambda rng, it: {"to": it.attr("From"), "body": f"Got it, thanks! Ref {rng.randrange(100, 999)}"},
    describe=lambda v, it: f'reply to the message "{it.title}" from {v["to"]} with the text "{v["body"]}"',
)

FAMILY = FamilySpec(
    name="mail", noun="message", plural="messages", path="mail", id_prefix="M",
    value_label="Size", author_label="Sender", date_label="Received",
    categories=tuple(FOLDERS),
    site_names=("{a} {n} Mail", "{a}{n}Post", "{a} {n} Webmail", "Inbox{a}{n}"),
    taglines=("Email without the clutter.", "Private, fast webmail.", "Your inbox, organised."),
    make_item=make_item, action=ACTION, login_required=True, value_sort_words=("smallest", "largest"),
)

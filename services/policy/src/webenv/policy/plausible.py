"""Plausible text for form fields, chosen from the field's label so forms get past validation."""

from __future__ import annotations

import random

FIRST = ["Alex", "Maria", "Sam", "Priya", "Jonas", "Chen", "Fatima", "Liam", "Ana", "Kenji"]
LAST = ["Morgan", "Silva", "Novak", "Okafor", "Larsen", "Tanaka", "Haddad", "Fischer"]
WORDS = ["laptop", "blue", "shoes", "coffee", "chair", "garden", "travel", "camera", "book", "lamp", "pasta",
         "headphones", "jacket", "paris", "python", "budget", "weekend", "recipe", "pizza", "tent"]
CITIES = ["Lisbon", "Berlin", "Osaka", "Toronto", "Nairobi", "Austin", "Lyon", "Porto"]
STREETS = ["Main St", "Oak Avenue", "Harbour Road", "Elm Street", "Park Lane"]


def plausible_text(label: str, rng: random.Random) -> str:
    """A value that fits a field called `label` (email for email fields, a query for search...)."""
    key = label.lower()
    first, last = rng.choice(FIRST), rng.choice(LAST)
    if "mail" in key:
        return f"{first.lower()}.{last.lower()}@example.com"
    if "password" in key or "passwd" in key:
        return f"Pw-{rng.randint(1000, 9999)}-{rng.choice(WORDS)}"
    if "user" in key or "login" in key:
        return f"{first.lower()}{rng.randint(1, 99)}"
    if "first" in key:
        return first
    if "last" in key or "surname" in key:
        return last
    if "name" in key:
        return f"{first} {last}"
    if "phone" in key or "tel" in key or "mobile" in key:
        return f"+1 555 {rng.randint(100, 999)} {rng.randint(1000, 9999)}"
    if "zip" in key or "postal" in key or "postcode" in key:
        return f"{rng.randint(10000, 99999)}"
    if "city" in key or "destination" in key or "from" in key or key.strip() == "to":
        return rng.choice(CITIES)
    if "address" in key or "street" in key:
        return f"{rng.randint(1, 250)} {rng.choice(STREETS)}"
    if "date" in key or "day" in key:
        return f"2026-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}"
    if any(w in key for w in ("qty", "quantity", "number", "amount", "age", "guests", "count", "price")):
        return str(rng.randint(1, 5))
    if "card" in key:
        return "4111 1111 1111 1111"
    if any(w in key for w in ("comment", "message", "review", "body", "description", "note")):
        return f"{rng.choice(WORDS).capitalize()} was great, would {rng.choice(WORDS)} again."
    if "title" in key or "subject" in key:
        return f"{rng.choice(WORDS).capitalize()} {rng.choice(WORDS)}"
    # Search boxes and anything unnamed: one or two topical words.
    return " ".join(rng.sample(WORDS, rng.randint(1, 2)))

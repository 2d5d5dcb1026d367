"""Deterministic content generators: every value comes from a `random.Random` seeded by a stable hash.

Python's `random.Random(int)` sequence for `random()`, `randrange`, `choice`, `sample` and `shuffle`
is stable across runs and CPython versions, and `hashlib` (not `hash()`, which is salted per process)
turns string keys into seeds, so the same (family, number, seed) always yields the same site.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import random

FIRST_NAMES = (
    "Ada", "Bruno", "Chiara", "Dmitri", "Elena", "Farid", "Greta", "Hiro", "Ines", "Jonas", "Kemal", "Lena",
    "Mateo", "Nadia", "Omar", "Priya", "Quentin", "Rosa", "Sven", "Tariq", "Uma", "Viktor", "Wen", "Ximena",
    "Yusuf", "Zoe", "Amara", "Bilal", "Carmen", "Diego", "Esther", "Felix", "Gita", "Hugo", "Ingrid", "Jamal",
)
LAST_NAMES = (
    "Okafor", "Lindqvist", "Moreau", "Tanaka", "Silva", "Novak", "Haddad", "Kowalski", "Rossi", "Fischer",
    "Nguyen", "Petrov", "Garcia", "Sato", "Mbeki", "Jansen", "Costa", "Ivanova", "Brennan", "Duarte",
    "Yilmaz", "Larsen", "Chopra", "Weber", "Abara", "Klein", "Romero", "Hale", "Varga", "Quinn",
)
CITIES = (
    "Lisbon", "Oslo", "Kyoto", "Austin", "Nairobi", "Porto", "Lyon", "Tallinn", "Hobart", "Quebec", "Seville",
    "Bergen", "Krakow", "Valencia", "Dublin", "Zurich", "Osaka", "Denver", "Cusco", "Tromso", "Gdansk", "Bilbao",
)
STREETS = ("Maple", "Harbor", "Cedar", "Willow", "Station", "Mill", "Orchard", "Bridge", "Castle", "Garden")
STREET_KINDS = ("Street", "Road", "Avenue", "Lane", "Way")
ADJECTIVES = (
    "Swift", "Quiet", "Bright", "Golden", "Rustic", "Urban", "Silver", "Bold", "Crisp", "Lunar", "Coastal",
    "Nordic", "Vivid", "Humble", "Noble", "Amber", "Cobalt", "Velvet", "Prime", "Classic", "Wild", "Misty",
)
NOUNS = (
    "Harbor", "Summit", "Meadow", "Forge", "Atlas", "Orbit", "Canyon", "Pine", "Beacon", "Vertex", "Prairie",
    "Tide", "Ember", "Grove", "Delta", "Echo", "Falcon", "Lantern", "Quarry", "Ridge", "Willow", "Zephyr",
)
LOREM = (
    "reliable", "compact", "everyday", "durable", "lightweight", "practical", "modern", "handy", "versatile",
    "popular", "affordable", "well reviewed", "sturdy", "elegant", "simple", "thoughtful", "balanced",
)
REVIEW_PHRASES = (
    "Works exactly as described.", "Would recommend to a friend.", "A bit pricey but worth it.",
    "Arrived quickly and well packed.", "Not what I expected, sadly.", "Great value for the money.",
    "Solid quality overall.", "I use it every day now.", "The instructions could be clearer.",
    "Five stars from me.", "Decent, nothing special.", "Exceeded my expectations.",
)


def stable_int(*parts: object) -> int:
    """A 64-bit integer from a stable hash of the parts (same on every run and machine)."""
    key = "|".join(str(p) for p in parts).encode()
    return int.from_bytes(hashlib.sha256(key).digest()[:8], "big")


def rng_for(*parts: object) -> random.Random:
    """A private, deterministic random generator for one purpose (a site, an item, a task)."""
    return random.Random(stable_int(*parts))


def person(rng: random.Random) -> str:
    return f"{rng.choice(FIRST_NAMES)} {rng.choice(LAST_NAMES)}"


def username(name: str, rng: random.Random) -> str:
    first, last = name.lower().split(" ", 1)
    return f"{first[0]}{last}{rng.randrange(10, 99)}"


def password(rng: random.Random) -> str:
    return f"{rng.choice(NOUNS).lower()}-{rng.randrange(1000, 9999)}"


def address(rng: random.Random) -> dict[str, str]:
    """A shipping address (name, street, city, zip)."""
    return {
        "name": person(rng),
        "street": f"{rng.randrange(1, 240)} {rng.choice(STREETS)} {rng.choice(STREET_KINDS)}",
        "city": rng.choice(CITIES),
        "zip": f"{rng.randrange(10000, 99999)}",
    }


def email_for(name: str, domain: str = "mail.test") -> str:
    return name.lower().replace(" ", ".") + "@" + domain


def price(rng: random.Random, low: float = 3.0, high: float = 400.0) -> float:
    """A shop-like price ending in .99, .49 or .00."""
    whole = int(low + (high - low) * rng.random() ** 2)
    return whole + rng.choice((0.99, 0.49, 0.0, 0.95))


def date(rng: random.Random, start: dt.date = dt.date(2026, 1, 1), days: int = 300) -> dt.date:
    return start + dt.timedelta(days=rng.randrange(days))


def sentence(rng: random.Random, subject: str) -> str:
    a, b = rng.sample(LOREM, 2)
    return f"{subject} is a {a} and {b} choice."


def reviews(rng: random.Random, n: int) -> list[dict[str, object]]:
    return [
        {"author": person(rng), "stars": rng.randrange(1, 6), "text": rng.choice(REVIEW_PHRASES)}
        for _ in range(n)
    ]


def brand(rng: random.Random) -> str:
    return f"{rng.choice(ADJECTIVES)}{rng.choice(NOUNS).lower()}"


def slugify(text: str) -> str:
    out = "".join(ch.lower() if ch.isalnum() else "-" for ch in text)
    while "--" in out:
        out = out.replace("--", "-")
    return out.strip("-")


DATE_FORMATS = ("%Y-%m-%d", "%d %b %Y", "%b %d, %Y")


def fmt_date(d: dt.date, style: int) -> str:
    """Dates look different per site layout; tasks expect the site's own format."""
    return d.strftime(DATE_FORMATS[style % len(DATE_FORMATS)])

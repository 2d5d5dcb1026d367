"""Travel booking: flights with fares; the transaction is booking seats for a passenger."""

from __future__ import annotations

import random

from webenv.sites import content as c
from webenv.sites.families.base import ActionSpec, FamilySpec, FieldSpec, Item, money

REGIONS = {
    "Europe": ("Lisbon", "Oslo", "Lyon", "Krakow", "Dublin", "Zurich"),
    "Asia": ("Kyoto", "Osaka", "Seoul", "Hanoi", "Manila", "Taipei"),
    "Americas": ("Austin", "Denver", "Quebec", "Cusco", "Lima", "Bogota"),
    "Africa": ("Nairobi", "Accra", "Dakar", "Tunis", "Kigali", "Windhoek"),
    "Oceania": ("Hobart", "Perth", "Auckland", "Suva", "Cairns", "Nelson"),
}
AIRLINES = ("Aurora Air", "BlueJet", "Cirrus Lines", "Delta Wing", "Equinox", "Falcon Express", "Gale Air")
CABINS = ("Economy", "Premium", "Business")


def make_item(rng: random.Random, idx: int, category: str) -> Item:
    origin = rng.choice(c.CITIES)
    dest = rng.choice([x for x in REGIONS[category] if x != origin])
    fare = c.price(rng, 49, 1400)
    airline = rng.choice(AIRLINES)
    return Item(
        id=f"F{1000 + idx}",
        title=f"{origin} to {dest} ({airline} {rng.randrange(100, 999)})",
        category=c.slugify(category),
        value=fare,
        value_text=money(fare),
        author=airline,
        date=c.date(rng).isoformat(),
        rating=round(1 + 4 * rng.random(), 1),
        attrs=(("Departure", f"{rng.randrange(5, 23):02d}:{rng.choice((0, 15, 30, 45)):02d}"),
               ("Duration", f"{rng.randrange(1, 15)}h {rng.randrange(0, 60):02d}m"),
               ("Stops", str(rng.choice((0, 0, 1, 2)))), ("Baggage", f"{rng.choice((0, 1, 2))} bags")),
        body=c.sentence(rng, "This flight"),
        reviews=tuple(c.reviews(rng, rng.randrange(1, 4))),
    )


ACTION = ActionSpec(
    key="bookings",
    item_field="flight",
    button=("Book now", "Reserve seats", "Continue to booking"),
    done_text="Booking confirmed",
    fields=(FieldSpec("passenger", "Passenger name", "text", min_len=3),
            FieldSpec("seats", "Seats", "number", min=1, max=9),
            FieldSpec("cabin", "Cabin", "select", options=CABINS)),
    make_values=lambda rng, it: {"passenger": c.person(rng), "seats": rng.randrange(1, 5), "cabin": rng.choice(CABINS)},
    describe=lambda v, it: (f'book {v["seats"]} {v["cabin"]} seat{"s" if v["seats"] != 1 else ""} on flight '
                            f'"{it.title}" for passenger {v["passenger"]}'),
)

FAMILY = FamilySpec(
    name="travel", noun="flight", plural="flights", path="flights", id_prefix="F",
    value_label="Fare", author_label="Airline", date_label="Date",
    categories=tuple(REGIONS),
    site_names=("{a} {n} Trips", "Fly{a}{n}", "{n} {a} Travel", "{a} {n} Voyages"),
    taglines=("Find your next trip.", "Low fares, everywhere.", "Book with confidence."),
    make_item=make_item, action=ACTION, value_sort_words=("cheapest", "most expensive"),
)

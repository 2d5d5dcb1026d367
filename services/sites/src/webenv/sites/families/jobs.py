"""Job board: postings with salaries; the transaction is applying."""

from __future__ import annotations

import random

from webenv.sites import content as c
from webenv.sites.families.base import ActionSpec, FamilySpec, FieldSpec, Item

FIELDS = {
    "Engineering": ("Backend Engineer", "Data Engineer", "QA Engineer", "Site Reliability Engineer"),
    "Design": ("Product Designer", "Illustrator", "UX Researcher", "Motion Designer"),
    "Sales": ("Account Executive", "Sales Manager", "Partner Lead", "Inside Sales Rep"),
    "Operations": ("Office Manager", "Logistics Planner", "Recruiter", "Support Specialist"),
    "Finance": ("Accountant", "Financial Analyst", "Controller", "Payroll Officer"),
}


def make_item(rng: random.Random, idx: int, category: str) -> Item:
    company = f"{rng.choice(c.NOUNS)} {rng.choice(('Labs', 'Group', 'Systems', 'Co', 'Works'))}"
    salary = rng.randrange(30, 180) * 1000
    return Item(
        id=f"J{1000 + idx}",
        title=f"{rng.choice(('Senior ', 'Junior ', '', 'Lead '))}{rng.choice(FIELDS[category])} at {company}",
        category=c.slugify(category),
        value=salary,
        value_text=f"${salary:,} / year",
        author=company,
        date=c.date(rng).isoformat(),
        rating=round(1 + 4 * rng.random(), 1),
        attrs=(("Location", rng.choice(c.CITIES)), ("Type", rng.choice(("Full-time", "Part-time", "Contract"))),
               ("Remote", rng.choice(("Yes", "No", "Hybrid"))), ("Experience", f"{rng.randrange(0, 10)}+ years")),
        body=c.sentence(rng, "This role"),
        reviews=tuple(c.reviews(rng, rng.randrange(1, 4))),
    )


def _values(rng: random.Random, it: Item) -> dict[str, object]:
    name = c.person(rng)
    return {"name": name, "email": c.email_for(name), "years": rng.randrange(0, 15)}


ACTION = ActionSpec(
    key="applications",
    item_field="job",
    button=("Apply now", "Send application", "Submit application"),
    done_text="Application sent",
    fields=(FieldSpec("name", "Full name", "text", min_len=3), FieldSpec("email", "Email", "email"),
            FieldSpec("years", "Years of experience", "number", min=0, max=50)),
    make_values=_values,
    describe=lambda v, it: (f'apply to "{it.title}" as {v["name"]} ({v["email"]}) with '
                            f'{v["years"]} years of experience'),
)

FAMILY = FamilySpec(
    name="jobs", noun="job", plural="jobs", path="jobs", id_prefix="J",
    value_label="Salary", author_label="Company", date_label="Posted",
    categories=tuple(FIELDS),
    site_names=("{a} {n} Careers", "{n} {a} Jobs", "Hire{a}{n}", "{a} {n} Talent"),
    taglines=("Find work you love.", "Thousands of openings.", "Your next role starts here."),
    make_item=make_item, action=ACTION, value_sort_words=("lowest paid", "highest paid"),
)

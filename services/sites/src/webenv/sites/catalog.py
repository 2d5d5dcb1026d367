"""The synthetic web: which sites exist, what each one holds, and which split it belongs to.

A site is a pure function of (family, number, seed): its builder (builders/: how its pages are built), name, layout
variant, theme, wording, users and items. The split is the stricter of the host's (webenv.splits.split_of, a
function of the host name alone) and the builder's (a held-out builder's sites are test sites), so a site is wholly
train, validation or test, and no task can leak across the split.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from functools import cached_property, lru_cache

from webenv.sites import content as c
from webenv.sites.families import FAMILIES
from webenv.sites.families.base import FamilySpec, Item
from webenv.splits import SYNTHETIC_DOMAIN, split_of
from webenv.v1 import common_pb2 as pb

DOMAIN = SYNTHETIC_DOMAIN

THEMES = (
    ("#1f6feb", "#f6f8fa", "#24292f", "system-ui, sans-serif"),
    ("#b3261e", "#fffbfe", "#1c1b1f", "Georgia, serif"),
    ("#0b8043", "#f1f8f4", "#102a1c", "Verdana, sans-serif"),
    ("#7b1fa2", "#faf5fc", "#2a1030", "Trebuchet MS, sans-serif"),
    ("#e37400", "#fff8ef", "#2d1a00", "Tahoma, sans-serif"),
    ("#00796b", "#eef7f6", "#0d2624", "Helvetica, Arial, sans-serif"),
)
LAYOUTS = ("classic", "compact", "magazine")

# Wording variants: the same control says different things on different sites.
WORDING = {
    "search": ("Search", "Find", "Go", "Look up"),
    "search_placeholder": ("Search {plural}...", "What are you looking for?", "Type a {noun} name", "Search"),
    "apply": ("Apply", "Update results", "Filter", "Show results"),
    "all": ("All categories", "Everything", "Any category", "All"),
    "details": ("Details", "Specifications", "More info", "Overview"),
    "reviews": ("Reviews", "What people say", "Feedback", "Comments"),
    "next": ("Next", "Next page", "More", "Older"),
    "prev": ("Previous", "Previous page", "Back", "Newer"),
    "login": ("Log in", "Sign in", "Log on", "Member login"),
    "cookie": ("We use cookies to improve your visit.", "This site stores cookies on your device.",
               "Cookies help us deliver our services."),
    "accept": ("Accept", "OK, got it", "Allow cookies", "I agree"),
    "popup": ("Join our newsletter for 10% off!", "Don't miss our weekly picks!", "Sign up for updates!"),
    "close": ("No thanks", "Close", "Maybe later", "Dismiss"),
    "add_cart": ("Add to cart", "Add to basket", "Buy now", "Add to bag"),
    "checkout": ("Checkout", "Proceed to checkout", "Place order", "Continue"),
}

@dataclass(frozen=True)
class User:
    name: str
    username: str
    password: str


@dataclass(eq=False)  # identity hash: pages cache rendered fragments per site object
class Site:
    """One website: everything its pages and tasks are built from."""

    family: FamilySpec
    number: int
    seed: int
    builder_name: str = "platform"  # its builder (webenv.sites.builders) and that builder's split
    builder_split: int = pb.SPLIT_TRAIN

    @cached_property
    def host(self) -> str:
        return site_host(self.family.name, self.number)

    @cached_property
    def split(self) -> int:
        return stricter_split(split_of(self.host), self.builder_split)

    @cached_property
    def _rng_seed(self) -> tuple[object, ...]:
        return ("site", self.family.name, self.number, self.seed)

    @cached_property
    def look(self) -> dict[str, object]:
        """Layout, theme, wording, date style and which nuisances (banner, pop-up) the site has."""
        rng = c.rng_for(*self._rng_seed, "look")
        name = rng.choice(self.family.site_names).format(a=rng.choice(c.ADJECTIVES), n=rng.choice(c.NOUNS))
        words = {k: rng.choice(v) for k, v in WORDING.items()}
        words["search_placeholder"] = words["search_placeholder"].format(plural=self.family.plural, noun=self.family.noun)
        return {
            "name": name,
            "tagline": rng.choice(self.family.taglines),
            "layout": rng.randrange(len(LAYOUTS)),
            "theme": rng.randrange(len(THEMES)),
            "date_style": rng.randrange(len(c.DATE_FORMATS)),
            "cookie_banner": rng.random() < 0.5,
            "popup": rng.random() < 0.3,
            "words": words,
            "action_button": rng.choice(self.family.action.button) if self.family.action else "",
        }

    @property
    def name(self) -> str:
        return str(self.look["name"])

    @property
    def words(self) -> dict[str, str]:
        return self.look["words"]  # type: ignore[return-value]

    @cached_property
    def categories(self) -> list[str]:
        """Category labels this site carries (a subset, so sites differ)."""
        rng = c.rng_for(*self._rng_seed, "cats")
        cats = list(self.family.categories)
        return sorted(rng.sample(cats, max(3, len(cats) - rng.randrange(0, 2))))

    @cached_property
    def category_labels(self) -> dict[str, str]:
        return {c.slugify(x): x for x in self.categories}

    @cached_property
    def items(self) -> list[Item]:
        rng = c.rng_for(*self._rng_seed, "items")
        n = rng.randrange(24, 48)
        out: list[Item] = []
        seen: set[str] = set()
        for i in range(n):
            item = self.family.make_item(rng, i, self.categories[i % len(self.categories)])
            if item.title in seen:  # titles are unique per site so search by title finds one thing
                item = _retitle(item, f"{item.title} {i}")
            seen.add(item.title)
            out.append(item)
        return out

    @cached_property
    def by_id(self) -> dict[str, Item]:
        return {it.id: it for it in self.items}

    @cached_property
    def users(self) -> list[User]:
        rng = c.rng_for(*self._rng_seed, "users")
        out = []
        for _ in range(3):
            nm = c.person(rng)
            out.append(User(nm, c.username(nm, rng), c.password(rng)))
        return out

    def fmt_date(self, iso: str) -> str:
        return _fmt_date(iso, int(self.look["date_style"]))

    def url(self, path: str = "/") -> str:
        return f"http://{self.host}{path}"


@lru_cache(maxsize=65536)
def _fmt_date(iso: str, style: int) -> str:
    return c.fmt_date(dt.date.fromisoformat(iso), style)


def _retitle(item: Item, title: str) -> Item:
    from dataclasses import replace

    return replace(item, title=title)


def site_host(family: str, number: int) -> str:
    return f"{family}-{number:04d}.{DOMAIN}"


_RANK = {pb.SPLIT_TRAIN: 0, pb.SPLIT_VALIDATION: 1, pb.SPLIT_TEST: 2}


def stricter_split(a: int, b: int) -> int:
    """The more held-out of two splits (train < validation < test)."""
    return a if _RANK[a] >= _RANK[b] else b


#: The builder of every family's first site (shop-0000, ...) whenever it is among the choices: the task files shipped
#: as examples (data/yaml, data/rubric/synthetic_examples.json) and the docs' commands address those sites' pages.
FIRST_SITE_BUILDER = "platform"


def assign_builder(family: str, number: int, seed: int, choices: tuple[str, ...]) -> str:
    """The builder of site `number` of a family: a pure function of (family, number, seed). A family's sites cycle
    through every builder of `choices`, each family starting ceil(builders / families) further on (from an offset per
    seed), so a family's first few sites together already cover every builder: even a small web has them all, and
    each family has every builder once it has as many sites (site 0 of a family keeps FIRST_SITE_BUILDER)."""
    if number == 0 and FIRST_SITE_BUILDER in choices:
        return FIRST_SITE_BUILDER
    step = -(-len(choices) // len(FAMILIES))
    return choices[(number + list(FAMILIES).index(family) * step + c.stable_int("builder", seed)) % len(choices)]


class SiteCatalog:
    """All sites, `count` in total, spread evenly over the families in a fixed order, and over `builders`
    (builder name -> its split; the world passes the registry's, webenv.sites.builders; by default every site is
    built by `platform`, the single-platform web)."""

    def __init__(self, count: int, seed: int, builders: dict[str, int] | None = None) -> None:
        self.seed = seed
        self.builders = dict(builders or {"platform": pb.SPLIT_TRAIN})
        choices = tuple(self.builders)
        fams = list(FAMILIES.values())
        self.sites: list[Site] = []
        for i in range(count):
            fam = fams[i % len(fams)]
            number = i // len(fams)
            name = assign_builder(fam.name, number, seed, choices)
            self.sites.append(Site(fam, number, seed, name, self.builders[name]))
        self.by_host: dict[str, Site] = {s.host: s for s in self.sites}

    def get(self, host: str) -> Site | None:
        return self.by_host.get(host.split(":", 1)[0].lower())

"""Tasks generated from each site's own data, graded by ground truth.

Three kinds: information (the answer must contain values read off the site), navigation (the final URL's
meaning and the page's text must match), transaction (the site state must show the records the task asks for).
A task's rubric is a list of fact groups; difficulty is the number of facts (easy 1-3, medium 4-6, hard 7+);
subtasks are groups that make sense on their own. Rubrics grade facts, never a builder's markup: a URL fact is a
regular expression the site's builder writes for a meaning (this item's page, a listing sorted by X); page facts
are text. The oracle is a selector-addressed action sequence that ends with an AnswerAction, made of the abstract
steps (dismiss, log in, open a record, browse, submit a form...) as the site's builder performs them, run by the
tests in real Chromium to prove every kind is solvable on every builder.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, field
from functools import cached_property

from webenv.answers import MIN_ANSWER_CHARS, fact_answers, given_away, normalize
from webenv.sites import builders
from webenv.sites import content as c
from webenv.sites.builders.base import PAGE_SIZE, answer, search
from webenv.sites.catalog import Site
from webenv.sites.families.base import Item
from webenv.taskfiles import difficulty_of
from webenv.v1 import common_pb2 as pb

# --- criteria -----------------------------------------------------------------------------------


def answer_contains(expected: str) -> pb.Criterion:
    return pb.Criterion(answer=pb.AnswerCriterion(mode=pb.MATCH_MODE_CONTAINS, expected=expected))


def url_matches(pattern: str, any_step: bool = False) -> pb.Criterion:
    """The final URL (or any step's) matches a regular expression: a URL meaning, as the site's builder spells it."""
    return pb.Criterion(url=pb.UrlCriterion(mode=pb.MATCH_MODE_REGEX, value=pattern, any_step=any_step))


def page_shows(text: str) -> pb.Criterion:
    """The final page's text contains `text` (wherever the builder puts it)."""
    return pb.Criterion(page=pb.PageCriterion(text=text, step_index=-1))


def state_eq(path: str, value: object) -> pb.Criterion:
    return pb.Criterion(site_state=pb.SiteStateCriterion(path=path, op=pb.COMPARISON_EQ, value_json=json.dumps(value)))


@dataclass
class Group:
    """A fact group under construction: (description, criterion) pairs."""

    gid: str
    description: str
    facts: list[tuple[str, pb.Criterion]] = field(default_factory=list)
    subtask: str = ""  # instruction when this group alone is a sensible subtask


def short_name(site: Site) -> str:
    return site.host.split(".", 1)[0]


# --- wording ------------------------------------------------------------------------------------

# Each task kind is worded from many templates (constraints in varying order, synonyms, indirect references such
# as "the cheapest"); an instruction names what a user would name (titles, labels, values), never a builder's markup.
INFO_OPENERS = (
    "On {site}, find the {noun} \"{title}\" and tell me {what}.",
    "Look up \"{title}\" on {site}. What {be} {what}?",
    "I need {what} of the {noun} called \"{title}\" ({site}).",
    "Using {site}, report {what} for \"{title}\".",
    "Go to {site} and check {what} of \"{title}\"; answer with the values.",
    "What {be} {what} of \"{title}\"? The {noun} is listed on {site}.",
    "Tell me {what} for the {noun} \"{title}\" on {site}.",
    "Can you check {site} for {what} of \"{title}\"?",
    "Find out {what} of \"{title}\" from {site}.",
    "{Site} lists a {noun} named \"{title}\": give me {what}.",
    "Read {what} off the page of \"{title}\" on {site}.",
    "According to {site}, what {be} {what} of the {noun} \"{title}\"?",
)
COMPARE_OPENERS = (
    "On {site}, compare two {plural}: give {a}, and {b}.",
    "I am choosing between two {plural} on {site}. Tell me {a}, and {b}.",
    "Using {site}, report {a}; also {b}.",
    "Look up two {plural} on {site}: {a}, then {b}.",
    "For a comparison on {site}, I need {a} as well as {b}.",
)
SUPERLATIVE_OPENERS = (
    "On {site}, which {noun} in the {category} category is the {word} (by {value})? Give its name and {value}.",
    "Find the {word} {noun} in {category} on {site} and tell me its name and {value}.",
    "What is the {word} {noun} listed under {category} on {site}? Answer with the name and the {value}.",
    "Among the {category} {plural} on {site}, which one is the {word}? I need its name and {value}.",
    "{Site}: name the {word} {noun} of the {category} category, with its {value}.",
    "Sort the {category} {plural} on {site} by {value} and tell me which is the {word}, and its {value}.",
)
NAV_OPENERS = (
    "On {site}, open the page of the {noun} \"{title}\".",
    "Navigate to the {noun} \"{title}\" on {site}.",
    "Bring up the detail page for \"{title}\" on {site}.",
    "Go to {site} and open \"{title}\".",
    "Show me the {noun} \"{title}\" on {site}.",
    "Take me to the page of \"{title}\" ({site}).",
    "I want to see the full page of the {noun} \"{title}\" on {site}.",
    "Find \"{title}\" on {site} and open it.",
    "Open {site}'s page for \"{title}\".",
    "Pull up \"{title}\" on {site}; stop on its page.",
)
INDIRECT_NAV = (
    "On {site}, open the page of the {word} {noun} in the {category} category.",
    "Go to {site} and open the {word} of the {category} {plural}.",
    "Show me the {word} {noun} under {category} on {site}.",
    "Find the {category} {noun} that is the {word} on {site} and open its page.",
)
SORTED_OPENERS = (
    "On {site}, list all {plural} sorted {how} and go to page {page} of the results.",
    "Go to page {page} of the {plural} on {site}, sorted {how}.",
    "Show me page {page} of {site}'s {plural}, ordered {how}.",
    "Sort the {plural} on {site} {how}, then open page {page} of the list.",
    "I want to browse {site}'s {plural} {how}: take me to page {page}.",
    "Open the list of {plural} on {site}, order it {how} and move to page {page}.",
)
BEST_OPENERS = (
    "On {site}, filter the {plural} to the {category} category, sort them by rating and open the best rated one.",
    "Open the best rated {noun} in {category} on {site}, going through the {category} list sorted by rating.",
    "On {site}, show the {category} {plural} from best to worst rated and open the top one.",
    "Sort {site}'s {category} {plural} by rating and open the first.",
    "Which {category} {noun} is rated highest on {site}? Sort that category by rating and open it.",
)
TX_OPENERS = (
    "On {site}, {todo}.", "Please {todo} using {site}.", "Using {site}: {todo}.", "{Todo} on {site}.",
    "Go to {site} and {todo}.", "I'd like you to {todo} on {site}.", "Could you {todo}? Use {site}.",
    "Task for {site}: {todo}.", "{Site} is the website to use: {todo}.", "Head over to {site} and {todo}.",
    "On the website {site}, {todo}.", "Help me {todo} on {site}.",
)
CART_OPENERS = (
    "On {site}, add {what} to the cart (do not check out).", "Put {what} in your {site} shopping cart.",
    "Add {what} to the basket on {site}; no need to order.", "Fill the cart on {site} with {what}, without buying.",
    "On {site}, I only want {what} in my cart for now.", "Load {what} into the cart at {site} (no checkout).",
)
ORDER_OPENERS = (
    "On {site}, order {what} and ship it to {where}.", "Buy {what} from {site}; the delivery address is {where}.",
    "Place an order on {site} for {what}, shipping to {where}.", "Ship {what} to {where}: order it on {site}.",
    "Deliver to {where}: {what}, ordered from {site}.", "Using {site}, purchase {what} with delivery to {where}.",
)
LOGIN_PHRASES = (
    "Log in as {user} (password: {pw}) first. ",
    "Your account is {user} with password {pw}. ",
    "Sign in with username {user} and password {pw}. ",
    "Credentials: {user} / {pw}. ",
    "You'll need to sign in ({user}, password {pw}). ",
)
INDIRECT_SORTS = {"value_asc": 0, "value_desc": 1, "date_desc": "newest", "rating_desc": "best rated"}


def _cap(text: str) -> str:
    return text[:1].upper() + text[1:]


def _join(parts: list[str]) -> str:
    return parts[0] if len(parts) == 1 else ", ".join(parts[:-1]) + " and " + parts[-1]


# --- generator ----------------------------------------------------------------------------------


class TaskFactory:
    """Builds one site's tasks; every choice comes from an rng seeded by (site, task number)."""

    def __init__(self, site: Site) -> None:
        self.site = site
        self.fam = site.family
        self.user = site.users[0]
        self.builder = builders.get(site.builder_name)

    # building blocks of oracles: the site's builder turns each abstract step into actions on its pages
    def prelude(self, login: bool) -> list[pb.Action]:
        acts = self.builder.dismiss(self.site)
        if login:
            acts += self.builder.log_in(self.site, self.user.username, self.user.password)
        return acts

    def open_item(self, item: Item) -> list[pb.Action]:
        return self.builder.open_record(self.site, item)

    def record_fact(self, item: Item) -> pb.Criterion:
        return url_matches(self.builder.scheme.record_regex(self.site, item))

    def listing_fact(self, key: str, value: str, any_step: bool = False) -> pb.Criterion:
        return url_matches(self.builder.scheme.listing_regex(self.site, key, value), any_step)

    def login_text(self, rng: random.Random) -> str:
        if not self.fam.login_required:
            return ""
        return rng.choice(LOGIN_PHRASES).format(user=self.user.username, pw=self.user.password)

    def indirect(self, rng: random.Random) -> tuple[str, str, str, Item] | None:
        """Sometimes (2 in 5) a category, a sort and the one item first under it, named by what it is ("the cheapest
        product in Books") instead of by its title; None when the draw says no or the first place is tied."""
        if rng.random() >= 0.4:
            return None
        slug = rng.choice(sorted(self.site.category_labels))
        sort = rng.choice(sorted(INDIRECT_SORTS))
        ranked = search(self.site, "", slug, sort)
        key = {"value_asc": lambda it: it.value, "value_desc": lambda it: it.value, "date_desc": lambda it: it.date,
               "rating_desc": lambda it: it.rating}[sort]
        if len(ranked) < 2 or key(ranked[0]) == key(ranked[1]):
            return None
        word = INDIRECT_SORTS[sort]
        word = self.fam.value_sort_words[word] if isinstance(word, int) else word
        return slug, sort, str(word), ranked[0]

    def describe_fields(self, rng: random.Random, item: Item, values: dict[str, object]) -> str:
        """A record's request worded from its form's labels, the fields in a random order."""
        spec = self.fam.action
        assert spec is not None
        parts = []
        for f in rng.sample(spec.fields, len(spec.fields)):
            v = values[f.name]
            if f.kind == "checkbox":
                parts.append(f'"{f.label}" {"ticked" if v else "left unticked"}')
            else:
                parts.append(f'{f.label.lower()} "{v}"')
        verb = rng.choice(("fill in the form on", "use the form of", "submit the form on", "complete the form for"))
        return f'{verb} the {self.fam.noun} "{item.title}" with {_join(parts)}'

    @cached_property
    def start_text(self) -> str:
        """What the site's start page gives to read (`Builder.start_text`), normalized once per site."""
        return normalize(self.builder.start_text(self.site))

    def shown(self, values: list[str]) -> bool:
        """Whether the start page gives away a fact group asking for these values, by the rule of `webenv validate`'s
        leak check (`webenv.answers.given_away`): an information task asking for them is answered before its first
        step (issue 50: a home page's featured listing showing the salary asked for)."""
        facts = fact_answers(answer_contains(v) for v in values)
        return facts is not None and given_away([facts], self.start_text, normalized=True) is not None

    def echoed(self, item: Item, values: list[str]) -> bool:
        """Whether the instruction's own names (the site's, the item's title, the login's username and password)
        hold every value, so the instruction echoed back passes a substring criterion (issue 50's whole-catalog run:
        `mail-0014/info-0` asked for "0" attachments after the password "falcon-1006")."""
        said = f"{self.site.name} {item.title}".lower()
        if self.fam.login_required:
            said += f" {self.user.username} {self.user.password}".lower()
        return bool(values) and all(v.lower() in said for v in values)

    def answered_early(self, item: Item, values: list[str]) -> bool:
        """Whether a task asking for these values of the item is answered before its first step: by its start page
        (`shown`) or by its own instruction echoed back (`echoed`)."""
        return self.shown(values) or self.echoed(item, values)

    def pick_attrs(self, rng: random.Random, item: Item, n_attrs: int) -> list[tuple[str, str]]:
        """n attributes of the item to ask for, not all of them read off its title."""
        attrs = rng.sample(self.attributes(item), n_attrs)
        if all(value.lower() in item.title.lower() for _, value in attrs):  # the title answers them all
            hidden = [a for a in self.attributes(item) if a[1].lower() not in item.title.lower()]
            attrs = rng.sample(hidden, n_attrs) if len(hidden) >= n_attrs else attrs
        return attrs

    def unshown(self, rng: random.Random, item: Item, attrs: list[tuple[str, str]],
                taken: list[Item]) -> tuple[Item, list[tuple[str, str]]]:
        """For attributes the start page shows all of: the same with one swapped for an attribute of the item that
        neither the start page nor the title shows, else another item (not one of `taken`) and attributes of it."""
        spare = [a for a in self.attributes(item) if a not in attrs and a[1].lower() not in item.title.lower()
                 and not self.answered_early(item, [a[1]])]
        if spare:  # one long enough for the leak check to judge (a rating, "4.5", is on any page) when there is one
            checked = [a for a in spare if len(normalize(a[1])) >= MIN_ANSWER_CHARS]
            attrs = list(attrs)
            attrs[rng.randrange(len(attrs))] = rng.choice(checked or spare)
            return item, attrs
        ids = {it.id for it in taken}
        for other in rng.sample(self.site.items, len(self.site.items)):
            if other.id not in ids:
                attrs = self.pick_attrs(rng, other, len(attrs))
                if not self.answered_early(other, [v for _, v in attrs]):
                    return other, attrs
        raise ValueError(f"{self.site.host}: the start page shows every item's attributes")

    def attributes(self, item: Item) -> list[tuple[str, str]]:
        """(label, value as shown) pairs an information task can ask for."""
        s = self.site
        out = [(self.fam.value_label.lower(), item.value_text), (self.fam.author_label.lower(), item.author),
               ("category", s.category_labels.get(item.category, item.category)),
               (self.fam.date_label.lower() + " date", s.fmt_date(item.date)), ("rating", f"{item.rating:.1f}")]
        out += [(k.lower(), v) for k, v in item.attrs]
        return out

    def task(self, kind: int, n: int, instruction: str, groups: list[Group], oracle: list[pb.Action],
             rng_seed: int, start_path: str = "/") -> pb.Task:
        s = self.site
        prefix = {pb.TASK_KIND_INFORMATION: "info", pb.TASK_KIND_NAVIGATION: "nav", pb.TASK_KIND_TRANSACTION: "tx"}[kind]
        task_id = f"synthetic/{short_name(s)}/{prefix}-{n}"
        rubric = pb.Rubric(rubric_id=task_id, version=1)
        n_facts = 0
        for g in groups:
            fg = rubric.groups.add(group_id=g.gid, description=g.description)
            for i, (desc, crit) in enumerate(g.facts):
                fg.facts.add(fact_id=f"{g.gid}.{i}", description=desc, criterion=crit)
                n_facts += 1
        subtasks = [
            pb.Subtask(subtask_id=f"{task_id}/sub-{i}", instruction=g.subtask, group_ids=[g.gid])
            for i, g in enumerate(groups) if g.subtask and len(groups) > 1
        ]
        return pb.Task(
            task_id=task_id, source=pb.TASK_SOURCE_SYNTHETIC, kind=kind, instruction=instruction,
            start_url=s.url(start_path), site=s.host, family=self.fam.name, split=s.split,
            difficulty=difficulty_of(n_facts), rubric=rubric, subtasks=subtasks, oracle=oracle,
            max_steps=max(10, 2 * len(oracle) + 5), timeout_seconds=float(max(60, 10 * len(oracle))),
            category=self.fam.name, seed=rng_seed, template_id=f"synthetic/{self.fam.name}/{prefix}-{n}",
            builder=s.builder_name, metadata={"site_name": s.name, "facts": str(n_facts), "layout": str(s.look["layout"])},
        )

    def rng(self, label: str, n: int) -> tuple[random.Random, int]:
        seed = c.stable_int("task", self.site.host, self.site.seed, label, n)
        return random.Random(seed), seed & 0x7FFFFFFFFFFFFFFF

    # information ---------------------------------------------------------------------------
    def info(self, n: int, n_items: int, n_attrs: int) -> pb.Task:
        rng, seed = self.rng("info", n)
        items = rng.sample(self.site.items, n_items)
        groups: list[Group] = []
        answers: list[str] = []
        oracle = self.prelude(self.fam.login_required)
        asks: list[str] = []
        for k, item in enumerate(items):
            attrs = self.pick_attrs(rng, item, n_attrs)
            values = [value for _, value in attrs]
            if self.answered_early(item, values):  # answered before a step: ask for what is not
                item, attrs = self.unshown(rng, item, attrs, items)
                items[k] = item
            what = _join([f"the {label}" for label, _ in attrs])
            asks.append(f"{what} of \"{item.title}\"")
            g = Group(f"item{k}", f"Facts about {item.title}", subtask=f"{self.login_text(rng)}On {self.site.name}, find {what} of the {self.fam.noun} \"{item.title}\".")
            for label, value in attrs:
                g.facts.append((f"The answer gives the {label} of {item.title}: {value}", answer_contains(value)))
                answers.append(f"{label}: {value}")
            groups.append(g)
            oracle += self.open_item(item) + self.builder.reveal(self.site, item, [label for label, _ in attrs])
        oracle.append(answer("; ".join(answers)))
        if n_items == 1:
            label_what = asks[0].rsplit(" of \"", 1)[0]
            instr = rng.choice(INFO_OPENERS).format(site=self.site.name, Site=self.site.name, noun=self.fam.noun,
                                                    title=items[0].title, what=label_what,
                                                    be="is" if n_attrs == 1 else "are")
        else:
            instr = rng.choice(COMPARE_OPENERS).format(site=self.site.name, plural=self.fam.plural, a=asks[0], b=asks[1])
        return self.task(pb.TASK_KIND_INFORMATION, n, self.login_text(rng) + instr, groups, oracle, seed)

    def superlative(self, n: int) -> pb.Task:
        rng, seed = self.rng("info", n)
        def end(slug: str, asc: bool) -> Item:
            return search(self.site, "", slug, "value_asc" if asc else "value_desc")[0]

        slugs = sorted(self.site.category_labels)
        slug = rng.choice(slugs)
        asc = rng.random() < 0.5
        best = end(slug, asc)
        if self.shown([best.title, best.value_text]):  # the start page shows the answer: another category or order
            others = [(s, a) for s in slugs for a in (True, False) if (s, a) != (slug, asc)]
            for slug, asc in rng.sample(others, len(others)):
                if not self.shown([(best := end(slug, asc)).title, best.value_text]):
                    break
            else:
                return self.info(n, 1, 2)  # every category's ends are on the start page: ask about one item
        label = self.site.category_labels[slug]
        sort = "value_asc" if asc else "value_desc"
        word = self.fam.value_sort_words[0 if asc else 1]
        instr = self.login_text(rng) + rng.choice(SUPERLATIVE_OPENERS).format(
            site=self.site.name, Site=self.site.name, noun=self.fam.noun, plural=self.fam.plural, category=label,
            word=word, value=self.fam.value_label.lower())
        g = Group("answer", f"The {word} {self.fam.noun} in {label}")
        g.facts.append((f"The answer names {best.title}", answer_contains(best.title)))
        g.facts.append((f"The answer gives its {self.fam.value_label.lower()} {best.value_text}", answer_contains(best.value_text)))
        oracle = self.prelude(self.fam.login_required) + self.builder.browse(self.site, category=slug, sort=sort) + [
            answer(f"{best.title} ({best.value_text})"),
        ]
        return self.task(pb.TASK_KIND_INFORMATION, n, instr, [g], oracle, seed)

    # navigation ----------------------------------------------------------------------------
    def nav_item(self, n: int) -> pb.Task:
        rng, seed = self.rng("nav", n)
        item = rng.choice(self.site.items)
        login = self.login_text(rng)
        instr = login + rng.choice(NAV_OPENERS).format(site=self.site.name, noun=self.fam.noun, title=item.title)
        oracle = self.prelude(self.fam.login_required) + self.open_item(item) + [answer("done")]
        indirect = self.indirect(rng)
        if indirect is not None:  # "the cheapest X in Y": found by browsing, not by its name
            slug, sort, word, item = indirect
            instr = login + rng.choice(INDIRECT_NAV).format(
                site=self.site.name, noun=self.fam.noun, plural=self.fam.plural, word=word,
                category=self.site.category_labels[slug])
            oracle = (self.prelude(self.fam.login_required) + self.builder.browse(self.site, category=slug, sort=sort)
                      + self.builder.open_listed(self.site, item) + [answer("done")])
        g = Group("page", f"The page of {item.title} is open")
        g.facts.append((f"The final URL is the page of {item.id}", self.record_fact(item)))
        g.facts.append((f"The page shows {item.title}", page_shows(item.title)))
        return self.task(pb.TASK_KIND_NAVIGATION, n, instr, [g], oracle, seed)

    def nav_sorted_page(self, n: int) -> pb.Task:
        rng, seed = self.rng("nav", n)
        sort = rng.choice(("value_asc", "value_desc", "date_desc", "rating_desc"))
        ranked = search(self.site, "", "", sort)
        page = rng.randrange(2, max(3, -(-len(ranked) // PAGE_SIZE) + 1))
        first = ranked[(page - 1) * PAGE_SIZE]
        how = {"value_asc": f"by {self.fam.value_label.lower()}, {self.fam.value_sort_words[0]} first",
               "value_desc": f"by {self.fam.value_label.lower()}, {self.fam.value_sort_words[1]} first",
               "date_desc": "newest first", "rating_desc": "best rated first"}[sort]
        instr = self.login_text(rng) + rng.choice(SORTED_OPENERS).format(
            site=self.site.name, plural=self.fam.plural, how=how, page=page)
        g = Group("list", f"Page {page} of the {self.fam.plural} sorted {how}")
        g.facts.append((f"The URL is the listing sorted by {sort}", self.listing_fact("sort", sort)))
        g.facts.append((f"The URL is page {page}", self.listing_fact("page", str(page))))
        g.facts.append((f"The page shows the first result {first.title}", page_shows(first.title)))
        oracle = (self.prelude(self.fam.login_required) + self.builder.browse(self.site, sort=sort, page=page)
                  + [answer("done")])
        return self.task(pb.TASK_KIND_NAVIGATION, n, instr, [g], oracle, seed)

    def nav_best_in_category(self, n: int) -> pb.Task:
        rng, seed = self.rng("nav", n)
        slug = rng.choice(sorted(self.site.category_labels))
        label = self.site.category_labels[slug]
        best = search(self.site, "", slug, "rating_desc")[0]
        instr = self.login_text(rng) + rng.choice(BEST_OPENERS).format(
            site=self.site.name, plural=self.fam.plural, noun=self.fam.noun, category=label)
        g1 = Group("filter", f"The {label} list was sorted by rating")
        g1.facts.append((f"Some URL filtered to {label}", self.listing_fact("category", slug, any_step=True)))
        g1.facts.append(("Some URL sorted by rating", self.listing_fact("sort", "rating_desc", any_step=True)))
        g2 = Group("page", f"The page of {best.title} is open")
        g2.facts.append((f"The final URL is the page of {best.id}", self.record_fact(best)))
        g2.facts.append((f"The page shows {best.title}", page_shows(best.title)))
        oracle = (self.prelude(self.fam.login_required)
                  + self.builder.browse(self.site, category=slug, sort="rating_desc")
                  + self.builder.open_listed(self.site, best) + [answer("done")])
        return self.task(pb.TASK_KIND_NAVIGATION, n, instr, [g1, g2], oracle, seed)

    # transactions ----------------------------------------------------------------------------
    def tx_records(self, n: int, n_records: int) -> pb.Task:
        spec = self.fam.action
        assert spec is not None
        rng, seed = self.rng("tx", n)
        items = rng.sample(self.site.items, n_records)
        login = self.fam.login_required
        oracle = self.prelude(login)
        groups: list[Group] = []
        todos: list[str] = []
        for k, item in enumerate(items):
            values = spec.make_values(rng, item)
            todo = spec.describe(values, item) if rng.random() < 0.5 else self.describe_fields(rng, item, values)
            todos.append(todo)
            g = Group(f"record{k}", f"A {spec.key} record for {item.title}", subtask=f"On {self.site.name}, {todo}.")
            base = f'$.{spec.key}[?(@.{spec.item_field}=="{item.id}")]'
            oracle += self.open_item(item) + self.builder.submit_record(self.site, item, values)
            for f in spec.fields:
                v = values[f.name]
                g.facts.append((f"The {spec.key} record for {item.id} has {f.name} = {v!r}", state_eq(f"{base}.{f.name}", v)))
            groups.append(g)
        if login:
            g = Group("auth", f"Signed in as {self.user.username}")
            g.facts.append((f"The session is logged in as {self.user.username}", state_eq("$.auth.user", self.user.username)))
            groups.append(g)
        oracle.append(answer("done"))
        todo = _join(todos)
        instr = rng.choice(TX_OPENERS).format(site=self.site.name, Site=self.site.name, todo=todo, Todo=_cap(todo))
        return self.task(pb.TASK_KIND_TRANSACTION, n, self.login_text(rng) + instr, groups, oracle, seed)

    def tx_cart(self, n: int, n_items: int) -> pb.Task:
        rng, seed = self.rng("tx", n)
        items = rng.sample(self.site.items, n_items)
        qtys = [rng.randrange(1, 5) for _ in items]
        g = Group("cart", "The cart holds the requested quantities")
        oracle = self.prelude(False)
        for item, q in zip(items, qtys, strict=True):
            g.facts.append((f"The cart has {q} x {item.title}", state_eq(f'$.cart.items[?(@.sku=="{item.id}")].qty', q)))
            oracle += self.open_item(item) + self.builder.add_to_cart(self.site, item, q)
        oracle.append(answer("done"))
        what = _join([f"{q} x \"{it.title}\"" for it, q in zip(items, qtys, strict=True)])
        instr = rng.choice(CART_OPENERS).format(site=self.site.name, what=what)
        return self.task(pb.TASK_KIND_TRANSACTION, n, instr, [g], oracle, seed)

    def tx_order(self, n: int, n_items: int) -> pb.Task:
        rng, seed = self.rng("tx", n)
        items = rng.sample(self.site.items, n_items)
        qtys = [rng.randrange(1, 4) for _ in items]
        addr = c.address(rng)
        g_items = Group("items", "The last order has the requested items",
                        subtask="")
        oracle = self.prelude(False)
        for item, q in zip(items, qtys, strict=True):
            g_items.facts.append((f"The last order has {q} x {item.title}",
                                  state_eq(f'$.orders[-1].items[?(@.sku=="{item.id}")].qty', q)))
            oracle += self.open_item(item) + self.builder.add_to_cart(self.site, item, q)
        g_ship = Group("shipping", f"The last order ships to {addr['name']}")
        for k in ("name", "street", "city", "zip"):
            g_ship.facts.append((f"The shipping {k} is {addr[k]}", state_eq(f"$.orders[-1].shipping.{k}", addr[k])))
        g_status = Group("status", "The order was placed")
        g_status.facts.append(("The last order's status is placed", state_eq("$.orders[-1].status", "placed")))
        oracle += self.builder.check_out(self.site, addr) + [answer("done")]
        what = _join([f"{q} x \"{it.title}\"" for it, q in zip(items, qtys, strict=True)])
        where = f"{addr['name']}, {addr['street']}, {addr['city']} {addr['zip']}"
        instr = rng.choice(ORDER_OPENERS).format(site=self.site.name, what=what, where=where)
        task = self.task(pb.TASK_KIND_TRANSACTION, n, instr, [g_items, g_ship, g_status], oracle, seed)
        # the order without the address is a valid part on its own (the shipping facts alone are not)
        task.subtasks.add(subtask_id=f"{task.task_id}/sub-0", group_ids=["items", "status"],
                          instruction=f"On {self.site.name}, order {what} (any shipping address).")
        return task

    # the site's task list ---------------------------------------------------------------------
    def all(self) -> list[pb.Task]:
        out = [self.info(0, 1, 1), self.info(1, 1, 2), self.info(2, 1, 3), self.superlative(3),
               self.info(4, 1, 4), self.info(5, 1, 5), self.info(6, 1, 6), self.info(7, 2, 4), self.info(8, 2, 5)]
        out += [self.nav_item(0), self.nav_item(1), self.nav_item(2), self.nav_sorted_page(3),
                self.nav_sorted_page(4), self.nav_best_in_category(5)]
        if self.fam.action is None:
            out += [self.tx_cart(0, 1), self.tx_cart(1, 2), self.tx_order(2, 1), self.tx_order(3, 1),
                    self.tx_order(4, 2), self.tx_order(5, 3)]
        else:
            out += [self.tx_records(0, 1), self.tx_records(1, 1), self.tx_records(2, 2), self.tx_records(3, 2),
                    self.tx_records(4, 3), self.tx_records(5, 3)]
        return out


def site_tasks(site: Site) -> list[pb.Task]:
    return TaskFactory(site).all()

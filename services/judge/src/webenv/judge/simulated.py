"""Grading a simulated episode against the pages the simulation showed: the world model's in-simulation reward.

A rubric's facts are the real website's: "the answer contains 21:30" is the real flight's departure. A world model
predicts an item's page by analogy (the right layout and labels, values re-bound from pages it was trained on), so
the departure a simulated page shows is plausible, not the real one, and an agent that read it correctly off the
simulated page is judged wrong; a simulated click changes no real site's state, so no transaction can pass. Dyna on
those verdicts had 1 of 200 simulated episodes pass (bench/results/dyna.md, before this). So a trajectory whose
`env_kind` is ENV_KIND_WORLD_MODEL is graded against its own world, fact by fact, by these rules (every other
trajectory is graded as before, and the rubric is the same):

* **Answer facts** (`answer` criteria with an expected value). The value is *re-read from the simulated pages*: of
  the facts the pages the agent saw state (`page_facts` of the sdk's candidate proposer: definition lists, tables,
  `label: value` lines and prose, read from the AXTREE, nothing of a site generator's), the one whose label shares
  the most word stems with the fact's description, on a page that shows the fact's subject (the description's
  other words the agent saw anywhere: another item's page with the same labels does not count), is the value the
  simulation stands for. The fact holds when the answer passes the criterion with that value (or with
  the real one). No simulated fact matching the description: the fact fails ("no simulated page shows it").
* **Page facts** with a CSS selector (a simulated page has no DOM): the selector is dropped and the text must be on
  the page; one with a selector and no text stays UNDECIDABLE.
* **Site-state facts** are checked against the simulated site's state the world model kept (`site_state_json`
  of its CloseSession: the forms the agent submitted, `sitestate.py` of the world model): the fact holds when a
  submission on a page whose URL or heading names every record key the path filters on (the `"A12"` of
  `$.cart.items[?(@.sku=="A12")].qty`) carries the expected value in one of its fields. What the real site would
  have stored (its validation, its defaults) cannot be known in simulation: a submission is taken as done.

Everything else (URLs, the env reward, categories, LLM facts) is judged as for a real trajectory. The rule is the
judge's, so every service that grades simulated episodes (the collector's Dyna runs, `webenv judge`) gets the same
reward; the verdict's reasons say when a value was re-read ("simulated: ...").
"""

from __future__ import annotations

import json
import re
from typing import Any

from webenv.agent.candidates import page_facts, parse_axtree
from webenv.judge.context import EvalContext
from webenv.judge.criteria import (
    DEFAULT_MAX_REGEX_CHARS,
    FAILS,
    HOLDS,
    UNDECIDABLE,
    Check,
    compile_answer,
    compile_page,
    excerpt,
)
from webenv.judge.textnorm import fold, parse_number
from webenv.v1 import common_pb2

_WORD = re.compile(r"[a-z0-9]+")
_STOP = frozenset("the and for with from that this what which who how does did are was were its you your has have "
                  "give gives tell find report answer names check values value page site shows shown".split())
_KEY = re.compile(r'"((?:[^"\\]|\\.)*)"')
#: Submissions kept by a simulated session (the world model bounds them too).
MAX_SUBMISSIONS = 64


def stems(text: str) -> set[str]:
    return {w[:5] for w in _WORD.findall(text.lower()) if len(w) > 2 and w not in _STOP}


def simulated_value(ctx: EvalContext, description: str, expected: str) -> tuple[str, int, str] | None:
    """(value, observation position, label) the simulated pages show for a fact, or None.

    The label must share a word stem with the description (the fact's words minus its real value). The
    description's other words name the fact's subject ("Koi Xenon 12"): every one of them the agent saw on any page
    must be on the page the value is read from, so another item's page with the same labels does not count. Among
    the rest, the label sharing the most stems wins, then the later page. A numeric real value is re-read only as a
    value with a digit."""
    want = stems(description) - stems(expected)
    numeric = any(ch.isdigit() for ch in expected)
    pages: list[tuple[int, set[str], list[tuple[str, str]]]] = []
    for pos, obs in enumerate(ctx.observations):
        if obs.axtree:
            nodes = parse_axtree(obs.axtree)
            pages.append((pos, stems(" ".join(n.name for n in nodes)), page_facts(nodes)))
    seen = set().union(*(words for _, words, _ in pages)) if pages else set()
    best: tuple[tuple[int, int], str, int, str] | None = None
    for pos, words, facts in pages:
        for label, value in facts:
            shared = stems(label) & want
            subject = (want - shared) & seen
            if not shared or not subject <= words or (numeric and not any(ch.isdigit() for ch in value)):
                continue
            key = (len(shared), pos)
            if best is None or key > best[0]:
                best = (key, value, pos, label)
    return None if best is None else (best[1], best[2], best[3])


def check_answer(fact: common_pb2.Fact, ctx: EvalContext, real: Check) -> Check:
    c = fact.criterion.answer
    if real.outcome == HOLDS or not c.expected:
        return real
    found = simulated_value(ctx, fact.description, c.expected)
    if found is None:
        return Check(FAILS, f"simulated: no page the agent saw shows this fact; {real.reason}"[:300],
                     excerpt=real.excerpt)
    value, pos, label = found
    rebound = common_pb2.AnswerCriterion()
    rebound.CopyFrom(c)
    rebound.expected = value
    got = compile_answer(rebound, DEFAULT_MAX_REGEX_CHARS)(ctx)
    return Check(got.outcome, f"simulated: the pages show {label}: {value!r}; {got.reason}"[:300],
                 step_index=ctx.evidence_step(pos), fmt=common_pb2.OBSERVATION_FORMAT_AXTREE, excerpt=got.excerpt)


def check_page(fact: common_pb2.Fact, ctx: EvalContext, real: Check) -> Check:
    c = fact.criterion.page
    if real.outcome != UNDECIDABLE or not c.css_selector or not c.text:
        return real
    loose = common_pb2.PageCriterion()
    loose.CopyFrom(c)
    loose.css_selector = ""
    got = compile_page(loose)(ctx)
    return Check(got.outcome, f"simulated: no DOM for {c.css_selector!r}; {got.reason}"[:300], got.step_index,
                 got.fmt, excerpt=got.excerpt)


def _same(field_value: Any, expected: Any) -> bool:
    text = str(field_value).strip()
    if isinstance(expected, bool):
        return (fold(text) in ("true", "on", "checked", "yes")) == expected
    if isinstance(expected, (int, float)):
        got = parse_number(text)
        return got is not None and abs(got - float(expected)) < 1e-9
    return fold(text) == fold(str(expected))


def _names(key: str, where: str) -> bool:
    return re.search(rf"(?<![\w]){re.escape(key.lower())}(?![\w])", where) is not None


def check_state(fact: common_pb2.Fact, ctx: EvalContext, real: Check) -> Check:
    c = fact.criterion.site_state
    state, _ = ctx.site_state()
    subs = state.get("submissions") if isinstance(state, dict) else None
    if not isinstance(subs, list):
        return real
    try:
        expected = json.loads(c.value_json)
    except json.JSONDecodeError:
        return real
    keys = [k.replace('\\"', '"') for k in _KEY.findall(c.path)]
    for sub in reversed(subs[-MAX_SUBMISSIONS:]):
        if not isinstance(sub, dict):
            continue
        where = f"{sub.get('url', '')} {sub.get('heading', '')}".lower()
        fields = sub.get("fields") if isinstance(sub.get("fields"), dict) else {}
        hit = next((k for k, v in fields.items() if _same(v, expected)), None)
        if hit is not None and all(_names(k, where) for k in keys):
            return Check(HOLDS, f"simulated: submitted {hit} = {fields[hit]!r} on {sub.get('url', '')}"[:300],
                         path=c.path, excerpt=excerpt(json.dumps(sub, default=str)))
    named = f" on a page naming {', '.join(keys)}" if keys else ""
    return Check(FAILS, f"simulated: no submitted form carries {c.value_json}{named}"[:300], path=c.path,
                 excerpt=excerpt(json.dumps(subs[-1:], default=str)))


GROUNDED = {"answer": check_answer, "page": check_page, "site_state": check_state}


def grade(kind: str, fact: common_pb2.Fact, ctx: EvalContext, real: Check) -> Check:
    """The check of one fact of a simulated trajectory, from its real-world check ``real``."""
    rule = GROUNDED.get(kind)
    return real if rule is None else rule(fact, ctx, real)

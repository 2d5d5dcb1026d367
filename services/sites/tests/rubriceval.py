"""A small evaluator for the criteria synthetic tasks use (the judge service has the real one).

Only for tests: answer CONTAINS, url CONTAINS or REGEX, page (text on the final page, within a css selector when
one is given; the selector "" is the whole page), and site_state with the path forms the generator emits: `$.a.b`, `[N]`, `[-1]`, `[?(@.k=="v")]`.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from webenv.v1 import common_pb2 as pb

_TOKEN = re.compile(r'\.([A-Za-z_][A-Za-z0-9_]*)|\[(-?\d+)\]|\[\?\(@\.([A-Za-z_][A-Za-z0-9_]*)=="([^"]*)"\)\]')


def json_path(doc: Any, path: str) -> tuple[bool, Any]:
    """(found, value) for a path; a filter picks the first match."""
    assert path.startswith("$"), path
    rest, cur = path[1:], doc
    while rest:
        m = _TOKEN.match(rest)
        assert m, f"unsupported path part {rest!r} in {path!r}"
        rest = rest[m.end():]
        key, idx, fkey, fval = m.groups()
        try:
            if key is not None:
                cur = cur[key]
            elif idx is not None:
                cur = cur[int(idx)]
            else:
                cur = next(x for x in cur if isinstance(x, dict) and str(x.get(fkey)) == fval)
        except (KeyError, IndexError, TypeError, StopIteration):
            return False, None
    return True, cur


@dataclass
class Evidence:
    answer: str = ""
    urls: list[str] = field(default_factory=list)  # URL after each step; the last is final
    page_texts: dict[str, str | None] = field(default_factory=dict)  # css selector -> inner text on final page
    site_state: dict[str, Any] = field(default_factory=dict)


def fact_holds(crit: pb.Criterion, ev: Evidence) -> bool:
    kind = crit.WhichOneof("kind")
    if kind == "answer":
        assert crit.answer.mode == pb.MATCH_MODE_CONTAINS
        return crit.answer.expected in ev.answer
    if kind == "url":
        assert crit.url.mode in (pb.MATCH_MODE_CONTAINS, pb.MATCH_MODE_REGEX)
        urls = ev.urls if crit.url.any_step else ev.urls[-1:]
        if crit.url.mode == pb.MATCH_MODE_REGEX:
            return any(re.search(crit.url.value, u) for u in urls)
        return any(crit.url.value in u for u in urls)
    if kind == "page":
        text = ev.page_texts.get(crit.page.css_selector)
        return text is not None and crit.page.text in text
    if kind == "site_state":
        found, value = json_path(ev.site_state, crit.site_state.path)
        assert crit.site_state.op == pb.COMPARISON_EQ
        return found and value == json.loads(crit.site_state.value_json)
    raise AssertionError(f"criterion kind {kind} not used by synthetic tasks")


def failing_facts(task: pb.Task, ev: Evidence) -> list[str]:
    return [f"{f.fact_id}: {f.description}" for g in task.rubric.groups for f in g.facts if not fact_holds(f.criterion, ev)]


def page_selectors(task: pb.Task) -> list[str]:
    return [f.criterion.page.css_selector for g in task.rubric.groups for f in g.facts if f.criterion.HasField("page")]

"""Whether a text gives a task's answer away: the rule `webenv validate`'s leak check applies to the instruction and
the start page, and the sites service's task generator applies to each site's start page before it asks a question
(an information task never asks what its start page already shows).

A rubric's fact group is decided by an answer alone when every fact is an answer criterion (no regular expression);
a text gives the group away when it holds an accepted answer of each fact, compared normalized (HTML entities
decoded, lower case, whitespace collapsed), answers of 4 characters or more only (shorter ones, "2" or "yes", occur on
any page by chance).
"""

from __future__ import annotations

import html
from collections.abc import Iterable

from webenv.v1 import common_pb2 as pb

MIN_ANSWER_CHARS = 4  # shorter expected answers ("2", "yes") occur on any page by chance: not checked for leaks


def normalize(text: str) -> str:
    return " ".join(html.unescape(text).lower().split())


def fact_answers(criteria: Iterable[pb.Criterion]) -> list[list[str]] | None:
    """Per fact of one group, its accepted answers, normalized, of 4 characters or more; None when some fact is not
    an answer criterion, is a regular expression or has no answer that long (an answer alone does not decide it)."""
    facts = []
    for c in criteria:
        if c.WhichOneof("kind") != "answer" or c.answer.mode == pb.MATCH_MODE_REGEX:
            return None
        values = [v for v in dict.fromkeys(normalize(x) for x in (c.answer.expected, *c.answer.values))
                  if len(v) >= MIN_ANSWER_CHARS]
        if not values:
            return None
        facts.append(values)
    return facts or None


def answer_groups(task: pb.Task) -> list[list[list[str]]]:
    """The rubric's required fact groups that an answer alone decides (every fact an answer criterion, none a regular
    expression): per group, per fact, the accepted answers, normalized. A group is given away by a text that holds an
    accepted answer of each of its facts, each of them 4 characters or more (shorter ones, "2" or "yes", occur on any
    page by chance)."""
    out = []
    for group in task.rubric.groups:
        if group.optional or not group.facts:
            continue
        if (facts := fact_answers(f.criterion for f in group.facts)) is not None:
            out.append(facts)
    return out


def given_away(groups: list[list[list[str]]], text: str, *, normalized: bool = False) -> list[str] | None:
    """The answers of the first group ``text`` gives away (one accepted answer of each fact), or None;
    ``normalized``: the text is already ``normalize``'s (a caller testing many groups against one page)."""
    t = text if normalized else normalize(text)
    for facts in groups:
        found = [next((v for v in values if v in t), None) for values in facts]
        if all(found):
            return [v for v in found if v]
    return None

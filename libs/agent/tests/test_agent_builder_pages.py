"""The fact reader and the answer candidates on pages of the synthetic web's train-split site builders (saved from
the oracle's episodes by bench/answer_reach.py; tests/pages/builders/expected.json): prose read clause by clause,
ratings in words, runs of `Label: value` pairs in one block or in sibling text nodes, a value over its caption, a page
laid out by a table, records of a result list; and one answer candidate holds every value the task's rubric wants."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from webenv.agent.candidates import context, page_facts, parse_axtree, propose
from webenv.agent.steps import fold
from webenv.v1 import common_pb2

PAGES = Path(__file__).with_name("pages") / "builders"
EXPECTED = json.loads((PAGES / "expected.json").read_text())["pages"]


def axtree(page: str) -> str:
    return (PAGES / f"{page}.axtree").read_text()


@pytest.mark.parametrize("page", sorted(EXPECTED))
def test_facts_of_builder_pages(page):
    want = EXPECTED[page]
    facts = page_facts(parse_axtree(axtree(page)))
    missing = [tuple(f) for f in want["facts"] if tuple(f) not in facts]
    assert not missing, (missing, facts)
    run_on = [v for _, v in facts if v in want["not_values"]]
    assert not run_on, "a value runs past its clause"


@pytest.mark.parametrize("page", sorted(EXPECTED))
def test_one_answer_candidate_holds_every_value(page):
    want = EXPECTED[page]
    ctx = context(want["instruction"], common_pb2.Observation(url="http://site.web.test/", axtree=axtree(page)), "", [],
                  3)
    answers = [fold(c.action.answer.text) for c in propose(ctx) if c.kind == "answer" and c.answer_type != "done"]
    assert any(all(v in a for v in want["answer"]) for a in answers), answers

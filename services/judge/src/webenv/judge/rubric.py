"""Rubric validation and compilation (with a cache of compiled rubrics).

A rubric is compiled once per distinct content: every criterion is validated and turned into a
checker. Problems are collected (ValidateRubric lists them all); Evaluate refuses a rubric with
any problem as INVALID_ARGUMENT naming the first one.
"""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from dataclasses import dataclass

from webenv.judge.benchmarks import compile_benchmark
from webenv.judge.criteria import DEFAULT_MAX_REGEX_CHARS, Checker, CriterionProblem, compile_criterion
from webenv.v1 import common_pb2

MAX_FACTS = 500


@dataclass(frozen=True)
class Problem:
    """One problem in a rubric, with the full field path (``rubric.groups[0].facts[2]...``)."""

    fact_id: str
    field: str
    message: str
    reason: str = "INVALID_RUBRIC"
    construct: str = ""


@dataclass(frozen=True)
class CompiledFact:
    """A fact ready to judge: its checker, or ``checker is None`` for LLM-judged facts."""

    fact: common_pb2.Fact
    group: common_pb2.FactGroup
    kind: str
    checker: Checker | None


@dataclass(frozen=True)
class CompiledRubric:
    """All facts of a rubric, in rubric order, plus a content hash used by the LLM cache."""

    rubric: common_pb2.Rubric
    facts: tuple[CompiledFact, ...]
    digest: str

    @property
    def has_llm(self) -> bool:
        return any(f.checker is None for f in self.facts)

    @property
    def has_answer(self) -> bool:
        return any(f.kind == "answer" for f in self.facts)


class RubricInvalid(ValueError):
    """The rubric has problems; ``problems`` lists them all."""

    def __init__(self, problems: list[Problem]) -> None:
        first = problems[0]
        super().__init__(f"{first.field}: {first.message}")
        self.problems = problems


def _criterion(criterion: common_pb2.Criterion, max_regex: int) -> tuple[str, Checker | None]:
    """(kind, checker) of a criterion: a benchmark's own evaluator (benchmarks.py, built on criteria.py's checks),
    or one of criteria.py's kinds."""
    if criterion.WhichOneof("kind") != "benchmark":
        return compile_criterion(criterion, max_regex)
    try:
        return "benchmark", compile_benchmark(criterion.benchmark)
    except CriterionProblem as exc:
        exc.field = f"benchmark.{exc.field}" if exc.field else "benchmark"
        raise


def _compile(rubric: common_pb2.Rubric, max_regex: int) -> tuple[list[CompiledFact], list[Problem]]:
    facts: list[CompiledFact] = []
    problems: list[Problem] = []
    seen_facts: set[str] = set()
    seen_groups: set[str] = set()
    total = sum(len(g.facts) for g in rubric.groups)
    if total == 0:
        problems.append(Problem("", "rubric.groups", "rubric has no facts", "EMPTY_RUBRIC"))
    if total > MAX_FACTS:
        problems.append(Problem("", "rubric.groups", f"rubric has {total} facts, more than {MAX_FACTS}",
                                "RUBRIC_TOO_LARGE"))
        return facts, problems
    for gi, group in enumerate(rubric.groups):
        gfield = f"rubric.groups[{gi}]"
        if group.group_id and group.group_id in seen_groups:
            problems.append(Problem("", f"{gfield}.group_id", f"duplicate group id {group.group_id!r}",
                                    "DUPLICATE_ID"))
        seen_groups.add(group.group_id)
        for fi, fact in enumerate(group.facts):
            ffield = f"{gfield}.facts[{fi}]"
            if not fact.fact_id:
                problems.append(Problem("", f"{ffield}.fact_id", "fact has no id", "MISSING_ID"))
            elif fact.fact_id in seen_facts:
                problems.append(Problem(fact.fact_id, f"{ffield}.fact_id", f"duplicate fact id {fact.fact_id!r}",
                                        "DUPLICATE_ID"))
            seen_facts.add(fact.fact_id)
            try:
                kind, checker = _criterion(fact.criterion, max_regex)
            except CriterionProblem as exc:
                cfield = f"{ffield}.criterion.{exc.field}" if exc.field else f"{ffield}.criterion"
                problems.append(Problem(fact.fact_id, cfield, exc.message, exc.reason, exc.construct))
                continue
            if kind == "llm" and not fact.description.strip():
                problems.append(Problem(fact.fact_id, f"{ffield}.description",
                                        "an LLM-judged fact needs a description", "MISSING_DESCRIPTION"))
            facts.append(CompiledFact(fact, group, kind, checker))
    return facts, problems


def validate_rubric(rubric: common_pb2.Rubric, max_regex: int = DEFAULT_MAX_REGEX_CHARS) -> list[Problem]:
    """Every problem of a rubric (empty when valid)."""
    return _compile(rubric, max_regex)[1]


class RubricCache:
    """Bounded LRU of compiled rubrics keyed by their serialized content (thread-safe)."""

    def __init__(self, size: int = 1024, max_regex: int = DEFAULT_MAX_REGEX_CHARS) -> None:
        self.size = size
        self.max_regex = max_regex
        self._items: OrderedDict[bytes, CompiledRubric] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, rubric: common_pb2.Rubric) -> CompiledRubric:
        """The compiled rubric; raises :class:`RubricInvalid` when it has problems."""
        key = rubric.SerializeToString(deterministic=True)
        with self._lock:
            hit = self._items.get(key)
            if hit is not None:
                self._items.move_to_end(key)
                return hit
        copy = common_pb2.Rubric()
        copy.CopyFrom(rubric)  # compiled facts must not alias the caller's (mutable) message
        facts, problems = _compile(copy, self.max_regex)
        if problems:
            raise RubricInvalid(problems)
        compiled = CompiledRubric(copy, tuple(facts), hashlib.sha256(key).hexdigest()[:16])
        with self._lock:
            self._items[key] = compiled
            while len(self._items) > self.size:
                self._items.popitem(last=False)
        return compiled

"""Verdict assembly: all-required-facts semantics, score, versions, answer support.

- passed: every fact of every required (non-optional) group HOLDS (undecidable is not proof), and,
  when the rubric has LLM-judged facts, the final answer is supported by the evidence.
- score: fraction of all facts (optional groups included) that hold.
- answer_supported (WebGym's anti-hallucination check, deterministic): true when no answer was
  needed and none given; false when an answer was needed and none given; otherwise every number
  of the answer and at least half of its content words (all, for answers of one or two words)
  must appear in the evidence: some observation (URL, title, AXTree/Markdown, else HTML) or the site state.
"""

from __future__ import annotations

import re
import time
from collections.abc import Sequence

from webenv.judge import __version__
from webenv.judge.context import EvalContext
from webenv.judge.textnorm import find_numbers
from webenv.v1 import common_pb2

JUDGE_VERSION = f"webenv-judge/{__version__}"

_WORD = re.compile(r"[^\W_]{3,}", re.UNICODE)
_STOPWORDS = frozenset(
    """the and for are was were that this with from have has had not but all any can its into only
    than then there their them they what when where which who will would your yours you our ours out
    about also been being both each few more most other some such very just over under again once
    here how why per via price total found answer is it of to in on at by an or as be""".split()
)


def answer_values(answer: str) -> tuple[list[str], list[str]]:
    """(numbers as written, content words) of an answer: the values that must be supported."""
    nums = [f"{n:g}" for n in find_numbers(answer)]
    words = [w for w in (m.group(0).lower() for m in _WORD.finditer(answer)) if w not in _STOPWORDS
             and not w.isdigit()]
    return nums, list(dict.fromkeys(words))


def _number_forms(n: str) -> list[str]:
    """Spellings of a number that may appear in a page: 1234.5 -> 1234.5, 1,234.5, 1234.50."""
    forms = {n}
    try:
        v = float(n)
    except ValueError:
        return [n]
    forms.add(f"{v:,.2f}".rstrip("0").rstrip(".") if "." in n else f"{v:,.0f}")
    forms.add(f"{v:.2f}")
    return list(forms)


def answer_supported(ctx: EvalContext, needs_answer: bool) -> tuple[bool, str]:
    """Whether the final answer's values appear in the evidence; returns (supported, reason)."""
    answer = ctx.trajectory.final_answer.strip()
    if not answer:
        return (not needs_answer, "an answer was needed but none was given" if needs_answer else "no answer needed")
    nums, words = answer_values(answer)
    if not nums and not words:
        return True, "answer has no checkable values"
    state = ctx.trajectory.site_state_json.lower()
    newest_first = range(len(ctx.observations) - 1, -1, -1)

    def seen(token: str) -> bool:
        # Newest observations first, lower-cased lazily: the answer's evidence is usually at the end.
        return token in state or any(token in ctx.raw_lower(pos) for pos in newest_first)

    missing_nums = [n for n in nums if not any(seen(f) for f in _number_forms(n))]
    if missing_nums:
        return False, f"answer numbers not in the evidence: {missing_nums[:5]}"
    if words:
        found = sum(1 for w in words if seen(w))
        need = len(words) if len(words) <= 2 else (len(words) + 1) // 2
        if found < need:
            return False, f"only {found} of {len(words)} answer words appear in the evidence"
    return True, "answer values appear in the evidence"


def assemble(
    rubric: common_pb2.Rubric,
    results: Sequence[common_pb2.FactResult],
    required: Sequence[bool],
    supported: bool,
    require_support: bool,
) -> common_pb2.Verdict:
    """Build the Verdict from per-fact results (in rubric order)."""
    total = len(results)
    holds = sum(1 for r in results if r.outcome == common_pb2.FACT_OUTCOME_HOLDS)
    required_ok = all(r.outcome == common_pb2.FACT_OUTCOME_HOLDS for r, req in zip(results, required, strict=True) if req)
    verdict = common_pb2.Verdict(
        passed=required_ok and (supported or not require_support),
        score=holds / total if total else 0.0,
        results=results,
        rubric_id=rubric.rubric_id,
        rubric_version=rubric.version,
        judge_version=JUDGE_VERSION,
        answer_supported=supported,
    )
    now = time.time_ns()
    verdict.judged_at.seconds = now // 1_000_000_000
    verdict.judged_at.nanos = now % 1_000_000_000
    return verdict

"""WebArena's answer and URL evaluators (``webarena.string_match``, ``webarena.url_match``) and the answer
normalisation every WebArena-family evaluator shares (``clean_answer``, ``exact_match``, ``must_include``)."""


from __future__ import annotations

import re
from collections import defaultdict
from typing import Any
from urllib.parse import parse_qs, urlparse

from webenv.judge.context import EvalContext
from webenv.judge.criteria import (
    FAILS,
    HOLDS,
    UNDECIDABLE,
    Check,
    Checker,
    CriterionProblem,
    excerpt,
)


def clean_answer(answer: str) -> str:
    """WebArena's StringEvaluator.clean_answer."""
    answer = answer.strip()
    if answer.startswith("'") and answer.endswith("'"):
        answer = answer[1:-1]
    elif answer.startswith('"') and answer.endswith('"'):
        answer = answer[1:-1]
    return answer.lower()


def answer_tokens(text: str) -> list[str]:
    """Word tokens (what nltk's word_tokenize gives for WebArena's one-character references)."""
    return re.findall(r"\w+|[^\w\s]", text)


def exact_match(ref: str, pred: str) -> bool:
    return clean_answer(pred) == clean_answer(ref)


def must_include(ref: str, pred: str, tokenize: bool = False) -> bool:
    clean_ref, clean_pred = clean_answer(ref), clean_answer(pred)
    if tokenize and len(clean_ref) == 1 and len(answer_tokens(clean_ref)) == 1:
        return clean_ref in answer_tokens(clean_pred)
    return clean_ref in clean_pred


def _string_match(cfg: dict[str, Any]) -> Checker:
    answers = cfg.get("reference_answers")
    if not isinstance(answers, dict) or not answers:
        raise CriterionProblem("config_json.reference_answers", "needs exact_match, must_include, must_exclude or "
                               "fuzzy_match")
    for key, value in answers.items():
        if key == "exact_match" and not isinstance(value, str):
            raise CriterionProblem("config_json.reference_answers.exact_match", "must be a string")
        elif key in ("must_include", "must_exclude") and not (isinstance(value, list) and all(isinstance(v, str) for v in value)):
            raise CriterionProblem(f"config_json.reference_answers.{key}", "must be a list of strings")
        elif key == "fuzzy_match" and value != "N/A":
            raise CriterionProblem("config_json.reference_answers.fuzzy_match", "fuzzy_match references are "
                                   "LLM-judged facts; only 'N/A' is graded here")
        elif key not in ("exact_match", "must_include", "must_exclude", "fuzzy_match"):
            raise CriterionProblem(f"config_json.reference_answers.{key}", "not a WebArena string_match approach")

    def check(ctx: EvalContext) -> Check:
        pred = clean_answer(ctx.trajectory.final_answer)
        for key, value in answers.items():
            if key == "exact_match" and not exact_match(value, pred):
                return Check(FAILS, f"exact_match: {pred[:80]!r} is not {value[:80]!r}", excerpt=excerpt(pred))
            if key == "must_include":
                for v in value:
                    if not must_include(v, pred, tokenize=len(value) == 1):
                        return Check(FAILS, f"must_include: {v[:80]!r} is not in the answer", excerpt=excerpt(pred))
            if key == "must_exclude":
                for v in value:
                    if must_include(v, pred):
                        return Check(FAILS, f"must_exclude: {v[:80]!r} is in the answer", excerpt=excerpt(pred))
            if key == "fuzzy_match" and not exact_match("N/A", pred):
                return Check(UNDECIDABLE, "fuzzy_match 'N/A': the answer is not 'N/A'; whether its reason matches "
                             f"the string_note ({cfg.get('string_note', '')[:80]!r}) needs an LLM (WebArena's ua_match)",
                             excerpt=excerpt(pred))
        return Check(HOLDS, f"string_match: the answer matches {list(answers)}", excerpt=excerpt(pred))

    return check


def _base_and_query(url: str) -> tuple[str, dict[str, list[str]]]:
    p = urlparse(url)
    return (p.netloc + p.path).rstrip("/"), parse_qs(p.query)


def url_matches(pred: str, reference: str) -> bool:
    """WebArena's URLEvaluator, "GOLD in PRED"."""
    refs = [u.rstrip("/") for u in reference.split(" |OR| ")]
    ref_bases, ref_queries = [], defaultdict(set)
    for u in refs:
        base, query = _base_and_query(u)
        ref_bases.append(base.rstrip("/"))
        for k, v in query.items():
            ref_queries[k].update(v)
    pred_base, pred_query = _base_and_query(pred.rstrip("/"))
    if not any(b in pred_base for b in ref_bases):  # upstream: `ref_base_path in pred_base_paths` (a string)
        return False
    return all(any(v in pred_query.get(k, []) for v in values) for k, values in ref_queries.items())


def url_exact(pred: str, reference: str) -> bool:
    """VisualWebArena's URLExactEvaluator, "EXACT"."""
    def clean(u: str) -> str:
        u = u.replace("localhost", "127.0.0.1")
        return u[:-1] if u.endswith("/") else u
    return clean(pred) in [clean(u) for u in reference.split(" |OR| ")]


def _url_match(cfg: dict[str, Any]) -> Checker:
    ref = cfg.get("reference_url")
    if not isinstance(ref, str) or not ref.strip():
        raise CriterionProblem("config_json.reference_url", "url_match needs a reference_url")
    rule = cfg.get("url_note", "GOLD in PRED")
    if rule not in ("GOLD in PRED", "EXACT"):
        raise CriterionProblem("config_json.url_note", f"unknown matching rule {cfg.get('url_note')!r}")
    matches = url_exact if rule == "EXACT" else url_matches

    def check(ctx: EvalContext) -> Check:
        pred = ctx.final_url()
        if not pred:
            return Check(UNDECIDABLE, "trajectory has no final URL", -1)
        ok = matches(pred, ref)
        return Check(HOLDS if ok else FAILS, f"final url {'matches' if ok else 'does not match'} {ref[:120]!r}", -1,
                     excerpt=excerpt(pred))

    return check

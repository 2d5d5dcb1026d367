"""Deterministic criteria: one compile function per criterion kind.

Each ``compile_<kind>`` validates its criterion once (regex size and syntax, condition safety,
selector syntax, path syntax, JSON values) and returns a checker closure that judges an
:class:`EvalContext` and returns a :class:`Check` (outcome, reason, evidence). Invalid criteria
raise :class:`CriterionProblem` naming the field, which the rubric compiler collects.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from typing import Any
from urllib.parse import parse_qsl, unquote, urlencode, urlsplit

import regex
from selectolax.lexbor import LexborHTMLParser, SelectolaxError
from webenv.judge.compare import judge_matches
from webenv.judge.context import FMT_HTML, EvalContext, node_text
from webenv.judge.jsonpath import JsonPathError, compile_path
from webenv.judge.safeexpr import EvaluationError, UnsafeExpression, compile_expression
from webenv.judge.textnorm import (
    contains_words,
    find_numbers,
    fold,
    normalize,
    parse_date,
    parse_number,
)
from webenv.v1 import common_pb2

HOLDS = common_pb2.FACT_OUTCOME_HOLDS
FAILS = common_pb2.FACT_OUTCOME_FAILS
UNDECIDABLE = common_pb2.FACT_OUTCOME_UNDECIDABLE

EXCERPT_CHARS = 200
DEFAULT_MAX_REGEX_CHARS = 512
# Catastrophic backtracking (e.g. `(x+x+)+y`) is cut off: a rubric regex must never stall the judge.
REGEX_TIMEOUT_SECONDS = 0.05


class RegexTimeout(Exception):
    """A rubric regex ran past REGEX_TIMEOUT_SECONDS on the evidence."""


def regex_search(rx: regex.Pattern[str], text: str) -> bool:
    """Whether ``rx`` matches somewhere in ``text``, within the time limit."""
    try:
        return rx.search(text, timeout=REGEX_TIMEOUT_SECONDS) is not None
    except TimeoutError:
        raise RegexTimeout(f"regex /{rx.pattern[:60]}/ ran past {REGEX_TIMEOUT_SECONDS}s") from None


@dataclass(frozen=True, slots=True)
class Check:
    """Outcome of one criterion with its evidence."""

    outcome: int
    reason: str
    step_index: int = 0
    fmt: int = 0
    path: str = ""
    excerpt: str = ""


Checker = Callable[[EvalContext], Check]


class CriterionProblem(ValueError):
    """A criterion is malformed or unsafe. ``field`` is relative to the criterion."""

    def __init__(self, field: str, message: str, reason: str = "INVALID_CRITERION", construct: str = "") -> None:
        super().__init__(message)
        self.field = field
        self.message = message
        self.reason = reason
        self.construct = construct


def excerpt(text: str, around: str = "", cap: int = EXCERPT_CHARS) -> str:
    """A capped excerpt of ``text``, centred on ``around`` when found."""
    if len(text) <= cap:
        return text
    start = 0
    if around:
        i = text.casefold().find(around.casefold())
        if i > 0:
            start = max(0, i - cap // 4)
    return text[start : start + cap]


@lru_cache(maxsize=4096)
def compile_regex(pattern: str, max_chars: int = DEFAULT_MAX_REGEX_CHARS) -> regex.Pattern[str]:
    """Compile a rubric regex with a size limit (cached)."""
    if len(pattern) > max_chars:
        raise CriterionProblem(
            "value", f"regex is {len(pattern)} characters, more than the limit of {max_chars}", "REGEX_TOO_LARGE"
        )
    try:
        return regex.compile(pattern)
    except regex.error as exc:
        raise CriterionProblem("value", f"invalid regex: {exc}", "INVALID_REGEX") from None


_MODE_NAMES = {v: k for k, v in common_pb2.MatchMode.items()}


# -- url ---------------------------------------------------------------------------------------


def normalize_url(url: str) -> str:
    """Canonical URL for NORMALIZED comparison: case of scheme/host, default port, trailing slash,
    percent-encoding, query order and fragment do not matter."""
    try:
        p = urlsplit(url.strip())
    except ValueError:
        return url.strip()
    scheme = p.scheme.lower()
    host = (p.hostname or "").lower()
    port = p.port if p.port and (scheme, p.port) not in (("http", 80), ("https", 443)) else None
    netloc = f"{host}:{port}" if port else host
    path = unquote(p.path).rstrip("/") or "/"
    query = urlencode(sorted(parse_qsl(p.query, keep_blank_values=True)))
    return f"{scheme}://{netloc}{path}" + (f"?{query}" if query else "")


def compile_url(c: common_pb2.UrlCriterion, max_regex: int) -> Checker:
    mode = c.mode or common_pb2.MATCH_MODE_EXACT
    value = c.value
    if not value:
        raise CriterionProblem("value", "url criterion needs a value")
    match: Callable[[str], bool]
    if mode == common_pb2.MATCH_MODE_EXACT:
        match = lambda u: u == value  # noqa: E731
    elif mode == common_pb2.MATCH_MODE_CONTAINS:
        match = lambda u: value in u  # noqa: E731
    elif mode == common_pb2.MATCH_MODE_NORMALIZED:
        want = normalize_url(value)
        match = lambda u: normalize_url(u) == want  # noqa: E731
    elif mode == common_pb2.MATCH_MODE_REGEX:
        rx = compile_regex(value, max_regex)
        match = lambda u: regex_search(rx, u)  # noqa: E731
    else:
        raise CriterionProblem("mode", f"mode {_MODE_NAMES.get(mode, mode)} is not valid for url criteria")
    how = _MODE_NAMES.get(mode, "").removeprefix("MATCH_MODE_").lower()

    def check(ctx: EvalContext) -> Check:
        try:
            return check_urls(ctx)
        except RegexTimeout as exc:
            return Check(UNDECIDABLE, str(exc), -1)

    def check_urls(ctx: EvalContext) -> Check:
        if c.any_step:
            urls = ctx.all_urls()
            for idx, u in urls:
                if match(u):
                    return Check(HOLDS, f"step {idx} url {how} {value!r}", idx, excerpt=excerpt(u))
            if not urls:
                return Check(UNDECIDABLE, "trajectory has no URLs")
            return Check(FAILS, f"no step's url {how} {value!r}", -1, excerpt=excerpt(urls[-1][1]))
        u = ctx.final_url()
        if not u:
            return Check(UNDECIDABLE, "trajectory has no final URL", -1)
        if match(u):
            return Check(HOLDS, f"final url {how} {value!r}", -1, excerpt=excerpt(u))
        return Check(FAILS, f"final url fails {how} {value!r}", -1, excerpt=excerpt(u))

    return check


# -- answer ------------------------------------------------------------------------------------


def compile_answer(c: common_pb2.AnswerCriterion, max_regex: int) -> Checker:
    mode = c.mode or common_pb2.MATCH_MODE_EXACT
    expected = c.expected
    match: Callable[[str], tuple[bool, str]]
    if mode == common_pb2.MATCH_MODE_SET:
        values = [v for v in c.values if v.strip()] or [v.strip() for v in expected.split(",") if v.strip()]
        if not values:
            raise CriterionProblem("values", "set criterion needs values (or a comma-separated expected)")
        norm_values = [(v, normalize(v)) for v in values]

        def match(a: str) -> tuple[bool, str]:
            na = normalize(a)
            missing = [v for v, nv in norm_values if not contains_words(na, nv)]
            if missing:
                return False, f"answer lacks {len(missing)} of {len(values)} values: {missing[:5]!r}"
            return True, f"answer contains all {len(values)} values"
    elif not expected:
        raise CriterionProblem("expected", "answer criterion needs an expected value")
    elif mode == common_pb2.MATCH_MODE_EXACT:
        want = expected.strip()

        def match(a: str) -> tuple[bool, str]:
            ok = a.strip() == want
            return ok, f"answer {'equals' if ok else 'is not'} {want!r}"
    elif mode == common_pb2.MATCH_MODE_CONTAINS:
        want = fold(expected)

        def match(a: str) -> tuple[bool, str]:
            ok = want in fold(a)
            return ok, f"answer {'contains' if ok else 'does not contain'} {expected!r}"
    elif mode == common_pb2.MATCH_MODE_NORMALIZED:
        want = normalize(expected)

        def match(a: str) -> tuple[bool, str]:
            ok = normalize(a) == want
            return ok, f"normalised answer {'equals' if ok else 'differs from'} {want!r}"
    elif mode == common_pb2.MATCH_MODE_REGEX:
        rx = compile_regex(expected, max_regex)

        def match(a: str) -> tuple[bool, str]:
            ok = regex_search(rx, a)
            return ok, f"answer {'matches' if ok else 'does not match'} /{expected}/"
    elif mode == common_pb2.MATCH_MODE_NUMBER:
        num = parse_number(expected)
        if num is None:
            raise CriterionProblem("expected", f"expected {expected!r} is not a number")
        tol = abs(c.tolerance)

        def match(a: str) -> tuple[bool, str]:
            whole = parse_number(a)
            if whole is not None:
                got = whole
            else:
                found = sorted(set(find_numbers(a)))
                if not found:
                    return False, "answer has no number"
                if len(found) > 1:
                    return False, f"answer has {len(found)} different numbers; ambiguous"
                got = found[0]
            ok = abs(got - num) <= tol + 1e-9 * max(1.0, abs(num))
            return ok, f"answer number {got:g} {'is' if ok else 'is not'} within {tol:g} of {num:g}"
    elif mode == common_pb2.MATCH_MODE_DATE:
        want_date = parse_date(expected)
        if want_date is None:
            raise CriterionProblem("expected", f"expected {expected!r} is not a date")

        def match(a: str) -> tuple[bool, str]:
            got = parse_date(a) or parse_date(a, fuzzy=True)
            if got is None:
                return False, "answer has no date"
            ok = got == want_date
            return ok, f"answer date {got.isoformat()} {'is' if ok else 'is not'} {want_date.isoformat()}"
    else:
        raise CriterionProblem("mode", f"unknown match mode {mode}")

    def check(ctx: EvalContext) -> Check:
        answer = ctx.trajectory.final_answer
        if not answer.strip():
            return Check(FAILS, "no final answer was given")
        try:
            ok, reason = match(answer)
        except RegexTimeout as exc:
            return Check(UNDECIDABLE, str(exc), excerpt=excerpt(answer))
        return Check(HOLDS if ok else FAILS, reason, excerpt=excerpt(answer))

    return check


# -- page --------------------------------------------------------------------------------------


def check_selector(selector: str, field: str = "css_selector") -> None:
    """Raise CriterionProblem when selectolax cannot parse the selector."""
    if len(selector) > 1000:
        raise CriterionProblem(field, "css selector longer than 1000 characters", "INVALID_SELECTOR")
    try:
        _EMPTY_DOC.css(selector)
    except (SelectolaxError, ValueError) as exc:
        raise CriterionProblem(field, f"invalid css selector {selector!r}: {exc}", "INVALID_SELECTOR") from None


_EMPTY_DOC = LexborHTMLParser("<html><body></body></html>")


def compile_page(c: common_pb2.PageCriterion) -> Checker:
    text, selector, cond_src = c.text, c.css_selector, c.condition
    if not (text or selector or cond_src):
        raise CriterionProblem("text", "page criterion needs text, css_selector or condition")
    if selector:
        check_selector(selector)
    cond = None
    if cond_src:
        try:
            cond = compile_expression(cond_src, frozenset({"text"}))
        except UnsafeExpression as exc:
            raise CriterionProblem("condition", str(exc), exc.reason, exc.construct) from None
    want = fold(text) if text else ""
    index = c.step_index if c.HasField("step_index") else None

    def judge_text(value: str) -> tuple[bool, str]:
        if want and want not in fold(value):
            return False, f"text {text!r} not found"
        if cond is not None:
            try:
                ok = bool(cond.evaluate({"text": value}))
            except EvaluationError as exc:
                return False, f"condition {cond_src!r} raised {exc}"
            if not ok:
                return False, f"condition {cond_src!r} is false for {value[:60]!r}"
            return True, f"condition {cond_src!r} holds for {value[:60]!r}"
        return True, f"text {text!r} found"

    def check_at(ctx: EvalContext, pos: int) -> Check:
        step = ctx.evidence_step(pos)
        if selector:
            tree = ctx.tree(pos)
            if tree is None:
                return Check(UNDECIDABLE, f"step {step} has no HTML (not kept); a css selector needs it", step)
            nodes = tree.css(selector)
            if not nodes:
                return Check(FAILS, f"no element matches {selector!r}", step, FMT_HTML)
            last_reason = ""
            first_text = ""
            for node in nodes:
                value = node_text(node)
                first_text = first_text or value
                ok, last_reason = judge_text(value)
                if ok:
                    return Check(HOLDS, f"{selector!r}: {last_reason}", step, FMT_HTML, excerpt=excerpt(value, text))
            if len(nodes) > 1:
                last_reason = f"none of {len(nodes)} elements qualifies; last: {last_reason}"
            return Check(FAILS, f"{selector!r}: {last_reason}", step, FMT_HTML, excerpt=excerpt(first_text))
        page, fmt = ctx.page_text(pos)
        if fmt == common_pb2.OBSERVATION_FORMAT_UNSPECIFIED:
            return Check(UNDECIDABLE, f"step {step} kept no text format (HTML, Markdown, AXTree)", step)
        ok, reason = judge_text(page)
        return Check(HOLDS if ok else FAILS, reason, step, fmt, excerpt=excerpt(page, text))

    def check(ctx: EvalContext) -> Check:
        if c.any_step:
            results = [check_at(ctx, pos) for pos in range(len(ctx.observations))]
            if not results:
                return Check(UNDECIDABLE, "trajectory has no observations")
            for r in results:
                if r.outcome == HOLDS:
                    return r
            decided = [r for r in results if r.outcome == FAILS]
            if decided:
                last = decided[-1]
                return Check(FAILS, f"no step satisfies it (last checked: {last.reason})", last.step_index,
                             last.fmt, excerpt=last.excerpt)
            return Check(UNDECIDABLE, f"no step could be checked ({results[-1].reason})", results[-1].step_index)
        pos = ctx.resolve(index)
        if pos is None:
            n = len(ctx.observations)
            return Check(UNDECIDABLE, f"step {index if index is not None else -1} is out of range ({n} observations)")
        return check_at(ctx, pos)

    return check


# -- element state -----------------------------------------------------------------------------

_BOOL_PROPS = {"checked", "disabled", "selected", "visible", "focused", "clickable"}


def _parse_value_json(value_json: str, op: int) -> Any:
    if not value_json.strip():
        if op == common_pb2.COMPARISON_EXISTS:
            return None
        raise CriterionProblem("value_json", "value_json is empty (give a JSON value, e.g. \"blue\", 3 or true)")
    try:
        return json.loads(value_json)
    except json.JSONDecodeError as exc:
        raise CriterionProblem(
            "value_json", f"value_json {value_json[:60]!r} is not valid JSON ({exc.msg}); quote strings", "INVALID_JSON"
        ) from None


def _comparison_valid(op: int) -> None:
    if op not in common_pb2.Comparison.values():
        raise CriterionProblem("op", f"unknown comparison {op}")


def live_element(ctx: EvalContext, pos: int, node: Any) -> common_pb2.Element | None:
    """The live state (ELEMENTS format) of an HTML element at ``pos``, by its ``bid``; None when not kept."""
    bid = node.attributes.get("bid")
    if bid:
        for e in ctx.observations[pos].elements:
            if e.element_id == bid:
                return e
    return None


def compile_element_state(c: common_pb2.ElementStateCriterion) -> Checker:
    if not c.css_selector:
        raise CriterionProblem("css_selector", "element state criterion needs a css_selector")
    check_selector(c.css_selector)
    prop = (c.property or "").strip()
    if not prop:
        raise CriterionProblem("property", "element state criterion needs a property (checked, value, disabled, ...)")
    _comparison_valid(c.op)
    expected = _parse_value_json(c.value_json, c.op)
    selector = c.css_selector

    def read(ctx: EvalContext, pos: int, node: Any) -> tuple[Any, str]:
        attrs = node.attributes
        live = live_element(ctx, pos, node)
        if prop in _BOOL_PROPS:
            if live is not None and prop in ("checked", "disabled", "visible", "focused", "clickable"):
                return bool(getattr(live, prop)), "elements"
            if prop in ("visible", "focused", "clickable"):
                return None, "html"
            return prop in attrs, "html"
        if prop == "value":
            if live is not None and live.value:
                return live.value, "elements"
            if node.tag == "textarea":
                return node.text(deep=True), "html"
            return attrs.get("value"), "html"
        if prop == "text":
            return node_text(node), "html"
        return attrs.get(prop), "html"

    def check(ctx: EvalContext) -> Check:
        pos = ctx.final_position()
        if pos is None:
            return Check(UNDECIDABLE, "trajectory has no final observation")
        step = ctx.evidence_step(pos)
        tree = ctx.tree(pos)
        if tree is None:
            return Check(UNDECIDABLE, f"step {step} has no HTML (not kept); a css selector needs it", step)
        node = tree.css_first(selector)
        if node is None:
            if c.op == common_pb2.COMPARISON_EXISTS and expected is False:
                return Check(HOLDS, f"no element matches {selector!r}, as expected", step, FMT_HTML)
            return Check(FAILS, f"no element matches {selector!r}", step, FMT_HTML)
        value, source = read(ctx, pos, node)
        if value is None and prop in ("visible", "focused", "clickable"):
            return Check(UNDECIDABLE, f"{prop} needs the ELEMENTS format, not kept at step {step}", step)
        matches = [] if value is None else [value]
        ok, shown, reason = judge_matches(matches, c.op, expected)
        fmt = common_pb2.OBSERVATION_FORMAT_ELEMENTS if source == "elements" else FMT_HTML
        return Check(HOLDS if ok else FAILS, f"{selector} {prop}: {reason}", step, fmt,
                     excerpt=excerpt(json.dumps(shown) if shown is not None else ""))

    return check


# -- site state --------------------------------------------------------------------------------


def compile_site_state(c: common_pb2.SiteStateCriterion) -> Checker:
    if not c.path:
        raise CriterionProblem("path", "site state criterion needs a path")
    try:
        path = compile_path(c.path)
    except JsonPathError as exc:
        raise CriterionProblem("path", str(exc), "INVALID_PATH") from None
    _comparison_valid(c.op)
    expected = _parse_value_json(c.value_json, c.op)

    def check(ctx: EvalContext) -> Check:
        state, err = ctx.site_state()
        if state is None:
            return Check(UNDECIDABLE, err, path=c.path)
        try:
            matches = path.find(state)
        except RecursionError:
            return Check(UNDECIDABLE, "site state is nested too deeply for this path", path=c.path)
        ok, shown, reason = judge_matches(matches, c.op, expected)
        shown_text = json.dumps(shown, separators=(",", ":"), default=str) if shown is not None else ""
        return Check(HOLDS if ok else FAILS, reason, path=c.path, excerpt=excerpt(shown_text))

    return check


# -- env reward, category ----------------------------------------------------------------------


def compile_env_reward(c: common_pb2.EnvRewardCriterion) -> Checker:
    threshold = c.min_reward

    def check(ctx: EvalContext) -> Check:
        r = ctx.trajectory.env_reward
        # min_reward 0 (the proto default) means "a positive reward": `reward >= 0` would be vacuous.
        ok = r >= threshold if threshold != 0 else r > 0
        want = f">= {threshold:g}" if threshold != 0 else "> 0"
        return Check(HOLDS if ok else FAILS, f"env reward {r:g} {'is' if ok else 'is not'} {want}",
                     excerpt=f"env_reward={r:g}")

    return check


def compile_category(c: common_pb2.CategoryCriterion) -> Checker:
    if not c.category.strip():
        raise CriterionProblem("category", "category criterion needs a category")
    want = normalize(c.category)

    def check(ctx: EvalContext) -> Check:
        got = ctx.trajectory.category
        if not got.strip():
            return Check(UNDECIDABLE, "trajectory has no category label")
        ok = normalize(got) == want
        return Check(HOLDS if ok else FAILS, f"category {got!r} {'matches' if ok else 'is not'} {c.category!r}",
                     excerpt=got)

    return check


def compile_llm(c: common_pb2.LlmCriterion) -> None:
    """LLM criteria have no deterministic checker; only their size is validated."""
    if len(c.guidance) > 4000:
        raise CriterionProblem("guidance", "guidance longer than 4000 characters")


def compile_criterion(criterion: common_pb2.Criterion, max_regex: int) -> tuple[str, Checker | None]:
    """(kind, checker) of a criterion; the checker is None for LLM-judged facts."""
    kind = criterion.WhichOneof("kind")
    if kind is None:
        raise CriterionProblem("", "criterion has no kind set", "MISSING_CRITERION")
    try:
        if kind == "url":
            return kind, compile_url(criterion.url, max_regex)
        if kind == "answer":
            return kind, compile_answer(criterion.answer, max_regex)
        if kind == "page":
            return kind, compile_page(criterion.page)
        if kind == "element_state":
            return kind, compile_element_state(criterion.element_state)
        if kind == "site_state":
            return kind, compile_site_state(criterion.site_state)
        if kind == "env_reward":
            return kind, compile_env_reward(criterion.env_reward)
        if kind == "category":
            return kind, compile_category(criterion.category)
        if kind == "llm":
            compile_llm(criterion.llm)
            return kind, None
    except CriterionProblem as exc:
        exc.field = f"{kind}.{exc.field}" if exc.field else kind
        raise
    raise CriterionProblem(kind, f"unknown criterion kind {kind!r}", "UNKNOWN_CRITERION")

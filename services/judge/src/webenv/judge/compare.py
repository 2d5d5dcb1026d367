"""Comparison semantics for site-state and element-state criteria.

Rules (documented in the README):
- Values are JSON values. EQ is JSON equality, except that a numeric string and a number compare
  as numbers and "true"/"false" strings compare with booleans (HTML attributes are strings).
- LT/LE/GT/GE compare numbers (numeric strings count) or two strings; other pairs do not satisfy.
- CONTAINS: a string contains the expected string (case-sensitive), a list contains an element
  JSON-equal to the expected value, an object has the expected key.
- With several matches (a path with a wildcard or filter): EXISTS holds when there is at least one,
  EQ/LT/LE/GT/GE/CONTAINS hold when ANY match satisfies, NE holds when NO match equals the
  expected value. A path that matches nothing fails (EXISTS with `false` as value holds then).
"""

from __future__ import annotations

from typing import Any

from webenv.judge.jsonpath import json_equal
from webenv.judge.textnorm import parse_number
from webenv.v1 import common_pb2

OP_NAMES = {
    common_pb2.COMPARISON_UNSPECIFIED: "==",
    common_pb2.COMPARISON_EQ: "==",
    common_pb2.COMPARISON_NE: "!=",
    common_pb2.COMPARISON_LT: "<",
    common_pb2.COMPARISON_LE: "<=",
    common_pb2.COMPARISON_GT: ">",
    common_pb2.COMPARISON_GE: ">=",
    common_pb2.COMPARISON_CONTAINS: "contains",
    common_pb2.COMPARISON_EXISTS: "exists",
}


def _as_number(v: Any) -> float | None:
    if isinstance(v, bool):
        return None
    if isinstance(v, (int, float)):
        return float(v)
    if isinstance(v, str):
        return parse_number(v)
    return None


def equal(actual: Any, expected: Any) -> bool:
    """Equality with the string coercions HTML attributes and scraped values need."""
    if json_equal(actual, expected):
        return True
    if isinstance(expected, bool) and isinstance(actual, str):
        return actual.strip().lower() == ("true" if expected else "false")
    if isinstance(expected, (int, float)) and not isinstance(expected, bool) and isinstance(actual, str):
        n = _as_number(actual)
        return n is not None and n == expected
    if isinstance(actual, (int, float)) and not isinstance(actual, bool) and isinstance(expected, str):
        n = _as_number(expected)
        return n is not None and n == actual
    return False


def satisfies(actual: Any, op: int, expected: Any) -> bool:
    """Whether one value satisfies the comparison (EXISTS is handled by the caller)."""
    if op in (common_pb2.COMPARISON_UNSPECIFIED, common_pb2.COMPARISON_EQ):
        return equal(actual, expected)
    if op == common_pb2.COMPARISON_NE:
        return not equal(actual, expected)
    if op == common_pb2.COMPARISON_CONTAINS:
        if isinstance(actual, str):
            return isinstance(expected, str) and expected in actual
        if isinstance(actual, list):
            return any(equal(a, expected) for a in actual)
        if isinstance(actual, dict):
            return isinstance(expected, str) and expected in actual
        return False
    a_num, e_num = _as_number(actual), _as_number(expected)
    if a_num is not None and e_num is not None:
        a, e = a_num, e_num
    elif isinstance(actual, str) and isinstance(expected, str):
        a, e = actual, expected  # type: ignore[assignment]
    else:
        return False
    if op == common_pb2.COMPARISON_LT:
        return a < e
    if op == common_pb2.COMPARISON_LE:
        return a <= e
    if op == common_pb2.COMPARISON_GT:
        return a > e
    if op == common_pb2.COMPARISON_GE:
        return a >= e
    return False


def judge_matches(matches: list[Any], op: int, expected: Any) -> tuple[bool, Any, str]:
    """Apply the multi-match rule; returns (holds, the value shown as evidence, reason)."""
    name = OP_NAMES.get(op, str(op))
    if op == common_pb2.COMPARISON_EXISTS:
        want = True if expected is None else bool(expected)
        found = bool(matches)
        if found == want:
            return True, matches[0] if matches else None, "path exists" if found else "path matched nothing, as expected"
        return False, matches[0] if matches else None, "path matched nothing" if want else "path exists but should not"
    if not matches:
        return False, None, "path matched nothing"
    if op == common_pb2.COMPARISON_NE:
        for m in matches:
            if equal(m, expected):
                return False, m, f"a value equals {expected!r}"
        return True, matches[0], f"no value equals {expected!r}"
    for m in matches:
        if satisfies(m, op, expected):
            return True, m, f"{_short(m)} {name} {_short(expected)}"
    return False, matches[0], f"no value satisfies {name} {_short(expected)} (first: {_short(matches[0])})"


def _short(v: Any, cap: int = 60) -> str:
    s = repr(v)
    return s if len(s) <= cap else s[: cap - 3] + "..."

"""The safe condition evaluator: seed conditions work, everything outside the whitelist is refused."""

from __future__ import annotations

import pytest
from webenv.judge.safeexpr import EvaluationError, UnsafeExpression, compile_expression


@pytest.mark.parametrize(
    ("expr", "text", "expected"),
    [
        ("float(text.strip('$')) < 50", "$45.00", True),
        ("float(text.strip('$')) < 50", "$50.01", False),
        ("'in stock' in text.lower()", "In Stock today", True),
        ("int(text) >= 3 and len(text) < 10", "7", True),
        ("int(text) >= 3 and len(text) < 10", "2", False),
        ("text.split()[0] == 'Total:'", "Total: 3", True),
        ("text[:3].upper() == 'ABC'", "abcdef", True),
        ("round(float(text.replace(',', '')), 0) == 1235", "1,234.6", True),
        ("max(len(text), 2) ** 2 == 16", "abcd", True),
        ("not text.startswith('x') or text.endswith('y')", "xy", True),
        ("-abs(float(text)) if text else 0", "-3", -3.0),
    ],
)
def test_seed_conditions_evaluate(expr: str, text: str, expected: object) -> None:
    assert compile_expression(expr).evaluate({"text": text}) == expected


@pytest.mark.parametrize(
    ("expr", "construct"),
    [
        ("text.__class__", "Attribute"),
        ("text.__class__.__mro__", "Attribute"),
        ("__import__('os').system('true')", "Attribute"),
        ("open('/etc/passwd').read()", "Attribute"),
        ("9**9**9", "Pow"),
        ("2 ** 10000", "Pow"),
        ("'a'*10**9", "Mult"),
        ("10**9*'a'", "Mult"),
        ("text * 1000000", "Mult"),
        ("lambda: 1", "Lambda"),
        ("(lambda x: x)(text)", "Lambda"),
        ("[c for c in text]", "ListComp"),
        ("{c: 1 for c in text}", "DictComp"),
        ("any(c for c in text)", "Call"),
        ("text.format(1)", "Attribute"),
        ("os", "Name"),
        ("(x := 1)", "NamedExpr"),
        ("f'{text}'", "JoinedStr"),
        ("text[len(text)]", "Subscript"),
        ("float(text, base=2)", "keyword"),
        ("import os", "SyntaxError"),
        ("'x' * (10**5 + 1)", "Mult"),
        ("'%0999999999d' % 1", "Mod"),
    ],
)
def test_unsafe_expressions_are_refused(expr: str, construct: str) -> None:
    with pytest.raises(UnsafeExpression) as info:
        compile_expression(expr)
    assert info.value.construct == construct
    assert str(info.value)


def test_refusal_messages_name_the_construct() -> None:
    with pytest.raises(UnsafeExpression, match="attribute access '__class__' is not allowed"):
        compile_expression("text.__class__")
    with pytest.raises(UnsafeExpression, match="call of '__import__' is not allowed"):
        compile_expression("__import__('os')")
    with pytest.raises(UnsafeExpression, match="exponent too large"):
        compile_expression("9**9**9")


def test_oversized_expression_refused() -> None:
    with pytest.raises(UnsafeExpression) as info:
        compile_expression("1 + " * 400 + "1")
    assert info.value.reason == "CONDITION_TOO_LARGE"


@pytest.mark.parametrize(
    ("expr", "text"),
    [
        ("float(text) > 1", "not a number"),
        ("text * int(text) == ''", "99999"),  # repetition bound at run time
        ("float(text) ** float(text) > 0", "1000"),  # exponent bound at run time
        ("text.replace('', 'x' * 1000) == ''", "a" * 1000),  # replace growth bound
        ("text.split().lower() == ''", "a b"),  # methods only on strings
        ("1 / (len(text) - 1) > 0", "a"),
        ("round(5, -10**9) == 0", "a"),  # would compute 10**(10**9)
        ("text % 1 == ''", "%0999999999d"),  # string formatting
        ("round(float(text), 2.5) > 0", "1"),
    ],
)
def test_runtime_errors_are_evaluation_errors(expr: str, text: str) -> None:
    compiled = compile_expression(expr)
    with pytest.raises(EvaluationError):
        compiled.evaluate({"text": text})


def test_only_bound_names_are_allowed() -> None:
    assert compile_expression("value > 3", {"value"}).evaluate({"value": 4}) is True
    with pytest.raises(UnsafeExpression, match="name 'text' is not allowed"):
        compile_expression("text", {"value"})

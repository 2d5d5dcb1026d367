"""The site-state path language."""

from __future__ import annotations

import pytest
from webenv.judge.jsonpath import JsonPathError, compile_path

DOC = {
    "orders": [
        {"id": 1, "items": [{"sku": "A12", "qty": 1}], "status": "cancelled"},
        {"id": 2, "items": [{"sku": "A12", "qty": 3}, {"sku": "B7", "qty": 5}], "status": "placed"},
    ],
    "cart": {"total": 12.5, "items": []},
    "user": {"name": "ada", "flags": {"vip": True}},
}


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("$.orders[-1].items[?(@.sku==\"A12\")].qty", [3]),
        ("$.orders[0].id", [1]),
        ("$.orders[*].id", [1, 2]),
        ("$.orders[-1].items[?(@.qty>=3)].sku", ["A12", "B7"]),
        ("$.orders[?(@.status=='placed')].id", [2]),
        ("$.orders[?(@.id==2 && @.items[0].qty>1)].id", [2]),
        ("$.orders[?(@.id==1 || @.id==2)].id", [1, 2]),
        ("$.orders[?(@.status)].id", [1, 2]),
        ("$.cart.total", [12.5]),
        ("$['cart']['total']", [12.5]),
        ("$..qty", [1, 3, 5]),
        ("$.user.*", ["ada", {"vip": True}]),
        ("$.user.flags.vip", [True]),
        ("$.nothing", []),
        ("$.orders[7]", []),
        ("$.cart.items[0]", []),
        ("$", [DOC]),
    ],
)
def test_paths_select(path: str, expected: list[object]) -> None:
    assert compile_path(path).find(DOC) == expected


@pytest.mark.parametrize(
    "path", ["orders", "$.", "$[", "$[?(@.a=)]", "$.a b", "$[abc]", "$[?(@.a==1 && @.b==2 || @.c==3)]", "$" + ".a" * 300]
)
def test_bad_paths_raise(path: str) -> None:
    with pytest.raises(JsonPathError):
        compile_path(path)


def test_error_names_position() -> None:
    with pytest.raises(JsonPathError, match="position 2"):
        compile_path("$[")

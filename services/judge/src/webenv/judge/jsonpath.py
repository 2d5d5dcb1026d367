"""The JSONPath-like path language of site-state criteria.

Grammar (a practical subset of JSONPath, enough for site state)::

    path     := '$' segment*
    segment  := '.' name | '.*' | '[' selector ']' | '..' name
    selector := int (negative counts from the end) | '*' | 'name' | "name"
              | '?(' filter ')'
    filter   := cond (('&&' | '||') cond)*          (no mixing of && and || in one filter)
    cond     := '@' ('.' name | '[' int ']')* [op literal]
    op       := '==' | '!=' | '<' | '<=' | '>' | '>='
    literal  := JSON string (or 'single quoted'), number, true, false, null

`$.orders[-1].items[?(@.sku=="A12")].qty` selects the qty of every item with sku A12 in the last
order. Evaluation returns every match (a list); the caller applies a comparison rule to them.
Paths are compiled once and cached.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

MAX_PATH_CHARS = 512


class JsonPathError(ValueError):
    """The path does not parse; the message says where."""


_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_\-]*")
_INT = re.compile(r"-?\d+")
_NUMBER = re.compile(r"-?\d+(\.\d+)?([eE][+-]?\d+)?")
_OPS = ("==", "!=", "<=", ">=", "<", ">")

Step = Callable[[Any], Iterator[Any]]


def _child(name: str) -> Step:
    def step(v: Any) -> Iterator[Any]:
        if isinstance(v, dict) and name in v:
            yield v[name]

    return step


def _index(i: int) -> Step:
    def step(v: Any) -> Iterator[Any]:
        if isinstance(v, list) and -len(v) <= i < len(v):
            yield v[i]

    return step


def _wildcard(v: Any) -> Iterator[Any]:
    if isinstance(v, dict):
        yield from v.values()
    elif isinstance(v, list):
        yield from v


def _descendants(v: Any) -> Iterator[Any]:
    yield v
    for c in _wildcard(v):
        yield from _descendants(c)


def _recursive(name: str) -> Step:
    child = _child(name)

    def step(v: Any) -> Iterator[Any]:
        for d in _descendants(v):
            yield from child(d)

    return step


def _filter(pred: Callable[[Any], bool]) -> Step:
    def step(v: Any) -> Iterator[Any]:
        items = v if isinstance(v, list) else list(v.values()) if isinstance(v, dict) else []
        for item in items:
            if pred(item):
                yield item

    return step


def _compare(a: Any, op: str, b: Any) -> bool:
    if op == "==":
        return json_equal(a, b)
    if op == "!=":
        return not json_equal(a, b)
    if isinstance(a, bool) or isinstance(b, bool):
        return False
    if isinstance(a, (int, float)) and isinstance(b, (int, float)) or isinstance(a, str) and isinstance(b, str):
        return {"<": a < b, "<=": a <= b, ">": a > b, ">=": a >= b}[op]
    return False


def json_equal(a: Any, b: Any) -> bool:
    """JSON equality: numbers compare by value, but booleans never equal numbers."""
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    return bool(a == b)


_MISSING = object()


@dataclass(frozen=True)
class JsonPath:
    """A compiled path."""

    source: str
    steps: tuple[Step, ...]

    def find(self, document: Any) -> list[Any]:
        """All values the path selects in ``document`` (empty when nothing matches)."""
        current = [document]
        for step in self.steps:
            current = [m for v in current for m in step(v)]
            if not current:
                break
        return current


def compile_path(source: str) -> JsonPath:
    """Parse ``source``; raises :class:`JsonPathError` naming the position of the problem."""
    return _compile_cached(source)


@lru_cache(maxsize=4096)
def _compile_cached(source: str) -> JsonPath:
    if len(source) > MAX_PATH_CHARS:
        raise JsonPathError(f"path is {len(source)} characters, more than the limit of {MAX_PATH_CHARS}")
    return JsonPath(source, tuple(_Parser(source).parse()))


class _Parser:
    def __init__(self, src: str) -> None:
        self.src = src
        self.pos = 0

    def error(self, what: str) -> JsonPathError:
        return JsonPathError(f"{what} at position {self.pos} of path {self.src!r}")

    def peek(self, s: str) -> bool:
        return self.src.startswith(s, self.pos)

    def expect(self, s: str) -> None:
        if not self.peek(s):
            raise self.error(f"expected {s!r}")
        self.pos += len(s)

    def skip_ws(self) -> None:
        while self.pos < len(self.src) and self.src[self.pos] == " ":
            self.pos += 1

    def match(self, rx: re.Pattern[str]) -> str | None:
        m = rx.match(self.src, self.pos)
        if not m:
            return None
        self.pos = m.end()
        return m.group(0)

    def parse(self) -> list[Step]:
        self.skip_ws()
        self.expect("$")
        steps: list[Step] = []
        while self.pos < len(self.src):
            if self.peek(".."):
                self.pos += 2
                name = self.match(_NAME)
                if name is None:
                    raise self.error("expected a name after '..'")
                steps.append(_recursive(name))
            elif self.peek(".*"):
                self.pos += 2
                steps.append(_wildcard)
            elif self.peek("."):
                self.pos += 1
                name = self.match(_NAME)
                if name is None:
                    raise self.error("expected a name after '.'")
                steps.append(_child(name))
            elif self.peek("["):
                self.pos += 1
                self.skip_ws()
                steps.append(self.selector())
                self.skip_ws()
                self.expect("]")
            elif self.src[self.pos] == " " and not self.src[self.pos :].strip():
                break
            else:
                raise self.error(f"unexpected {self.src[self.pos]!r}")
        return steps

    def selector(self) -> Step:
        if self.peek("*"):
            self.pos += 1
            return _wildcard
        if self.peek("?("):
            self.pos += 2
            pred = self.filter_expr()
            self.skip_ws()
            self.expect(")")
            return _filter(pred)
        if self.peek("'") or self.peek('"'):
            return _child(self.string())
        i = self.match(_INT)
        if i is not None:
            return _index(int(i))
        raise self.error("expected an index, '*', a quoted name or a filter")

    def string(self) -> str:
        quote = self.src[self.pos]
        end = self.pos + 1
        while end < len(self.src) and self.src[end] != quote:
            end += 2 if self.src[end] == "\\" else 1
        if end >= len(self.src):
            raise self.error("unterminated string")
        raw = self.src[self.pos + 1 : end]
        self.pos = end + 1
        if quote == "'":
            raw = raw.replace('"', '\\"').replace("\\'", "'")
        try:
            return str(json.loads(f'"{raw}"'))
        except json.JSONDecodeError:
            raise self.error("bad string escape") from None

    def filter_expr(self) -> Callable[[Any], bool]:
        conds = [self.condition()]
        joiner = None
        while True:
            self.skip_ws()
            if self.peek("&&") or self.peek("||"):
                op = self.src[self.pos : self.pos + 2]
                if joiner not in (None, op):
                    raise self.error("mixing '&&' and '||' in one filter is not supported")
                joiner = op
                self.pos += 2
                conds.append(self.condition())
            else:
                break
        if joiner == "||":
            return lambda v: any(c(v) for c in conds)
        return lambda v: all(c(v) for c in conds)

    def condition(self) -> Callable[[Any], bool]:
        self.skip_ws()
        self.expect("@")
        sub: list[Step] = []
        while True:
            if self.peek("."):
                self.pos += 1
                name = self.match(_NAME)
                if name is None:
                    raise self.error("expected a name after '@.'")
                sub.append(_child(name))
            elif self.peek("["):
                self.pos += 1
                if self.peek("'") or self.peek('"'):
                    sub.append(_child(self.string()))
                else:
                    i = self.match(_INT)
                    if i is None:
                        raise self.error("expected an index or quoted name")
                    sub.append(_index(int(i)))
                self.expect("]")
            else:
                break
        inner = JsonPath("@", tuple(sub))
        self.skip_ws()
        op = next((o for o in _OPS if self.peek(o)), None)
        if op is None:
            return lambda v: bool(inner.find(v))
        self.pos += len(op)
        self.skip_ws()
        lit = self.literal()

        def cond(v: Any) -> bool:
            return any(_compare(m, op, lit) for m in inner.find(v))

        return cond

    def literal(self) -> Any:
        if self.peek("'") or self.peek('"'):
            return self.string()
        for word, value in (("true", True), ("false", False), ("null", None)):
            if self.peek(word):
                self.pos += len(word)
                return value
        num = self.match(_NUMBER)
        if num is None:
            raise self.error("expected a literal (string, number, true, false, null)")
        return float(num) if any(c in num for c in ".eE") else int(num)

"""WebArena's program_html locators and ``func:`` helpers, parsed, never run.

Upstream WebArena runs a locator as JavaScript in the page (``page.evaluate``) and a ``func:`` string through
Python's ``eval``. Here both are parsed into data the judge interprets over the pages the episode saw:

- a locator is ``""`` (the whole page), or JavaScript of the shapes WebArena's 812 tasks use: ``document`` then
  ``.querySelector(s)`` / ``?.querySelector(s)`` / ``.querySelectorAll(s)[n]``, ``.lastElementChild``,
  ``.firstElementChild``, ``.lastChild``, then ``.outerText`` / ``.innerText`` / ``.textContent`` / ``.value`` /
  ``.selectedIndex`` / ``.checked`` / ``.getAttribute(name)``, optionally ``.toString()``; ``(chain || '')``;
  ``[...chain.querySelectorAll(s)].map(elem => elem.getAttribute(a) || elem.getAttribute(b)).join(sep)``; and
  terms joined by ``+``. Anything else is a :class:`LocatorError` naming what it could not read.
- a ``func:`` string is ``func:name(arg, ...)`` with ``name`` in :data:`FUNCS` and its arguments string literals
  or the markers ``__page__`` / ``'__last_url__'``; any other name or form is refused.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

#: The named helpers a ``func:`` string may call: name -> (where it may appear, its parameters).
#: ``page`` is the page the locator reads (upstream's ``__page__``), ``url`` a string (``'__last_url__'``:
#: the episode's last URL), ``sku`` / ``name`` strings. The judge implements each (or says why it cannot).
FUNCS: dict[str, tuple[str, tuple[str, ...]]] = {
    "reddit_get_post_url": ("url", ("url",)),
    "shopping_get_latest_order_url": ("url", ()),
    "gitlab_get_project_memeber_role": ("locator", ("page", "name")),
    "shopping_get_sku_latest_review_author": ("locator", ("sku",)),
    "shopping_get_sku_latest_review_rating": ("locator", ("sku",)),
    "get_query_text": ("locator", ("page", "selector")),
    "get_query_text_lowercase": ("locator", ("page", "selector")),
}
#: Properties a chain may end with.
PROPS = ("outerText", "innerText", "textContent", "value", "selectedIndex", "checked")
MOVES = ("lastElementChild", "firstElementChild", "lastChild")
MAX_CHARS = 2000


class LocatorError(ValueError):
    """A locator or func: string that cannot be read; the message says what and where."""


@dataclass(frozen=True)
class Step:
    """One link of a chain: ``op`` is qs, qsa (``arg`` the selector, ``index`` for ``[n]``), a move, prop, attr,
    or to_string."""

    op: str
    arg: str = ""
    index: int | None = None


@dataclass(frozen=True)
class Chain:
    steps: tuple[Step, ...]
    fallback: bool = False  # ``(chain || '')``: a missing element gives ''


@dataclass(frozen=True)
class MapJoin:
    base: Chain  # ends with a querySelectorAll without an index
    attrs: tuple[str, ...]
    sep: str


@dataclass(frozen=True)
class Func:
    name: str
    args: tuple[str, ...]  # string arguments ("__page__" for the page, "__last_url__" for the last URL)


Term = Chain | MapJoin


class _Parser:
    def __init__(self, text: str) -> None:
        self.s, self.i = text, 0

    def fail(self, what: str) -> LocatorError:
        return LocatorError(f"{what} at character {self.i} of {self.s[:200]!r}")

    def ws(self) -> None:
        while self.i < len(self.s) and self.s[self.i].isspace():
            self.i += 1

    def eat(self, tok: str) -> bool:
        self.ws()
        if self.s.startswith(tok, self.i):
            self.i += len(tok)
            return True
        return False

    def expect(self, tok: str) -> None:
        if not self.eat(tok):
            raise self.fail(f"expected {tok!r}")

    def ident(self) -> str:
        self.ws()
        m = re.compile(r"[A-Za-z_$][A-Za-z0-9_$]*").match(self.s, self.i)
        if not m:
            raise self.fail("expected a name")
        self.i = m.end()
        return m.group(0)

    def string(self) -> str:
        self.ws()
        if self.i >= len(self.s) or self.s[self.i] not in "'\"":
            raise self.fail("expected a string literal")
        q, out, self.i = self.s[self.i], [], self.i + 1
        while self.i < len(self.s) and self.s[self.i] != q:
            if self.s[self.i] == "\\" and self.i + 1 < len(self.s):
                self.i += 1
            out.append(self.s[self.i])
            self.i += 1
        if self.i >= len(self.s):
            raise self.fail("unterminated string")
        self.i += 1
        return "".join(out)

    def integer(self) -> int:
        self.ws()
        m = re.compile(r"\d+").match(self.s, self.i)
        if not m:
            raise self.fail("expected an index")
        self.i = m.end()
        return int(m.group(0))

    def chain(self, open_qsa: bool = False) -> Chain:
        if self.ident() != "document":
            raise self.fail("a locator chain starts with 'document'")
        steps: list[Step] = []
        while True:
            save = self.i
            if not (self.eat("?.") or self.eat(".")):
                break
            name = self.ident()
            if name in ("querySelector", "querySelectorAll"):
                self.expect("(")
                sel = self.string()
                self.expect(")")
                if name == "querySelector":
                    steps.append(Step("qs", sel))
                elif self.eat("["):
                    idx = self.integer()
                    self.expect("]")
                    steps.append(Step("qsa", sel, idx))
                elif open_qsa:
                    steps.append(Step("qsa", sel))
                    return Chain(tuple(steps))
                else:
                    raise self.fail("querySelectorAll needs an index [n] here")
            elif name in MOVES:
                steps.append(Step(name))
            elif name in PROPS:
                steps.append(Step("prop", name))
            elif name == "getAttribute":
                self.expect("(")
                steps.append(Step("attr", self.string()))
                self.expect(")")
            elif name == "toString":
                self.expect("(")
                self.expect(")")
                steps.append(Step("to_string"))
            elif name in ("map", "join"):
                self.i = save
                break
            else:
                raise self.fail(f"unsupported member {name!r}")
        if open_qsa:
            raise self.fail("expected a querySelectorAll to spread")
        return Chain(tuple(steps))

    def term(self) -> Term:
        if self.eat("[..."):
            base = self.chain(open_qsa=True)
            self.expect("]")
            self.expect(".map(")
            var = self.ident()
            self.expect("=>")
            attrs = []
            while True:
                if self.ident() != var:
                    raise self.fail(f"expected {var}.getAttribute(...)")
                self.expect(".getAttribute(")
                attrs.append(self.string())
                self.expect(")")
                if not self.eat("||"):
                    break
            self.expect(")")
            self.expect(".join(")
            sep = self.string()
            self.expect(")")
            return MapJoin(base, tuple(attrs), sep)
        if self.eat("("):
            c = self.chain()
            self.expect("||")
            if self.string() != "":
                raise self.fail("only || '' is supported as a fallback")
            self.expect(")")
            return Chain(c.steps, fallback=True)
        return self.chain()


def parse_locator(text: str) -> tuple[Term, ...]:
    """The terms of a JavaScript locator (joined by ``+``); ``()`` for ``""`` (the whole page). Raises
    LocatorError."""
    if len(text) > MAX_CHARS:
        raise LocatorError(f"locator longer than {MAX_CHARS} characters")
    if not text.strip():
        return ()
    p = _Parser(text)
    terms = [p.term()]
    while p.eat("+"):
        terms.append(p.term())
    p.ws()
    if p.i != len(p.s):
        raise p.fail("unexpected text")
    return tuple(terms)


def parse_func(text: str, where: str) -> Func:
    """A ``func:name(args)`` string as data; ``where`` is "url" or "locator". Raises LocatorError for a name
    outside :data:`FUNCS`, one not allowed there, a wrong number of arguments, or any other form."""
    if len(text) > MAX_CHARS:
        raise LocatorError(f"func: string longer than {MAX_CHARS} characters")
    p = _Parser(text.strip())
    p.expect("func:")
    name = p.ident()
    if name not in FUNCS:
        raise LocatorError(f"func:{name} is not a registered helper (registered: {', '.join(sorted(FUNCS))})")
    place, params = FUNCS[name]
    if place != where:
        raise LocatorError(f"func:{name} computes a {place}, not a {where}")
    p.expect("(")
    args: list[str] = []
    if not p.eat(")"):
        while True:
            p.ws()
            if p.s.startswith("__page__", p.i):
                p.i += len("__page__")
                args.append("__page__")
            else:
                args.append(p.string())
            if p.eat(")"):
                break
            p.expect(",")
    p.ws()
    if p.i != len(p.s):
        raise p.fail("unexpected text after the call")
    if len(args) != len(params):
        raise LocatorError(f"func:{name} takes {len(params)} argument(s) ({', '.join(params) or 'none'}), got {len(args)}")
    for a, kind in zip(args, params, strict=True):
        if (kind == "page") != (a == "__page__"):
            raise LocatorError(f"func:{name}: argument {a!r} where {kind} is expected")
    return Func(name, tuple(args))

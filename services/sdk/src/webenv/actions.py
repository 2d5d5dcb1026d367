"""The action text grammar shared by policies, traces and replay: ``click(12)`` <-> ``Action``.

One call per action, arguments separated by commas::

    click(12)                       element by id (a bare token: digits, letters, '_' or '-')
    click("#buy > button")          a quoted string where an element is expected is a CSS selector
    click(12, button="right", count=2)
    fill(12, "text")   select(3, "red", "blue")   hover(4)   press(4, "Enter")   press("Control+a")
    scroll_element(4, 0, 300)   click_at(340, 520)   type("hello")   scroll(0, 400)   drag(10, 20, 30, 40)
    goto("https://example.com")   go_back()   go_forward()   new_tab()   new_tab("https://...")
    switch_tab(1)   close_tab()   close_tab(2)   wait(500)   answer("42 items")   noop()

Strings use double quotes with JSON escapes (single quotes are accepted on input, for model output).
:func:`format_action` writes the canonical text and ``parse_action(format_action(a)) == a`` for every action;
canonical text survives ``format_action(parse_action(text)) == text``. Malformed text raises
:class:`ActionParseError` with the column where parsing stopped.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from google.protobuf.message import Message
from webenv.v1 import common_pb2 as pb

__all__ = ["ACTION_KINDS", "ACTION_NAMES", "ActionKind", "ActionParseError", "format_action", "is_element_id", "parse_action"]

_BARE = re.compile(r"[A-Za-z0-9_\-]+")
_NUMBER = re.compile(r"-?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?")
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")

_BUTTONS = {"left": pb.MOUSE_BUTTON_LEFT, "middle": pb.MOUSE_BUTTON_MIDDLE, "right": pb.MOUSE_BUTTON_RIGHT}
_BUTTON_NAMES = {v: k for k, v in _BUTTONS.items()}



class ActionParseError(ValueError):
    """Text that is not a valid action; ``position`` is the 0-based column where parsing failed."""

    def __init__(self, message: str, text: str, position: int) -> None:
        super().__init__(f"{message} at column {position + 1}: {text!r}")
        self.reason = message
        self.text = text
        self.position = position


@dataclass(frozen=True)
class _Str:
    value: str


@dataclass(frozen=True)
class _Bare:
    value: str


@dataclass(frozen=True)
class _Num:
    value: float
    raw: str


_Arg = _Str | _Bare | _Num


class _Parser:
    def __init__(self, text: str) -> None:
        self.text = text
        self.i = 0

    def error(self, message: str, at: int | None = None) -> ActionParseError:
        return ActionParseError(message, self.text, self.i if at is None else at)

    def skip(self) -> None:
        while self.i < len(self.text) and self.text[self.i].isspace():
            self.i += 1

    def expect(self, ch: str) -> None:
        self.skip()
        if self.i >= len(self.text) or self.text[self.i] != ch:
            found = repr(self.text[self.i]) if self.i < len(self.text) else "end of text"
            raise self.error(f"expected {ch!r}, found {found}")
        self.i += 1

    def call(self) -> tuple[str, list[_Arg], dict[str, _Arg], list[int]]:
        self.skip()
        m = _IDENT.match(self.text, self.i)
        if not m:
            raise self.error("expected an action name")
        name = m.group()
        self.i = m.end()
        self.expect("(")
        args: list[_Arg] = []
        kwargs: dict[str, _Arg] = {}
        positions: list[int] = []
        self.skip()
        if self.i < len(self.text) and self.text[self.i] == ")":
            self.i += 1
        else:
            while True:
                self.skip()
                start = self.i
                kw = _IDENT.match(self.text, self.i)
                if kw and self.text[kw.end():].lstrip().startswith("=") and not self.text[kw.end():].lstrip().startswith("=="):
                    self.i = kw.end()
                    self.expect("=")
                    if kw.group() in kwargs:
                        raise self.error(f"duplicate argument {kw.group()!r}", start)
                    kwargs[kw.group()] = self.value()
                else:
                    if kwargs:
                        raise self.error("positional argument after keyword argument", start)
                    positions.append(start)
                    args.append(self.value())
                self.skip()
                if self.i < len(self.text) and self.text[self.i] == ",":
                    self.i += 1
                    continue
                self.expect(")")
                break
        self.skip()
        if self.i != len(self.text):
            raise self.error("unexpected text after the action")
        return name, args, kwargs, positions

    def value(self) -> _Arg:
        self.skip()
        if self.i >= len(self.text):
            raise self.error("expected a value, found end of text")
        ch = self.text[self.i]
        if ch in "\"'":
            return _Str(self.string(ch))
        num = _NUMBER.match(self.text, self.i)
        bare = _BARE.match(self.text, self.i)
        if num and (not bare or num.end() >= bare.end()):
            self.i = num.end()
            return _Num(float(num.group()), num.group())
        if bare:
            self.i = bare.end()
            return _Bare(bare.group())
        raise self.error(f"unexpected character {ch!r}")

    def string(self, quote: str) -> str:
        start = self.i
        j = self.i + 1
        while j < len(self.text):
            c = self.text[j]
            if c == "\\":
                j += 2
                continue
            if c == quote:
                body = self.text[start + 1 : j]
                self.i = j + 1
                if quote == '"':
                    try:
                        return json.loads('"' + body + '"')
                    except json.JSONDecodeError as exc:
                        raise self.error(f"bad escape in string: {exc.msg}", start + 1 + exc.pos - 1) from None
                return re.sub(r"\\(.)", r"\1", body)
            j += 1
        raise self.error("unterminated string", start)


class _Args:
    """The parsed arguments of one call, read by a kind's parser; every accessor names the argument it wanted."""

    def __init__(self, name: str, args: list[_Arg], kwargs: dict[str, _Arg], pos: list[int], text: str) -> None:
        self.name, self.args, self.kwargs, self.pos, self.text = name, args, kwargs, pos, text

    def __len__(self) -> int:
        return len(self.args)

    def arity(self, low: int, high: int) -> None:
        if not low <= len(self.args) <= high:
            want = str(low) if low == high else f"{low} to {high}"
            raise ActionParseError(f"{self.name}() takes {want} arguments, got {len(self.args)}", self.text,
                                   len(self.text) - 1)

    def target(self, k: int) -> pb.ElementTarget:
        a = self.args[k]
        if isinstance(a, _Str):
            if not a.value.strip():
                raise ActionParseError("empty CSS selector", self.text, self.pos[k])
            return pb.ElementTarget(selector=a.value)
        if isinstance(a, _Bare):
            return pb.ElementTarget(element_id=a.value)
        return pb.ElementTarget(element_id=a.raw)

    def string(self, k: int, what: str) -> str:
        a = self.args[k]
        if not isinstance(a, _Str):
            raise ActionParseError(f"{self.name}(): {what} must be a quoted string", self.text, self.pos[k])
        return a.value

    def number(self, k: int, what: str) -> float:
        a = self.args[k]
        if not isinstance(a, _Num) or not math.isfinite(a.value):
            raise ActionParseError(f"{self.name}(): {what} must be a number", self.text, self.pos[k])
        return a.value

    def ident(self, k: int) -> str:
        a = self.args[k]
        return a.value if isinstance(a, (_Str, _Bare)) else a.raw

    def button(self) -> int:
        b = self.kwargs.pop("button", None)
        if b is None:
            return pb.MOUSE_BUTTON_UNSPECIFIED
        label = b.value if isinstance(b, (_Str, _Bare)) else ""
        if label not in _BUTTONS:
            raise ActionParseError(f"{self.name}(): button must be one of left, middle, right", self.text, 0)
        return _BUTTONS[label]

    def click_count(self) -> int:
        count = self.kwargs.pop("count", None)
        clicks = count.value if isinstance(count, _Num) else (None if count is None else -1.0)
        if clicks is not None and (clicks < 1 or clicks != int(clicks) or clicks > 3):
            raise ActionParseError("click(): count must be 1, 2 or 3", self.text, 0)
        return int(clicks or 0)

    def milliseconds(self) -> int:
        ms = self.number(0, "milliseconds")
        if ms < 0 or ms != int(ms) or ms > 2**31 - 1:
            raise ActionParseError("wait(): milliseconds must be a non-negative integer", self.text, self.pos[0])
        return int(ms)


def is_element_id(text: str) -> bool:
    """Whether ``text`` can be written as a bare element id in the grammar (letters, digits, ``_``, ``-``)."""
    return bool(_BARE.fullmatch(text))


def _num_text(x: float) -> str:
    return str(int(x)) if x == int(x) and abs(x) < 1e15 else repr(x)


def _q(s: str) -> str:
    return json.dumps(s, ensure_ascii=False)


def _target(t: pb.ElementTarget) -> str:
    kind = t.WhichOneof("ref")
    if kind == "selector":
        return _q(t.selector)
    if kind == "element_id" and _BARE.fullmatch(t.element_id):
        return t.element_id
    raise ValueError(f"element target {t!r} has no usable element_id or selector")


def _ident(s: str) -> str:
    return s if _BARE.fullmatch(s) else _q(s)


def _button(b: int) -> str:
    return f', button="{_BUTTON_NAMES[b]}"' if b in _BUTTON_NAMES else ""


def _has_target(m: Any) -> bool:
    return m.HasField("target") and bool(m.target.WhichOneof("ref"))


@dataclass(frozen=True)
class ActionKind:
    """Everything webenv knows about one kind of action, in one row of :data:`ACTION_KINDS`."""

    field: str  #: the Action oneof field
    name: str  #: the grammar's name (``goto`` for ``navigate``)
    arity: tuple[int, int | None]  #: positional arguments in the grammar, at least and at most (None: no limit)
    parse: Callable[[_Args], Message]  #: the kind's message from its parsed arguments
    format: Callable[[Any], str]  #: the canonical text of the kind's message
    target: str = ""  #: "required" or "optional" when the action names an element (ElementTarget), else ""
    navigates: bool = False  #: moves or opens a document itself (goto, back, forward, new tab)
    may_navigate: bool = False  #: acts on the page, which can start a navigation of the active tab
    next_frame: bool = False  #: its effects arrive with the next rendered frame (scroll events, rAF-driven UIs)


_n = _num_text
_KINDS = (
    ActionKind("click", "click", (1, 1), target="required", may_navigate=True,
               parse=lambda a: pb.ClickAction(button=a.button(), click_count=a.click_count(), target=a.target(0)),
               format=lambda m: f"click({_target(m.target)}{_button(m.button)}"
                                f"{f', count={m.click_count}' if m.click_count > 1 else ''})"),
    ActionKind("fill", "fill", (2, 2), target="required", may_navigate=True,
               parse=lambda a: pb.FillAction(target=a.target(0), text=a.string(1, "text")),
               format=lambda m: f"fill({_target(m.target)}, {_q(m.text)})"),
    ActionKind("select", "select", (2, None), target="required", may_navigate=True,
               parse=lambda a: pb.SelectAction(target=a.target(0),
                                               options=[a.string(k, "option") for k in range(1, len(a))]),
               format=lambda m: f"select({_target(m.target)}, {', '.join(_q(o) for o in m.options)})"),
    ActionKind("hover", "hover", (1, 1), target="required", may_navigate=True, next_frame=True,
               parse=lambda a: pb.HoverAction(target=a.target(0)),
               format=lambda m: f"hover({_target(m.target)})"),
    ActionKind("press", "press", (1, 2), target="optional", may_navigate=True,
               parse=lambda a: (pb.PressAction(key=a.string(0, "key")) if len(a) == 1
                                else pb.PressAction(target=a.target(0), key=a.string(1, "key"))),
               format=lambda m: (f"press({_target(m.target)}, {_q(m.key)})" if _has_target(m)
                                 else f"press({_q(m.key)})")),
    ActionKind("scroll_element", "scroll_element", (3, 3), target="required", may_navigate=True, next_frame=True,
               parse=lambda a: pb.ScrollElementAction(target=a.target(0), dx=a.number(1, "dx"), dy=a.number(2, "dy")),
               format=lambda m: f"scroll_element({_target(m.target)}, {_n(m.dx)}, {_n(m.dy)})"),
    ActionKind("click_at", "click_at", (2, 2), may_navigate=True,
               parse=lambda a: pb.ClickAtAction(button=a.button(), x=a.number(0, "x"), y=a.number(1, "y")),
               format=lambda m: f"click_at({_n(m.x)}, {_n(m.y)}{_button(m.button)})"),
    ActionKind("type", "type", (1, 1), may_navigate=True,
               parse=lambda a: pb.TypeAction(text=a.string(0, "text")),
               format=lambda m: f"type({_q(m.text)})"),
    ActionKind("scroll", "scroll", (2, 2), may_navigate=True, next_frame=True,
               parse=lambda a: pb.ScrollAction(dx=a.number(0, "dx"), dy=a.number(1, "dy")),
               format=lambda m: f"scroll({_n(m.dx)}, {_n(m.dy)})"),
    ActionKind("drag", "drag", (4, 4), may_navigate=True, next_frame=True,
               parse=lambda a: pb.DragAction(from_x=a.number(0, "from_x"), from_y=a.number(1, "from_y"),
                                             to_x=a.number(2, "to_x"), to_y=a.number(3, "to_y")),
               format=lambda m: f"drag({_n(m.from_x)}, {_n(m.from_y)}, {_n(m.to_x)}, {_n(m.to_y)})"),
    ActionKind("navigate", "goto", (1, 1), navigates=True,
               parse=lambda a: pb.NavigateAction(url=a.string(0, "url")),
               format=lambda m: f"goto({_q(m.url)})"),
    ActionKind("go_back", "go_back", (0, 0), navigates=True,
               parse=lambda a: pb.GoBackAction(), format=lambda m: "go_back()"),
    ActionKind("go_forward", "go_forward", (0, 0), navigates=True,
               parse=lambda a: pb.GoForwardAction(), format=lambda m: "go_forward()"),
    ActionKind("new_tab", "new_tab", (0, 1), navigates=True,
               parse=lambda a: pb.NewTabAction(url=a.string(0, "url") if len(a) else ""),
               format=lambda m: f"new_tab({_q(m.url)})" if m.url else "new_tab()"),
    ActionKind("switch_tab", "switch_tab", (1, 1),
               parse=lambda a: pb.SwitchTabAction(tab_id=a.ident(0)),
               format=lambda m: f"switch_tab({_ident(m.tab_id)})"),
    ActionKind("close_tab", "close_tab", (0, 1),
               parse=lambda a: pb.CloseTabAction(tab_id=a.ident(0) if len(a) else ""),
               format=lambda m: f"close_tab({_ident(m.tab_id)})" if m.tab_id else "close_tab()"),
    ActionKind("wait", "wait", (1, 1), next_frame=True,
               parse=lambda a: pb.WaitAction(milliseconds=a.milliseconds()),
               format=lambda m: f"wait({m.milliseconds})"),
    ActionKind("answer", "answer", (1, 1),
               parse=lambda a: pb.AnswerAction(text=a.string(0, "text")),
               format=lambda m: f"answer({_q(m.text)})"),
    ActionKind("noop", "noop", (0, 0), parse=lambda a: pb.NoopAction(), format=lambda m: "noop()"),
)

#: One row per kind of action, by its Action oneof field, in the order of the oneof.
ACTION_KINDS: dict[str, ActionKind] = {k.field: k for k in _KINDS}
_BY_NAME: dict[str, ActionKind] = {k.name: k for k in _KINDS}

#: Action names of the grammar, in the order of the Action oneof.
ACTION_NAMES = tuple(k.name for k in _KINDS)


def parse_action(text: str) -> pb.Action:
    """Parse one action in the text grammar into an ``Action``; raise ActionParseError on malformed text."""
    name, args, kwargs, pos = _Parser(text).call()
    kind = _BY_NAME.get(name)
    if kind is None:
        raise ActionParseError(f"unknown action {name!r} (known: {', '.join(ACTION_NAMES)})", text, 0)
    parsed = _Args(name, args, kwargs, pos, text)
    low, high = kind.arity
    if len(args) < low or (high is not None and len(args) > high):
        parsed.arity(low, low if high is None else high)
    a = pb.Action()
    getattr(a, kind.field).CopyFrom(kind.parse(parsed))
    getattr(a, kind.field).SetInParent()
    if parsed.kwargs:
        raise ActionParseError(f"{name}(): unknown argument {next(iter(parsed.kwargs))!r}", text, 0)
    return a


def format_action(action: pb.Action) -> str:
    """The canonical text of an action; ValueError for an action with no kind or no element target."""
    kind = action.WhichOneof("kind")
    if kind is None:
        raise ValueError("action has no kind set")
    return ACTION_KINDS[kind].format(getattr(action, kind))

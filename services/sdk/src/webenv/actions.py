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
from dataclasses import dataclass

from webenv.v1 import common_pb2 as pb

__all__ = ["ACTION_NAMES", "ActionParseError", "format_action", "parse_action"]

_BARE = re.compile(r"[A-Za-z0-9_\-]+")
_NUMBER = re.compile(r"-?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?")
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")

_BUTTONS = {"left": pb.MOUSE_BUTTON_LEFT, "middle": pb.MOUSE_BUTTON_MIDDLE, "right": pb.MOUSE_BUTTON_RIGHT}
_BUTTON_NAMES = {v: k for k, v in _BUTTONS.items()}

#: Action names of the grammar, in the order of the Action oneof.
ACTION_NAMES = (
    "click", "fill", "select", "hover", "press", "scroll_element", "click_at", "type", "scroll", "drag",
    "goto", "go_back", "go_forward", "new_tab", "switch_tab", "close_tab", "wait", "answer", "noop",
)


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


def _arity(name: str, args: list[_Arg], low: int, high: int, text: str) -> None:
    if not low <= len(args) <= high:
        want = str(low) if low == high else f"{low} to {high}"
        raise ActionParseError(f"{name}() takes {want} arguments, got {len(args)}", text, len(text) - 1)


def parse_action(text: str) -> pb.Action:
    """Parse one action in the text grammar into an ``Action``; raise ActionParseError on malformed text."""
    p = _Parser(text)
    name, args, kwargs, pos = p.call()

    def target(k: int) -> pb.ElementTarget:
        a = args[k]
        if isinstance(a, _Str):
            if not a.value.strip():
                raise ActionParseError("empty CSS selector", text, pos[k])
            return pb.ElementTarget(selector=a.value)
        if isinstance(a, _Bare):
            return pb.ElementTarget(element_id=a.value)
        return pb.ElementTarget(element_id=a.raw)

    def string(k: int, what: str) -> str:
        a = args[k]
        if not isinstance(a, _Str):
            raise ActionParseError(f"{name}(): {what} must be a quoted string", text, pos[k])
        return a.value

    def number(k: int, what: str) -> float:
        a = args[k]
        if not isinstance(a, _Num) or not math.isfinite(a.value):
            raise ActionParseError(f"{name}(): {what} must be a number", text, pos[k])
        return a.value

    def ident(k: int) -> str:
        a = args[k]
        return a.value if isinstance(a, (_Str, _Bare)) else a.raw

    def button() -> int:
        b = kwargs.pop("button", None)
        if b is None:
            return pb.MOUSE_BUTTON_UNSPECIFIED
        label = b.value if isinstance(b, (_Str, _Bare)) else ""
        if label not in _BUTTONS:
            raise ActionParseError(f"{name}(): button must be one of left, middle, right", text, 0)
        return _BUTTONS[label]

    a = pb.Action()
    if name == "click":
        _arity(name, args, 1, 1, text)
        btn = button()
        count = kwargs.pop("count", None)
        clicks = count.value if isinstance(count, _Num) else (None if count is None else -1.0)
        if clicks is not None and (clicks < 1 or clicks != int(clicks) or clicks > 3):
            raise ActionParseError("click(): count must be 1, 2 or 3", text, 0)
        a.click.CopyFrom(pb.ClickAction(target=target(0), button=btn, click_count=int(clicks or 0)))
    elif name == "fill":
        _arity(name, args, 2, 2, text)
        a.fill.CopyFrom(pb.FillAction(target=target(0), text=string(1, "text")))
    elif name == "select":
        if len(args) < 2:
            _arity(name, args, 2, 2, text)
        a.select.CopyFrom(pb.SelectAction(target=target(0), options=[string(k, "option") for k in range(1, len(args))]))
    elif name == "hover":
        _arity(name, args, 1, 1, text)
        a.hover.CopyFrom(pb.HoverAction(target=target(0)))
    elif name == "press":
        _arity(name, args, 1, 2, text)
        if len(args) == 1:
            a.press.CopyFrom(pb.PressAction(key=string(0, "key")))
        else:
            a.press.CopyFrom(pb.PressAction(target=target(0), key=string(1, "key")))
    elif name == "scroll_element":
        _arity(name, args, 3, 3, text)
        a.scroll_element.CopyFrom(pb.ScrollElementAction(target=target(0), dx=number(1, "dx"), dy=number(2, "dy")))
    elif name == "click_at":
        _arity(name, args, 2, 2, text)
        btn = button()
        a.click_at.CopyFrom(pb.ClickAtAction(x=number(0, "x"), y=number(1, "y"), button=btn))
    elif name == "type":
        _arity(name, args, 1, 1, text)
        a.type.CopyFrom(pb.TypeAction(text=string(0, "text")))
    elif name == "scroll":
        _arity(name, args, 2, 2, text)
        a.scroll.CopyFrom(pb.ScrollAction(dx=number(0, "dx"), dy=number(1, "dy")))
    elif name == "drag":
        _arity(name, args, 4, 4, text)
        a.drag.CopyFrom(pb.DragAction(from_x=number(0, "from_x"), from_y=number(1, "from_y"),
                                      to_x=number(2, "to_x"), to_y=number(3, "to_y")))
    elif name == "goto":
        _arity(name, args, 1, 1, text)
        a.navigate.CopyFrom(pb.NavigateAction(url=string(0, "url")))
    elif name == "go_back":
        _arity(name, args, 0, 0, text)
        a.go_back.SetInParent()
    elif name == "go_forward":
        _arity(name, args, 0, 0, text)
        a.go_forward.SetInParent()
    elif name == "new_tab":
        _arity(name, args, 0, 1, text)
        a.new_tab.CopyFrom(pb.NewTabAction(url=string(0, "url") if args else ""))
    elif name == "switch_tab":
        _arity(name, args, 1, 1, text)
        a.switch_tab.CopyFrom(pb.SwitchTabAction(tab_id=ident(0)))
    elif name == "close_tab":
        _arity(name, args, 0, 1, text)
        a.close_tab.CopyFrom(pb.CloseTabAction(tab_id=ident(0) if args else ""))
    elif name == "wait":
        _arity(name, args, 1, 1, text)
        ms = number(0, "milliseconds")
        if ms < 0 or ms != int(ms) or ms > 2**31 - 1:
            raise ActionParseError("wait(): milliseconds must be a non-negative integer", text, pos[0])
        a.wait.CopyFrom(pb.WaitAction(milliseconds=int(ms)))
    elif name == "answer":
        _arity(name, args, 1, 1, text)
        a.answer.CopyFrom(pb.AnswerAction(text=string(0, "text")))
    elif name == "noop":
        _arity(name, args, 0, 0, text)
        a.noop.SetInParent()
    else:
        raise ActionParseError(f"unknown action {name!r} (known: {', '.join(ACTION_NAMES)})", text, 0)
    if kwargs:
        raise ActionParseError(f"{name}(): unknown argument {next(iter(kwargs))!r}", text, 0)
    return a


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


def format_action(action: pb.Action) -> str:
    """The canonical text of an action; ValueError for an action with no kind or no element target."""
    kind = action.WhichOneof("kind")
    if kind is None:
        raise ValueError("action has no kind set")
    a = getattr(action, kind)
    n = _num_text
    if kind == "click":
        count = f", count={a.click_count}" if a.click_count > 1 else ""
        return f"click({_target(a.target)}{_button(a.button)}{count})"
    if kind == "fill":
        return f"fill({_target(a.target)}, {_q(a.text)})"
    if kind == "select":
        return f"select({_target(a.target)}, {', '.join(_q(o) for o in a.options)})"
    if kind == "hover":
        return f"hover({_target(a.target)})"
    if kind == "press":
        if a.HasField("target") and a.target.WhichOneof("ref"):
            return f"press({_target(a.target)}, {_q(a.key)})"
        return f"press({_q(a.key)})"
    if kind == "scroll_element":
        return f"scroll_element({_target(a.target)}, {n(a.dx)}, {n(a.dy)})"
    if kind == "click_at":
        return f"click_at({n(a.x)}, {n(a.y)}{_button(a.button)})"
    if kind == "type":
        return f"type({_q(a.text)})"
    if kind == "scroll":
        return f"scroll({n(a.dx)}, {n(a.dy)})"
    if kind == "drag":
        return f"drag({n(a.from_x)}, {n(a.from_y)}, {n(a.to_x)}, {n(a.to_y)})"
    if kind == "navigate":
        return f"goto({_q(a.url)})"
    if kind in ("go_back", "go_forward", "noop"):
        return f"{kind}()"
    if kind == "new_tab":
        return f"new_tab({_q(a.url)})" if a.url else "new_tab()"
    if kind == "switch_tab":
        return f"switch_tab({_ident(a.tab_id)})"
    if kind == "close_tab":
        return f"close_tab({_ident(a.tab_id)})" if a.tab_id else "close_tab()"
    if kind == "wait":
        return f"wait({a.milliseconds})"
    if kind == "answer":
        return f"answer({_q(a.text)})"
    raise ValueError(f"unknown action kind {kind!r}")  # pragma: no cover - the oneof is exhaustive above

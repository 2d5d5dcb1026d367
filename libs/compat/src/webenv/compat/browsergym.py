"""BrowserGym compatibility, in one place: BrowserGym's high-level action strings -> webenv ``Action`` messages,
and BrowserGym's observation dict from a webenv ``Observation``.

    actions = to_actions('fill("12", "blue mug")\\nclick("14")', observation)   # [Action(fill), Action(click)]
    obs = observation_dict(observation, goal=..., chat_messages=..., last_action=..., last_action_error=...)

Actions are parsed, never executed: ``ast.parse`` of the text, every statement a call of a known action name,
every argument a literal (``ast.literal_eval`` of its node: strings, numbers, lists, True/False/None), bound to
BrowserGym's own parameter names and defaults (``click(bid, button="left", modifiers=[])``), so positional and
keyword forms both work. Several calls, one a line (BrowserGym's ``multiaction``), give several Actions, run in
order. Text longer than :data:`MAX_ACTION_CHARS` or with more than :data:`MAX_ACTIONS` calls is refused. A bid is
a webenv element id (the ``[12]`` of ``axtree_txt``, the ``bid`` attribute of ``pruned_html``).

What each BrowserGym action becomes (the names are BrowserGym's, ``browsergym.core.action.functions``):

    click / dblclick(bid, button)        click(bid, button=, count=1|2)
    fill(bid, value) / clear(bid)        fill(bid, value) / fill(bid, "")  (clear is Playwright's fill(""))
    select_option(bid, options)          select(bid, *options)
    hover / press(bid, key_comb)         hover / press(bid, key)
    focus(bid)                           press(bid, "Shift"): the farm focuses the element, then presses Shift
    check / uncheck(bid)                 click(bid) when its checked state differs (needs the elements format)
    drag_and_drop(from_bid, to_bid)      drag between the two elements' centres (needs the elements format)
    scroll(delta_x, delta_y)             scroll(dx, dy)
    mouse_click(x, y, button)            click_at(x, y, button=)
    mouse_drag_and_drop(fx, fy, tx, ty)  drag(fx, fy, tx, ty)
    keyboard_press(key)                  press(key)
    keyboard_type / keyboard_insert_text type(text)
    goto(url) / go_back / go_forward     goto / go_back / go_forward
    new_tab() / tab_close()              new_tab() / close_tab()
    tab_focus(index)                     switch_tab(<id of open tab number index>), negative indexes as in Python
    send_msg_to_user(text)               answer(text): the episode's answer (it ends the episode)
    report_infeasible(reason)            answer(reason), and the chat gets an "infeasible" message
    noop(wait_ms=1000)                   wait(wait_ms) (noop() when wait_ms is 0)

Refused with a message that says why (the farm has no such primitive): ``click``/``dblclick`` with
``modifiers``, ``mouse_dblclick``, ``mouse_move``, ``mouse_down``/``mouse_up``, ``keyboard_down``/``keyboard_up``,
``scroll_at`` (the farm scrolls the page or an element, not at a point), ``upload_file``/``mouse_upload_file``
(agents send no files to the farm). An action error is :class:`BrowserGymActionError`, an
``errors.InvalidArgument`` (reason ``BAD_ACTION``, field ``action``); BrowserGym itself reports a failed action
in the next observation's ``last_action_error`` as ``"<ExceptionType>: <message>"``, and
:func:`action_error_text` writes it the same way.

The observation dict has BrowserGym's keys (``browsergym.core.env.BrowserEnv._get_obs``) filled from the farm's
observation: ``chat_messages``, ``goal``, ``goal_object``, ``open_pages_urls``, ``open_pages_titles``,
``active_page_index``, ``url``, ``screenshot`` (an HxWx3 uint8 array), ``focused_element_bid``,
``extra_element_properties`` (bid -> visibility, bbox, clickable, set_of_marks), ``last_action``,
``last_action_error``, ``elapsed_time``, plus the flattened texts AgentLab's preprocessor makes of BrowserGym's
raw CDP trees, ``axtree_txt`` and ``pruned_html`` (the farm's cleaned HTML, ``bid`` attributes). The raw
``dom_object`` / ``axtree_object`` CDP snapshots are not produced: the farm builds its trees in one in-page pass
(~15 ms) instead of CDP's snapshots (~55-100 ms a page, browser README).

``axtree_txt`` is the farm's AXTREE written as BrowserGym writes its tree (:func:`axtree_txt`: what
``browsergym.utils.obs.flatten_axtree_to_str`` gives with its defaults on the same tree), so agents and prompts written
for BrowserGym parse it: ``[6] checkbox 'Remember me', checked='false'`` where the farm writes
``[6] checkbox "Remember me" checked=false``. Names and values are Python literals (``repr``), a text control's
value follows its name (`` value='blue'``), the states are CDP's typed properties after a comma (``checked`` a
tristate string, ``expanded``/``selected``/``disabled`` booleans, ``focused``/``required`` bare words, ``level``
left out as BrowserGym leaves it out), and a StaticText line whose text is already in its parent's name is dropped.
"""

from __future__ import annotations

import ast
import io
import json
import math
import re
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from webenv import errors
from webenv.actions import is_element_id
from webenv.client.environment import open_tabs
from webenv.v1 import common_pb2 as pb

__all__ = [
    "ACTIONS", "MAX_ACTIONS", "MAX_ACTION_CHARS", "UNSUPPORTED", "BrowserGymActionError", "Chat", "action_error_text",
    "axtree_txt", "observation_dict", "to_actions",
]

#: Longest action text accepted (characters); longer text is refused before it is parsed.
MAX_ACTION_CHARS = 65_536
#: Most calls in one action text (BrowserGym's multiaction: one call a line).
MAX_ACTIONS = 20
#: BrowserGym's opening chat message (browsergym.core.env.BrowserEnv.reset), so chat-reading agents see the same.
GREETING = "Hi! I am your UI assistant, I can perform web tasks for you. What can I help you with?"

_BUTTONS = {"left": pb.MOUSE_BUTTON_LEFT, "middle": pb.MOUSE_BUTTON_MIDDLE, "right": pb.MOUSE_BUTTON_RIGHT}
_NO_DEFAULT = object()


class BrowserGymActionError(errors.InvalidArgument):
    """BrowserGym action text that cannot become webenv actions; the message names the call and the problem."""

    default_reason = "BAD_ACTION"

    def __init__(self, message: str) -> None:
        super().__init__(f"action: {message}", metadata={"field": "action"})
        self.detail = message


def action_error_text(exc: BaseException) -> str:
    """An error as BrowserGym writes ``last_action_error``: ``"<ExceptionType>: <message>"``."""
    if isinstance(exc, BrowserGymActionError):
        return f"ValueError: {exc.detail}"
    return f"{type(exc).__name__}: {getattr(exc, 'message', None) or exc}"


@dataclass
class _Call:
    """One parsed call: its name and its arguments bound to the action's parameter names."""

    name: str
    args: dict[str, Any]

    def bid(self, key: str = "bid") -> pb.ElementTarget:
        value = self.args[key]
        if isinstance(value, bool) or not isinstance(value, (str, int)):
            raise BrowserGymActionError(f"{self.name}(): {key} must be a string, got {type(value).__name__}")
        text = str(value).strip()
        if not is_element_id(text):
            raise BrowserGymActionError(f"{self.name}(): {key} {text!r} is not an element id (the [id] of axtree_txt)")
        return pb.ElementTarget(element_id=text)

    def string(self, key: str) -> str:
        value = self.args[key]
        if not isinstance(value, str):
            raise BrowserGymActionError(f"{self.name}(): {key} must be a string, got {type(value).__name__}")
        return value

    def number(self, key: str) -> float:
        value = self.args[key]
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise BrowserGymActionError(f"{self.name}(): {key} must be a finite number, got {value!r}")
        return float(value)

    def button(self) -> int:
        value = self.args.get("button", "left")
        if value not in _BUTTONS:
            raise BrowserGymActionError(f"{self.name}(): button must be one of 'left', 'middle', 'right', got {value!r}")
        return _BUTTONS[value]

    def no_modifiers(self) -> None:
        if self.args.get("modifiers"):
            raise BrowserGymActionError(f"{self.name}(): modifiers are not supported by the webenv farm (it has no "
                                        "held-key clicks); press the key combination with press() instead")


@dataclass(frozen=True)
class _Spec:
    """One BrowserGym action: its parameters (name, default) in BrowserGym's order and how it becomes Actions."""

    params: tuple[tuple[str, Any], ...]
    build: Callable[[_Call, pb.Observation | None], list[pb.Action]]


def _one(**kind: Any) -> list[pb.Action]:
    return [pb.Action(**kind)]


def _click(c: _Call, _: pb.Observation | None, count: int = 0) -> list[pb.Action]:
    c.no_modifiers()
    return _one(click=pb.ClickAction(target=c.bid(), button=c.button(), click_count=count))


def _element(c: _Call, obs: pb.Observation | None, key: str) -> pb.Element:
    target = c.bid(key).element_id
    if obs is None or not obs.elements:
        raise BrowserGymActionError(f"{c.name}(): needs the page's elements (observation format 'elements') to find "
                                    f"element {target!r}")
    for e in obs.elements:
        if e.element_id == target:
            return e
    raise BrowserGymActionError(f"{c.name}(): element {target!r} is not among the page's interactive elements")


def _centre(e: pb.Element) -> tuple[float, float]:
    return e.bbox.x + e.bbox.width / 2, e.bbox.y + e.bbox.height / 2


def _drag_and_drop(c: _Call, obs: pb.Observation | None) -> list[pb.Action]:
    (fx, fy), (tx, ty) = _centre(_element(c, obs, "from_bid")), _centre(_element(c, obs, "to_bid"))
    return _one(drag=pb.DragAction(from_x=fx, from_y=fy, to_x=tx, to_y=ty))


def _check(c: _Call, obs: pb.Observation | None, want: bool) -> list[pb.Action]:
    if _element(c, obs, "bid").checked == want:
        return _one(noop=pb.NoopAction())
    return _one(click=pb.ClickAction(target=c.bid()))


def _select(c: _Call, _: pb.Observation | None) -> list[pb.Action]:
    options = c.args["options"]
    options = [options] if isinstance(options, str) else options
    if not isinstance(options, (list, tuple)) or not options or not all(isinstance(o, str) for o in options):
        raise BrowserGymActionError(f"{c.name}(): options must be a string or a non-empty list of strings")
    return _one(select=pb.SelectAction(target=c.bid(), options=list(options)))


def _tab_focus(c: _Call, obs: pb.Observation | None) -> list[pb.Action]:
    index = c.args["index"]
    if isinstance(index, bool) or not isinstance(index, int):
        raise BrowserGymActionError(f"{c.name}(): index must be an integer, got {index!r}")
    tabs = list(obs.tabs) if obs is not None else []
    if not -len(tabs) <= index < len(tabs):
        raise BrowserGymActionError(f"{c.name}(): index {index} is out of range ({len(tabs)} open tabs)")
    return _one(switch_tab=pb.SwitchTabAction(tab_id=tabs[index].tab_id))


def _noop(c: _Call, _: pb.Observation | None) -> list[pb.Action]:
    ms = c.number("wait_ms")
    if ms < 0 or ms > 2**31 - 1:
        raise BrowserGymActionError(f"{c.name}(): wait_ms must be between 0 and {2**31 - 1}, got {ms!r}")
    return _one(wait=pb.WaitAction(milliseconds=round(ms))) if round(ms) else _one(noop=pb.NoopAction())


def _unsupported(why: str) -> Callable[[_Call, pb.Observation | None], list[pb.Action]]:
    def build(c: _Call, _: pb.Observation | None) -> list[pb.Action]:
        raise BrowserGymActionError(f"{c.name}() is not supported by the webenv farm: {why}")

    return build


_BID = (("bid", _NO_DEFAULT),)
_XY = (("x", _NO_DEFAULT), ("y", _NO_DEFAULT))
_CLICK = (("bid", _NO_DEFAULT), ("button", "left"), ("modifiers", []))

#: Every BrowserGym high-level action by name: BrowserGym's parameters and the webenv Actions it becomes.
ACTIONS: dict[str, _Spec] = {
    "send_msg_to_user": _Spec((("text", _NO_DEFAULT),), lambda c, _: _one(answer=pb.AnswerAction(text=c.string("text")))),
    "report_infeasible": _Spec((("reason", _NO_DEFAULT),),
                               lambda c, _: _one(answer=pb.AnswerAction(text=c.string("reason")))),
    "noop": _Spec((("wait_ms", 1000),), _noop),
    "fill": _Spec((("bid", _NO_DEFAULT), ("value", _NO_DEFAULT), ("enable_autocomplete_menu", False)),
                  lambda c, _: _one(fill=pb.FillAction(target=c.bid(), text=c.string("value")))),
    "check": _Spec(_BID, lambda c, o: _check(c, o, True)),
    "uncheck": _Spec(_BID, lambda c, o: _check(c, o, False)),
    "select_option": _Spec((("bid", _NO_DEFAULT), ("options", _NO_DEFAULT)), _select),
    "click": _Spec(_CLICK, _click),
    "dblclick": _Spec(_CLICK, lambda c, o: _click(c, o, count=2)),
    "hover": _Spec(_BID, lambda c, _: _one(hover=pb.HoverAction(target=c.bid()))),
    "press": _Spec((("bid", _NO_DEFAULT), ("key_comb", _NO_DEFAULT)),
                   lambda c, _: _one(press=pb.PressAction(target=c.bid(), key=c.string("key_comb")))),
    "focus": _Spec(_BID, lambda c, _: _one(press=pb.PressAction(target=c.bid(), key="Shift"))),
    "clear": _Spec(_BID, lambda c, _: _one(fill=pb.FillAction(target=c.bid(), text=""))),
    "drag_and_drop": _Spec((("from_bid", _NO_DEFAULT), ("to_bid", _NO_DEFAULT)), _drag_and_drop),
    "upload_file": _Spec((("bid", _NO_DEFAULT), ("file", _NO_DEFAULT)),
                         _unsupported("agents send no files to the farm")),
    "scroll": _Spec((("delta_x", _NO_DEFAULT), ("delta_y", _NO_DEFAULT)),
                    lambda c, _: _one(scroll=pb.ScrollAction(dx=c.number("delta_x"), dy=c.number("delta_y")))),
    "scroll_at": _Spec((*_XY, ("dx", _NO_DEFAULT), ("dy", _NO_DEFAULT)),
                       _unsupported("it scrolls the page (scroll) or an element, not at a point")),
    "mouse_move": _Spec(_XY, _unsupported("it has no pointer moves; hover an element instead")),
    "mouse_up": _Spec((*_XY, ("button", "left")), _unsupported("it has no separate button releases; use mouse_click")),
    "mouse_down": _Spec((*_XY, ("button", "left")), _unsupported("it has no separate button presses; use mouse_click")),
    "mouse_click": _Spec((*_XY, ("button", "left")),
                         lambda c, _: _one(click_at=pb.ClickAtAction(x=c.number("x"), y=c.number("y"),
                                                                     button=c.button()))),
    "mouse_dblclick": _Spec((*_XY, ("button", "left")),
                            _unsupported("it has no double clicks at a point; use dblclick on the element")),
    "mouse_drag_and_drop": _Spec((("from_x", _NO_DEFAULT), ("from_y", _NO_DEFAULT), ("to_x", _NO_DEFAULT),
                                  ("to_y", _NO_DEFAULT)),
                                 lambda c, _: _one(drag=pb.DragAction(from_x=c.number("from_x"), from_y=c.number("from_y"),
                                                                      to_x=c.number("to_x"), to_y=c.number("to_y")))),
    "mouse_upload_file": _Spec((*_XY, ("file", _NO_DEFAULT)), _unsupported("agents send no files to the farm")),
    "keyboard_down": _Spec((("key", _NO_DEFAULT),), _unsupported("it has no held keys; use keyboard_press")),
    "keyboard_up": _Spec((("key", _NO_DEFAULT),), _unsupported("it has no held keys; use keyboard_press")),
    "keyboard_press": _Spec((("key", _NO_DEFAULT),), lambda c, _: _one(press=pb.PressAction(key=c.string("key")))),
    "keyboard_type": _Spec((("text", _NO_DEFAULT),), lambda c, _: _one(type=pb.TypeAction(text=c.string("text")))),
    "keyboard_insert_text": _Spec((("text", _NO_DEFAULT),),
                                  lambda c, _: _one(type=pb.TypeAction(text=c.string("text")))),
    "goto": _Spec((("url", _NO_DEFAULT),), lambda c, _: _one(navigate=pb.NavigateAction(url=c.string("url")))),
    "go_back": _Spec((), lambda c, _: _one(go_back=pb.GoBackAction())),
    "go_forward": _Spec((), lambda c, _: _one(go_forward=pb.GoForwardAction())),
    "new_tab": _Spec((), lambda c, _: _one(new_tab=pb.NewTabAction())),
    "tab_close": _Spec((), lambda c, _: _one(close_tab=pb.CloseTabAction())),
    "tab_focus": _Spec((("index", _NO_DEFAULT),), _tab_focus),
}

#: The BrowserGym actions the farm refuses (no such primitive), each with the reason given.
UNSUPPORTED = ("mouse_move", "mouse_up", "mouse_down", "mouse_dblclick", "mouse_upload_file", "scroll_at",
               "upload_file", "keyboard_down", "keyboard_up")


def _bind(name: str, node: ast.Call) -> _Call:
    spec = ACTIONS[name]
    names = [p for p, _ in spec.params]
    if any(isinstance(a, ast.Starred) for a in node.args) or any(k.arg is None for k in node.keywords):
        raise BrowserGymActionError(f"{name}(): * and ** arguments are not accepted")
    if len(node.args) > len(names):
        raise BrowserGymActionError(f"{name}() takes {len(names)} arguments, got {len(node.args)}")
    args: dict[str, Any] = {}
    try:
        for key, arg in zip(names, node.args, strict=False):
            args[key] = ast.literal_eval(arg)
        for kw in node.keywords:
            if kw.arg not in names:
                raise BrowserGymActionError(f"{name}(): unknown argument {kw.arg!r} (takes {', '.join(names) or 'none'})")
            if kw.arg in args:
                raise BrowserGymActionError(f"{name}(): argument {kw.arg!r} given twice")
            args[kw.arg] = ast.literal_eval(kw.value)
    except (ValueError, TypeError, SyntaxError, RecursionError, MemoryError):
        raise BrowserGymActionError(f"{name}(): arguments must be literals (strings, numbers, lists)") from None
    for key, default in spec.params:
        if key not in args:
            if default is _NO_DEFAULT:
                raise BrowserGymActionError(f"{name}(): missing argument {key!r}")
            args[key] = default
    return _Call(name, args)


def parse_calls(text: str) -> list[_Call]:
    """The calls of a BrowserGym action text, each bound to its parameters (no action is built yet)."""
    if not isinstance(text, str):
        raise BrowserGymActionError(f"must be a string, got {type(text).__name__}")
    if len(text) > MAX_ACTION_CHARS:
        raise BrowserGymActionError(f"{len(text)} characters, at most {MAX_ACTION_CHARS}")
    try:
        tree = ast.parse(text, mode="exec")
    except (SyntaxError, ValueError, RecursionError, MemoryError) as exc:
        where = f" at line {exc.lineno}, column {exc.offset}" if isinstance(exc, SyntaxError) and exc.lineno else ""
        raise BrowserGymActionError(f"not a call like click('12'){where}") from None
    if not tree.body:
        raise BrowserGymActionError("no action given (e.g. noop())")
    if len(tree.body) > MAX_ACTIONS:
        raise BrowserGymActionError(f"{len(tree.body)} calls, at most {MAX_ACTIONS}")
    calls = []
    for stmt in tree.body:
        call = stmt.value if isinstance(stmt, ast.Expr) else None
        if not isinstance(call, ast.Call) or not isinstance(call.func, ast.Name):
            raise BrowserGymActionError(f"line {stmt.lineno}: only calls of action functions, like click('12')")
        if call.func.id not in ACTIONS:
            raise BrowserGymActionError(f"unknown action {call.func.id!r} (known: {', '.join(ACTIONS)})")
        calls.append(_bind(call.func.id, call))
    return calls


def to_actions(text: str, observation: pb.Observation | None = None) -> list[pb.Action]:
    """The webenv Actions of a BrowserGym action text, in order. ``observation`` (the page the actions act on) is
    read by the actions that need the page: ``tab_focus`` (its tabs), ``drag_and_drop``/``check``/``uncheck`` (its
    elements). Raises :class:`BrowserGymActionError` naming the call and the problem; nothing is sent then."""
    out: list[pb.Action] = []
    for call in parse_calls(text):
        out.extend(ACTIONS[call.name].build(call, observation))
    return out


@dataclass
class Chat:
    """BrowserGym's chat: the greeting, the goal as the user's message, then the agent's messages."""

    messages: list[dict[str, Any]] = field(default_factory=list)

    @classmethod
    def start(cls, goal: str) -> Chat:
        chat = cls()
        chat.add("assistant", GREETING)
        if goal:
            chat.add("user", goal)
        return chat

    def add(self, role: str, message: str) -> None:
        self.messages.append({"role": role, "timestamp": time.time(), "message": message})

    def record(self, text: str) -> None:
        """Add what an action text says to the user (send_msg_to_user, report_infeasible); call before it runs."""
        try:
            calls = parse_calls(text)
        except BrowserGymActionError:
            return
        for c in calls:
            if c.name == "send_msg_to_user" and isinstance(c.args["text"], str):
                self.add("assistant", c.args["text"])
            elif c.name == "report_infeasible" and isinstance(c.args["reason"], str):
                self.add("infeasible", c.args["reason"])


def screenshot_array(shot: pb.Screenshot) -> np.ndarray:
    """The screenshot as BrowserGym gives it: an HxWx3 uint8 RGB array (0x0x3 when none was taken)."""
    if not shot.data:
        return np.zeros((0, 0, 3), dtype=np.uint8)
    from PIL import Image  # webenv-compat[browsergym]

    with Image.open(io.BytesIO(shot.data)) as img:
        img.load()
        return np.asarray(img if img.mode == "RGB" else img.convert("RGB"), dtype=np.uint8)


def element_properties(elements: Iterable[pb.Element]) -> dict[str, dict[str, Any]]:
    """BrowserGym's ``extra_element_properties``: bid -> visibility (1.0 or 0.0), bbox [x, y, w, h], clickable,
    set_of_marks (visible and clickable: the elements a set-of-marks screenshot boxes)."""
    return {e.element_id: {"visibility": 1.0 if e.visible else 0.0,
                           "bbox": [e.bbox.x, e.bbox.y, e.bbox.width, e.bbox.height],
                           "clickable": e.clickable, "set_of_marks": bool(e.visible and e.clickable)}
            for e in elements}


#: A line of the farm's AXTREE: tab indentation, an optional ``[id]``, the role, an optional JSON-quoted name, then
#: its states (``focused, checked=false, value="x"``).
_AX_LINE = re.compile(r'(?P<indent>\t*)(?:\[(?P<bid>[^\]\s]+)\] )?(?P<role>[\w-]+)'
                      r'(?: (?P<name>"(?:[^"\\]|\\.)*"))?(?: (?P<states>.*))?')
_AX_STATE = re.compile(r'(?P<key>\w+)(?:=(?P<value>"(?:[^"\\]|\\.)*"|[^,\s]*))?(?:, |$)')
#: BrowserGym's defaults (browsergym.utils.obs): roles left out (their children move up), properties never printed,
#: properties printed as a bare word when true.
_BG_IGNORED_ROLES = frozenset({"LineBreak"})
_BG_IGNORED_PROPERTIES = frozenset({"editable", "readonly", "level", "settable", "multiline", "invalid", "focusable"})
_BG_BARE_PROPERTIES = frozenset({"required", "focused", "atomic"})
#: The farm's states whose CDP property is a boolean (the rest, ``checked``, is a tristate string).
_BG_BOOLEAN_STATES = frozenset({"expanded", "selected", "disabled", "pressed", "multiselectable", "modal", "busy"})


@dataclass
class _AxNode:
    role: str
    name: str | None  # None: the line had no name (BrowserGym skips such a node, keeping its children)
    bid: str | None
    value: str | None
    properties: list[tuple[str, Any]]
    children: list[_AxNode] = field(default_factory=list)


def _json_text(quoted: str) -> str:
    try:
        return json.loads(quoted)
    except ValueError:  # a line the farm's length cap cut inside its string
        return quoted.strip('"')


def _ax_node(line: str) -> tuple[int, _AxNode]:
    m = _AX_LINE.fullmatch(line)
    if m is None:  # text the farm's cap cut mid-line: kept as a nameless node of its own words
        indent = len(line) - len(line.lstrip("\t"))
        return indent, _AxNode("StaticText", line.strip(), None, None, [])
    value, props = None, []
    for st in _AX_STATE.finditer(m["states"] or ""):
        key, raw = st["key"], st["value"]
        if key == "value" and raw is not None:
            value = _json_text(raw) if raw.startswith('"') else raw
        elif raw is None:
            props.append((key, True))
        elif key in _BG_BOOLEAN_STATES:
            props.append((key, raw == "true"))
        else:
            props.append((key, _json_text(raw) if raw.startswith('"') else raw))
    name = _json_text(m["name"]) if m["name"] is not None else None
    return len(m["indent"]), _AxNode(m["role"], name, m["bid"], value, props)


def _ax_forest(axtree: str) -> list[_AxNode]:
    """The farm's AXTREE text as a tree (a line's parent: the nearest line above it indented one tab less)."""
    roots: list[_AxNode] = []
    stack: list[tuple[int, _AxNode]] = []
    for line in axtree.splitlines():
        if not line.strip():
            continue
        depth, node = _ax_node(line)
        while stack and stack[-1][0] >= depth:
            stack.pop()
        (stack[-1][1].children if stack else roots).append(node)
        stack.append((depth, node))
    return roots


def axtree_txt(axtree: str) -> str:
    """The farm's AXTREE text in BrowserGym's ``axtree_txt`` format: what ``browsergym.utils.obs.
    flatten_axtree_to_str(tree)`` returns, with its default arguments, on the same tree (tests/
    test_compat_browsergym.py checks it against browsergym-core's own function)."""
    lines: list[str] = []

    def visit(node: _AxNode, depth: int, parent_name: str) -> None:
        skip = node.role in _BG_IGNORED_ROLES or node.name is None
        name = "" if skip else node.name
        if not skip:
            attributes = [k if k in _BG_BARE_PROPERTIES else f"{k}={v!r}" for k, v in node.properties
                          if k not in _BG_IGNORED_PROPERTIES and (v or k not in _BG_BARE_PROPERTIES)]
            if node.role == "generic" and not attributes:
                skip = True
            if node.role == "StaticText" and name in parent_name:
                skip = True
            if not skip:
                text = node.role if node.role == "generic" and not name else f"{node.role} {name.strip()!r}"
                if node.bid is not None:
                    text = f"[{node.bid}] {text}"
                if node.value is not None:
                    text += f" value={node.value!r}"
                if attributes:
                    text += ", ".join(["", *attributes])
                lines.append("\t" * depth + text)
        for child in node.children:
            visit(child, depth if skip else depth + 1, name)

    for root in _ax_forest(axtree):
        visit(root, 0, "")
    return "\n".join(lines)


def observation_dict(observation: pb.Observation, *, goal: str, chat: Chat, last_action: str = "",
                     last_action_error: str = "", start_time: float | None = None) -> dict[str, Any]:
    """BrowserGym's observation dict from a farm observation (keys as in the module docstring)."""
    tabs = open_tabs(observation)
    active = next((i for i, t in enumerate(tabs) if t["active"]), 0)
    return {
        "chat_messages": tuple(dict(m) for m in chat.messages),
        "goal": goal,
        "goal_object": ({"type": "text", "text": goal},) if goal else (),
        "open_pages_urls": tuple(t["url"] for t in tabs),
        "open_pages_titles": tuple(t["title"] for t in tabs),
        "active_page_index": np.asarray([active], dtype=np.int64),
        "url": observation.url,
        "screenshot": screenshot_array(observation.screenshot),
        "axtree_txt": axtree_txt(observation.axtree),
        "pruned_html": observation.html,
        "extra_element_properties": element_properties(observation.elements),
        "focused_element_bid": observation.focused_element_id,
        "last_action": last_action,
        "last_action_error": last_action_error,
        "elapsed_time": np.asarray([time.time() - start_time if start_time else 0.0], dtype=np.float64),
    }


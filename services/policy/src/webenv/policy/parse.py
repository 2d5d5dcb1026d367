"""Reading a model's answer: the memory prompt's labelled lines and the action in the text grammar.

Unparsable output never raises: it becomes a NoopAction flagged `parse_failed`, with the raw text and
the parser's message kept, so a trajectory records exactly what the model said.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from webenv.actions import ActionParseError, parse_action
from webenv.agent.prompt import answer_sections
from webenv.v1 import common_pb2

_CALL = re.compile(
    r"\b(click|fill|select|hover|press|scroll_element|click_at|type|scroll|drag|goto|go_back|go_forward|new_tab|"
    r"switch_tab|close_tab|wait|answer|noop)\s*\(")


@dataclass(slots=True)
class Parsed:
    """What was read from one model output."""

    action: common_pb2.Action
    memory: str = ""
    progress: str = ""
    intention: str = ""
    action_text: str = ""
    failed: bool = False
    error: str = ""


def _clean(action_text: str) -> str:
    text = action_text.strip().strip("`").strip()
    if text.startswith(("python", "text")) and "\n" in text:
        text = text.split("\n", 1)[1].strip()
    return text


def _balanced_call(text: str) -> str | None:
    """The first `name(...)` in free text, up to its matching parenthesis (quotes respected)."""
    m = _CALL.search(text)
    if not m:
        return None
    depth, quote, i = 0, "", m.end() - 1
    while i < len(text):
        ch = text[i]
        if quote:
            if ch == "\\":
                i += 1
            elif ch == quote:
                quote = ""
        elif ch in "\"'":
            quote = ch
        elif ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
            if depth == 0:
                return text[m.start(): i + 1]
        i += 1
    return None


def parse_output(raw: str) -> Parsed:
    """Parse a model answer; never raises."""
    sections = answer_sections(raw)
    memory = sections.get("memory", "")
    progress, intention = sections.get("progress", ""), sections.get("intention", "")
    candidate = sections.get("action")
    if candidate is not None:
        candidate = _clean(candidate)
        call = _balanced_call(candidate)
        if call and not candidate.startswith(call.split("(", 1)[0]):
            candidate = call
    else:
        candidate = _balanced_call(raw)
        if candidate is None:
            return Parsed(action=common_pb2.Action(noop=common_pb2.NoopAction()), memory=memory, progress=progress,
                          intention=intention, failed=True, error="no `Action:` line and no action call in the output")
    try:
        action = parse_action(candidate)
    except ActionParseError as exc:
        return Parsed(action=common_pb2.Action(noop=common_pb2.NoopAction()), memory=memory, progress=progress,
                      intention=intention, action_text=candidate, failed=True, error=str(exc))
    return Parsed(action=action, memory=memory, progress=progress, intention=intention, action_text=candidate)

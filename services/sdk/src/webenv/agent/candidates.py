"""The actions a learned policy chooses among: every sensible action on the page, proposed by rules.

A policy that generates action text must learn the grammar, the element ids and the strings to type
before it learns anything about the task; a policy that *ranks* proposed actions only has to learn the
task (MindAct's candidate ranking, and WebGym's element-id action space). The proposer is deterministic
and shared by the policy service (acting) and the trainer (rebuilding the same candidates from stored
observations), so a stored step's action is found again among its candidates by its action text.

What is proposed, from the AXTREE text and the instruction:
- click on every link, button, tab, checkbox, radio, menu item and switch;
- fill of every text control with every value the instruction can supply (quoted strings, runs of
  capitalised words, tokens with digits, `@` or `-`, numbers, comma-separated clauses);
- select of every option of every combobox that lists options;
- go_back;
- answer: "done", a *report* of the facts the page (and pages seen earlier, kept in memory) shows for
  the labels the instruction names, and the *top* result of a result list with its value.

Memory: facts read off detail pages (`term`/`definition` lists, table headers and cells) are carried
from step to step in HistoryEntry.memory as `label: value` lines, so an answer can report a page the
agent has left. `fold_memory` is a pure function of the observations, so the trainer recomputes it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from webenv.actions import format_action
from webenv.v1 import common_pb2

CLICK_ROLES = frozenset({"link", "button", "tab", "checkbox", "radio", "menuitem", "menuitemcheckbox",
                         "menuitemradio", "switch", "treeitem"})
FILL_ROLES = frozenset({"textbox", "searchbox", "spinbutton"})
#: At most this many fill values are proposed per text control.
MAX_VALUES = 24
#: At most this many facts are kept in memory.
MAX_FACTS = 48
#: An action already taken this often in the visible history is not proposed again (a loop breaker: a
#: BC policy that meets a state its demonstrations never showed, e.g. after a failed fill, otherwise
#: repeats one click until the horizon).
MAX_REPEATS = 2

_LINE = re.compile(r'^(?P<indent>[\t ]*)(?:\[(?P<id>[^\]\s]+)\]\s+)?(?P<role>[\w-]+)(?:\s+"(?P<name>(?:[^"\\]|\\.)*)")?(?P<rest>.*)$')
_VALUE = re.compile(r'value="((?:[^"\\]|\\.)*)"')
_QUOTED = re.compile(r'"([^"]{1,120})"')
_CAPS = re.compile(r"(?:\d+\s+)?[A-Z][\w'&.-]*(?:\s+(?:of\s+|de\s+)?[A-Z][\w'&.-]*){0,4}")
_TOKEN = re.compile(r"[\w.@+-]*[\d@][\w.@+-]*|\w+-\w+")
_WORD = re.compile(r"[a-z0-9]+")


@dataclass(frozen=True, slots=True)
class AxNode:
    """One AXTREE line: `[id] role "name" attributes`, with its depth and position."""

    index: int
    depth: int
    element_id: str
    role: str
    name: str
    value: str
    selected: bool
    checked: bool
    disabled: bool


def parse_axtree(text: str) -> list[AxNode]:
    """Every line of the farm's AXTREE text format as a node (lines that do not parse are skipped)."""
    nodes: list[AxNode] = []
    for line in text.splitlines():
        m = _LINE.match(line)
        if not m:
            continue
        rest = m["rest"] or ""
        v = _VALUE.search(rest)
        nodes.append(AxNode(
            index=len(nodes), depth=m["indent"].count("\t") + m["indent"].count(" ") // 2, element_id=m["id"] or "", role=m["role"].lower(),
            name=(m["name"] or "").replace('\\"', '"'), value=(v.group(1).replace('\\"', '"') if v else ""),
            selected=" selected" in f" {rest}", checked=" checked" in f" {rest}", disabled="disabled" in rest,
        ))
    return nodes


def _subtree(nodes: Sequence[AxNode], i: int) -> Iterable[AxNode]:
    depth = nodes[i].depth
    for n in nodes[i + 1:]:
        if n.depth <= depth:
            return
        yield n


def _text_of(nodes: Sequence[AxNode], i: int) -> str:
    parts = [n.name for n in _subtree(nodes, i) if n.name and n.name != "·"]
    return " ".join(parts).strip()


def page_facts(nodes: Sequence[AxNode]) -> list[tuple[str, str]]:
    """(label, value) pairs a detail page shows: definition lists and two-column tables."""
    facts: list[tuple[str, str]] = []
    for i, n in enumerate(nodes):
        if n.role == "term" and n.name:
            nxt = next((m for m in nodes[i + 1:i + 2] if m.role == "definition"), None)
            if nxt is not None:
                value = nxt.name or _text_of(nodes, nxt.index)
                if value:
                    facts.append((n.name, value))
        elif n.role in ("columnheader", "rowheader") and n.name:
            nxt = nodes[i + 1] if i + 1 < len(nodes) else None
            if nxt is not None and nxt.role == "cell" and nxt.depth == n.depth and nxt.name:
                facts.append((n.name, nxt.name))
    return facts


def heading(nodes: Sequence[AxNode]) -> str:
    """The page's first level-1 heading (a detail page's item title)."""
    return next((n.name for n in nodes if n.role == "heading" and n.name), "")


def parse_memory(memory: str) -> list[tuple[str, str]]:
    out = []
    for line in memory.splitlines():
        label, sep, value = line.partition(": ")
        if sep and label and value:
            out.append((label, value))
    return out


def fold_memory(memory: str, nodes: Sequence[AxNode]) -> str:
    """Memory after seeing a page: earlier facts plus this page's, newest kept when over MAX_FACTS."""
    facts = parse_memory(memory)
    seen = set(facts)
    for fact in page_facts(nodes):
        if fact not in seen:
            facts.append(fact)
            seen.add(fact)
    return "\n".join(f"{k}: {v}" for k, v in facts[-MAX_FACTS:])


def instruction_values(instruction: str) -> list[str]:
    """Strings the instruction can supply to a text field, most specific first."""
    out: list[str] = []
    seen: set[str] = set()

    def add(v: str, exact: bool = False) -> None:
        v = v.strip()
        if not exact:
            v = v.strip(".,;:").strip()
            if v.count("(") != v.count(")"):
                v = v.strip("()").strip()
        if v and v not in seen and len(v) <= 120:
            seen.add(v)
            out.append(v)

    for m in _QUOTED.finditer(instruction):
        add(m.group(1), exact=True)
    for m in re.finditer(r"\(([^()]{1,80})\)", instruction):
        inner = m.group(1)
        add(inner.split(":", 1)[1] if ":" in inner else inner)
    unquoted = _QUOTED.sub(" ", instruction)
    for m in _TOKEN.finditer(unquoted):
        add(m.group(0))
    for m in _CAPS.finditer(unquoted):
        add(m.group(0))
    for clause in re.split(r"[,;]", unquoted):
        words = clause.split()
        if 1 <= len(words) <= 4:
            add(clause)
    return out[:MAX_VALUES]


def mentioned(label: str, instruction: str) -> bool:
    return bool(re.search(rf"\b{re.escape(label.lower())}\b", instruction.lower()))


def report_answer(instruction: str, facts: Sequence[tuple[str, str]]) -> str:
    """`label: value` for every remembered fact whose label the instruction names."""
    parts: list[str] = []
    for label, value in facts:
        part = f"{label.lower()}: {value}"
        if mentioned(label, instruction) and part not in parts:
            parts.append(part)
    return "; ".join(parts)


def top_result(nodes: Sequence[AxNode]) -> str:
    """The first result of a result list: its link text and the value shown beside it."""
    for i, n in enumerate(nodes):
        if n.role != "listitem":
            continue
        sub = list(_subtree(nodes, i))
        link = next((m for m in sub if m.role == "link" and m.name), None)
        texts = [m.name for m in sub if m.role == "statictext" and m.name and m.name != "·"]
        if link is not None and texts:
            return f"{link.name} ({texts[0]})"
    return ""


@dataclass(slots=True)
class Candidate:
    """One proposed action with what the scorer reads about it."""

    action: common_pb2.Action
    text: str
    kind: str
    node: AxNode | None = None
    value: str = ""
    answer_type: str = ""


@dataclass(slots=True)
class Context:
    """What the proposer and the scorer know at one step."""

    instruction: str
    url: str
    nodes: list[AxNode]
    memory: str
    history: list[str] = field(default_factory=list)
    history_errors: list[str] = field(default_factory=list)
    last_error: str = ""
    step_index: int = 0


def _target(element_id: str) -> common_pb2.ElementTarget:
    return common_pb2.ElementTarget(element_id=element_id)


def _combobox_options(nodes: Sequence[AxNode], i: int) -> list[AxNode]:
    return [m for m in _subtree(nodes, i) if m.role == "option" and m.name and not m.disabled]


def propose(ctx: Context) -> list[Candidate]:
    """Every candidate action at this step, in a stable order, without duplicates."""
    out: list[Candidate] = []
    seen: set[str] = set()

    repeats: dict[str, int] = {}
    for past in ctx.history:
        repeats[past] = repeats.get(past, 0) + 1

    def add(action: common_pb2.Action, kind: str, node: AxNode | None = None, value: str = "",
            answer_type: str = "") -> None:
        text = format_action(action)
        if text not in seen and repeats.get(text, 0) < MAX_REPEATS:
            seen.add(text)
            out.append(Candidate(action, text, kind, node, value, answer_type))

    values = instruction_values(ctx.instruction)
    nodes = ctx.nodes
    for i, n in enumerate(nodes):
        if not n.element_id or n.disabled:
            continue
        if n.role in CLICK_ROLES:
            add(common_pb2.Action(click=common_pb2.ClickAction(target=_target(n.element_id))), "click", n)
        elif n.role in FILL_ROLES:
            for v in values:
                add(common_pb2.Action(fill=common_pb2.FillAction(target=_target(n.element_id), text=v)), "fill", n, v)
        elif n.role in ("combobox", "listbox"):
            for opt in _combobox_options(nodes, i):
                add(common_pb2.Action(select=common_pb2.SelectAction(target=_target(n.element_id),
                                                                     options=[opt.name])), "select", n, opt.name)
    add(common_pb2.Action(go_back=common_pb2.GoBackAction()), "back")
    add(common_pb2.Action(answer=common_pb2.AnswerAction(text="done")), "answer", value="done", answer_type="done")
    report = report_answer(ctx.instruction, parse_memory(ctx.memory))
    if report:
        add(common_pb2.Action(answer=common_pb2.AnswerAction(text=report)), "answer", value=report,
            answer_type="report")
    top = top_result(nodes)
    if top:
        add(common_pb2.Action(answer=common_pb2.AnswerAction(text=top)), "answer", value=top, answer_type="top")
    return out


def context(instruction: str, observation: common_pb2.Observation, memory_before: str,
            history: Sequence[tuple[str, str]], step_index: int) -> Context:
    """The step's context: the page parsed, memory folded with this page's facts, past actions.

    ``history`` is (action_text, last_action_error) of the earlier steps, oldest first.
    """
    nodes = parse_axtree(observation.axtree)
    return Context(
        instruction=instruction, url=observation.url, nodes=nodes, memory=fold_memory(memory_before, nodes),
        history=[a for a, _ in history], history_errors=[e for _, e in history],
        last_error=observation.last_action_error, step_index=step_index,
    )


def words(text: str) -> list[str]:
    return _WORD.findall(text.lower())

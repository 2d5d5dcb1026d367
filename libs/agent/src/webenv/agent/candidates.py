"""The actions a learned policy chooses among: every sensible action on the page, proposed by rules.

A policy that generates action text must learn the grammar, the element ids and the strings to type
before it learns anything about the task; a policy that *ranks* proposed actions only has to learn the
task (MindAct's candidate ranking, and WebGym's element-id action space). The proposer is deterministic
and shared by the policy service (acting) and the trainer (rebuilding the same candidates from stored
observations), so a stored step's action is found again among its candidates by its action text.

What is proposed, from the AXTREE text and the instruction:
- click on every link, button, tab, checkbox, radio, menu item, switch and option (an open ARIA listbox's), and on
  an ARIA combobox that lists no options until it is opened;
- fill of every text control with every value the instruction can supply (quoted strings, runs of
  capitalised words, tokens with digits, `@` or `-`, numbers, comma-separated clauses);
- select of every option of every combobox that lists options;
- go_back;
- answer: "done" (unless the instruction is a question: `asks_question`; no answer that only repeats the
  instruction: `echoes`), a *report* of the facts the page (and pages seen earlier, kept in memory) shows for
  the labels the instruction names or a synonym of them (`label: value; ...`; `facts.wanted_labels`), each
  remembered *fact*'s value on its own, the *matched* facts (`value (label); ...`, labels whose word stems the
  instruction names at least half of), the *top* results (the first list item, and the first record of each kind:
  article, table row, link card, as `title (details)`), and *passages* of the page (a sentence after its nearest
  heading, a table row, a term with its definition: the 8 sharing most words with the instruction). A ranker
  chooses among them, so a question worded unlike the page's label ("how much does it cost" for "Price") still has
  its answer among the candidates. Passages are for pages no `label: value` rule reads: on hand-made websites the
  oracle's answer page offered an accepted answer for 9 of 28 information tasks without them, 21 with them
  (designed on four other hand-made sites, 10/17 -> 15/17; synthetic test 67/67 either way;
  bench/results/learning/notes.md).

Facts (`page_facts`, webenv.agent.facts) are read from any page's structure and prose, not from one site
generator's templates: definition lists, tables and grids, `label: value` lines and runs of them, and sentences
read clause by clause ("The price is $12.99", "Written by Mara Ellison", "readers rate it 2.6 out of 5"); the
prose of a list's records is the records', not the page's. They are carried from step to step in
HistoryEntry.memory as `label: value` lines, so an answer can report a page the agent has left. `fold_memory` is a
pure function of the observations, so the trainer recomputes it from stored steps. On the oracle's answer pages
of the validation builders an accepted answer was offered for 24 of 64 information tasks before the clause, pair,
record and synonym rules, 64 with them (train builders, designed on: 40/72 -> 67/72; bench/results/answer-reach.md).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from webenv.actions import format_action
from webenv.v1 import common_pb2

from .axtree import AxNode, parse_axtree, subtree
from .facts import (
    MAX_PASSAGE_CHARS,
    MAX_PASSAGES,
    heading,
    page_facts,
    passage_keys,
    passages,
    relevant_passages,
    top_results,
    wanted_labels,
)

__all__ = ["MAX_PASSAGES", "MAX_PASSAGE_CHARS", "AxNode", "Candidate", "Context", "context", "fold_memory", "heading",
           "instruction_values", "page_facts", "parse_axtree", "parse_memory", "passage_keys", "passages", "propose",
           "relevant_passages", "words"]

CLICK_ROLES = frozenset({"link", "button", "tab", "checkbox", "radio", "menuitem", "menuitemcheckbox",
                         "menuitemradio", "switch", "treeitem", "option"})
FILL_ROLES = frozenset({"textbox", "searchbox", "spinbutton"})
#: At most this many fill values are proposed per text control.
MAX_VALUES = 24
#: At most this many facts are kept in memory.
MAX_FACTS = 48
#: At most this many remembered facts (the newest) are proposed as answers of their own.
MAX_FACT_ANSWERS = 24
#: At most this many *top* results (the first list item, and the first record of each kind: `facts.top_results`).
MAX_TOPS = 3
#: An action already taken this often in the visible history is not proposed again (a loop breaker: a
#: BC policy that meets a state its demonstrations never showed, e.g. after a failed fill, otherwise
#: repeats one click until the horizon). A click or go_back counts only since the last fill or select: typing
#: changes what the same button does (a search form's button pressed for each of three products, one result link
#: at the same place on each result page: 6 of 110 oracle episodes of the train and validation builders took a
#: step the rule hid, bench/answer_reach.py actions).
MAX_REPEATS = 2
#: Action kinds that change a form's values: after one, a click is a new action.
_TYPING = ("fill(", "select(")

_QUOTED = re.compile(r'"([^"]{1,120})"')
_CAPS = re.compile(r"(?:\d+\s+)?[A-Z][\w'&.-]*(?:\s+(?:of\s+|de\s+)?[A-Z][\w'&.-]*){0,4}")
_TOKEN = re.compile(r"[\w.@+-]*[\d@][\w.@+-]*|\w+-\w+")
_WORD = re.compile(r"[a-z0-9]+")


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


def asks_question(instruction: str) -> bool:
    """Whether the instruction ends with a question mark: a task that asks for an answer, so "done" is not one.

    Of the distinct tasks of the stored oracle episodes of the train and validation builders (answer_reach's and
    ranking's collections: 203 information, 267 navigation and transaction), 33 information tasks end with "?" and no
    other does (`Could you book ...?` goes on with the booking's details); all 17 of handmade_dev's information tasks
    do. The features-2 seed-1 checkpoints answered "done" to 14 (BC) and 16 (RL) of those 17
    questions after two or three clicks (bench/results/handmade-dev.md): a ranker trained where "done" ends short navigation episodes
    ranks it first on pages it does not know.
    """
    return instruction.rstrip().endswith("?")


def echoes(answer: str, instruction: str) -> bool:
    """Whether an answer only repeats the instruction (its whole text inside it, case and spacing folded): the site's
    name in a banner ("Hearth & Loaf" for "On the Hearth & Loaf website, ..."), which tells the asker nothing. Not when
    the instruction offers alternatives (" or "), whose answer is one of its own strings.

    On the final pages of 261 stored oracle episodes of information tasks (train and validation builders,
    handmade_dev) no accepted answer candidate echoes its instruction; the features-2 seed-1 BC checkpoint, once
    "done" was not offered to a question, answered the site's name to 5 of handmade_dev's 17 questions
    (bench/results/handmade-dev.md).
    """
    folded, asked = " ".join(answer.split()).casefold(), " ".join(instruction.split()).casefold()
    return bool(folded) and folded in asked and " or " not in asked


def mentioned(label: str, instruction: str) -> bool:
    return bool(re.search(rf"\b{re.escape(label.lower())}\b", instruction.lower()))


def report_answer(instruction: str, facts: Sequence[tuple[str, str]]) -> str:
    """`label: value` for every remembered fact whose label the instruction names (or a synonym of it:
    `facts.wanted_labels`)."""
    parts: list[str] = []
    for label, value in facts:
        part = f"{label.lower()}: {value}"
        if wanted_labels(label, instruction) and part not in parts:
            parts.append(part)
    return "; ".join(parts)


def _stems(text: str) -> set[str]:
    return {w[:4] for w in _WORD.findall(text.lower()) if len(w) > 2 and w not in _STOP_WORDS}


_STOP_WORDS = frozenset("the and for with from that this what which who how does did are was were its you your "
                        "give tell find report answer check values value page site".split())


def matched_answer(instruction: str, facts: Sequence[tuple[str, str]]) -> str:
    """`value (label)` for every remembered fact whose label's word stems the instruction names at least half of, or
    whose label is a synonym of a word it names (`facts.wanted_labels`): "Price" for "what is its price", "Pro
    Monthly price" for "How much is the Pro plan per month?", but not every other row's "Basic Monthly price"."""
    want = _stems(instruction)
    parts: list[str] = []
    for label, value in facts:
        part = f"{value} ({label})"
        have = _stems(label)
        if ((have and 2 * len(have & want) >= len(have)) or wanted_labels(label, instruction)) and part not in parts:
            parts.append(part)
    return "; ".join(parts)


def top_result(nodes: Sequence[AxNode]) -> str:
    """The first result of a result list: its link text and the value shown beside it."""
    for i, n in enumerate(nodes):
        if n.role != "listitem":
            continue
        sub = list(subtree(nodes, i))
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
    label: str = ""  # a fact answer's label


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
    return [m for m in subtree(nodes, i) if m.role == "option" and m.name and not m.disabled]


def propose(ctx: Context) -> list[Candidate]:
    """Every candidate action at this step, in a stable order, without duplicates."""
    out: list[Candidate] = []
    seen: set[str] = set()

    repeats: dict[str, int] = {}
    for past in ctx.history:
        if past.startswith(_TYPING):
            repeats = {k: v for k, v in repeats.items() if k.startswith(_TYPING)}  # clicks count afresh
        repeats[past] = repeats.get(past, 0) + 1

    def add(action: common_pb2.Action, kind: str, node: AxNode | None = None, value: str = "",
            answer_type: str = "", label: str = "") -> None:
        text = format_action(action)
        if kind == "answer" and answer_type != "done" and echoes(value, ctx.instruction):
            return
        if text not in seen and repeats.get(text, 0) < MAX_REPEATS:
            seen.add(text)
            out.append(Candidate(action, text, kind, node, value, answer_type, label))

    values = instruction_values(ctx.instruction)
    nodes = ctx.nodes
    native_options: set[int] = set()
    for i, n in enumerate(nodes):
        if not n.element_id or n.disabled:
            continue
        if n.role in CLICK_ROLES:
            if n.index in native_options:
                continue
            add(common_pb2.Action(click=common_pb2.ClickAction(target=_target(n.element_id))), "click", n)
        elif n.role in FILL_ROLES:
            for v in values:
                add(common_pb2.Action(fill=common_pb2.FillAction(target=_target(n.element_id), text=v)), "fill", n, v)
        elif n.role in ("combobox", "listbox"):
            options = _combobox_options(nodes, i)
            if n.role == "combobox":  # a native select's options are selected, not clicked
                native_options.update(m.index for m in options)
            for opt in options:
                add(common_pb2.Action(select=common_pb2.SelectAction(target=_target(n.element_id),
                                                                     options=[opt.name])), "select", n, opt.name)
            if not options and n.role == "combobox":  # an ARIA combobox lists its options once opened
                add(common_pb2.Action(click=common_pb2.ClickAction(target=_target(n.element_id))), "click", n)
    add(common_pb2.Action(go_back=common_pb2.GoBackAction()), "back")
    if not asks_question(ctx.instruction):  # a question is answered, never ended with "done"
        add(common_pb2.Action(answer=common_pb2.AnswerAction(text="done")), "answer", value="done",
            answer_type="done")
    facts = parse_memory(ctx.memory)
    report = report_answer(ctx.instruction, facts)
    if report:
        add(common_pb2.Action(answer=common_pb2.AnswerAction(text=report)), "answer", value=report,
            answer_type="report")
    for label, value in reversed(facts[-MAX_FACT_ANSWERS:]):  # newest first: the page just read
        add(common_pb2.Action(answer=common_pb2.AnswerAction(text=value)), "answer", value=value,
            answer_type="fact", label=label)
    matched = matched_answer(ctx.instruction, facts)
    if matched.count("; ") >= 1:
        add(common_pb2.Action(answer=common_pb2.AnswerAction(text=matched)), "answer", value=matched,
            answer_type="matched")
    for text in relevant_passages(ctx.instruction, nodes):
        add(common_pb2.Action(answer=common_pb2.AnswerAction(text=text)), "answer", value=text, answer_type="passage",
            label=text)
    for top in [top_result(nodes), *top_results(nodes)][:MAX_TOPS]:
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

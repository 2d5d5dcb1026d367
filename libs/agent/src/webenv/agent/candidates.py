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
  the labels the instruction names (`label: value; ...`), each remembered *fact*'s value on its own, the
  *matched* facts (`value (label); ...`, labels sharing a word stem with the instruction), the *top*
  result of a result list with its value, and *passages* of the page (a sentence after its nearest heading, a
  table row, a term with its definition: the 8 sharing most words with the instruction). A ranker chooses among
  them, so a question worded unlike the page's label ("how much does it cost" for "Price") still has its answer
  among the candidates. Passages are for pages no `label: value` rule reads: on hand-made websites the oracle's
  answer page offered an accepted answer for 9 of 28 information tasks without them, 21 with them (designed on four
  other hand-made sites, 10/17 -> 15/17; synthetic test 67/67 either way; bench/results/learning/notes.md).

Facts (`page_facts`) are read from any page's structure and prose, not from one site generator's
templates: definition lists (`term`/`definition`), tables (a header row over data rows, row headers
beside cells, two-column key/value rows), `label: value` and `label - value` lines of list items and
paragraphs, and sentences such as "The price is $12.99", "Ships in 3 days", "Written by Mara Ellison",
"It has 312 pages". They are carried from step to step in HistoryEntry.memory as `label: value` lines, so
an answer can report a page the agent has left. `fold_memory` is a pure function of the observations, so
the trainer recomputes it from stored steps.
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
#: At most this many remembered facts (the newest) are proposed as answers of their own.
MAX_FACT_ANSWERS = 24
#: At most this many passages of the page (sentences, table rows: `passages`), those sharing the most words with the
#: instruction, are proposed as answers of their own, each at most this long.
MAX_PASSAGES = 8
MAX_PASSAGE_CHARS = 200
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


#: Roles whose text is read as prose (sentences, `label: value` lines).
_BLOCKS = frozenset({"paragraph", "listitem", "blockquote", "caption", "note", "figcaption"})
#: Text under these roles is a fact of its own structure (or an action's label), never prose.
_NOT_PROSE = frozenset({"term", "definition", "cell", "gridcell", "rowheader", "columnheader", "heading", "link",
                        "button", "option", "combobox", "listbox", "textbox", "searchbox", "tab", "menuitem",
                        "navigation", "banner", "contentinfo", "labeltext", "legend", "table"})
_CELLS = frozenset({"cell", "gridcell", "rowheader", "columnheader"})
#: A sentence opening with one of these verbs tells the user to work a page control ("Click on the link ...",
#: "Enter the password ...", "Choose a course on the courses page."): an instruction the page gives, never a fact it
#: states, so it is not a passage. Verbs of the page's controls only: "Call us on 0131 ..." is a fact.
_UI_VERBS = frozenset("click select enter type choose press tap pick check uncheck tick expand collapse drag drop "
                      "scroll fill submit focus copy paste highlight toggle".split())
_SENTENCE = re.compile(r"(?<=[.!?])\s+(?=[A-Z0-9$\u20ac\u00a3\"'(])")
_LABEL = r"[A-Za-z][\w()/&'.-]*(?:\s+[\w()/&'.-]+){0,4}"
_COLON_FACT = re.compile(rf"^\s*({_LABEL})\s*:\s+(\S.*)$")
_DASH_FACT = re.compile(rf"^\s*({_LABEL})\s+[-\u2013\u2014]\s+(\S.*)$")
_IS_FACT = re.compile(r"^(?:[Tt]he|[Ii]ts|[Tt]heir|[Oo]ur|[Yy]our)\s+([a-z][a-z-]*(?:\s+[a-z][a-z-]*){0,2})\s+"
                      r"(?:is|are|was|were)\s+(?:only\s+|about\s+|just\s+)?(\S.*)$")
_NUMBER = r"(?:[$\u20ac\u00a3]\s?)?\d[\d,.]*(?:\s?(?:%|[A-Za-z]+))?"
_LEAD_FACT = re.compile(rf"^([A-Z][a-z]+(?:\s+[a-z]+){{0,3}})\s+({_NUMBER})")
_BY_FACT = re.compile(r"\b([A-Za-z]+ed|[Ww]ritten|[Mm]ade|[Bb]uilt|[Ss]old|[Hh]eld|[Tt]aught|[Dd]rawn|[Gg]iven|[Kk]nown|"
                      r"[Ss]hown|[Rr]un)\s+(by|in|on|from|at)\s+([A-Z][\w'.-]*(?:\s+[A-Z][\w'.-]*){0,3}|\d[\w,]*(?:\s\d{4})?)")
_HAS_FACT = re.compile(r"\b(?:has|have|with|holds|contains)\s+(\d[\d,.]*)\s+([a-z]+)")
_PRONOUNS = frozenset("It This That They We You He She There Here Each Every All Our Your".split())


def _clean(value: str) -> str:
    return value.strip().rstrip(".,;:!").strip()


def _sentence_facts(sentence: str) -> list[tuple[str, str]]:
    """Facts one sentence or line states."""
    s = sentence.strip()
    out: list[tuple[str, str]] = []
    for pattern in (_COLON_FACT, _DASH_FACT):
        m = pattern.match(s)
        if m and not m.group(1).strip().isdigit():
            return [(m.group(1).strip(), _clean(m.group(2)))]
    m = _IS_FACT.match(s)
    if m:
        out.append((m.group(1), _clean(m.group(2))))
    m = None if out else _LEAD_FACT.match(s)
    if m and m.group(1).split()[0] not in _PRONOUNS:
        out.append((m.group(1), _clean(m.group(2))))
    for m in _BY_FACT.finditer(s):
        out.append((f"{m.group(1).lower()} {m.group(2)}", _clean(m.group(3))))
    for m in _HAS_FACT.finditer(s):
        out.append((m.group(2), m.group(1)))
    return [(k, v) for k, v in out if k and v]


def _prose_text(nodes: Sequence[AxNode], i: int) -> str:
    text = " ".join(p for p in (nodes[i].name, _text_of(nodes, i)) if p)
    return re.sub(r"\s+([,.;:!?])", r"\1", text).strip()


def _table_facts(nodes: Sequence[AxNode], i: int) -> list[tuple[str, str]]:
    """Facts of one table: key/value rows, and data rows under a header row (`<row key> <header>: cell`)."""
    table_depth = nodes[i].depth
    rows: list[list[AxNode]] = []
    for n in _subtree(nodes, i):
        if n.role == "table":
            break  # a nested table is read on its own
        if n.role == "row":
            rows.append([])
        elif n.role in _CELLS and rows and n.depth > table_depth:
            rows[-1].append(n)
    rows = [r for r in rows if r]
    facts: list[tuple[str, str]] = []
    header: list[str] = []
    if rows and len(rows[0]) > 1 and all(c.role == "columnheader" for c in rows[0]):
        header = [c.name or _text_of(nodes, c.index) for c in rows[0]]
        rows = rows[1:]
    for row in rows:
        texts = [c.name or _text_of(nodes, c.index) for c in row]
        if header and len(texts) == len(header):
            if len(rows) == 1:  # one record: the headers are its labels
                facts += [(h, v) for h, v in zip(header, texts, strict=True) if h and v]
            elif texts[0]:  # a row per record, keyed by its first cell
                facts += [(f"{texts[0]} {h}", v) for h, v in zip(header[1:], texts[1:], strict=True) if h and v]
        elif len(texts) == 2 and texts[0] and texts[1]:
            facts.append((texts[0], texts[1]))
    return facts


def _walk(nodes: Sequence[AxNode]) -> Iterable[tuple[int, AxNode, set[str], bool, bool]]:
    """Every node in document order with the roles above it, whether it is inside a table, and whether it is prose
    (a text block outside tables, other blocks and controls): the one traversal `page_facts` and `passages` read."""
    stack: list[tuple[int, str]] = []
    in_table = -1
    for i, n in enumerate(nodes):
        while stack and stack[-1][0] >= n.depth:
            stack.pop()
        if in_table >= 0 and n.depth <= in_table:
            in_table = -1
        inside = {r for _, r in stack}
        prose = in_table < 0 and not (inside & (_BLOCKS | _NOT_PROSE)) and (
            n.role in _BLOCKS or (n.role == "statictext" and bool(n.name)))
        yield i, n, inside, in_table >= 0, prose
        if n.role == "table":
            in_table = n.depth
        stack.append((n.depth, n.role))


def page_facts(nodes: Sequence[AxNode]) -> list[tuple[str, str]]:
    """(label, value) pairs a page shows, in document order: definition lists, tables, and prose."""
    facts: list[tuple[str, str]] = []
    for i, n, _, in_table, prose in _walk(nodes):
        if n.role == "term" and n.name:
            nxt = next((m for m in nodes[i + 1:i + 2] if m.role == "definition"), None)
            if nxt is not None:
                value = nxt.name or _text_of(nodes, nxt.index)
                if value:
                    facts.append((n.name, value))
        elif n.role == "table":
            facts += _table_facts(nodes, i)
        elif n.role in ("columnheader", "rowheader") and n.name and not in_table:
            nxt = nodes[i + 1] if i + 1 < len(nodes) else None
            if nxt is not None and nxt.role == "cell" and nxt.depth == n.depth and nxt.name:
                facts.append((n.name, nxt.name))
        elif prose:
            for sentence in _SENTENCE.split(_prose_text(nodes, i)):
                facts += _sentence_facts(sentence)
    out: list[tuple[str, str]] = []
    for label, value in facts:
        label, value = label.strip()[:60], value.strip()[:120]
        if label and value and (label, value) not in out:
            out.append((label, value))
    return out


def passages(nodes: Sequence[AxNode]) -> list[str]:
    """Short texts of the page that state something, in document order: each sentence of its prose (paragraphs, list
    items, ...) after the nearest heading above it (`Dr Priya Raman: Her office is room 2.07.`), each table row with
    its cells joined (`27 Feb; Buried valleys; Dr Hamish Corrie; British Geological Survey`), each term with its
    definition. What a person would quote to answer from a page whose facts no `label: value` pattern reads, or
    whose answer joins values of one record (a row, a card). A sentence that tells the user to work a control
    (`_UI_VERBS`) is the page's instruction, not a passage."""
    out: list[str] = []
    head = ""

    def add(text: str) -> None:
        text = re.sub(r"\s+", " ", text).strip()
        if text and len(text) <= MAX_PASSAGE_CHARS and text not in out:
            out.append(text)

    for i, n, inside, _, prose in _walk(nodes):
        if n.role == "heading" and n.name:
            head = n.name
        elif n.role == "row" and not inside & {"row"}:
            cells = [c.name or _text_of(nodes, c.index) for c in _subtree(nodes, i) if c.role in _CELLS
                     and c.depth == n.depth + 1]
            if len([c for c in cells if c]) > 1:
                add("; ".join(c for c in cells if c))
        elif n.role == "term" and n.name:
            nxt = next((m for m in nodes[i + 1:i + 2] if m.role == "definition"), None)
            if nxt is not None:
                add(f"{n.name}: {nxt.name or _text_of(nodes, nxt.index)}")
        elif prose:
            for sentence in _SENTENCE.split(_prose_text(nodes, i)):
                sentence = sentence.strip()
                words = sentence.split()
                if len(words) < 2 or words[0].lower().strip("\"'(") in _UI_VERBS:
                    continue
                if head and head.lower() not in sentence.lower():
                    sentence = f"{head}: {sentence}"
                add(sentence)
    return out


def passage_keys(text: str) -> set[str]:
    """What relevance between a passage and an instruction counts: 3-letter stems ("feb" of "February") and every
    number ("27"), stop words left out."""
    return {w if w.isdigit() else w[:3] for w in _WORD.findall(text.lower())
            if w.isdigit() or (len(w) > 2 and w not in _STOP_WORDS)}


def relevant_passages(instruction: str, nodes: Sequence[AxNode]) -> list[str]:
    """The page's passages sharing the most word stems with the instruction (at least one), at most MAX_PASSAGES."""
    want = passage_keys(instruction)
    scored = [(len(passage_keys(p) & want), -i, p) for i, p in enumerate(passages(nodes))]
    return [p for k, _, p in sorted(scored, reverse=True)[:MAX_PASSAGES] if k > 0]


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


def _stems(text: str) -> set[str]:
    return {w[:4] for w in _WORD.findall(text.lower()) if len(w) > 2 and w not in _STOP_WORDS}


_STOP_WORDS = frozenset("the and for with from that this what which who how does did are was were its you your "
                        "give tell find report answer check values value page site".split())


def matched_answer(instruction: str, facts: Sequence[tuple[str, str]]) -> str:
    """`value (label)` for every remembered fact whose label shares a word stem with the instruction."""
    want = _stems(instruction)
    parts: list[str] = []
    for label, value in facts:
        part = f"{value} ({label})"
        if _stems(label) & want and part not in parts:
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
    return [m for m in _subtree(nodes, i) if m.role == "option" and m.name and not m.disabled]


def propose(ctx: Context) -> list[Candidate]:
    """Every candidate action at this step, in a stable order, without duplicates."""
    out: list[Candidate] = []
    seen: set[str] = set()

    repeats: dict[str, int] = {}
    for past in ctx.history:
        repeats[past] = repeats.get(past, 0) + 1

    def add(action: common_pb2.Action, kind: str, node: AxNode | None = None, value: str = "",
            answer_type: str = "", label: str = "") -> None:
        text = format_action(action)
        if text not in seen and repeats.get(text, 0) < MAX_REPEATS:
            seen.add(text)
            out.append(Candidate(action, text, kind, node, value, answer_type, label))

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

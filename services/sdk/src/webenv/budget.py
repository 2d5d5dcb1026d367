"""Observation budgets: an accessibility tree (and the page's MARKDOWN) cut to a number of characters, or of tokens of
a named tokenizer, the way agent harnesses cut it, and a report of what was cut. One rule for every environment
(`webenv.envservice` applies it to the farm's and the world model's observations when ``ObservationSpec.budget_chars``
or ``budget_tokens`` is set); each of AXTREE and MARKDOWN is held to the budget on its own.

The tree is the farm's AXTREE text, one node a line (``[id] role "name" states``), indented one tab per depth. While it
is over the budget:

1. **Long repeated lists collapse with counts**: a run of more than ``KEEP_ITEMS`` * 2 consecutive siblings of one
   role (rows, list items, links, options) keeps its first ``KEEP_ITEMS`` (with their subtrees) and one line in place
   of the rest, ``... 37 more row cut ([120]..[408])``, naming the first and last ids cut.
2. **Lines by priority**: interactive nodes in the viewport first, then the page's text and structure, then
   interactive nodes out of view, each class in document order; a kept line keeps its ancestors (the structure it
   sits in). Each gap of cut lines is one line, ``... 12 lines cut``. Visibility comes from the observation's elements
   (``Element.visible``); without them every interactive node counts as in view.

MARKDOWN (`prune_markdown`) is flat, a line a node: table rows (``|``), list items (``- ``), headings (``#``) and
lines that are one link or control (the world model's MARKDOWN, one element a line) are the roles whose runs collapse;
a line naming an element (``[12:...]``: links, buttons, controls) is interactive and in view when one of those
elements is; any other line is text.

A budget in tokens (`prune_tokens`) counts with a `webenv.tokens` tokenizer: a text within it is untouched; otherwise
the same rule runs at the largest number of characters whose output (footer included) is within the tokens, found by
bisection from the text's own characters per token (up to eight prunings; fewer when the collapsed text fits whole),
and if even a short cut is over (a tokenizer far denser than four characters a token) the output is cut at its end
until it fits.

The last line says what was cut and how to get it (a larger budget, no budget for the whole text, or scrolling: a node
out of view comes in when the page scrolls to it). Observation.budget (AXTREE) and Observation.markdown_budget carry
the same as numbers.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from webenv import tokens as tokens_module
from webenv.v1 import common_pb2

__all__ = ["KEEP_ITEMS", "apply_budget", "prune_axtree", "prune_markdown", "prune_tokens"]

#: Items of a long repeated list kept before the rest collapse into one line.
KEEP_ITEMS = 5
#: Roles an agent acts on (what it needs first).
INTERACTIVE = frozenset({
    "link", "button", "textbox", "searchbox", "combobox", "checkbox", "radio", "option", "menuitem", "menuitemcheckbox",
    "menuitemradio", "tab", "slider", "spinbutton", "switch", "clickable", "listbox", "Date", "InputTime", "DateTime",
})
_LINE = re.compile(r"^\[([^\]]*)\]\s+(\S+)|^(\S+)")
HOW = "no budget (budget_chars and budget_tokens 0) for the whole text, a larger budget, or scroll to bring out-of-view nodes in"


@dataclass
class _Node:
    index: int
    line: str
    depth: int
    role: str
    element_id: str
    parent: _Node | None = None
    children: list[_Node] = field(default_factory=list)
    refs: tuple[str, ...] = ()  # MARKDOWN: the elements a line names ([id:...]); it is interactive when it names one


@dataclass
class Report:
    """What a budget cut (Observation.budget)."""

    full_chars: int = 0
    kept_chars: int = 0
    items_collapsed: int = 0
    lines_cut: int = 0
    full_tokens: int = 0
    kept_tokens: int = 0


def _parse(text: str) -> list[_Node]:
    nodes: list[_Node] = []
    stack: list[_Node] = []
    for i, line in enumerate(text.split("\n")):
        depth = len(line) - len(line.lstrip("\t"))
        m = _LINE.match(line.strip())
        eid, role = (m.group(1) or "", m.group(2) or m.group(3) or "") if m else ("", "")
        node = _Node(i, line, depth, role, eid)
        while stack and stack[-1].depth >= depth:
            stack.pop()
        if stack:
            node.parent = stack[-1]
            stack[-1].children.append(node)
        stack.append(node)
        nodes.append(node)
    return nodes


_MD_REF = re.compile(r"\[([0-9][^\]:\s]*):")
_MD_KINDS = (("|", "row"), ("- ", "listitem"), ("#", "heading"))
_MD_LEAD = re.compile(r"^\[[0-9][^\]:\s]*:(?:(\w+) )?[^\]]*\](\()?")


def _parse_markdown(text: str) -> list[_Node]:
    """MARKDOWN lines as flat nodes: a table row, a list item, a heading, or a line that is one link or control (the
    world model writes one element a line) by its kind, so runs of one kind collapse; any other line is text. A line
    naming elements (links, buttons, controls) carries their ids."""
    nodes = []
    for i, line in enumerate(text.split("\n")):
        role = next((kind for lead, kind in _MD_KINDS if line.startswith(lead)), "")
        lead = _MD_LEAD.match(line) if not role and line.count("[") == 1 else None
        if lead is not None:
            role = "link" if lead.group(2) else (lead.group(1) or "control")
        refs = tuple(_MD_REF.findall(line))
        nodes.append(_Node(i, line, 0, role, refs[0] if refs else "", refs=refs))
    return nodes


def _subtree(node: _Node) -> Iterable[_Node]:
    yield node
    for c in node.children:
        yield from _subtree(c)


def _collapse(nodes: list[_Node], report: Report) -> list[tuple[_Node | None, str]]:
    """The lines after collapsing long runs of same-role siblings: (node or None for a summary line, text)."""
    cut: dict[int, str] = {}  # index of the first node cut in a run -> its summary line
    hidden: set[int] = set()
    roots = [n for n in nodes if n.parent is None]
    for siblings in [roots] + [n.children for n in nodes]:
        i = 0
        while i < len(siblings):
            j = i
            while j < len(siblings) and siblings[j].role == siblings[i].role:
                j += 1
            run = siblings[i:j]
            if len(run) > KEEP_ITEMS * 2 and run[0].role not in ("StaticText", ""):
                rest = run[KEEP_ITEMS:]
                ids = [n.element_id for n in rest if n.element_id]
                span = f" ([{ids[0]}]..[{ids[-1]}])" if ids else ""
                cut[rest[0].index] = "\t" * rest[0].depth + f"... {len(rest)} more {run[0].role} cut{span}"
                for n in rest:
                    hidden.update(d.index for d in _subtree(n))
                report.items_collapsed += len(rest)
            i = j
    out: list[tuple[_Node | None, str]] = []
    for n in nodes:
        if n.index in cut:
            out.append((None, cut[n.index]))
        if n.index not in hidden:
            out.append((n, n.line))
    return out


def _render(lines: list[tuple[_Node | None, str]], keep: set[int]) -> tuple[str, int]:
    """The kept lines in document order, each gap of cut ones as one line; and how many lines were cut."""
    out: list[str] = []
    gap, gap_depth, cut = 0, 0, 0
    for pos, (_, text) in enumerate(lines):
        if pos in keep:
            if gap:
                out.append("\t" * gap_depth + f"... {gap} lines cut")
                cut += gap
                gap = 0
            out.append(text)
        else:
            if not gap:
                gap_depth = len(text) - len(text.lstrip("\t"))
            gap += 1
    if gap:
        out.append("\t" * gap_depth + f"... {gap} lines cut")
        cut += gap
    return "\n".join(out), cut


def prune_axtree(text: str, budget: int, visible_ids: set[str] | None = None, *, label: str = ""
                 ) -> tuple[str, Report | None]:
    """``text`` within ``budget`` characters (the footer included), and what was cut; (text, None) when it fits. The
    footer names the budget as ``label`` (default ``"<budget> chars"``)."""
    if budget <= 0 or len(text) <= budget:
        return text, None
    return _prune(text, _parse(text), budget, visible_ids, label)


def prune_markdown(text: str, budget: int, visible_ids: set[str] | None = None, *, label: str = ""
                   ) -> tuple[str, Report | None]:
    """The MARKDOWN ``text`` within ``budget`` characters by the same rule, a line a node: runs of table rows, list
    items or headings collapse with counts, then lines naming an element in view come first, text next, lines naming
    only elements out of view last."""
    if budget <= 0 or len(text) <= budget:
        return text, None
    return _prune(text, _parse_markdown(text), budget, visible_ids, label)


def _prune(text: str, nodes: list[_Node], budget: int, visible_ids: set[str] | None, label: str
           ) -> tuple[str, Report]:
    label = label or f"{budget} chars"
    report = Report(full_chars=len(text))
    lines = _collapse(nodes, report)

    def footer(lines_cut: int) -> str:
        return (f"\n[budget {label}: {report.items_collapsed} list items collapsed, {lines_cut} lines cut "
                f"of {len(nodes)}; for the rest: {HOW}]")

    body = "\n".join(t for _, t in lines)
    if len(body) + len(footer(0)) <= budget:
        out = body + footer(0)
        report.kept_chars = len(out)
        return out, report

    def rank(pos: int) -> tuple[int, int]:
        node, _ = lines[pos]
        if node is None:
            return (1, pos)  # a collapsed list's count: with the text
        in_view = visible_ids is None or node.element_id in visible_ids or any(r in visible_ids for r in node.refs)
        return ((0 if in_view else 2) if node.role in INTERACTIVE or node.refs else 1, pos)

    position = {id(node): pos for pos, (node, _) in enumerate(lines) if node is not None}
    keep: set[int] = set()
    size = 0
    room = budget - len(footer(len(nodes))) - 40
    for pos in sorted(range(len(lines)), key=rank):
        node, line = lines[pos]
        add = [pos]
        anc = node.parent if node is not None else None
        while anc is not None and position.get(id(anc)) is not None and position[id(anc)] not in keep:
            add.append(position[id(anc)])
            anc = anc.parent
        cost = sum(len(lines[p][1]) + 1 for p in add) + 24  # a gap line may follow
        if size + cost > room:
            continue
        keep.update(add)
        size += cost
    out, cut = _render(lines, keep)
    out += footer(cut)
    if len(out) > budget:  # never beyond the budget, whatever the lines' lengths
        out = out[:budget]
    report.lines_cut = cut
    report.kept_chars = len(out)
    return out, report


#: Bisection steps at most in a budget in tokens, and the closeness (a fraction of the characters) that ends it.
_MAX_PRUNINGS, _CLOSE = 8, 0.03


Prune = Callable[..., tuple[str, Report | None]]


def prune_tokens(text: str, tokens: int, tokenizer: str, visible_ids: set[str] | None = None, *,
                 prune: Prune = prune_axtree) -> tuple[str, Report | None]:
    """``text`` within ``tokens`` tokens of the named tokenizer (`webenv.tokens`), footer included, by ``prune``
    (`prune_axtree` or `prune_markdown`) at the most characters that fit, and what was cut (the report counts both
    characters and tokens); (text, None) when it fits."""
    count = tokens_module.counter(tokenizer)
    if tokens <= 0:
        return text, None
    full = tokens_module.count_long(tokenizer, text)
    if full <= tokens and len(text) > tokens_module.CHUNK_CHARS:
        full = count(text)  # the decision to send it whole: counted exactly
    if full <= tokens:
        return text, None
    label = f"{tokens} tokens of {tokenizer}"
    best: tuple[str, Report] | None = None
    lo, hi = 0, len(text) - 1  # characters: lo fits (0 = none known yet), hi is over
    guess = max(64, min(hi, int(tokens * len(text) / full)))
    for _ in range(_MAX_PRUNINGS):
        out, report = prune(text, guess, visible_ids, label=label)
        assert report is not None
        report.kept_tokens = count(out)
        if report.kept_tokens <= tokens:
            lo, best = guess, (out, report)
            if not report.lines_cut:  # the collapsed tree whole: more characters would not add a line
                break
        else:
            hi = guess
        if best is not None and hi - lo <= max(16, _CLOSE * lo):
            break
        if best is None:  # over from the start: scale down by how far over
            guess = max(16, int(guess * tokens / report.kept_tokens * 0.9))
        else:  # bisect, growing by at most a third while nothing above is known to be over
            guess = (lo + hi) // 2 if hi < len(text) - 1 else min((lo + hi) // 2, lo * 4 // 3 + 16)
        if best is None and guess <= 16:
            break
    if best is None:  # a tokenizer far denser than the footer allows: cut at the end until it fits
        out, report = prune(text, max(16, guess), visible_ids, label=label)
        assert report is not None
        keep_lo, keep_hi = 0, len(out)
        while keep_lo < keep_hi:
            mid = (keep_lo + keep_hi + 1) // 2
            if count(out[:mid]) <= tokens:
                keep_lo = mid
            else:
                keep_hi = mid - 1
        out = out[:keep_lo]
        report.kept_chars, report.kept_tokens = len(out), count(out)
        best = (out, report)
    out, report = best
    report.full_tokens = full
    return out, report


def apply_budget(obs: common_pb2.Observation, spec: common_pb2.ObservationSpec | None, *,
                 drop_elements: bool = False) -> None:
    """Prune ``obs.axtree`` and ``obs.markdown`` in place, each to the spec's budget (``budget_chars``, or
    ``budget_tokens`` of ``tokenizer``), and fill ``obs.budget`` / ``obs.markdown_budget`` for the format something
    was cut from; the elements (asked for only to know what is in view) are cleared with ``drop_elements``."""
    if spec is not None and (spec.budget_chars > 0 or spec.budget_tokens > 0):
        visible = {e.element_id for e in obs.elements if e.visible} if obs.elements else None
        for name, prune, into in (("axtree", prune_axtree, obs.budget), ("markdown", prune_markdown,
                                                                         obs.markdown_budget)):
            text = getattr(obs, name)
            if not text:
                continue
            if spec.budget_tokens > 0:
                text, report = prune_tokens(text, spec.budget_tokens, spec.tokenizer, visible, prune=prune)
            else:
                text, report = prune(text, spec.budget_chars, visible)
            if report is not None:
                setattr(obs, name, text)
                into.CopyFrom(common_pb2.ObservationBudget(
                    budget_chars=spec.budget_chars, full_chars=report.full_chars, kept_chars=report.kept_chars,
                    items_collapsed=report.items_collapsed, lines_cut=report.lines_cut, how_to_get_more=HOW,
                    budget_tokens=spec.budget_tokens, tokenizer=spec.tokenizer if spec.budget_tokens else "",
                    full_tokens=report.full_tokens, kept_tokens=report.kept_tokens))
    if drop_elements:
        del obs.elements[:]
        formats = [f for f in obs.formats if f != common_pb2.OBSERVATION_FORMAT_ELEMENTS]
        del obs.formats[:]
        obs.formats.extend(formats)

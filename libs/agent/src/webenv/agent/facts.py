"""What a page states, read from its structure and prose, not from one site generator's templates.

Facts (`page_facts`, `(label, value)` pairs) come from definition lists (`term`/`definition`), tables and grids (a
header row over data rows, row headers beside cells, two-column key/value rows), `label: value` and `label - value`
lines of list items and paragraphs, runs of them in one block or in sibling text nodes (`Salary — $82,000 / year
Company — Echo Co`, `Time : 24 min Chef : Jamal Silva`), and sentences such as "The price is $12.99", "Ships in 3
days", "Written by Mara Ellison", "It has 312 pages", "readers rate it 2.6 out of 5" (rating), "filed under Receipts"
(category), "a message by Amara Costa" (by). A sentence is read clause by clause: a value stops at "; ", ", and",
" and its ...", " · " and " | ", so "Last editor: Gita Jansen and its length is 3281 words" is two facts.

Passages (`passages`) are short texts a person would quote: each sentence after its nearest heading, each table row
with its cells joined, each term with its definition. Records (`records`) are the entries of a result list: list
items, articles and table rows with a link, or a link followed by its sibling texts (cards without a container);
`top_results` offers the first of each kind as `title (details)`.

`wanted_labels` tells whether the instruction asks for a label, by the label's own words or a word English uses for
the same attribute (`SYNONYMS`: a thesaurus's, not any website's word list), so a question asking for the "category"
finds a fact the page labels "Section", and a question for the "sender" one labelled "From".
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

from .axtree import AxNode, subtree, text_of

#: At most this many passages of the page (sentences, table rows: `passages`), those sharing the most words with the
#: instruction, are proposed as answers of their own, each at most this long.
MAX_PASSAGES = 8
MAX_PASSAGE_CHARS = 200

#: Roles whose text is read as prose (sentences, `label: value` lines).
_BLOCKS = frozenset({"paragraph", "listitem", "blockquote", "caption", "note", "figcaption"})
_TABLES = frozenset({"table", "grid", "treegrid"})
#: Text under these roles is a fact of its own structure (or an action's label), never prose.
_NOT_PROSE = frozenset({"term", "definition", "cell", "gridcell", "rowheader", "columnheader", "heading", "link",
                        "button", "option", "combobox", "listbox", "textbox", "searchbox", "tab", "menuitem",
                        "navigation", "banner", "contentinfo", "labeltext", "legend"}) | _TABLES
_CELLS = frozenset({"cell", "gridcell", "rowheader", "columnheader"})
#: Regions around a page's content: a result list's records are not read there (a menu of categories is no result).
_ASIDE = frozenset({"navigation", "banner", "contentinfo", "complementary", "search", "form", "dialog", "menu",
                    "menubar", "tablist"})
#: A sentence opening with one of these verbs tells the user to work a page control ("Click on the link ...",
#: "Enter the password ...", "Choose a course on the courses page."): an instruction the page gives, never a fact it
#: states, so it is not a passage. Verbs of the page's controls only: "Call us on 0131 ..." is a fact.
_UI_VERBS = frozenset("click select enter type choose press tap pick check uncheck tick expand collapse drag drop "
                      "scroll fill submit focus copy paste highlight toggle".split())
#: A sentence ends at . ! or ? before a space, or right before a capitalised word (text run together: "out of 5.Omar").
_SENTENCE = re.compile(r"(?<=[.!?])\s+(?=[A-Z0-9$\u20ac\u00a3\"'(])|(?<=[a-z0-9][.!?])(?=[A-Z][a-z])")
#: Where a clause ends inside a sentence or line: a value never runs past it.
_CLAUSE = re.compile(r";\s+|,\s+(?:and|but|while|whereas)\s+|\s+and\s+(?=(?:its|their|his|her)\s)|\s+[\u00b7\u2022|]\s+")
_LABEL = r"[A-Za-z][\w()/&'.-]*(?:\s+[\w()/&'.-]+){0,4}"
_COLON_FACT = re.compile(rf"^\s*({_LABEL})\s*:\s+(\S.*)$")
_DASH_FACT = re.compile(rf"^\s*({_LABEL})\s+[-\u2013\u2014]\s+(\S.*)$")
#: One label of a run of `Label: value` (or `Label — value`) pairs in one text: a capitalised word and up to two
#: lower-case ones right before the separator.
_RUN_LABEL = re.compile(r"(?:^|(?<=\s))([A-Z][a-z]+(?:\s[a-z]+){0,2})(?:\s*:|\s*[\u2013\u2014]|\s+-)\s+")
_IS_FACT = re.compile(r"^(?:[Tt]he|[Ii]ts|[Tt]heir|[Oo]ur|[Yy]our|[Hh]is|[Hh]er)\s+([a-z][a-z-]*(?:\s+[a-z][a-z-]*){0,2})\s+"
                      r"(?:is|are|was|were)\s+(?:only\s+|about\s+|just\s+)?(\S.*)$")
_NUMBER = r"(?:[$\u20ac\u00a3]\s?)?\d[\d,.]*(?:\s?(?:%|(?!(?:of|out|in|to|for|and|or|from|at|on|by)\b)[A-Za-z]+))?"
_LEAD_FACT = re.compile(rf"^([A-Z][a-z]+(?:\s+[a-z]+){{0,3}})\s+({_NUMBER})")
_BY_FACT = re.compile(r"\b([A-Za-z]+ed|[Ww]ritten|[Mm]ade|[Bb]uilt|[Ss]old|[Hh]eld|[Tt]aught|[Dd]rawn|[Gg]iven|[Kk]nown|"
                      r"[Ss]hown|[Rr]un)\s+(by|in|on|from|at)\s+([A-Z][\w'.-]*(?:\s+[A-Z][\w'.-]*){0,3}|\d[\w,]*(?:\s\d{4})?)")
#: "a message by Amara Costa", "an article by Lena Garcia": a thing made by someone (-ed verbs are `_BY_FACT`'s).
_NOUN_BY = re.compile(r"\b(?:an?|the)\s+[a-z]+\s+by\s+([A-Z][\w'.-]*(?:\s+[A-Z][\w'.-]*){0,3})")
_HAS_FACT = re.compile(r"\b(?:has|have|with|holds|contains)\s+(\d[\d,.]*)\s+([a-z]+)")
#: "rated 2.8 out of 5", "readers rate it 3.0 out of 5", "a rating of 4/5", "scored 7 out of 10".
_RATED = re.compile(r"\b(?:rated|rates?\s+(?:it|this|them)|rating\s+(?:of|is)|scored?)\s+(\d+(?:[.,]\d+)?)\s*"
                    r"(?:out\s+of|/)\s*\d+", re.IGNORECASE)
#: "filed under Receipts", "listed under Getting started".
_UNDER = re.compile(r"\b(?:filed|listed|posted|shelved|sorted|kept|found)\s+under\s+(?:the\s+)?(\S.*)$")
#: "in the Travel category", "from the Sales department".
_IN_GROUP = re.compile(r"\b(?:in|under|from|of)\s+the\s+(\S+(?:\s+\S+){0,3}?)\s+(category|section|topic|department|genre)\b")
#: "posted this in general", "filed in Reference": where a thing was put (its category, `SYNONYMS`).
_PUT_IN = re.compile(r"\b(posted|filed|listed|published|shelved)\s+(?:this\s+|it\s+|them\s+)?in\s+(?:the\s+)?"
                     r"([A-Za-z][\w&'-]*(?:\s+[a-z][\w&'-]*){0,2})(?=\s+(?:on|at|by)\s|[.,;]|$)")
_DATE = r"(?:\d{1,2}\s[A-Z][a-z]{2,8}\.?,?\s\d{4}|[A-Z][a-z]{2,8}\.?\s\d{1,2},?\s\d{4}|\d{4}-\d{2}-\d{2})"
#: "posted this in general on 07 Jan 2026", "updated on Aug 07, 2026": when it was done.
_DONE_ON = re.compile(rf"\b(posted|published|updated|started|created|edited|received|sent|listed)\b(?:[^.;]*?)\s+on\s+({_DATE})")
#: "Last editor Yusuf Haddad posted this", "Company Ridge Works posted this": a role, its holder's name, a verb.
_ROLE_NAME = re.compile(r"(?:^|(?<=[a-z0-9\s]))([A-Z][a-z]+(?:\s[a-z]+){0,2})\s+([A-Z][\w'.-]*(?:\s+[A-Z][\w'.-]*){0,2})"
                        r"\s+(?:posted|wrote|writes|said|added|edited|updated)\b")
_PRONOUNS = frozenset("It This That They We You He She There Here Each Every All Our Your The A An".split())
#: A sentence led by a preposition and a number is a date, time or place ("On 24 and 31 December we close at 16:00",
#: "In 2019 ...", "From 9 ..."), not `Label number`: on handmade_dev's blockhaus the BC and RL checkpoints answered
#: the fact `On: 24` to three questions (bench/results/handmade-dev.md).
_PREPOSITIONS = frozenset("On In At From By For Until Till Since After Before During Between Over Under Around "
                          "About Within".split())

#: Words English uses for the same attribute of a thing (a thesaurus's groups, no website's labels): an instruction
#: asking for one word of a group wants a fact labelled with any other.
SYNONYMS: tuple[frozenset[str], ...] = tuple(frozenset(g) for g in (
    {"category", "section", "topic", "genre", "department", "filed under", "listed under", "posted in", "filed in",
     "listed in", "published in"},
    {"author", "writer", "written by", "by", "posted by", "created by", "creator", "made by"},
    {"sender", "from", "sent by", "by"},
    {"chef", "cook", "by"},
    {"rating", "rated", "score", "stars"},
    {"price", "cost", "fare", "fee"},
    {"location", "city", "place"},
    {"company", "employer"},
    {"date", "posted on", "published on", "updated on", "started on", "created on", "edited on", "received on",
     "sent on"},
))


def _clean(value: str) -> str:
    return value.strip().rstrip(".,;:!").strip()


def _norm(text: str) -> str:
    return re.sub(r"\s+([,.;:!?])", r"\1", re.sub(r"\s+", " ", text)).strip()


def label_pairs(text: str) -> list[tuple[str, str]]:
    """The pairs of a run of `Label: value` (or `Label — value`) in one text, each value up to the next label: two or
    more, else none (one pair is a line `_COLON_FACT` reads)."""
    found = list(_RUN_LABEL.finditer(text))
    if len(found) < 2:
        return []
    out = []
    for m, nxt in zip(found, [*found[1:], None], strict=True):
        value = _clean(text[m.end():nxt.start() if nxt is not None else len(text)])
        if value:
            out.append((m.group(1), value))
    return out if len(out) >= 2 else []


def _clause_facts(clause: str) -> list[tuple[str, str]]:
    """Facts one clause states."""
    s = clause.strip()
    out: list[tuple[str, str]] = []
    rated = [("rating", m.group(1)) for m in _RATED.finditer(s)]
    for pattern in (_COLON_FACT, _DASH_FACT):
        m = pattern.match(s)
        if m and not m.group(1).strip().isdigit():
            return [(m.group(1).strip(), _clean(m.group(2))), *rated]
    m = _IS_FACT.match(s)
    if m:
        out.append((m.group(1), _clean(m.group(2))))
    m = None if out or rated else _LEAD_FACT.match(s)
    if m and m.group(1).split()[0] not in _PRONOUNS | _PREPOSITIONS:
        out.append((m.group(1), _clean(m.group(2))))
    out += rated
    by = list(_BY_FACT.finditer(s))
    for m in by:
        out.append((f"{m.group(1).lower()} {m.group(2)}", _clean(m.group(3))))
    if not by:
        out += [("by", _clean(m.group(1))) for m in _NOUN_BY.finditer(s)]
    for m in _HAS_FACT.finditer(s):
        out.append((m.group(2), m.group(1)))
    out += [(m.group(1), m.group(2)) for m in _ROLE_NAME.finditer(s) if m.group(1).split()[0] not in _PRONOUNS]
    out += [(f"{m.group(1).lower()} in", m.group(2)) for m in _PUT_IN.finditer(s)]
    out += [(f"{m.group(1).lower()} on", m.group(2)) for m in _DONE_ON.finditer(s)]
    m = _UNDER.search(s)
    if m and len(m.group(1).split()) <= 4:
        out.append(("category", _clean(m.group(1))))
    for m in _IN_GROUP.finditer(s):
        out.append((m.group(2), _clean(m.group(1))))
    return [(k, v) for k, v in out if k and v]


def sentence_facts(sentence: str) -> list[tuple[str, str]]:
    """Facts one sentence or line states: a run of `Label: value` pairs, else each clause's."""
    pairs = label_pairs(sentence.strip())
    if pairs:
        out = []
        for label, value in pairs:
            parts = _CLAUSE.split(value)
            out.append((label, _clean(parts[0])))
            for extra in parts[1:]:
                out += _clause_facts(extra)
        return out
    out = []
    for clause in _CLAUSE.split(sentence.strip()):
        out += _clause_facts(clause)
    return out


def _prose_text(nodes: Sequence[AxNode], i: int) -> str:
    return _norm(" ".join(p for p in (nodes[i].name, text_of(nodes, i)) if p))


def _table_facts(nodes: Sequence[AxNode], i: int) -> list[tuple[str, str]]:
    """Facts of one table: key/value rows, and data rows under a header row (`<row key> <header>: cell`)."""
    table_depth = nodes[i].depth
    rows: list[list[AxNode]] = []
    for n in subtree(nodes, i):
        if n.role in _TABLES:
            break  # a nested table is read on its own
        if n.role == "row":
            rows.append([])
        elif n.role in _CELLS and rows and n.depth > table_depth:
            rows[-1].append(n)
    rows = [r for r in rows if r]
    facts: list[tuple[str, str]] = []
    header: list[str] = []
    if rows and len(rows[0]) > 1 and all(c.role == "columnheader" for c in rows[0]):
        header = [c.name or text_of(nodes, c.index) for c in rows[0]]
        rows = rows[1:]
    for row in rows:
        texts = [c.name or text_of(nodes, c.index) for c in row]
        if header and len(texts) == len(header):
            if len(rows) == 1:  # one record: the headers are its labels
                facts += [(h, v) for h, v in zip(header, texts, strict=True) if h and v]
            elif texts[0]:  # a row per record, keyed by its first cell
                facts += [(f"{texts[0]} {h}", v) for h, v in zip(header[1:], texts[1:], strict=True) if h and v]
        elif len(texts) == 2 and texts[0] and texts[1] and len(texts[0]) < LONG_CELL:
            facts.append((texts[0], texts[1]))
    return facts


def walk(nodes: Sequence[AxNode]) -> Iterable[tuple[int, AxNode, set[str], bool, bool]]:
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
        if n.role in _TABLES:
            in_table = n.depth
        stack.append((n.depth, n.role))


def _text_runs(nodes: Sequence[AxNode], prose: set[int]) -> dict[int, tuple[list[int], str]]:
    """Runs of sibling text nodes (two or more, one after another at one depth) that read as `Label: value` pairs
    together (`Time` `:` `24 min` `Chef` `:` `Jamal Silva`): the run's first index -> (its indices, its text)."""
    runs: dict[int, tuple[list[int], str]] = {}
    run: list[int] = []

    def close() -> None:
        if len(run) >= 2:
            text = _norm(" ".join(nodes[j].name for j in run))
            if label_pairs(text):
                runs[run[0]] = (list(run), text)
        run.clear()

    for i in sorted(prose):
        if nodes[i].role != "statictext":
            continue
        if run and not (i == run[-1] + 1 and nodes[i].depth == nodes[run[-1]].depth):
            close()
        run.append(i)
    close()
    return runs


#: A table cell named this long is prose laid out in a table (a page laid out by tables: its whole text is the name).
LONG_CELL = 80


def _prose_units(nodes: Sequence[AxNode]) -> dict[int, str]:
    """Each prose node's text by its index, sibling text runs that read as pairs joined into their first node's, and
    each long cell's name (`LONG_CELL`)."""
    prose = {i for i, _, _, _, is_prose in walk(nodes) if is_prose}
    runs = _text_runs(nodes, prose)
    skip = {j for idx, _ in runs.values() for j in idx[1:]}
    units = {i: runs[i][1] if i in runs else _prose_text(nodes, i) for i in sorted(prose) if i not in skip}
    units |= {n.index: _norm(n.name) for n in nodes if n.role in ("cell", "gridcell") and len(n.name) >= LONG_CELL}
    return units


#: A text that is a value alone ("211", "$226.95", "12h 26m"), which a caption below it may label.
_LONE_VALUE = re.compile(r"^(?:[$\u20ac\u00a3]\s?)?\d[\d,.:]*(?:\s?(?:%|[A-Za-z]{1,5}))?(?:\s\d+[A-Za-z]{1,3})?$")
#: A caption: one to three words, a capitalised one first.
_CAPTION = re.compile(r"^[A-Z][a-z]+(?:\s[a-z]+){0,2}$")


def _value_over_label(nodes: Sequence[AxNode], units: dict[int, str], i: int) -> tuple[str, str] | None:
    """A lone value whose next sibling text opens with a caption (`211` over `Replies · General`, `$226.95` over
    `Fare`): the caption's fact."""
    if not _LONE_VALUE.match(units[i]):
        return None
    j = next((k for k in range(i + 1, len(nodes)) if nodes[k].depth <= nodes[i].depth), -1)
    if j < 0 or j not in units or nodes[j].depth != nodes[i].depth:
        return None
    caption = _CLAUSE.split(units[j])[0].strip()
    return (caption, units[i]) if _CAPTION.match(caption) else None


def page_facts(nodes: Sequence[AxNode]) -> list[tuple[str, str]]:
    """(label, value) pairs a page shows, in document order: definition lists, tables, and prose (but for the prose
    of a list's records: `_listed`)."""
    facts: list[tuple[str, str]] = []
    units = _prose_units(nodes)
    listed = _listed(nodes)
    for i, n, _, in_table, _ in walk(nodes):
        if n.role == "term" and n.name:
            nxt = next((m for m in nodes[i + 1:i + 2] if m.role == "definition"), None)
            if nxt is not None:
                value = nxt.name or text_of(nodes, nxt.index)
                if value:
                    facts.append((n.name, value))
        elif n.role in _TABLES:
            facts += _table_facts(nodes, i)
        elif n.role in ("columnheader", "rowheader") and n.name and not in_table:
            nxt = nodes[i + 1] if i + 1 < len(nodes) else None
            if nxt is not None and nxt.role == "cell" and nxt.depth == n.depth and nxt.name:
                facts.append((n.name, nxt.name))
        elif i in units and i not in listed:
            over = _value_over_label(nodes, units, i)
            if over:
                facts.append(over)
            for sentence in _SENTENCE.split(units[i]):
                facts += sentence_facts(sentence)
    out: list[tuple[str, str]] = []
    seen: set[tuple[str, str]] = set()
    for label, value in facts:
        label, value = label.strip().rstrip(":").strip()[:60], value.strip()[:120]  # "Category:" is Category
        if label and value and (label.lower(), value) not in seen:
            seen.add((label.lower(), value))
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
    units = _prose_units(nodes)

    def add(text: str) -> None:
        text = re.sub(r"\s+", " ", text).strip()
        if text and len(text) <= MAX_PASSAGE_CHARS and text not in out:
            out.append(text)

    for i, n, inside, _, _ in walk(nodes):
        if n.role == "heading" and n.name:
            head = n.name
        elif n.role == "row" and not inside & {"row"}:
            cells = [c.name or text_of(nodes, c.index) for c in subtree(nodes, i) if c.role in _CELLS
                     and c.depth == n.depth + 1]
            if len([c for c in cells if c]) > 1:
                add("; ".join(c for c in cells if c))
        elif n.role == "term" and n.name:
            nxt = next((m for m in nodes[i + 1:i + 2] if m.role == "definition"), None)
            if nxt is not None:
                add(f"{n.name}: {nxt.name or text_of(nodes, nxt.index)}")
        elif i in units:
            for sentence in _SENTENCE.split(units[i]):
                sentence = sentence.strip()
                words = sentence.split()
                if len(words) < 2 or words[0].lower().strip("\"'(") in _UI_VERBS:
                    continue
                if head and head.lower() not in sentence.lower():
                    sentence = f"{head}: {sentence}"
                add(sentence)
    return out


_WORD = re.compile(r"[a-z0-9]+")
_STOP_WORDS = frozenset("the and for with from that this what which who how does did are was were its you your "
                        "give tell find report answer check values value page site".split())


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


def _mentioned(label: str, instruction: str) -> bool:
    return bool(re.search(rf"\b{re.escape(label.lower())}\b", instruction.lower()))


_FUNCTION_WORDS = frozenset("by in on of at from to for with as".split())


def wanted_labels(label: str, instruction: str) -> bool:
    """Whether the instruction asks for facts labelled ``label``: it names the label, or a word of its `SYNONYMS`
    group (the label's whole text, or its last word: "Posted date" is a date)."""
    if _mentioned(label, instruction):
        return True
    low = " ".join(label.lower().split())
    last = low.split()[-1] if low else ""
    keys = {low, last} if last not in _FUNCTION_WORDS else {low}
    return any(keys & group and any(_mentioned(w, instruction) for w in group) for group in SYNONYMS)


def _records(nodes: Sequence[AxNode]) -> list[tuple[str, str, str, int, int]]:
    """The records of the page's result lists, in document order, outside its navigation and other asides: (kind,
    title, details) of each list item, article or table row holding a link (a row's title is its link or first cell,
    its details the other cells), and of each link followed by sibling texts before the next link at its depth (a
    card without a container: `Seville to Taipei (BlueJet 731)` then `BlueJet · 26 Sep 2026`, `$1,162.49`), with the
    first and last index of its nodes."""
    out: list[tuple[str, str, str, int, int]] = []
    for i, n, inside, _, _ in walk(nodes):
        if inside & _ASIDE:
            continue
        if n.role in ("listitem", "article") and not inside & {"listitem", "article"}:
            sub = list(subtree(nodes, i))
            link = next((m for m in sub if m.role == "link" and m.name), None)
            texts = [m.name for m in sub if m.name and m.role in ("statictext", "paragraph", "cell") and m.name != "·"
                     and (link is None or m.name != link.name)]
            if link is not None and texts and len("; ".join(texts)) <= MAX_PASSAGE_CHARS:  # a record, not a page
                out.append((n.role, link.name, "; ".join(texts), i, sub[-1].index))
        elif n.role == "row":  # a data row (a layout table's row, with a long cell, is none)
            cells = [c for c in subtree(nodes, i) if c.role in _CELLS and c.depth == n.depth + 1]
            if len(cells) < 2 or any(c.role == "columnheader" or len(c.name) >= LONG_CELL for c in cells):
                continue
            link = next((m for m in subtree(nodes, i) if m.role == "link" and m.name), None)
            texts = [c.name or text_of(nodes, c.index) for c in cells]
            title = link.name if link is not None else texts[0]
            rest = [t for t in texts if t and t != title]
            if title and rest:
                out.append(("row", title, "; ".join(rest), i, i))
        elif n.role == "link" and n.name and not inside & {"listitem", "article", "row", "heading", "paragraph"}:
            before = next((nodes[k] for k in range(i - 1, -1, -1) if nodes[k].depth <= n.depth), None)
            if before is not None and before.depth == n.depth and before.role == "statictext":
                continue  # a link inside a line of text, no card's title
            texts: list[str] = []
            last = i
            for k in range(i + 1, len(nodes)):
                m = nodes[k]
                if m.depth < n.depth or (m.depth == n.depth and m.role == "link") or m.role == "heading":
                    break
                last = m.index
                if m.depth == n.depth:
                    t = " ".join(p for p in (m.name, text_of(nodes, m.index)) if p and p != "·").strip()
                    if t:
                        texts.append(t)
            if texts and len("; ".join(texts)) <= MAX_PASSAGE_CHARS:
                out.append(("card", n.name, "; ".join(texts), i, last))
    return out


def records(nodes: Sequence[AxNode]) -> list[tuple[str, str, str]]:
    """(kind, title, details) of each record of the page's result lists (`_records`)."""
    return [(kind, title, details) for kind, title, details, _, _ in _records(nodes)]


#: A page listing at least this many records of one kind (list items, articles, cards) is a list: what their texts
#: state is each listed thing's, not the page's, and is read as records (`top_results`) and passages, not as facts.
LIST_RECORDS = 3


def _listed(nodes: Sequence[AxNode]) -> set[int]:
    """Indices of the nodes inside records of a list (`LIST_RECORDS`; a table's rows stay facts of the table)."""
    spans: dict[str, list[tuple[int, int]]] = {}
    for kind, _, _, first, last in _records(nodes):
        if kind != "row":
            spans.setdefault(kind, []).append((first, last))
    return {j for found in spans.values() if len(found) >= LIST_RECORDS for a, b in found for j in range(a, b + 1)}


def top_results(nodes: Sequence[AxNode]) -> list[str]:
    """The first record of each kind (`records`) as `title (details)`: the top result of a sorted or searched list."""
    out: list[str] = []
    kinds: set[str] = set()
    for kind, title, details in records(nodes):
        if kind not in kinds:
            kinds.add(kind)
            out.append(f"{title} ({details})"[:MAX_PASSAGE_CHARS])
    return out

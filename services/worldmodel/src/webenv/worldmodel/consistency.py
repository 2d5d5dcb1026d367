"""A simulated session's value memory: an item's price, a quantity, a typed text stay what the session first showed.

Every page of a simulated session is predicted on its own (recalled, composed by analogy from another website's
page, or edited by the language model), so nothing ties the price a listing showed for an item to the price its
detail page shows two steps later: a composed page carries the exemplar website's number wherever its words could
not be aligned with this page's, and a language model's edit can rewrite any number near the element acted on. A
real website shows one price per item for the whole session. So each session keeps what it has shown:

* **Entity values.** An *entity* is a thing the page names: a link's text, or a heading whose text this session
  has shown as a link (the item's title on its detail page; a section heading such as "Reviews" is not a link and
  so no entity). Its *values* are the numbers (`$233`, `12.50 €`, `3`, `15%`) of the text lines that follow it
  directly — up to three lines, before any other text line (a label such as "Price" breaks the binding, so a
  key-value table's "Price | $41" is never pinned) and within the entity's container. A value is keyed by the
  entity's text, its unit (currency sign, `%`, none) and its order among the entity's values of that unit; the
  listing's `$233` after the link "Koi Xenon Lamp" and the detail page's `Price $233` after its heading are the
  same key. Only the page's content counts: banner, navigation, sidebar and footer (landmarks `banner`,
  `navigation`, `complementary`, `contentinfo`) carry the session's live state (cart count, login), which the
  world model refreshes itself (compose.refresh_chrome).
* **When values are kept.** A page of a *new document* (a link, a form, `goto`) shows each known key with the
  value first seen (or last changed in place, below); keys it shows for the first time are learned. A change of
  the *current* document (an edit: `+` on a cart line, a fill) is the action's effect: its values are taken as
  the new ones. `go_back`/`go_forward` restore a page as it was left, as a browser does, and are not rewritten.
* **Ambiguous keys are left alone.** A key a page shows with two different values (two "View" links, each with
  its item's price) is marked ambiguous and never rewritten again in the session.
* **Typed values.** What the agent typed with `fill(id, text)` (or `type(text)` into the focused field) is the
  field's value on every page of that document: a predicted page that shows the field (same role and name)
  with another value, or none, gets the typed one. A new document loads its fields as the model predicts them.

Bounded: at most `max_values` entity values and as many link texts per session (the oldest dropped first) and
64 typed fields; the memory lives on the session and goes with it when it is closed or evicted (simenv.py), and
ForkSession copies it. Generic by construction: nothing here knows a website, a family or a template — roles,
landmarks and number shapes only. Measured by `python -m webenv.worldmodel consistency`
(bench/results/worldmodel-consistency.md; 40 random walks of 12 steps on the tiny web's held-out website, the
analogy predictor): items shown with one price on every page 93.2% without the memory (a composed listing keeps
the training website's price for its first item) and 100% with it; with a quarter of new pages' prices made
wrong, 40.2% and 100%. What it cannot do: a value that
really changes on a page not reached by an in-place edit (a cart total after "Add to cart" on another page) is
pinned to its old value when the entity and the unit are the same; a price first shown wrong stays wrong.
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections import OrderedDict
from dataclasses import dataclass, field

from webenv.worldmodel.analogy import action_text_arg
from webenv.worldmodel.compose import PageView
from webenv.worldmodel.formats import AxNode, parse_line
from webenv.worldmodel.page import action_kind, target_id

VALUES_KEPT = 512  # entity values (and link texts) kept per session
TYPED_KEPT = 64  # typed fields kept for the current document
#: Landmarks holding the session's live state, refreshed by the world model itself (not pinned).
CHROME = frozenset({"banner", "navigation", "complementary", "contentinfo"})
#: Lines that are controls, not text: never values (a button "Add for $5" is not an item's price).
CONTROLS = frozenset({"link", "button", "textbox", "searchbox", "combobox", "spinbutton", "checkbox", "radio",
                      "switch", "slider", "listbox", "option", "menuitem", "tab", "heading"})
FIELDS = frozenset({"textbox", "searchbox", "combobox", "spinbutton"})
VALUE_LINES = 3  # text lines after an entity whose numbers are its values
_VALUE = re.compile(r"(?<![\w.,])(?P<cur>[$€£¥₹]\s?)?(?P<num>\d+(?:,\d{3})*(?:\.\d+)?)(?P<suf>\s?(?:%|€))?(?![\w])")
_STATE_VALUE = re.compile(r'value="(?:[^"\\]|\\.)*"')
_LETTER = re.compile(r"[^\W\d_]")

Key = tuple[str, str, int]  # entity text, unit, order among the entity's values of that unit
Field = tuple[str, str, int]  # role, name, order among the page's fields of that role and name


@dataclass(frozen=True, slots=True)
class Binding:
    """One value on a page: line `line`, characters [start, end) of its name, bound to `key`."""

    line: int
    start: int
    end: int
    key: Key
    value: str


def _norm(text: str) -> str:
    return " ".join(text.split()).casefold()


def _unit(m: re.Match[str]) -> str:
    return ((m.group("cur") or "").strip() + (m.group("suf") or "").strip()) or "#"


def _content_lines(lines: list[str]) -> list[tuple[int, AxNode]]:
    """(index, node) of the lines outside the chrome landmarks, blank lines left out."""
    out: list[tuple[int, AxNode]] = []
    chrome_depth: int | None = None  # depth of the chrome landmark we are inside
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        n = parse_line(line)
        if chrome_depth is not None and n.depth > chrome_depth:
            continue
        chrome_depth = n.depth if n.raw is None and n.role in CHROME else None
        if chrome_depth is None:
            out.append((i, n))
    return out


def _is_entity(n: AxNode, links: set[str] | OrderedDict[str, None]) -> bool:
    if n.raw is not None or not n.name or not _LETTER.search(n.name):
        return False
    return n.role == "link" or (n.role == "heading" and _norm(n.name) in links)


def bindings(state: str, links: set[str] | OrderedDict[str, None]) -> tuple[list[Binding], set[str]]:
    """The page's entity values, and the texts of its links (which make headings of the same text entities).

    `links` is the link texts seen before this page; this page's own are added to them."""
    lines = state.split("\n")
    content = _content_lines(lines)
    here = {_norm(n.name) for _, n in content if n.raw is None and n.role == "link" and n.name}
    known = set(links) | here
    out: list[Binding] = []
    entity: str | None = None
    depth = 0
    taken = 0
    order: dict[str, int] = {}
    for i, n in content:
        if entity is not None and n.depth < depth - 2:  # left the entity's container
            entity = None
        if _is_entity(n, known):
            entity, depth, taken, order = _norm(n.name or ""), n.depth, 0, {}
            continue
        text = n.raw if n.raw is not None else (n.name or "")
        found = list(_VALUE.finditer(text)) if n.raw is None and n.role not in CONTROLS else []
        if entity is not None and found and taken < VALUE_LINES:
            taken += 1
            for m in found:
                unit = _unit(m)
                k = order.get(unit, 0)
                order[unit] = k + 1
                out.append(Binding(i, m.start(), m.end(), (entity, unit, k), m.group(0)))
        elif _LETTER.search(text) and not found or n.role in CONTROLS and n.name:
            entity = None  # another text (a label, a control) between: what follows is not this entity's
    return out, here


def _field_keys(lines: list[str]) -> dict[int, Field]:
    """line index -> the field's key, for every text field of the page."""
    seen: dict[tuple[str, str], int] = {}
    out: dict[int, Field] = {}
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        n = parse_line(line)
        if n.raw is None and n.role in FIELDS:
            rn = (n.role, _norm(n.name or ""))
            out[i] = (*rn, seen.get(rn, 0))
            seen[rn] = seen.get(rn, 0) + 1
    return out


def _field_value(states: str | None) -> str:
    m = _STATE_VALUE.search(states or "")
    return json.loads(m.group(0)[len("value="):]) if m else ""


def _with_value(n: AxNode, text: str) -> AxNode:
    states = _STATE_VALUE.sub("", n.states or "").replace(", ,", ",").strip(", ")
    if text:
        states = ", ".join(s for s in (states, "value=" + json.dumps(text, ensure_ascii=False)) if s)
    return dataclasses.replace(n, states=states or None)


@dataclass
class ValueMemory:
    """What one simulated session has shown (module docstring)."""

    max_values: int = VALUES_KEPT
    #: entity values, first seen first; None: ambiguous (never rewritten)
    values: OrderedDict[Key, str | None] = field(default_factory=OrderedDict)
    #: link texts shown (headings of these texts are entities)
    links: OrderedDict[str, None] = field(default_factory=OrderedDict)
    #: what the agent typed into the current document's fields
    typed: OrderedDict[Field, str] = field(default_factory=OrderedDict)
    #: values put back (entity) and typed texts restored (typed), for the metrics and the measurement
    restored: dict[str, int] = field(default_factory=lambda: {"entity": 0, "typed": 0})

    def __len__(self) -> int:
        return len(self.values) + len(self.links) + len(self.typed)

    def copy(self) -> ValueMemory:
        """An independent copy (ForkSession)."""
        return ValueMemory(self.max_values, OrderedDict(self.values), OrderedDict(self.links), OrderedDict(self.typed),
                           dict(self.restored))

    def start(self, page: PageView) -> None:
        """The session's first page: everything on it is learned."""
        self._learn(page.state, overwrite=False)

    def step(self, current: PageView, action_text: str, page: PageView, navigated: bool) -> PageView:
        """The page a step predicted, with this session's values (module docstring); what it shows is learned."""
        kind = action_kind(action_text)
        if navigated:
            self.typed.clear()  # a new document, or one restored as it was left: its fields are its own
            if kind in ("go_back", "go_forward"):
                return page
            state = self._keep(page.state)
            self._learn(state, overwrite=False)
        else:
            self._remember_typed(current, action_text, kind)
            state = self._put_typed(page.state)
            self._learn(state, overwrite=True)
        return page if state == page.state else PageView(page.url, state, page.links)

    # --- entity values -------------------------------------------------------------------------------
    def _learn(self, state: str, overwrite: bool) -> None:
        found, here = bindings(state, self.links)
        for text in here:
            self.links[text] = None
            self.links.move_to_end(text)
        seen: dict[Key, str] = {}
        for b in found:
            if self.values.get(b.key, "") is None:
                continue
            if seen.setdefault(b.key, b.value) != b.value:  # two values of one key on one page
                self.values[b.key] = None
            elif overwrite or b.key not in self.values:
                self.values[b.key] = b.value
        self._bound()

    def _keep(self, state: str) -> str:
        """The state with every known key's value as remembered (keys ambiguous on this page left alone)."""
        found, _ = bindings(state, self.links)
        shown: dict[Key, set[str]] = {}
        for b in found:
            shown.setdefault(b.key, set()).add(b.value)
        for key, vals in shown.items():
            if len(vals) > 1 and key in self.values:
                self.values[key] = None
        fix = [b for b in found if self.values.get(b.key) not in (None, b.value)]
        if not fix:
            return state
        lines = state.split("\n")
        for b in sorted(fix, key=lambda b: (b.line, -b.start)):
            n = parse_line(lines[b.line])
            name = n.name or ""
            lines[b.line] = dataclasses.replace(n, name=name[:b.start] + str(self.values[b.key]) + name[b.end:]).render()
        self.restored["entity"] += len(fix)
        return "\n".join(lines)

    def _bound(self) -> None:
        while len(self.values) > self.max_values:
            self.values.popitem(last=False)
        while len(self.links) > self.max_values:
            self.links.popitem(last=False)

    # --- typed values --------------------------------------------------------------------------------
    def _remember_typed(self, current: PageView, action_text: str, kind: str) -> None:
        if kind not in ("fill", "type"):
            return
        lines = current.state.split("\n")
        keys = _field_keys(lines)
        tid = target_id(action_text) if kind == "fill" else None
        for i, key in keys.items():
            n = parse_line(lines[i])
            if kind == "fill" and tid is not None and n.node_id == tid:
                self.typed[key] = action_text_arg(action_text)
            elif kind == "type" and "focused" in (n.states or ""):
                self.typed[key] = self.typed.get(key, _field_value(n.states)) + action_text_arg(action_text)
            else:
                continue
            self.typed.move_to_end(key)
            while len(self.typed) > TYPED_KEPT:
                self.typed.popitem(last=False)
            return

    def _put_typed(self, state: str) -> str:
        if not self.typed:
            return state
        lines = state.split("\n")
        changed = 0
        for i, key in _field_keys(lines).items():
            text = self.typed.get(key)
            n = parse_line(lines[i])
            if text is not None and _field_value(n.states) != text:
                lines[i] = _with_value(n, text).render()
                changed += 1
        self.restored["typed"] += changed
        return "\n".join(lines) if changed else state

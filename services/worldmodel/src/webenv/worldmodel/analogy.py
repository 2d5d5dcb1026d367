"""What an action on a page does, by analogy with the same action on training websites.

A website's behaviour is mostly its family's: the search box submits to the listing with `?q=<what was typed>`, a
link loads its href (or the login page with `?next=<href>` when the site wants a login first), an open modal
swallows clicks outside it, typing sets the field's value. So an action is described by what it acts on —
family, action kind, the element's role, where its link goes (the page kind of the href), its CSS selector,
whether a dialog is open and whether the element is in it, whether the page offers a login — and the training
transitions that match that description best are looked up. Their outcome is kept as a template bound to its
own page, so it can be re-bound to this one:

* **none**: the page does not change;
* **nav**: a new document at a URL template whose variables are this page's values — `{HREF}` (the element's
  link target, also URL-encoded as in `?next=`), `{V:<role>}` (a field's value, as a form submits it),
  `{SEG:<i>}` (a path segment of the current URL, e.g. an item id) — the rest is the family's own literal text
  (`/flights?q=`);
* **edit**: hunks placed relative to the element acted on, with ids shifted from the exemplar's element to this
  one, the exemplar's words replaced by this page's (aligned lines), the typed text replaced by this text.

The matching exemplars vote; the outcome with most votes wins. Measured on held-out websites (evaluate.py), this
decides and locates page changes better than the tiny language model can learn to in the minutes two shared CPU
cores allow; the language model stays as the fallback for actions with no matching exemplar.
"""

from __future__ import annotations

import json
import re
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from urllib.parse import quote, quote_plus, urlsplit

from webenv.worldmodel import diff
from webenv.worldmodel.compose import PageView, word_map_lines
from webenv.worldmodel.dataset import page_lines
from webenv.worldmodel.page import (
    SELECTOR,
    TEXT_FIELDS,
    Node,
    action_kind,
    family_of,
    page_kind,
    parse_line,
    resolve,
    target_line,
)

_ARG_TEXT = re.compile(r',\s*"((?:[^"\\]|\\.)*)"\)\s*$')
_STATE_VALUE = re.compile(r'value=("(?:[^"\\]|\\.)*")')
_ID = re.compile(r"^([\t ]*)\[(\d+)\] ")
WEIGHTS = {"role": 3.0, "selector": 5.0, "href_kind": 4.0, "name": 2.0, "modal": 2.0, "in_modal": 2.0,
           "login": 1.0, "src_kind": 1.0, "has_value": 1.0, "filled": 6.0}
#: Features compared only when this action has them: an action by element id (`click(19)`, every trained policy's)
#: says nothing about CSS selectors, so matching it by selector would prefer the crawl's and the explorer's id actions
#: over the oracle's selector actions on the same element, whatever they did.
OPTIONAL = ("selector",)


def _path(url: str) -> str:
    p = urlsplit(url)
    return (p.path or "/") + (f"?{p.query}" if p.query else "")


def action_text_arg(action_text: str) -> str:
    """The text an action types or selects (`fill(3, "x")` -> x), if any."""
    m = _ARG_TEXT.search(action_text)
    if not m:
        return ""
    try:
        return json.loads(f'"{m.group(1)}"')
    except json.JSONDecodeError:
        return m.group(1)


@dataclass
class Context:
    """An action on a page, as analogy sees it."""

    page: PageView
    action_text: str
    kind: str
    nodes: list[Node]
    target: int | None
    features: dict[str, str]
    href: str = ""

    @property
    def target_node(self) -> Node | None:
        return self.nodes[self.target] if self.target is not None else None

    def variables(self) -> dict[str, str]:
        """This page's values a URL template may use."""
        out: dict[str, str] = {}
        if self.href:
            out["HREF"] = _path(self.href)
        for n in self.nodes:
            m = _STATE_VALUE.search(n.states)
            if m and n.role in TEXT_FIELDS:
                try:
                    out.setdefault(f"V:{n.role}", json.loads(m.group(1)))
                except json.JSONDecodeError:
                    pass
        for i, seg in enumerate(urlsplit(self.page.url).path.split("/")):
            if any(c.isdigit() for c in seg):
                out[f"SEG:{i}"] = seg
        return out


def _filled(nodes: list[Node]) -> str:
    fields = [n for n in nodes if n.role in TEXT_FIELDS]
    if not fields:
        return ""
    n = sum(1 for f in fields if _STATE_VALUE.search(f.states))
    return "all" if n == len(fields) else ("some" if n else "none")


def context(page: PageView, action_text: str) -> Context:
    lines = page_lines(page)
    t = target_line(lines, action_text)
    nodes = [parse_line(line) for line in page.state.split("\n")]
    node = nodes[t] if t is not None and t < len(nodes) else None
    href = resolve(page.url, page.links.get(node.node_id or "", "")) if node is not None and node.node_id else ""
    modal_at = [i for i, n in enumerate(nodes) if n.role in ("dialog", "alertdialog")]
    in_modal = False
    if t is not None:
        for i in modal_at:
            j = i + 1
            while j < len(nodes) and nodes[j].depth > nodes[i].depth:
                j += 1
            in_modal = in_modal or i <= t < j
    sel = SELECTOR.match(action_text)
    features = {
        "role": node.role if node else "",
        "selector": re.sub(r'"[^"]*"', '""', sel.group(1)) if sel else "",
        "href_kind": page_kind(href) if href else "",
        "name": (node.name.lower() if node and not href else ""),
        "modal": str(bool(modal_at)),
        "in_modal": str(in_modal),
        "login": str(any(v.startswith("/login") for v in page.links.values())),
        "src_kind": page_kind(page.url),
        "has_value": str(bool(node and "value=" in node.states)),
        # what a button submits: whether the page's text fields (all of them, a banner's search box too) show a
        # value: all, some or none. The farm's tree never shows a password's value, so a login form reads "some"
        # at best, filled or not; the strongest feature, so that the crawl's many empty submissions do not outvote
        # the oracle's filled ones
        "filled": _filled(nodes) if node is not None and node.role == "button" else "",
    }
    return Context(page, action_text, action_kind(action_text), nodes, t if node is not None else None, features, href)


# --- outcomes -------------------------------------------------------------------------------------------------------
@dataclass
class Outcome:
    """What an exemplar's action did, bound to its own page (see the module docstring)."""

    kind: str  # none | nav | edit
    url_template: str = ""
    hunks: list[tuple[int, int, tuple[str, ...]]] = field(default_factory=list)  # (offset from target, delete, insert)
    target_states: str | None = None  # the element's own line, re-stated: new states with {TEXT} for the typed text
    source: Context | None = None

    @property
    def signature(self) -> str:
        """What the vote compares: the same behaviour on two sites has the same signature."""
        if self.kind == "nav":
            return f"nav {self.url_template}"
        if self.kind == "edit":
            return f"edit {self.target_states!r} {[(o, d, len(i)) for o, d, i in self.hunks]}"
        return "none"


#: How a value may be written into a URL: as a form submits it, fully escaped, escaped but slashes, a form value
#: inside an escaped parameter (`?next=/x%3Fq%3Da%2Bb`), as is.
ENCODINGS = {"form": quote_plus, "q": lambda v: quote(v, safe=""), "qs": lambda v: quote(v, safe="/"),
             "formq": lambda v: quote(quote_plus(v), safe=""), "raw": lambda v: v}


def url_template(next_url: str, ctx: Context) -> str:
    """The next URL with this page's values replaced by `{NAME|encoding}` variables (longest values first)."""
    path = _path(next_url)
    if ctx.href and path == _path(ctx.href):
        return "{HREF|raw}"
    values = sorted(((k, v) for k, v in ctx.variables().items() if v), key=lambda kv: -len(kv[1]))
    for k, v in values:
        for name, enc in ENCODINGS.items():
            e = enc(v)
            if e and e in path:
                path = path.replace(e, "{" + k + "|" + name + "}")
                break
    return path


def fill_template(template: str, ctx: Context) -> str | None:
    """A URL on this page's origin from a template, or None when a variable has no value here."""
    vars_ = ctx.variables()
    out = template
    for m in re.finditer(r"\{([A-Z_]+(?::[^}|]+)?)\|(\w+)\}", template):
        key, enc = m.group(1), ENCODINGS.get(m.group(2))
        if enc is None or (key not in vars_ and not key.startswith("V:")):
            return None
        out = out.replace(m.group(0), enc(vars_.get(key, "")), 1)
    base = urlsplit(ctx.page.url)
    return f"{base.scheme}://{base.netloc}{out}" if out.startswith("/") else out


def outcome_of(ctx: Context, next_url: str, next_state: str) -> Outcome:
    if next_url != ctx.page.url:
        return Outcome("nav", url_template(next_url, ctx), source=ctx)
    if next_state == ctx.page.state:
        return Outcome("none", source=ctx)
    if ctx.target is None:
        return Outcome("edit", hunks=[], source=ctx)  # no anchor to place hunks: counted, not reproducible
    text = action_text_arg(ctx.action_text)
    out = Outcome("edit", source=ctx)
    for h in diff.compute(ctx.page.state, next_state):
        ins = list(h.insert)
        if h.start == ctx.target and h.delete == 1 and len(ins) == 1:
            new = parse_line(ins[0])
            tn = ctx.target_node
            if tn is not None and new.node_id == tn.node_id and new.role == tn.role:
                states = new.states.replace(json.dumps(text)[1:-1], "{TEXT}") if text else new.states
                out.target_states = states
                continue
        if h.delete == 1 and len(ins) == 1 and "focused" in ctx.nodes[h.start].states and "focused" not in ins[0]:
            continue  # focus leaving another element: re-applied as a rule
        out.hunks.append((h.start - ctx.target, h.delete, tuple(ins)))
    return out


def apply_outcome(o: Outcome, ctx: Context) -> str | None:
    """The edited state for this page, or None when the exemplar's edit cannot be placed here."""
    if ctx.target is None or o.source is None or o.source.target is None:
        return None
    lines = ctx.page.state.split("\n")
    words = word_map_lines(o.source.nodes, ctx.nodes, o.source.target, ctx.target)
    text = action_text_arg(ctx.action_text)
    ex_text = action_text_arg(o.source.action_text)
    if ex_text and text:
        words[ex_text] = text
    id_shift = int(ctx.target_node.node_id) - int(o.source.target_node.node_id) \
        if ctx.target_node and o.source.target_node and (ctx.target_node.node_id or "").isdigit() \
        and (o.source.target_node.node_id or "").isdigit() else 0
    hunks: list[diff.Hunk] = []
    if o.target_states is not None:
        tn = ctx.target_node
        states = o.target_states.replace("{TEXT}", json.dumps(text)[1:-1])
        indent = lines[ctx.target][: len(lines[ctx.target]) - len(lines[ctx.target].lstrip("\t "))]
        new = f"{indent}[{tn.node_id}] {tn.role} {json.dumps(tn.name, ensure_ascii=False)}" + (f" {states}" if states else "")
        hunks.append(diff.Hunk(ctx.target, 1, (new,)))
    for off, delete, ins in o.hunks:
        start = ctx.target + off
        if start < 0 or start + delete > len(lines):
            return None
        mapped = []
        for line in ins:
            for a, b in sorted(words.items(), key=lambda kv: -len(kv[0])):
                if a and a in line:
                    line = line.replace(a, b)
            m = _ID.match(line)
            if m and id_shift:
                line = f"{m.group(1)}[{int(m.group(2)) + id_shift}] " + line[m.end():]
            mapped.append(line)
        hunks.append(diff.Hunk(start, delete, tuple(mapped)))
    hunks.sort(key=lambda h: h.start)
    try:
        out = diff.apply_hunks(hunks, ctx.page.state)
    except diff.EditError:
        return None
    return _single_focus(out, ctx.target if o.target_states and "focused" in o.target_states else None)


def _single_focus(state: str, focused_line: int | None) -> str:
    """A page has one focused element: the one just focused keeps it."""
    if focused_line is None:
        return state
    lines = state.split("\n")
    for i, line in enumerate(lines):
        if i != focused_line and "focused" in line:
            lines[i] = line.replace("focused, ", "").replace(", focused", "").replace(" focused", "")
    return "\n".join(lines)


# --- the index --------------------------------------------------------------------------------------------------------
class PageActions:
    """Training page actions by family and kind, matched by their features."""

    def __init__(self, max_per_key: int = 4000) -> None:
        self.index: dict[tuple[str, str], list[tuple[dict[str, str], Outcome]]] = defaultdict(list)
        self.max_per_key = max_per_key

    def __len__(self) -> int:
        return sum(len(v) for k, v in self.index.items() if k[0] != "*")

    def add(self, site: str, page: PageView, action_text: str, next_url: str, next_state: str) -> None:
        ctx = context(page, action_text)
        item = (ctx.features, outcome_of(ctx, next_url, next_state))
        # by family, and every family's together ("*"): a website of a family never trained on (a hand-made
        # website, a MiniWoB++ page) is matched against all of them, by what the action acts on
        for key in ((family_of(site), ctx.kind), ("*", ctx.kind)):
            bucket = self.index[key]
            if len(bucket) < self.max_per_key:
                bucket.append(item)

    def candidates(self, ctx: Context, top: int = 12, any_family: bool = True) -> tuple[float, list[Outcome]]:
        bucket = self.index.get((family_of(ctx.page.url), ctx.kind)) or []
        if not bucket and not ctx.href and any_family:
            # a family never trained on: other families' actions say how the page itself changes (an edit, or
            # nothing), never where a URL of theirs goes; a link's href says that (Predictor.link_default)
            # and of an edit only the element's own line (its value, checked, focused): lines at offsets from it
            # are their markup's
            bucket = [(f, o if o.kind == "none" or not o.hunks else Outcome(o.kind, o.url_template, [], o.target_states, o.source))
                      for f, o in self.index.get(("*", ctx.kind), []) if o.kind != "nav"]
        wild = {k for k in OPTIONAL if not ctx.features.get(k)}
        scored = [(sum(w for k, w in WEIGHTS.items() if k in wild or f.get(k) == ctx.features.get(k)), o)
                  for f, o in bucket]
        if not scored:
            return 0.0, []
        best = max(s for s, _ in scored)
        return best / sum(WEIGHTS.values()), [o for s, o in scored if s == best][:top * 4]

    def predict(self, ctx: Context, any_family: bool = True) -> tuple[Outcome | None, float, int]:
        """(winning outcome, match score 0..1, its share of the vote in percent)."""
        score, outs = self.candidates(ctx, any_family=any_family)
        if not outs:
            return None, 0.0, 0
        votes = Counter(o.signature for o in outs)
        sig, n = votes.most_common(1)[0]
        return next(o for o in outs if o.signature == sig), score, round(100 * n / len(outs))

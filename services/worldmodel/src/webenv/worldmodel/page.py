"""A page as the world model holds it: the farm's a11y-tree lines, the links' targets, and its kind and regions.

The farm's AXTREE text is one node per line, `[id] role "name" states` (a StaticText line has the id of the element it
sits in when that element has no line of its own, else none), indented
by one tab per depth. It leaves out where a link goes; the farm's MARKDOWN keeps it (`[id:name](href)`), so the
world model's state is the tree plus a map element id -> href, read from the Markdown recorded with the same step.
Knowing the href turns "where does this click go" from a guess into a copy, which is what makes the next URL
predictable on websites never seen in training.

A page's top-level nodes split it into regions (banner, main, complementary, contentinfo, dialog...). On one
site every page shares the regions around `main` (the chrome), and element ids are assigned in document order
from 1 on every new document, so a page of a site can be predicted as "this site's chrome + a main region of
the right kind" with ids shifted where the main region's size differs.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from urllib.parse import parse_qsl, urljoin, urlsplit

from webenv.worldmodel import formats

_MD_LINK = re.compile(r"\[(?P<id>\d+):(?P<name>(?:[^\]\\]|\\.)*)\]\((?P<href>[^)\s]*)\)")
_ID_IN_PATH = re.compile(r"\d")


@dataclass(frozen=True, slots=True)
class Node:
    """One line of the tree."""

    depth: int
    node_id: str | None
    role: str
    name: str
    states: str
    line: str

    @property
    def shape(self) -> str:
        """What a line is, without its words: depth, role and which states it has (not their values)."""
        keys = ",".join(sorted(s.split("=", 1)[0] for s in self.states.split(", ") if s)) if self.states else ""
        return f"{self.depth}:{self.role}:{keys}"


def parse_line(line: str) -> Node:
    """One line of the tree (formats.parse_line's grammar; a line it keeps raw has no role)."""
    a = formats.parse_line(line)
    if a.raw is not None:
        return Node(a.depth, None, "", a.raw.strip(), "", line)
    return Node(a.depth, a.node_id, a.role, a.name or "", a.states or "", line)


def parse(state: str) -> list[Node]:
    return [parse_line(line) for line in state.split("\n") if line.strip()] if state else []


def links_from_markdown(markdown: str) -> dict[str, str]:
    """element id -> href of every link in the farm's Markdown (`[id:name](href)`)."""
    return {m.group("id"): m.group("href") for m in _MD_LINK.finditer(markdown or "")}


def resolve(url: str, href: str) -> str:
    """The absolute URL a link goes to, without the fragment (a fragment does not load a new document)."""
    return urljoin(url, href).split("#", 1)[0] if href else ""


def page_kind(url: str) -> str:
    """The template a URL names: path segments holding digits become `{id}`, query values are dropped.

    `/products/P1007?tab=reviews` -> `/products/{id}?tab`; the same kind on two sites of a family is rendered by
    the same template."""
    u = urlsplit(url)
    segs = ["{id}" if _ID_IN_PATH.search(s) else s for s in (u.path or "/").split("/")]
    keys = sorted({k for k, _ in parse_qsl(u.query, keep_blank_values=True)})
    return "/".join(segs) + ("?" + "&".join(keys) if keys else "")


def family_of(site_or_url: str) -> str:
    """`shop-0003.web.test` (or a URL on it) -> `shop`."""
    host = urlsplit(site_or_url).hostname if "://" in site_or_url else site_or_url
    return (host or "").split(".", 1)[0].rsplit("-", 1)[0]


@dataclass(frozen=True, slots=True)
class Region:
    """A top-level node and its subtree: lines [start, end) of the page."""

    role: str
    start: int
    end: int


def regions(nodes: list[Node]) -> list[Region]:
    """Top-level regions; lines before the first top-level node belong to a nameless region."""
    out: list[Region] = []
    for i, n in enumerate(nodes):
        if n.depth == 0 or not out:
            if out:
                out[-1] = Region(out[-1].role, out[-1].start, i)
            out.append(Region(n.role if n.depth == 0 else "", i, len(nodes)))
    return out


def first_id(nodes: list[Node], start: int, end: int) -> int | None:
    for n in nodes[start:end]:
        if n.node_id and n.node_id.isdigit():
            return int(n.node_id)
    return None


_ID_TOKEN = re.compile(r"^([\t ]*)\[(\d+)\] ")


def shift_ids(lines: list[str], delta: int) -> list[str]:
    """The lines with every numeric element id moved by delta."""
    if not delta:
        return list(lines)
    return [_ID_TOKEN.sub(lambda m: f"{m.group(1)}[{int(m.group(2)) + delta}] ", ln, count=1) for ln in lines]


def target_id(action_text: str) -> str | None:
    """The element id an action in the text grammar names first (`click(12)`, `fill(3, "x")`), if any."""
    m = re.match(r"^\w+\((\d+)\b", action_text)
    return m.group(1) if m else None


def action_kind(action_text: str) -> str:
    return action_text.split("(", 1)[0]


def target_id_of_line(line: str) -> str | None:
    s = line.lstrip("\t ")
    if s.startswith("["):
        end = s.find("]")
        if end > 1:
            return s[1:end]
    return None


#: The CSS selector an action names (`click("#search-btn")` -> `#search-btn`).
SELECTOR = re.compile(r'^\w+\("((?:[^"\\]|\\.)*)"')
#: The roles whose value a form submits as typed text.
TEXT_FIELDS = ("searchbox", "textbox", "combobox", "spinbutton")
_WORD = re.compile(r"[A-Za-z]+|\d+")
_ROLE_HINTS = {"search": "searchbox", "btn": "button", "submit": "button", "close": "button", "accept": "button",
               "link": "link", "item": "link", "page": "link"}


def target_line(lines: list[str], action_text: str) -> int | None:
    """The line of the element an action names: by id, or for a CSS selector the interactive line sharing most of
    its words (`#search-q` -> the searchbox, `a.item-link[data-item="P1003"]` -> the link to .../P1003)."""
    tid = target_id(action_text)
    if tid is not None:
        for i, line in enumerate(lines):
            if target_id_of_line(line) == tid:
                return i
        return None
    m = SELECTOR.match(action_text)
    if not m:
        return None
    ordered = [w.lower() for w in _WORD.findall(m.group(1).replace('\\"', '"'))]
    words = set(ordered) - {"f", "a", "data", "id"}
    if not words:
        return None
    roles = {_ROLE_HINTS[w] for w in words if w in _ROLE_HINTS}
    # the last word with a role hint names the element's kind (`#search-btn` is a button, not the searchbox or the
    # search landmark its other word matches): a line of that role outranks any word overlap
    kind = next((_ROLE_HINTS[w] for w in reversed(ordered) if w in _ROLE_HINTS), None)
    best, best_score = None, 0.0
    for i, line in enumerate(lines):
        if target_id_of_line(line) is None:
            continue
        body = f" {line.split('] ', 1)[-1]} "
        text = {w.lower() for w in _WORD.findall(body)}
        score = len(words & text) + (0.5 if any(f" {r} " in body for r in roles) else 0) + \
            (10.0 if kind and body.startswith(f" {kind} ") else 0)
        if score > best_score:
            best, best_score = i, score
    return best

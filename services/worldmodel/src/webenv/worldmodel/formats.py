"""State formats and the conversions between them that can be derived from the a11y tree.

The a11y-tree text of the browser farm has one node per line, `[id] role "name" states`, indented one tab
per depth (two spaces per depth are read too). XML (WebWorld's XML rendering) carries exactly the same
information, so axtree -> XML -> axtree is lossless; Markdown is a lossy, one-way rendering of the tree (with
the links' targets when known, as the farm writes them). HTML cannot be derived from the tree.
"""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from enum import StrEnum


class Format(StrEnum):
    """Text formats the world model reads and writes (names as in the transitions JSONL)."""

    AXTREE = "axtree"
    HTML = "html"
    MARKDOWN = "markdown"
    XML = "xml"


_LINE = re.compile(r'^(?P<ws>[\t ]*)(?:\[(?P<id>[^\]\s]+)\] )?(?P<role>[A-Za-z][\w-]*)(?: (?P<name>"(?:[^"\\]|\\.)*"))?(?: (?P<states>.+))?$')
_XML_NAME = re.compile(r"^[A-Za-z_][\w-]*$")


@dataclass(frozen=True)
class AxNode:
    """One parsed a11y-tree line; `raw` set when the line does not follow the grammar."""

    ws: str
    node_id: str | None = None
    role: str = ""
    name: str | None = None
    states: str | None = None
    raw: str | None = None

    def render(self) -> str:
        if self.raw is not None:
            return self.ws + self.raw
        parts = []
        if self.node_id is not None:
            parts.append(f"[{self.node_id}]")
        parts.append(self.role)
        if self.name is not None:
            parts.append(json.dumps(self.name, ensure_ascii=False))
        if self.states is not None:
            parts.append(self.states)
        return self.ws + " ".join(parts)

    @property
    def depth(self) -> int:
        return self.ws.count("\t") + self.ws.count(" ") // 2


def parse_line(line: str) -> AxNode:
    """Parse one a11y-tree line; anything that would not render back identically is kept raw."""
    m = _LINE.match(line)
    ws = line[: len(line) - len(line.lstrip("\t "))]
    if m:
        name = None
        ok = True
        if m.group("name") is not None:
            try:
                name = json.loads(m.group("name"))
            except json.JSONDecodeError:
                ok = False
        node = AxNode(ws=ws, node_id=m.group("id"), role=m.group("role"), name=name, states=m.group("states"))
        if ok and node.render() == line:
            return node
    return AxNode(ws=ws, raw=line[len(ws):])


def axtree_to_xml(state: str) -> str:
    """Nest the tree's lines as XML elements (tag = role); lossless, see xml_to_axtree."""
    root = ET.Element("page")
    stack: list[tuple[int, ET.Element]] = [(-1, root)]
    for line in state.split("\n"):
        node = parse_line(line)
        while len(stack) > 1 and stack[-1][0] >= node.depth:
            stack.pop()
        parent = stack[-1][1]
        level = len(stack) - 1
        if node.raw is not None:
            el = ET.SubElement(parent, "text", {"value": node.raw})
        elif _XML_NAME.match(node.role) and node.role not in ("text", "page"):
            el = ET.SubElement(parent, node.role)
        else:
            el = ET.SubElement(parent, "node", {"role": node.role})
        if node.raw is None:
            if node.node_id is not None:
                el.set("id", node.node_id)
            if node.name is not None:
                el.set("name", node.name)
            if node.states is not None:
                el.set("states", node.states)
        if node.ws != "\t" * level:
            el.set("ws", node.ws)
        stack.append((node.depth, el))
    ET.indent(root, space="  ")
    return ET.tostring(root, encoding="unicode")


def xml_to_axtree(text: str) -> str:
    """Inverse of axtree_to_xml."""
    root = ET.fromstring(text)
    lines: list[str] = []

    def walk(el: ET.Element, level: int) -> None:
        ws = el.get("ws", "\t" * level)
        if el.tag == "text":
            lines.append(AxNode(ws=ws, raw=el.get("value", "")).render())
        else:
            role = el.get("role", "") if el.tag == "node" else el.tag
            lines.append(AxNode(ws=ws, node_id=el.get("id"), role=role, name=el.get("name"), states=el.get("states")).render())
        for child in el:
            walk(child, level + 1)

    for child in root:
        walk(child, 0)
    return "\n".join(lines)


_MD_INPUTS = {"textbox", "searchbox", "combobox", "checkbox", "radio", "spinbutton", "slider", "switch", "listbox"}


def axtree_to_markdown(state: str, links: dict[str, str] | None = None) -> str:
    """Render the tree as Markdown with element ids, in the farm's notation (`[id:name](href)` for a link, `[id:button
    name]`, `# [id] heading`); lossy: nesting and roles without a notation are dropped."""
    links = links or {}
    out: list[str] = []
    for line in state.split("\n"):
        node = parse_line(line)
        if node.raw is not None:
            out.append(node.raw)
            continue
        name = node.name or ""
        states = ", ".join(x for x in (node.states or "").split(", ") if x and x != "focused")
        if node.role == "StaticText":
            out.append(name)
        elif node.role == "heading":
            m = re.search(r"level=(\d)", states)
            out.append("#" * int(m.group(1) if m else 2) + f" [{node.node_id}] {name}")
        elif node.role == "link":
            out.append(f"[{node.node_id}:{name}]({links.get(node.node_id or '', '')})")
        elif node.role == "button":
            out.append(f"[{node.node_id}:button {name}]")
        elif node.role in _MD_INPUTS:
            out.append(f"[{node.node_id}:{node.role}" + (f" {name}" if name else "") + (f" {states}" if states else "") + "]")
        elif node.role == "listitem":
            out.append("-")
    return "\n".join(x for x in out if x)


def convert(state: str, src: Format, dst: Format) -> str:
    """Convert between formats where derivable; raise ValueError naming the pair otherwise."""
    if src == dst:
        return state
    if src == Format.AXTREE and dst == Format.XML:
        return axtree_to_xml(state)
    if src == Format.XML and dst == Format.AXTREE:
        return xml_to_axtree(state)
    if src == Format.AXTREE and dst == Format.MARKDOWN:
        return axtree_to_markdown(state)
    if src == Format.XML and dst == Format.MARKDOWN:
        return axtree_to_markdown(xml_to_axtree(state))
    raise ValueError(f"format {dst.value} cannot be derived from {src.value}")


def line_f1(predicted: str, target: str) -> float:
    """Line-level F1 of two states: lines compared as a multiset, stripped of trailing spaces."""
    from collections import Counter

    p = Counter(line.rstrip() for line in predicted.split("\n") if line.strip())
    t = Counter(line.rstrip() for line in target.split("\n") if line.strip())
    if not p and not t:
        return 1.0
    common = sum((p & t).values())
    if common == 0:
        return 0.0
    precision, recall = common / sum(p.values()), common / sum(t.values())
    return 2 * precision * recall / (precision + recall)

"""The farm's AXTREE text format parsed into nodes: `[id] role "name" attributes`, one element a line, indented by
depth. The one reading of a page that the candidate proposer (candidates.py) and the fact reader (facts.py) share."""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

_LINE = re.compile(r'^(?P<indent>[\t ]*)(?:\[(?P<id>[^\]\s]+)\]\s+)?(?P<role>[\w-]+)(?:\s+"(?P<name>(?:[^"\\]|\\.)*)")?(?P<rest>.*)$')
_VALUE = re.compile(r'value="((?:[^"\\]|\\.)*)"')


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


def subtree(nodes: Sequence[AxNode], i: int) -> Iterable[AxNode]:
    """The nodes under node ``i``, in document order."""
    depth = nodes[i].depth
    for j in range(i + 1, len(nodes)):  # by index: a slice would copy the rest of the page for every node
        n = nodes[j]
        if n.depth <= depth:
            return
        yield n


def text_of(nodes: Sequence[AxNode], i: int) -> str:
    """The names under node ``i`` joined (its text, as far as the AXTREE shows it)."""
    parts = [n.name for n in subtree(nodes, i) if n.name and n.name != "·"]
    return " ".join(parts).strip()

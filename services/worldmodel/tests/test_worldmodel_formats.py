"""State formats: axtree <-> XML is lossless; Markdown is derived; line F1 behaves."""

from __future__ import annotations

import pytest
from webenv.worldmodel.formats import (
    Format,
    axtree_to_markdown,
    axtree_to_xml,
    convert,
    line_f1,
    parse_line,
    xml_to_axtree,
)

TREE = "\n".join([  # the farm's a11y tree: one tab per depth
    '[1] banner ""',
    '\tStaticText "Shop & <Co> cart: 0"',
    '\t[3] navigation ""',
    '\t\t[6] link "Home" focused',
    '[13] main ""',
    '\t[14] heading "Products" level=1',
    '\t[16] searchbox "Search" value="a \\"quoted\\" term"',
    '\t\t\t[99] checkbox "deep jump" checked=true',
    "\t{not: grammar} line",
    '\t[20] weird-role "x\\ny"',
    '  [21] link "two-space indent"',
])


def test_axtree_xml_round_trip() -> None:
    xml = axtree_to_xml(TREE)
    assert "<heading" in xml and 'name="Products"' in xml
    assert xml_to_axtree(xml) == TREE
    assert convert(convert(TREE, Format.AXTREE, Format.XML), Format.XML, Format.AXTREE) == TREE


def test_parse_line_keeps_unknown_lines_raw() -> None:
    node = parse_line("\t{not: grammar} line")
    assert node.raw == "{not: grammar} line" and node.render() == "\t{not: grammar} line"
    node = parse_line('\t\t[14] heading "Products" level=1')
    assert (node.node_id, node.role, node.name, node.states, node.depth) == ("14", "heading", "Products", "level=1", 2)


def test_markdown_is_derived_with_link_targets() -> None:
    md = convert(TREE, Format.AXTREE, Format.MARKDOWN)
    assert "# [14] Products" in md and "[6:Home]()" in md and "Shop & <Co> cart: 0" in md
    assert "[6:Home](/)" in axtree_to_markdown(TREE, {"6": "/"})  # the farm's notation when the target is known


def test_html_cannot_be_derived() -> None:
    with pytest.raises(ValueError, match="html cannot be derived from axtree"):
        convert(TREE, Format.AXTREE, Format.HTML)


def test_line_f1() -> None:
    assert line_f1("a\nb", "a\nb") == 1.0
    assert line_f1("a\nb", "c") == 0.0
    assert line_f1("a\nb", "a\nc") == pytest.approx(0.5)

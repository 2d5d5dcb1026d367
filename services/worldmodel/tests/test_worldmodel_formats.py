"""State formats: axtree <-> XML is lossless; Markdown is derived; line F1 behaves."""

from __future__ import annotations

import pytest
from webenv.worldmodel.formats import Format, axtree_to_xml, convert, line_f1, parse_line, xml_to_axtree

TREE = "\n".join([
    '[0] RootWebArea "Shop & <Co>"',
    "  [1] banner",
    '    StaticText "Cart: 0"',
    "    [3] navigation",
    '      [6] link "Home" focused',
    '  [13] main',
    '    [14] heading "Products" level=1',
    '    [16] searchbox "Search" value="a \\"quoted\\" term"',
    '        [99] checkbox "deep jump" checked',
    "  {not: grammar} line",
    '  [20] weird-role "x\\ny"',
])


def test_axtree_xml_round_trip() -> None:
    xml = axtree_to_xml(TREE)
    assert "<heading" in xml and 'name="Products"' in xml
    assert xml_to_axtree(xml) == TREE
    assert convert(convert(TREE, Format.AXTREE, Format.XML), Format.XML, Format.AXTREE) == TREE


def test_parse_line_keeps_unknown_lines_raw() -> None:
    node = parse_line("  {not: grammar} line")
    assert node.raw == "{not: grammar} line" and node.render() == "  {not: grammar} line"
    node = parse_line('    [14] heading "Products" level=1')
    assert (node.node_id, node.role, node.name, node.states) == ("14", "heading", "Products", "level=1")


def test_markdown_is_derived() -> None:
    md = convert(TREE, Format.AXTREE, Format.MARKDOWN)
    assert "# Products [14]" in md and "[Home](#6)" in md


def test_html_cannot_be_derived() -> None:
    with pytest.raises(ValueError, match="html cannot be derived from axtree"):
        convert(TREE, Format.AXTREE, Format.HTML)


def test_line_f1() -> None:
    assert line_f1("a\nb", "a\nb") == 1.0
    assert line_f1("a\nb", "c") == 0.0
    assert line_f1("a\nb", "a\nc") == pytest.approx(0.5)

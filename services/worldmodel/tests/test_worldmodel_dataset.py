"""Dataset builder over real collected transitions: formats and edits round-trip exactly."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from webenv.worldmodel import diff
from webenv.worldmodel.dataset import (
    build_examples,
    decode_url,
    encode_url,
    parse_output,
    read_transitions,
    rule_reasoner,
    split_examples,
)
from webenv.worldmodel.formats import Format, convert


def test_collected_records_follow_the_contract(transitions_file: Path) -> None:
    rows = [json.loads(line) for line in transitions_file.read_text().splitlines()]
    assert set(rows[0]) == {"episode_id", "step_index", "site", "split", "format", "instruction", "url", "state",
                            "action_text", "next_url", "next_state", "env_kind"}
    assert {r["split"] for r in rows} == {"train", "test"}
    assert all(r["split"] == "test" for r in rows if r["site"] == "wiki-0000")
    assert rows[0]["state"].startswith("[0] RootWebArea")


@pytest.mark.parametrize("fmt", [Format.AXTREE, Format.XML])
def test_edit_targets_rebuild_next_state(transitions_file: Path, fmt: Format) -> None:
    records = read_transitions([transitions_file])
    examples = build_examples(records, fmt=fmt)
    assert len(examples) == len(records)
    for ex in examples:
        r = ex.record
        assert ex.state == convert(r.state, Format.AXTREE, fmt)
        parsed = parse_output(ex.target, r.url, ex.state)
        assert not parsed.fallback, parsed.error
        assert parsed.next_state == ex.next_state
        assert parsed.next_url == r.next_url
        if fmt == Format.XML:
            assert convert(parsed.next_state, Format.XML, Format.AXTREE) == r.next_state


def test_full_state_targets_and_reasoning(transitions_file: Path) -> None:
    records = read_transitions([transitions_file])
    examples = build_examples(records, as_edit=False, reasoning_fraction=1.0, reasoner=rule_reasoner)
    for ex in examples:
        parsed = parse_output(ex.target, ex.record.url, ex.state)
        assert parsed.next_state == ex.record.next_state
        assert ex.record.action_text in parsed.reasoning


def test_history_window_and_split(transitions_file: Path) -> None:
    examples = build_examples(read_transitions([transitions_file]), history_window=2)
    assert max(len(e.history) for e in examples) == 2
    train, test = split_examples(examples)
    assert {e.record.site for e in test} == {"wiki-0000"}
    assert not {e.record.site for e in train} & {"wiki-0000"}


def test_url_encoding() -> None:
    u = "http://shop-0001.web.test/products"
    for nxt in [u, "http://shop-0001.web.test/search?q=a", "http://other.web.test/", "about:blank"]:
        assert decode_url(u, encode_url(u, nxt)) == nxt
    assert encode_url(u, u) == "<same>"


def test_malformed_outputs_fall_back() -> None:
    state = "a\nb"
    for text in ["", "garbage", "URL =\nEDIT\n@9 1\n+x", "URL =\nWHAT", "<reasoning>never closed"]:
        p = parse_output(text, "http://x/", state)
        assert p.fallback and p.next_state == state and p.error
    p = parse_output("<nav>/y\nEDIT\n" + diff.make_edit(state, "a\nc"), "http://x/", state)
    assert (p.next_state, p.next_url, p.fallback) == ("a\nc", "http://x/y", False)


def test_bad_jsonl_line_is_named(tmp_path: Path) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"episode_id": "e"}\n')
    with pytest.raises(ValueError, match=r"bad.jsonl:1: not a transition"):
        read_transitions([bad])


def test_repair_applies_what_it_can() -> None:
    p = parse_output("URL =\nEDIT\n@2 5\n+x", "http://x/", "a\nb\nc", repair=True)
    assert (p.next_state, p.repaired, p.fallback) == ("a\nx", True, False)
    assert parse_output("URL =\nEDIT\n@2 5\n+x", "http://x/", "a\nb\nc").fallback

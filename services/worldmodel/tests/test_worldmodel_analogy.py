"""Page actions on a website never seen, by analogy with the training website's same actions."""

from __future__ import annotations

from pathlib import Path

from webenv.worldmodel.analogy import PageActions, apply_outcome, context, fill_template, url_template
from webenv.worldmodel.compose import PageView
from webenv.worldmodel.dataset import is_page_action, read_transitions


def _index(transitions_file: Path) -> tuple[PageActions, list]:
    records = read_transitions([transitions_file])
    pa = PageActions()
    for r in records:
        if r.split == "train" and is_page_action(r.action_text):
            pa.add(r.site, r.page, r.action_text, r.next_url, r.next_state)
    return pa, [r for r in records if r.split == "test" and is_page_action(r.action_text)]


def test_held_out_page_actions_are_reproduced(transitions_file: Path) -> None:
    pa, test = _index(transitions_file)
    assert test
    for r in test:
        ctx = context(r.page, r.action_text)
        outcome, score, vote = pa.predict(ctx)
        assert outcome is not None and score > 0.5 and vote > 0, r.action_text
        if r.next_url != r.url:
            assert outcome.kind == "nav" and fill_template(outcome.url_template, ctx) == r.next_url, (r.action_text, outcome)
        elif r.next_state == r.state:
            assert outcome.kind == "none", r.action_text
        else:  # typing on a page of another site: the same edit, with this page's ids and this text
            assert outcome.kind == "edit" and apply_outcome(outcome, ctx) == r.next_state, r.action_text


def test_url_templates_bind_to_this_page() -> None:
    page = PageView("http://jobs-0004.web.test/about",
                    '[1] banner ""\n\t[3] searchbox "Find" focused, value="data analyst"\n\t[4] button "Find"',
                    {"9": "/jobs?category=it"})
    ctx = context(page, "click(4)")
    t = url_template("http://jobs-0004.web.test/jobs?q=data+analyst", ctx)
    assert t == "/jobs?q={V:searchbox|form}"
    other = PageView("http://jobs-0009.web.test/", page.state.replace("data analyst", "nurse & co"), {})
    assert fill_template(t, context(other, "click(4)")) == "http://jobs-0009.web.test/jobs?q=nurse+%26+co"
    link = PageView("http://bank-0001.web.test/", '[4] link "Transactions"', {"4": "/transactions?category=dining"})
    ctx = context(link, "click(4)")
    assert url_template("http://bank-0001.web.test/login?next=/transactions%3Fcategory%3Ddining", ctx) == "/login?next={HREF|qs}"
    assert url_template("http://bank-0001.web.test/transactions?category=dining", ctx) == "{HREF|raw}"
    assert fill_template("{SEG:2|raw}", ctx) is None  # a variable this page lacks: no guess

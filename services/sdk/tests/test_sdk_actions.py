"""The action text grammar: every Action kind round-trips exactly; malformed text is rejected with a position."""

from __future__ import annotations

import pytest
from webenv.actions import ACTION_NAMES, ActionParseError, format_action, parse_action
from webenv.v1 import common_pb2 as pb

T = pb.ElementTarget

EVERY_KIND = [
    pb.Action(click=pb.ClickAction(target=T(element_id="12"))),
    pb.Action(click=pb.ClickAction(target=T(selector="#buy > button"), button=pb.MOUSE_BUTTON_RIGHT, click_count=2)),
    pb.Action(fill=pb.FillAction(target=T(element_id="a7"), text='say "hi"\nnow ünïcode')),
    pb.Action(select=pb.SelectAction(target=T(element_id="3"), options=["red", "blue, green"])),
    pb.Action(hover=pb.HoverAction(target=T(selector="nav a[href='/x']"))),
    pb.Action(press=pb.PressAction(target=T(element_id="4"), key="Enter")),
    pb.Action(press=pb.PressAction(key="Control+a")),
    pb.Action(scroll_element=pb.ScrollElementAction(target=T(element_id="9"), dx=0, dy=300.5)),
    pb.Action(click_at=pb.ClickAtAction(x=340, y=520, button=pb.MOUSE_BUTTON_MIDDLE)),
    pb.Action(type=pb.TypeAction(text="hello\tworld\\")),
    pb.Action(scroll=pb.ScrollAction(dx=-10, dy=400)),
    pb.Action(drag=pb.DragAction(from_x=1, from_y=2.25, to_x=3, to_y=4)),
    pb.Action(navigate=pb.NavigateAction(url="https://shop-0001.web.test/p?q=a&b=%20")),
    pb.Action(go_back=pb.GoBackAction()),
    pb.Action(go_forward=pb.GoForwardAction()),
    pb.Action(new_tab=pb.NewTabAction()),
    pb.Action(new_tab=pb.NewTabAction(url="http://x.web.test/")),
    pb.Action(switch_tab=pb.SwitchTabAction(tab_id="1")),
    pb.Action(close_tab=pb.CloseTabAction()),
    pb.Action(close_tab=pb.CloseTabAction(tab_id="tab 2")),
    pb.Action(wait=pb.WaitAction(milliseconds=500)),
    pb.Action(answer=pb.AnswerAction(text="$42.50, in stock")),
    pb.Action(noop=pb.NoopAction()),
]


def test_every_oneof_kind_is_covered():
    kinds = {a.WhichOneof("kind") for a in EVERY_KIND}
    assert kinds == {f.name for f in pb.Action.DESCRIPTOR.oneofs_by_name["kind"].fields}
    assert len(ACTION_NAMES) == len(kinds)


@pytest.mark.parametrize("action", EVERY_KIND, ids=lambda a: a.WhichOneof("kind"))
def test_proto_text_proto_round_trip(action):
    text = format_action(action)
    assert parse_action(text) == action
    assert format_action(parse_action(text)) == text


@pytest.mark.parametrize(
    "text",
    ['click(12)', 'click("#buy", button="right", count=2)', 'fill(007, "x")', 'press("Enter")',
     'scroll(0, -400.5)', 'switch_tab(t1)', 'select(3, "a", "b")', 'click_at(1.5, 2)', 'wait(0)', 'noop()'],
)
def test_canonical_text_round_trips(text):
    assert format_action(parse_action(text)) == text


def test_lenient_input_is_normalised():
    assert format_action(parse_action("  click( 12 )  ")) == "click(12)"
    assert format_action(parse_action("answer('it\\'s')")) == 'answer("it\'s")'
    assert parse_action("click(007)").click.target.element_id == "007"  # ids are kept verbatim


@pytest.mark.parametrize(
    ("text", "column", "words"),
    [
        ("click(", 7, "expected a value"),
        ("clik(1)", 1, "unknown action 'clik'"),
        ("fill(1)", 7, "takes 2 arguments"),
        ("click(1) x", 10, "unexpected text after"),
        ("wait(-1)", 6, "non-negative integer"),
        ('fill(1, 2)', 9, "must be a quoted string"),
        ('answer("open', 8, "unterminated string"),
        ("click(1, button=\"top\")", 1, "button must be one of"),
        ("scroll(a, 1)", 8, "must be a number"),
        ('click("")', 7, "empty CSS selector"),
        ("", 1, "expected an action name"),
    ],
)
def test_malformed_text_is_rejected_with_position(text, column, words):
    with pytest.raises(ActionParseError) as info:
        parse_action(text)
    assert words in str(info.value)
    assert info.value.position + 1 == column
    assert f"column {column}" in str(info.value)


def test_format_rejects_actions_without_kind_or_target():
    with pytest.raises(ValueError):
        format_action(pb.Action())
    with pytest.raises(ValueError):
        format_action(pb.Action(click=pb.ClickAction()))


def test_the_kind_table_has_one_row_per_oneof_field_in_order():
    from webenv.actions import ACTION_KINDS

    assert list(ACTION_KINDS) == [f.name for f in pb.Action.DESCRIPTOR.oneofs_by_name["kind"].fields]
    assert {k for k, row in ACTION_KINDS.items() if row.target == "required"} == {
        "click", "fill", "select", "hover", "scroll_element"}
    assert {k for k, row in ACTION_KINDS.items() if row.navigates} == {"navigate", "go_back", "go_forward", "new_tab"}

"""The tree an agent reads follows Chromium's own where agents meet it: open shadow roots, the names ARIA gives
(legends, row headers, labelled content), date fields' parts, and every element a page made clickable has an id
that a click by id reaches (real Chromium through the farm; the full comparison is services/browser/fidelity.py)."""

from __future__ import annotations

import re

from webenv.v1 import common_pb2


def line_id(axtree: str, pattern: str) -> str:
    """The id of the first tree line matching `pattern` (a regex on the line after its id)."""
    for line in axtree.splitlines():
        m = re.match(r"\s*\[([^\]]+)\] (.*)$", line)
        if m and re.search(pattern, m.group(2)):
            return m.group(1)
    raise AssertionError(f"no line matches {pattern!r}:\n{axtree}")


async def test_open_shadow_roots_are_read_and_acted_on_by_id(env, page_server):
    o = await env.open(start_url=page_server.url("shadow"))
    sid, tree = o.session.session_id, o.observation.axtree
    assert re.search(r'heading "Blue mug"', tree)
    button = line_id(tree, r'^button "Add to cart"')
    field = line_id(tree, r'^textbox "Search"')  # its label lives in the same shadow root
    r = await env.step(sid, f"click({button})")
    assert not r.observation.last_action_error and 'StaticText "added"' in r.observation.axtree
    r = await env.step(sid, f'fill({field}, "mug")')
    assert not r.observation.last_action_error
    assert re.search(r'textbox "Search" .*value="mug"', r.observation.axtree), r.observation.axtree
    await env.close(sid)


async def test_names_and_roles_follow_aria(env, page_server):
    o = await env.open(start_url=page_server.url("patterns"))
    tree = o.observation.axtree
    assert re.search(r'\] group "Contact"', tree)  # a fieldset is named by its legend
    assert re.search(r'\] rowheader "#1001"', tree) and re.search(r'\] columnheader "Order"', tree)
    assert re.search(r'\] cell "twenty dollars"', tree)  # a child's aria-label names the cell
    date = line_id(tree, r'^Date "Birthday"')
    for part in ("spinbutton \"Month\"", "spinbutton \"Day\"", "spinbutton \"Year\"", "button \"Show date picker\""):
        assert f"[{date}] {part}" in tree  # Chromium's parts, printed with the field's id
    assert re.search(r'\] tab "Reviews"', tree) and re.search(r'\] link "Reviews"', tree)  # focusable: not presentational
    assert re.search(r'\] img ""', tree)  # an element drawn by `content: url(...)`
    await env.close(o.session.session_id)


async def test_every_clickable_thing_has_an_id_a_click_reaches(env, page_server):
    o = await env.open(start_url=page_server.url("patterns"))
    sid, tree = o.session.session_id, o.observation.axtree
    word = line_id(tree, r'^clickable "beta"')  # pointer cursor + script listener, no role of its own
    r = await env.step(sid, f"click({word})")
    assert re.search(r'^\s*StaticText "beta"', r.observation.axtree, re.M)  # the page's log says it was clicked
    box = line_id(r.observation.axtree, r'^clickable ""')  # a listener on an empty box
    r = await env.step(sid, f"click({box})")
    assert re.search(r'StaticText "box"', r.observation.axtree)
    icon = line_id(r.observation.axtree, r'^img ""')
    r = await env.step(sid, f"click({icon})")
    assert re.search(r'StaticText "trash"', r.observation.axtree)
    await env.close(sid)


async def test_miniwob_click_link_words_are_clicked_by_id(env, farm):
    task = common_pb2.Task(task_id="miniwob/click-link", source=common_pb2.TASK_SOURCE_MINIWOB,
                           metadata={"miniwob_task": "click-link"})
    r = await env.open(task=task, seed=5)
    target = re.search(r'"(.+)"', r.instruction).group(1)
    sid = r.session.session_id
    word = line_id(r.observation.axtree, rf'^(clickable|link) "{re.escape(target)}"')
    step = await env.step(sid, f"click({word})")
    assert step.done and step.raw_reward == 1.0, (step.reward_reason, r.observation.axtree)
    await env.close(sid)


async def test_markdown_writes_out_table_cells_and_labels_content(env, page_server):
    """A cell, header, label or legend is named by its content in the tree; MARKDOWN prints no name for them, so it
    writes that content out: the cells' text and links, the control inside a label (once empty rows, a lost input)."""
    spec = common_pb2.ObservationSpec(formats=[common_pb2.OBSERVATION_FORMAT_MARKDOWN], max_text_chars=2_000_000)
    o = await env.open(start_url=page_server.url("patterns"), spec=spec)
    md = o.observation.markdown
    assert "Contact Email [" in md and ":textbox Email]" in md  # the legend's words, the input inside the label
    assert re.search(r"^\| Order\s+\| Total\s+\|$", md, re.M) and re.search(r"^\| #1001\s+\| \$20\s+\|$", md, re.M)
    assert re.search(r"\[\d+:tab Reviews\]\n", md)  # named by its content and printed with it: not twice
    await env.close(o.session.session_id)
    o = await env.open(start_url=page_server.url("big"), spec=spec)
    md = o.observation.markdown
    assert re.search(r"^\| \[\d+:Order 10000\]\(#o0\)\s+\| shipped on day 1\s+\| \[\d+:button Track 0\]\s+\|$", md, re.M)
    assert md.count("](#o") == 1500 and md.endswith("Order 4417 ships on 12 March.")
    await env.close(o.session.session_id)

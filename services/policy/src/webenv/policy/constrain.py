"""Constrained decoding: a regular expression for a memory-prompt answer whose action is valid here.

Small or lightly trained models often answer in almost the right shape. With WEBENV_POLICY_CONSTRAINED
on, backends that support structured outputs (vLLM) decode only strings matching this pattern: the
four labelled lines, and an action from the grammar whose element ids are the ones the observation
offers (fill only on fillable elements, select only on <select>). Parsing then cannot fail, and a
click on an id that does not exist cannot be generated.
"""

from __future__ import annotations

import re

from webenv.agent.observe import candidates, clickables
from webenv.v1 import common_pb2

_BARE = re.compile(r"[A-Za-z0-9_\-]+")  # ids the action grammar writes unquoted
_TEXT = r'[^"\\\n]{0,60}'
_NOTE = r"[^\n]{0,160}"


def _alt(ids: list[str]) -> str:
    return "(" + "|".join(re.escape(i) for i in ids) + ")"


def answer_regex(obs: common_pb2.Observation) -> str:
    """Pattern of a whole answer (`Memory: ...` to `Action: ...`) for this observation."""
    cands = [c for c in candidates(obs) if _BARE.fullmatch(c.element_id)]
    click_ids = [c.element_id for c in clickables(cands)]
    fill_ids = [c.element_id for c in cands if c.fillable]
    select_ids = [c.element_id for c in cands if c.selectable]
    actions = [r"scroll\(0, -?[1-9][0-9]{0,3}\)", r"go_back\(\)", rf'answer\("{_TEXT}"\)']
    if click_ids:
        actions.append(rf"click\({_alt(click_ids)}\)")
    if fill_ids:
        actions.append(rf'fill\({_alt(fill_ids)}, "{_TEXT}"\)')
        actions.append(rf'press\({_alt(fill_ids)}, "Enter"\)')
    if select_ids:
        actions.append(rf'select\({_alt(select_ids)}, "{_TEXT}"\)')
    return (rf"Memory: {_NOTE}\nProgress: {_NOTE}\nIntention: {_NOTE}\nAction: "
            "(" + "|".join(actions) + ")")

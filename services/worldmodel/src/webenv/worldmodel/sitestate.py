"""A simulated session's site state: the forms the agent submitted, which a judge grades transactions against.

A real website's transaction ends in its database (the cart holds 2 of A12, an order row exists), and the judge
reads that state (`site_state` criteria, from the sites service's evidence). A simulated click changes no database,
so without a state of its own no simulated transaction can pass (bench/results/dyna.md: 0 of 59 before this). The
simulated session keeps instead what the agent *did* to the site:

* **Fields.** A `fill` (the text), `select` (the first option) or a click on a checkbox, radio or switch (its new
  checked state) on an element of the current page sets that field's value, by the field's accessible name (the
  label a user reads, "Quantity", "Username"). A new document (a link followed, a form submitted) starts with no
  fields, as a loaded page does.
* **Submissions.** A click on a button (role `button`; a tab, a link, a checkbox is no submission) records
  `{url, heading, button, fields}`: the page's URL, its first level-1 heading, the button's name and the fields set
  on that document so far. The last MAX_SUBMISSIONS are kept.

The session's CloseSession evidence (`site_state_json`) carries them as `{"simulated": true, "submissions": [...]}`,
and the judge credits a site-state fact when a submission on the record's page carries the expected value
(webenv/judge/simulated.py). Generic by construction: roles and accessible names only, nothing of a site's
templates. What it cannot know: whether the real site would have accepted the form (validation, login), and what it
would have stored beyond the submitted values; `type(text)` into the focused field is not tracked.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from webenv.v1 import common_pb2
from webenv.worldmodel.page import parse

MAX_SUBMISSIONS = 64
MAX_FIELDS = 64
_TOGGLES = frozenset({"checkbox", "radio", "switch", "menuitemcheckbox"})


@dataclass
class SiteLedger:
    """Fields of the current document and the submissions made (bounded)."""

    fields: dict[str, str] = field(default_factory=dict)
    submissions: list[dict[str, Any]] = field(default_factory=list)

    def copy(self) -> SiteLedger:
        return dataclasses.replace(self, fields=dict(self.fields), submissions=[dict(s) for s in self.submissions])

    def step(self, url: str, state: str, action: common_pb2.Action, element_id: str, navigated: bool) -> None:
        """Record ``action`` taken on the page (``url``, ``state``) before it; ``navigated``: it loaded a new
        document. An action whose element is not on the page did nothing and is not recorded (the caller's)."""
        kind = action.WhichOneof("kind")
        node = next((n for n in parse(state) if element_id and n.node_id == element_id), None)
        if node is not None:
            name = node.name or f"#{element_id}"
            if kind == "fill":
                self._set(name, action.fill.text)
            elif kind == "select" and action.select.options:
                self._set(name, action.select.options[0])
            elif kind == "click" and node.role in _TOGGLES:
                self._set(name, "false" if "checked=true" in node.states.split() else "true")
            elif kind == "click" and node.role == "button":
                self.submissions.append({"url": url, "heading": _heading(state), "button": node.name,
                                         "fields": dict(self.fields)})
                del self.submissions[:-MAX_SUBMISSIONS]
        if navigated:
            self.fields.clear()

    def _set(self, name: str, value: str) -> None:
        self.fields.pop(name, None)
        self.fields[name] = value
        while len(self.fields) > MAX_FIELDS:
            self.fields.pop(next(iter(self.fields)))

    def evidence(self) -> dict[str, Any]:
        return {"submissions": self.submissions}


def _heading(state: str) -> str:
    for n in parse(state):
        if n.role == "heading" and "level=1" in n.states and n.name:
            return n.name
    return ""

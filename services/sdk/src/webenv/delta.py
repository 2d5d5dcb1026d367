"""Incremental observations (``ObservationSpec.incremental``): AXTREE and MARKDOWN sent as line edits to the previous
observation the session sent, and rebuilt whole on the client side. One rule for every environment:
`webenv.envservice` encodes (it keeps each session's last observation, :class:`Base`), the sdk's EnvironmentClient
rebuilds (:class:`Rebuilder`), so every adapter built on it (BrowserGym, OpenEnv, TRL, MCP) shows the whole view.

Why lines: an AXTREE line is one node, led by its ``[element_id]``, which the farm keeps stable across steps while the
element lives (``data-webenv-id``); a MARKDOWN line is one block. A step changes few nodes, so the edits are few
lines: on an 8,000-element page a click's observation is ~0.5 kB of edits instead of ~400 kB of tree
(bench/results/observations.md). The diff trims the common head and tail, then matches the middle with difflib
(autojunk on for big middles: a page of repeated lines stays linear); the edits are exact whatever it matches, and an
observation whose edits would not be smaller than the text goes whole.

Whole observations: the session's first (OpenSession, ForkSession), every ``full_every``-th step (0 = 20), any step
whose spec asks for no increments (the way to get the full form on request), and one whose base is gone.
A client that lost its base (a step answer it never received) gets :class:`DeltaBaseLost`, a FAILED_PRECONDITION that
says to step once with ``incremental`` false; EnvironmentClient asks for that whole observation by itself on its
next step.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from dataclasses import dataclass

from webenv import errors
from webenv.v1 import common_pb2

__all__ = ["DEFAULT_FULL_EVERY", "Base", "DeltaBaseLost", "Rebuilder", "apply", "diff", "encode", "full_due"]

#: Steps between whole observations when ``full_every`` is 0.
DEFAULT_FULL_EVERY = 20
#: A middle section (after the common head and tail) at least this long is matched with difflib's autojunk on.
_JUNK_FROM = 2000
#: The text formats sent as edits, by their Observation field.
FIELDS = ("axtree", "markdown")


def _lines(text: str) -> list[str]:
    return text.split("\n") if text else []


def _join(lines: list[str]) -> str:
    return "\n".join(lines)


def diff(base: list[str], new: list[str]) -> list[common_pb2.TextEdit]:
    """The edits (in the base's order, base numbering) that turn ``base`` into ``new``."""
    n, m = len(base), len(new)
    head = 0
    while head < n and head < m and base[head] == new[head]:
        head += 1
    tail = 0
    while tail < n - head and tail < m - head and base[n - 1 - tail] == new[m - 1 - tail]:
        tail += 1
    a, b = base[head:n - tail], new[head:m - tail]
    if not a and not b:
        return []
    if not a or not b:
        return [common_pb2.TextEdit(start=head, deleted=len(a), lines=b)]
    matcher = difflib.SequenceMatcher(None, a, b, autojunk=len(a) + len(b) >= _JUNK_FROM)
    return [common_pb2.TextEdit(start=head + i1, deleted=i2 - i1, lines=b[j1:j2])
            for op, i1, i2, j1, j2 in matcher.get_opcodes() if op != "equal"]


def apply(base: list[str], edits: Iterable[common_pb2.TextEdit]) -> list[str]:
    """``base`` with ``edits`` applied (ValueError when they do not fit it)."""
    out: list[str] = []
    at = 0
    for e in edits:
        if e.start < at or e.deleted < 0 or e.start + e.deleted > len(base):
            raise ValueError(f"edit at line {e.start} (-{e.deleted}) does not fit a base of {len(base)} lines")
        out.extend(base[at:e.start])
        out.extend(e.lines)
        at = e.start + e.deleted
    out.extend(base[at:])
    return out


def full_due(spec: common_pb2.ObservationSpec | None, step_index: int) -> bool:
    """Whether the observation answering step ``step_index`` (-1: the session's first) is whole."""
    if spec is None or not spec.incremental or step_index < 0:
        return True
    every = spec.full_every or DEFAULT_FULL_EVERY
    return (step_index + 1) % every == 0


@dataclass
class Base:
    """The last observation a session sent, as lines (what its client holds)."""

    step: int
    axtree: list[str]
    markdown: list[str]

    @classmethod
    def of(cls, obs: common_pb2.Observation, step: int) -> Base:
        return cls(step, _lines(obs.axtree), _lines(obs.markdown))


def encode(obs: common_pb2.Observation, spec: common_pb2.ObservationSpec | None, step: int,
           base: Base | None, keep: bool = False) -> Base | None:
    """Turn the whole observation ``obs`` (answering ``step``; -1 for the first) into edits against ``base`` when the
    spec asks for increments and no whole one is due; returns the session's new base (the whole text; None when the
    spec asks for no increments, unless ``keep``: a session opened incremental that asked for one whole step)."""
    if spec is None or not spec.incremental:
        return Base.of(obs, step) if keep else None
    new = Base.of(obs, step)
    if base is None or full_due(spec, step):
        return new
    delta = common_pb2.ObservationDelta(base_step=base.step, axtree_lines=len(new.axtree),
                                        markdown_lines=len(new.markdown))
    size = 0
    for name in FIELDS:
        edits = diff(getattr(base, name), getattr(new, name))
        getattr(delta, name).extend(edits)
        size += sum(len(line) + 1 for e in edits for line in e.lines) + 8 * len(edits)
    if size >= len(obs.axtree) + len(obs.markdown):  # a navigation to another page: whole is smaller
        return new
    obs.axtree, obs.markdown = "", ""
    obs.delta.CopyFrom(delta)
    return new


class DeltaBaseLost(errors.FailedPrecondition):
    """An incremental observation whose base this client does not hold (it missed the answer that carried it)."""

    def __init__(self, session_id: str, base_step: int, held: int | None) -> None:
        super().__init__(
            f"session {session_id[:100]}: the observation is edits to step {base_step}'s, and this client holds "
            f"{'none' if held is None else f'step {held}'}'s; step once with ObservationSpec.incremental false for a "
            "whole observation", reason="DELTA_BASE_LOST",
            metadata={"session_id": session_id[:100], "base_step": str(base_step)})


class Rebuilder:
    """The client side: each session's last whole text; fills an incremental observation's AXTREE and MARKDOWN back
    in (its ``delta`` is kept, for an agent that reads the changes)."""

    def __init__(self) -> None:
        self._bases: dict[str, Base] = {}

    def rebuild(self, session_id: str, obs: common_pb2.Observation, step: int) -> None:
        """Make ``obs`` (answering ``step``; -1 for the first) whole and keep it as the session's base."""
        if obs.HasField("delta"):
            d = obs.delta
            base = self._bases.get(session_id)
            if base is None or base.step != d.base_step:
                self._bases.pop(session_id, None)
                raise DeltaBaseLost(session_id, d.base_step, None if base is None else base.step)
            try:
                ax, md = apply(base.axtree, d.axtree), apply(base.markdown, d.markdown)
            except ValueError as exc:
                self._bases.pop(session_id, None)
                raise DeltaBaseLost(session_id, d.base_step, base.step) from exc
            if (len(ax), len(md)) != (d.axtree_lines, d.markdown_lines):
                self._bases.pop(session_id, None)
                raise DeltaBaseLost(session_id, d.base_step, base.step)
            obs.axtree, obs.markdown = _join(ax), _join(md)
            self._bases[session_id] = Base(step, ax, md)
        else:
            self._bases[session_id] = Base.of(obs, step)

    def lost(self, session_id: str) -> bool:
        """Whether the session's base is gone (its next step should ask for a whole observation)."""
        return session_id not in self._bases

    def forget(self, session_id: str) -> None:
        self._bases.pop(session_id, None)

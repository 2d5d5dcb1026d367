"""Compact line-based edits of a page state.

Most actions change a handful of lines of an accessibility tree, so the world model predicts an edit
of the current state instead of the whole next state: shorter to generate, faster to serve, and a
malformed edit is detectable (unlike a malformed full state). An edit is a list of hunks against the
*original* lines; lines between hunks are kept.

Text encoding (what the model emits), one hunk after another in increasing order:

    @<start> <delete_count>      1-based line number in the current state, lines removed there
    +<line>                      a line inserted at that place (zero or more)

`@3 1` + `+x` replaces line 3 with "x"; `@3 2` deletes lines 3-4; `@4 0` + `+y` inserts "y" before the
original line 4 (`@<n+1> 0` appends). The empty edit means "no change". A state is split on "\n" exactly,
so `apply(compute(a, b), a) == b` holds for every pair of strings (trailing newlines included).
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass, field

_HEADER = re.compile(r"^@(\d+) (\d+)$")


class EditError(ValueError):
    """An edit text that is malformed or does not fit the state it is applied to."""


@dataclass(frozen=True)
class Hunk:
    """Replace `delete` original lines starting at 0-based `start` with `insert`."""

    start: int
    delete: int
    insert: tuple[str, ...] = field(default_factory=tuple)


def split_lines(state: str) -> list[str]:
    """Split exactly (inverse of "\\n".join): "" -> [""], "a\\n" -> ["a", ""]."""
    return state.split("\n")


def compute(old: str, new: str) -> list[Hunk]:
    """Minimal-ish hunks turning `old` into `new` (difflib opcodes, no junk heuristics: deterministic)."""
    a, b = split_lines(old), split_lines(new)
    matcher = difflib.SequenceMatcher(a=a, b=b, autojunk=False)
    hunks: list[Hunk] = []
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag == "equal":
            continue
        hunks.append(Hunk(start=i1, delete=i2 - i1, insert=tuple(b[j1:j2])))
    return hunks


def encode(hunks: list[Hunk]) -> str:
    """Edit text for `hunks` (see the module docstring)."""
    out: list[str] = []
    for h in hunks:
        out.append(f"@{h.start + 1} {h.delete}")
        out.extend("+" + line for line in h.insert)
    return "\n".join(out)


def decode(text: str) -> list[Hunk]:
    """Parse edit text; raise EditError naming the first bad line."""
    hunks: list[Hunk] = []
    if text == "":
        return hunks
    cur: tuple[int, int] | None = None
    inserts: list[str] = []
    for n, line in enumerate(text.split("\n"), start=1):
        m = _HEADER.match(line)
        if m:
            if cur is not None:
                hunks.append(Hunk(cur[0], cur[1], tuple(inserts)))
            start = int(m.group(1))
            if start < 1:
                raise EditError(f"edit line {n}: line numbers start at 1, got {start}")
            cur, inserts = (start - 1, int(m.group(2))), []
        elif line.startswith("+") and cur is not None:
            inserts.append(line[1:])
        else:
            raise EditError(f"edit line {n}: expected '@<line> <count>' or '+<text>', got {line[:60]!r}")
    if cur is not None:
        hunks.append(Hunk(cur[0], cur[1], tuple(inserts)))
    return hunks


def apply_hunks(hunks: list[Hunk], state: str) -> str:
    """Apply hunks to `state`; raise EditError when they overlap, go backwards or past the end."""
    lines = split_lines(state)
    out: list[str] = []
    pos = 0
    for h in hunks:
        if h.start < pos:
            raise EditError(f"hunk at line {h.start + 1} overlaps or precedes the previous hunk")
        if h.start + h.delete > len(lines):
            raise EditError(
                f"hunk at line {h.start + 1} deletes {h.delete} lines but the state has {len(lines)} lines"
            )
        out.extend(lines[pos : h.start])
        out.extend(h.insert)
        pos = h.start + h.delete
    out.extend(lines[pos:])
    return "\n".join(out)


def apply(edit: str, state: str) -> str:
    """Apply edit text to `state`."""
    return apply_hunks(decode(edit), state)


def make_edit(old: str, new: str) -> str:
    """Edit text turning `old` into `new`."""
    return encode(compute(old, new))


def apply_lenient(edit: str, state: str) -> str:
    """Apply what can be applied of a model's edit: malformed lines and hunks that overlap or start past the end
    are skipped, a deletion running past the end stops there. Used only after `apply` failed (a repair)."""
    hunks: list[Hunk] = []
    cur: tuple[int, int] | None = None
    inserts: list[str] = []
    for line in edit.split("\n"):
        m = _HEADER.match(line)
        if m:
            if cur is not None:
                hunks.append(Hunk(cur[0], cur[1], tuple(inserts)))
            cur, inserts = (max(int(m.group(1)), 1) - 1, int(m.group(2))), []
        elif line.startswith("+") and cur is not None:
            inserts.append(line[1:])
    if cur is not None:
        hunks.append(Hunk(cur[0], cur[1], tuple(inserts)))
    n = len(split_lines(state))
    kept: list[Hunk] = []
    pos = 0
    for h in hunks:
        if h.start < pos or h.start > n:
            continue
        kept.append(Hunk(h.start, min(h.delete, n - h.start), h.insert))
        pos = h.start + kept[-1].delete
    return apply_hunks(kept, state)

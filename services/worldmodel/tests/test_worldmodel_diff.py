"""The edit encoding round-trips exactly: apply(make_edit(a, b), a) == b for many generated pairs."""

from __future__ import annotations

import random

import pytest
from webenv.worldmodel import diff

_ALPHABET = ["a", "b", "", " ", "@1 2", "+x", "[3] link \"Home\"", "  StaticText \"$5\"", "\t", "é"]


def _random_state(rng: random.Random) -> str:
    return "\n".join(rng.choice(_ALPHABET) for _ in range(rng.randint(0, 12)))


def _mutate(rng: random.Random, state: str) -> str:
    lines = state.split("\n")
    for _ in range(rng.randint(0, 4)):
        op = rng.choice(["ins", "del", "rep"])
        i = rng.randint(0, len(lines))
        if op == "ins":
            lines.insert(i, rng.choice(_ALPHABET))
        elif lines and i < len(lines):
            if op == "del":
                del lines[i]
            else:
                lines[i] = rng.choice(_ALPHABET)
    return "\n".join(lines)


@pytest.mark.parametrize("seed", range(5))
def test_round_trip_generated_pairs(seed: int) -> None:
    rng = random.Random(seed)
    for _ in range(400):
        a = _random_state(rng)
        b = _mutate(rng, a) if rng.random() < 0.7 else _random_state(rng)
        edit = diff.make_edit(a, b)
        assert diff.apply(edit, a) == b
        assert diff.encode(diff.decode(edit)) == edit


def test_edge_cases() -> None:
    for a, b in [("", ""), ("", "x"), ("x", ""), ("a\n", "a"), ("a", "a\n"), ("\n\n", "\n"), ("a\nb", "b\na")]:
        assert diff.apply(diff.make_edit(a, b), a) == b
    assert diff.make_edit("same\ntext", "same\ntext") == ""


def test_small_change_gives_small_edit() -> None:
    a = "\n".join(f"[{i}] link \"L{i}\"" for i in range(40))
    b = a.replace('[7] link "L7"', '[7] link "L7" focused')
    assert diff.make_edit(a, b) == '@8 1\n+[7] link "L7" focused'


@pytest.mark.parametrize(
    ("edit", "message"),
    [("garbage", "expected '@<line> <count>'"), ("+x", "expected"), ("@0 1", "start at 1"), ("@2 1\n@1 1", "overlaps"),
     ("@1 9", "deletes 9 lines")],
)
def test_bad_edits_raise(edit: str, message: str) -> None:
    with pytest.raises(diff.EditError, match=message):
        diff.apply(edit, "one\ntwo")


def test_lenient_apply_repairs_what_it_can() -> None:
    state = "a\nb\nc"
    assert diff.apply_lenient("@2 9\n+x", state) == "a\nx"  # deletion clamped at the end
    assert diff.apply_lenient("@2 1\n+x\ngarbage\n@1 1\n+y\n@9 0\n+z", state) == "a\nx\nc"  # overlap, past end skipped
    assert diff.apply_lenient("", state) == state

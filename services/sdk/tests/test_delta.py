"""webenv.delta: edits rebuild the whole text exactly, whole observations come when due, a lost base is an error."""

from __future__ import annotations

import random

import pytest
from webenv import delta
from webenv.v1 import common_pb2

SPEC = common_pb2.ObservationSpec(incremental=True, full_every=5)


def _tree(rng: random.Random, n: int) -> list[str]:
    return [f"{chr(9) * rng.randrange(4)}[{i}] {rng.choice(['link', 'button', 'StaticText'])} \"{rng.randrange(9)}\""
            for i in range(n)]


def test_edits_rebuild_the_text_after_random_changes() -> None:
    rng = random.Random(7)
    base = _tree(rng, 400)
    for _ in range(200):
        new = list(base)
        for _ in range(rng.randrange(6)):
            at = rng.randrange(len(new) + 1)
            op = rng.randrange(3)
            if op == 0:
                new[at:at] = _tree(rng, rng.randrange(1, 30))
            elif op == 1:
                del new[at:at + rng.randrange(1, 40)]
            elif new:
                new[min(at, len(new) - 1)] += " focused"
        edits = delta.diff(base, new)
        assert delta.apply(base, edits) == new
        base = new or _tree(rng, 10)


def test_repeated_lines_stay_fast_and_exact() -> None:
    base = ['StaticText "|"'] * 9000
    new = list(base)
    new[4000:4000] = ["[1] button \"x\""] * 3
    new[100] = "[2] link \"y\""
    assert delta.apply(base, delta.diff(base, new)) == new


def _obs(ax: list[str]) -> common_pb2.Observation:
    return common_pb2.Observation(axtree="\n".join(ax), markdown="# " + ax[0])


def test_server_encodes_and_client_rebuilds_with_a_whole_one_every_n() -> None:
    rng = random.Random(3)
    tree = _tree(rng, 300)
    first = _obs(tree)
    base = delta.encode(first, SPEC, -1, None)
    client = delta.Rebuilder()
    client.rebuild("s", first, -1)
    for step in range(12):
        tree = list(tree)
        tree[rng.randrange(len(tree))] += " checked=true"
        want = _obs(tree)
        sent = common_pb2.Observation()
        sent.CopyFrom(want)
        base = delta.encode(sent, SPEC, step, base)
        assert sent.HasField("delta") == (step % 5 != 4), step  # every 5th step whole
        if sent.HasField("delta"):
            assert not sent.axtree and sent.delta.base_step == step - 1
            assert sent.ByteSize() * 20 < want.ByteSize()
        client.rebuild("s", sent, step)
        assert (sent.axtree, sent.markdown) == (want.axtree, want.markdown)


def test_no_increments_without_the_flag_and_a_lost_base_is_failed_precondition() -> None:
    obs = _obs(["[1] a", "[2] b"])
    assert delta.encode(obs, common_pb2.ObservationSpec(), 0, None) is None
    base = delta.Base(3, ["[1] a"] * 50, [])
    sent = _obs(["[1] a"] * 49 + ["[1] b"])
    delta.encode(sent, SPEC, 5, base)
    assert sent.delta.base_step == 3
    with pytest.raises(delta.DeltaBaseLost) as err:
        delta.Rebuilder().rebuild("s", sent, 5)
    assert err.value.reason == "DELTA_BASE_LOST" and "incremental false" in str(err.value)
    assert err.value.code.name == "FAILED_PRECONDITION"

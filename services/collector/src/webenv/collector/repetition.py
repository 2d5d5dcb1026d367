"""WebGym's repetition filter: a step whose next observation equals the one it was taken from made no progress.

Such steps are flagged (``repeated_state``) rather than dropped, so exports can filter them (``drop_repeated``)
while the raw trajectory stays intact for judging and replay.
"""

from __future__ import annotations

import hashlib

from webenv.v1 import common_pb2


def fingerprint(obs: common_pb2.Observation) -> str:
    """A digest of what the agent sees: URL plus the text formats present (screenshots excluded: pixels jitter)."""
    h = hashlib.blake2b(digest_size=16)
    for part in (obs.url, obs.axtree, obs.html, obs.markdown):
        h.update(part.encode())
        h.update(b"\x00")
    for el in obs.elements:
        h.update(f"{el.element_id}|{el.role}|{el.name}|{el.value}|{el.checked}".encode())
    return h.hexdigest()


#: SQL for the steps ``drop_repeated`` keeps: not flagged, or an answer (stores written before answers were exempt).
KEPT_SQL = "(repeated_state = 0 OR JSONHas(action_json, 'answer'))"


def is_repeated(before: common_pb2.Observation, after: common_pb2.Observation,
                action: common_pb2.Action | None = None) -> bool:
    """Whether the step made no progress: the observation after it equals the one before it. An answer is never a
    repeated step: it leaves the page as it was by nature, and it is the step that ends the episode (the one a
    policy must learn to take). Flagged, every answer step was lost to ``drop_repeated`` exports and reads (a
    `webenv export --drop-repeated` dataset held no answer at all); the trainer was spared only because it reads
    unfiltered and applies the rule itself (bench/results/learning/notes.md)."""
    if action is not None and action.WhichOneof("kind") == "answer":
        return False
    return fingerprint(before) == fingerprint(after)

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


def is_repeated(before: common_pb2.Observation, after: common_pb2.Observation) -> bool:
    """Whether the observation after a step equals the one before it."""
    return fingerprint(before) == fingerprint(after)

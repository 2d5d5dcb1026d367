"""Which split a website belongs to: the platform's one rule, so train, validation and test websites never mix.

The split is a function of the host name alone (a stable hash bucket 0-99), so a site is wholly in one split
whatever the seed, whichever service asks (the sites service's catalog, task files loaded by a user's `webenv
run --task-file`, the trainer's guard), and no task can leak across the split. Buckets below
``TEST_FRACTION_PERCENT`` are test; the next ``VALIDATION_FRACTION_PERCENT`` are validation, taken from what
were train hosts, so every test site stays a test site and test figures stay comparable across the change.
Training reads only train sites; every choice (epochs, temperature, the checkpoint reported) is made on
validation sites; test sites are reported and never tuned on. The hand-made websites are the exception to the
hash: their split is fixed (``RESERVED``), since they exist only to be held out.
"""

from __future__ import annotations

import hashlib

from webenv.v1 import common_pb2

#: The synthetic web's domain (`shop-0003.web.test`).
SYNTHETIC_DOMAIN = "web.test"
#: Share of hosts in the test split, in percent.
TEST_FRACTION_PERCENT = 20
#: Share of hosts in the validation split, in percent (taken from the train hosts).
VALIDATION_FRACTION_PERCENT = 10
#: The split names the store, the CLI and reports use.
SPLIT_NAMES = {common_pb2.SPLIT_TRAIN: "train", common_pb2.SPLIT_VALIDATION: "validation",
               common_pb2.SPLIT_TEST: "test"}
#: Splits never trained on.
HELD_OUT = frozenset({common_pb2.SPLIT_VALIDATION, common_pb2.SPLIT_TEST})
#: Websites whose split is fixed, not hashed: the hand-made websites (webenv.sites data/handmade/). The six of the
#: transfer suite are test (reported, never tuned on); the four of the development set are validation (where changes
#: to fact reading are designed). By hash, 7 of these 10 hosts fell in train, where a run over the train split would
#: sample them and the trainer's guard would let their episodes through.
RESERVED = {**dict.fromkeys(("quillpine.web.test", "elmwooddental.web.test", "spokeshed.web.test",
                             "lanternhall.web.test", "tallyforge.web.test", "ridgewalkers.web.test"),
                            common_pb2.SPLIT_TEST),
            **dict.fromkeys(("hearthloaf.web.test", "blockhaus.web.test", "parlance.web.test", "northmere.web.test"),
                            common_pb2.SPLIT_VALIDATION)}


def split_of(host: str) -> int:
    """SPLIT_TRAIN, SPLIT_VALIDATION or SPLIT_TEST for a host: deterministic, seed-independent, exactly one."""
    if host in RESERVED:
        return RESERVED[host]
    bucket = int.from_bytes(hashlib.sha256(f"split|{host}".encode()).digest()[:8], "big") % 100
    if bucket < TEST_FRACTION_PERCENT:
        return common_pb2.SPLIT_TEST
    if bucket < TEST_FRACTION_PERCENT + VALIDATION_FRACTION_PERCENT:
        return common_pb2.SPLIT_VALIDATION
    return common_pb2.SPLIT_TRAIN

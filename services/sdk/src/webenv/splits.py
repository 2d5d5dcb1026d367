"""Which split a website belongs to: the platform's one rule, so train and test websites never mix.

The split is a function of the host name alone (a stable hash), so a site is wholly train or wholly test whatever
the seed, whichever service asks (the sites service's catalog, task files loaded by a user's `webenv run
--task-file`, the trainer's guard), and no task can leak across the split.
"""

from __future__ import annotations

import hashlib

from webenv.v1 import common_pb2

#: The synthetic web's domain (`shop-0003.web.test`).
SYNTHETIC_DOMAIN = "web.test"
#: Share of hosts in the test split, in percent.
TEST_FRACTION_PERCENT = 20


def split_of(host: str) -> int:
    """SPLIT_TRAIN or SPLIT_TEST for a host: deterministic, seed-independent, never both."""
    bucket = int.from_bytes(hashlib.sha256(f"split|{host}".encode()).digest()[:8], "big") % 100
    return common_pb2.SPLIT_TEST if bucket < TEST_FRACTION_PERCENT else common_pb2.SPLIT_TRAIN

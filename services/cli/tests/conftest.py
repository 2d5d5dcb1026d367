"""The `webenv` command's tests drive a real collector over gRPC: the collector's own test peers (a tiny
deterministic web, policy and judge served over real channels, services/collector/tests/conftest.py) and its
collector fixtures, loaded from that file rather than copied."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

_PEERS = Path(__file__).resolve().parents[2] / "collector" / "tests" / "conftest.py"
_spec = importlib.util.spec_from_file_location("webenv_collector_test_peers", _PEERS)
assert _spec and _spec.loader
peers = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = peers  # dataclasses look their module up while the class is built
_spec.loader.exec_module(peers)

# the fixtures the tests here use, registered for this folder
chdb_url, collector, make_collector, stub, watch, world = (
    peers.chdb_url, peers.collector, peers.make_collector, peers.stub, peers.watch, peers.world)

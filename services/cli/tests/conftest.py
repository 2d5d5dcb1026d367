"""The `webenv` command's tests drive a real collector over gRPC: the collector's own test peers (a tiny
deterministic web, policy and judge served over real channels, services/collector/tests/conftest.py) and its
collector fixtures, loaded from that file rather than copied."""

from __future__ import annotations

from pathlib import Path

from webenv.testing import load_test_module

peers = load_test_module(Path(__file__).resolve().parents[2] / "collector" / "tests" / "conftest.py",
                         "webenv_collector_test_peers")

# the fixtures the tests here use, registered for this folder
chdb_url, collector, make_collector, stub, watch, world = (
    peers.chdb_url, peers.collector, peers.make_collector, peers.stub, peers.watch, peers.world)

"""The collector under failing peers: the collector in this process (its metrics read from the registry) with the
collector suite's test peers and fixtures (services/collector/tests/conftest.py), loaded from that file rather
than copied, and the real policy and judge as processes beside it (`webenv.cli.stack.Stack`, the client's
launcher, which is why this suite lives at the root and not in the collector's folder)."""

from __future__ import annotations

from pathlib import Path

from webenv.testing import load_test_module

peers = load_test_module(Path(__file__).resolve().parents[2] / "services" / "collector" / "tests" / "conftest.py",
                         "webenv_collector_test_peers")

# the fixtures the tests here use, registered for this folder
world, make_collector, chdb_url = peers.world, peers.make_collector, peers.chdb_url

"""`webenv tasks --task-file` on a published benchmark's own file (docs/benchmarks/examples/): its tasks listed as
source `benchmark`; a placeholder without a base URL is refused before anything runs, exit code 2."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

EXAMPLES = Path(__file__).resolve().parents[3] / "docs" / "benchmarks" / "examples"


def test_webenv_tasks_lists_a_benchmark_file(monkeypatch: pytest.MonkeyPatch) -> None:
    from webenv.cli.commands import common
    from webenv.cli.main import app

    monkeypatch.setenv("WEBENV_SITE_HEARTHLOAF", "http://hearthloaf.web.test")
    common.console.width = 200
    r = CliRunner().invoke(app, ["tasks", "--task-file", str(EXAMPLES / "webarena_handmade.json")])
    assert r.exit_code == 0 and "4 tasks match" in r.output and "webarena/3" in r.output and "benchmark" in r.output, r.output
    monkeypatch.delenv("WEBENV_SITE_HEARTHLOAF")
    r = CliRunner().invoke(app, ["tasks", "--task-file", str(EXAMPLES / "webarena_handmade.json")])
    assert r.exit_code == 2 and "placeholder __HEARTHLOAF__ has no base URL" in r.output, r.output

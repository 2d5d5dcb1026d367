"""`webenv tasks --task-file` on a published benchmark's own file (docs/benchmarks/examples/): its tasks listed as
source `benchmark`; a placeholder without a base URL is refused before anything runs, exit code 2."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner
from webenv.cli.commands.rescore import mind2web_result
from webenv.taskfiles import load
from webenv.v1 import collector_pb2
from webenv.v1 import common_pb2 as pb

EXAMPLES = Path(__file__).resolve().parents[3] / "docs" / "benchmarks" / "examples"
UPSTREAM = Path(__file__).resolve().parents[2] / "sdk" / "tests" / "benchmarks"  # verbatim upstream files


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


def test_our_online_mind2web_result_json_has_the_v2_schema_keys() -> None:
    """``webenv rescore --out``'s result.json against the authors' v2 submission schema (an upstream example): the
    same top-level keys and step keys; browser-use's published results use an older shape (docs/benchmarks/
    online-mind2web.md lists the differences)."""
    task = load(UPSTREAM / "Online_Mind2Web.jsonl")[0]
    ep = collector_pb2.StoredEpisode(task=task)
    ep.trajectory.final_answer = "23 kg"
    ep.trajectory.steps.add(step_index=0, observation=pb.Observation(url=task.start_url), action_text="click('12')",
                            raw_output="Open the baggage page.")
    ours = mind2web_result(ep)
    upstream = json.loads((UPSTREAM / "online_mind2web_result_v2.json").read_text())
    assert list(ours) == list(upstream)
    assert set(ours["action_history"][0]) == set(upstream["action_history"][0])
    assert (ours["schema_version"], ours["task_id"], ours["reference_length"]) == (
        "online-mind2web-v2", "005be9dd91c95669d6ddde9ae667125c", 4)
    assert ours["agent_final_answer"] == "23 kg" and ours["action_history"][0]["screenshot"] is None
    browser_use = json.loads((UPSTREAM / "online_mind2web_result_browser_use.json").read_text())
    assert set(browser_use) == {"task_id", "task", "final_result_response", "judge"}

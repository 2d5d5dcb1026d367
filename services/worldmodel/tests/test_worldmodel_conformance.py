"""`python -m webenv.worldmodel conformance`: its inputs checked before anything is replayed, recorded episodes saved
and read back as StoredEpisode JSONL. (Replays over real gRPC: tests/test_worldmodel_farm_start.py against a real
farm, tests/test_worldmodel_rollouts.py through a collector's ReadEpisodes.)"""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner
from webenv.actions import parse_action
from webenv.v1 import collector_pb2, common_pb2
from webenv.worldmodel.__main__ import app
from webenv.worldmodel.conformance import read_jsonl, write_jsonl


def test_episodes_round_trip_as_jsonl(tmp_path: Path) -> None:
    ep = collector_pb2.StoredEpisode(episode_id="e1", horizon=3, truncated=True, step_count=1)
    ep.task.task_id = "synthetic/x"
    ep.trajectory.steps.append(common_pb2.StepRecord(step_index=0, action=parse_action("click(4)"), done=False,
                                                     target_element_id="4", last_action_error=""))
    write_jsonl([ep, ep], str(tmp_path / "e.jsonl"))
    assert read_jsonl(str(tmp_path / "e.jsonl")) == [ep, ep]


def test_bad_inputs_name_the_option(tmp_path: Path) -> None:
    runner = CliRunner(env={"COLUMNS": "300"})
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"episodeId": "e1"}\n{"noSuchField": \n')
    cases = [([], "--episodes", "exactly one of"),
             (["--episodes", str(bad), "--collector", "127.0.0.1:1"], "--episodes", "exactly one of"),
             (["--collector", "127.0.0.1:1"], "--run", "needs at least one --run"),
             (["--farm", "127.0.0.1:1"], "--sites", "needs --sites"),
             (["--farm", "127.0.0.1:1", "--sites", "127.0.0.1:1", "--record", "0"], "--record", "at least 1"),
             (["--episodes", str(bad), "--limit", "-1"], "--limit", "0 (all) or more"),
             (["--episodes", str(bad)], "--episodes", "bad.jsonl:2: not a StoredEpisode")]
    for args, option, needle in cases:
        res = runner.invoke(app, ["conformance", "--worldmodel", "127.0.0.1:1", *args])
        assert res.exit_code == 2 and option in res.output and needle in res.output, (args, res.output)

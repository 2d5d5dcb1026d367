"""Traces exported from the store replay against an environment and reproduce their URLs."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner
from webenv.cli.main import app
from webenv.cli.replay import axtree_diff, read_trace, replay
from webenv.v1 import collector_pb2


async def test_trace_replays_with_same_urls(stub, watch, world, tmp_path):
    run = (await stub.StartRun(collector_pb2.StartRunRequest(
        spec=collector_pb2.RunSpec(policy="oracle", seed=1, task_limit=3)))).run
    await watch(stub, run.run_id)
    exp = await stub.ExportRun(collector_pb2.ExportRunRequest(
        run_id=run.run_id, format=collector_pb2.EXPORT_FORMAT_TRACES, destination=str(tmp_path)))
    assert exp.episodes == 3 and len(exp.paths) == 3
    header, steps = read_trace(exp.paths[0])
    assert header["episode_id"] == Path(exp.paths[0]).stem and header["task_pb"]
    assert [s["step_index"] for s in steps] == list(range(len(steps)))
    report = await replay(exp.paths[0], world.addr["env"], speed=0)
    assert report.reproduced and len(report.steps) == len(steps)
    assert all(s.axtree_changed_lines == 0 for s in report.steps)


def tamper(path: Path) -> None:
    """Change the recording: the first step's result now names another page, and so does the tree after it."""
    lines = path.read_text().splitlines()
    lines[1] = lines[1].replace("/page/1", "/page/9")
    lines[2] = lines[2].replace("page 1", "page 9")
    path.write_text("\n".join(lines) + "\n")


async def oracle_trace(stub, watch, dest: Path) -> Path:
    """The trace of one oracle episode, exported to ``dest``."""
    run = (await stub.StartRun(collector_pb2.StartRunRequest(
        spec=collector_pb2.RunSpec(policy="oracle", seed=1, task_limit=1)))).run
    await watch(stub, run.run_id)
    exp = await stub.ExportRun(collector_pb2.ExportRunRequest(
        run_id=run.run_id, format=collector_pb2.EXPORT_FORMAT_TRACES, destination=str(dest)))
    return Path(exp.paths[0])


async def test_replay_reports_divergence(stub, watch, world, tmp_path):
    path = await oracle_trace(stub, watch, tmp_path)
    tamper(path)
    report = await replay(path, world.addr["env"])
    assert not report.reproduced
    assert not report.steps[0].url_matches and report.steps[0].expected_url.endswith("/page/9")
    assert report.steps[0].axtree_changed_lines > 0


def edit_first_action(path: Path, text: str) -> dict:
    """Set the first step's action_text in a trace file; returns the step as it was."""
    lines = path.read_text().splitlines()
    first = json.loads(lines[1])
    lines[1] = json.dumps({**first, "action_text": text})
    path.write_text("\n".join(lines) + "\n")
    return first


async def test_replay_honours_an_edited_action(stub, watch, world, tmp_path):
    """Editing a step's action_text changes what replays; a bad edit is named by line and nothing runs."""
    path = await oracle_trace(stub, watch, tmp_path)
    first = edit_first_action(path, "noop()")  # the edit: stay on the page instead of clicking next
    assert first["action_text"] == 'click("#next")' and first["url_after"].endswith("/page/1")
    opened = world.env.opened
    report = await replay(path, world.addr["env"])
    assert report.steps[0].action_text == "noop()"
    assert report.steps[0].actual_url.endswith("/page/0") and not report.steps[0].url_matches
    edit_first_action(path, "click(#next")
    with pytest.raises(ValueError, match=rf"{path}:2: action_text: "):
        await replay(path, world.addr["env"])
    assert world.env.opened == opened + 1  # the bad edit opened no session
    r = await asyncio.to_thread(CliRunner().invoke, app, ["replay", str(path), "--env", world.addr["env"]])
    assert r.exit_code == 2 and "action_text" in r.output and "Traceback" not in r.output


def test_axtree_diff_counts_changed_lines():
    assert axtree_diff("a\nb\nc", "a\nb\nc") == 0
    assert axtree_diff("a\nb\nc", "a\nX\nc") == 2

"""`webenv rescore RUN` re-grades a stored run without a browser and writes the benchmarks' own result files: a run of
benchmark task files (docs/benchmarks/examples/) through a real collector (its test peers' page-walk environment and
policy, services/collector/tests/conftest.py) graded by the real judge (a subprocess), then re-scored by that judge
gives the same verdicts, fact for fact (the environment's network trace kept with each episode), and WebArena-Verified eval_result.json, Online-Mind2Web result.json and
WebVoyager interact_messages.json files their authors' tools read."""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from typer.testing import CliRunner
from webenv.cli.commands import common
from webenv.cli.main import app
from webenv.client import make_channel
from webenv.testing import free_port, load_test_module
from webenv.v1 import collector_pb2, collector_pb2_grpc

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "docs" / "benchmarks" / "examples"
peers = load_test_module(ROOT / "services" / "collector" / "tests" / "conftest.py", "webenv_collector_test_peers")
_e2e = load_test_module(Path(__file__).with_name("test_sites_farm_e2e.py"), "_sites_farm_e2e_for_benchmarks")
chdb_url, make_collector, world = peers.chdb_url, peers.make_collector, peers.world


@pytest.fixture(scope="module")
async def judge_addr(tmp_path_factory) -> AsyncIterator[str]:
    """The real judge as a subprocess, without an LLM backend."""
    port = free_port()
    env = {"WEBENV_GRPC_PORT": str(port), "WEBENV_METRICS_PORT": "0", "WEBENV_HOST": "127.0.0.1",
           "WEBENV_JUDGE_LLM_BACKEND": "none", "WEBENV_LOG_LEVEL": "WARNING"}
    async for _ in _e2e._serve("webenv.judge", env, port, tmp_path_factory.mktemp("judge") / "judge.log"):
        yield f"127.0.0.1:{port}"


def invoke(*args: str):
    common.console.width = 200
    return CliRunner().invoke(app, list(args))


async def test_rescore_gives_the_same_verdicts_and_writes_the_authors_formats(make_collector, judge_addr, tmp_path,
                                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WEBENV_SITE_HEARTHLOAF", "http://hearthloaf.web.test")
    collector = await make_collector(judge_addr=judge_addr)
    files = [str(EXAMPLES / f) for f in ("webarena_verified_handmade.json", "online_mind2web_handmade.json",
                                         "webvoyager_handmade.jsonl", "webarena_handmade.json")]
    r = await asyncio.to_thread(invoke, "run", "--policy", "random", "--horizon", "3", "--collector", collector.address,
                                *(x for f in files for x in ("--task-file", f)))
    assert r.exit_code == 0, r.output
    run_id = re.search(r"started (run-[0-9a-f]+)", r.output).group(1)  # type: ignore[union-attr]
    out = tmp_path / "out"
    r = await asyncio.to_thread(invoke, "rescore", run_id, "--out", str(out), "--collector", collector.address,
                                "--judge", judge_addr)
    assert r.exit_code == 0, r.output
    report = json.loads((out / "rescore.json").read_text())
    assert report["episodes"] == report["regraded"] == report["same"] == 9, report
    assert report["facts_changed"] == 0 and report["now_passed"] == report["now_failed"] == 0
    assert {e["judge_now"] for e in report["episodes_detail"]} == {e["judge_before"] for e in report["episodes_detail"]}
    # the environment's network trace is kept with each episode and read back with it
    async with make_channel(collector.address) as ch:
        stored = [r.episode async for r in collector_pb2_grpc.CollectorServiceStub(ch).ReadEpisodes(
            collector_pb2.ReadEpisodesRequest(run_ids=[run_id]), timeout=60)]
    assert len(stored) == 9 and all(e.trajectory.network_events for e in stored)
    assert all(e.trajectory.network_events[0].url == e.trajectory.steps[0].observation.url for e in stored)
    # WebArena-Verified's eval_result.json, as its examples/agent_logs write it
    result = json.loads((out / "webarena-verified" / "2" / "eval_result.json").read_text())
    assert result["task_id"] == 2 and result["status"] == "failure" and result["task_revision"] == 1
    assert [e["evaluator_name"] for e in result["evaluators_results"]] == ["AgentResponseEvaluator", "NetworkEventEvaluator"]
    assert result["evaluators_results"][1]["expected"] == {"url": "http://hearthloaf.web.test/faq.html"}
    assert (out / "webarena-verified" / "1" / "agent_response.json").exists()
    m2w = json.loads((out / "online-mind2web" / "hearthloaf-faq" / "result.json").read_text())
    assert m2w["schema_version"] == "online-mind2web-v2" and m2w["task_id"] == "hearthloaf-faq"
    assert m2w["reference_length"] == 2 and m2w["action_history"] and m2w["action_history"][0]["url"]
    messages = json.loads((out / "webvoyager" / "taskHearth___Loaf--0" / "interact_messages.json").read_text())
    assert messages[0]["role"] == "user" and "gluten-free" in messages[0]["content"]
    assert "result files in the benchmarks' formats" in r.output and "judge webenv-judge/" in r.output
    r = await asyncio.to_thread(invoke, "rescore", "run-none", "--collector", collector.address, "--judge", judge_addr)
    assert r.exit_code == 1 and "run-none" in r.output, r.output

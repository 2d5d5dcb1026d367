"""The `webenv` command against a collector over gRPC, and the collector's own metrics on /metrics."""

from __future__ import annotations

import asyncio

from typer.testing import CliRunner
from webenv.collector import cli
from webenv.collector.cli import app
from webenv.testing import scrape
from webenv.v1 import collector_pb2


def invoke(*args: str):
    cli.console.width = 200  # wide enough that tables are not truncated
    return CliRunner().invoke(app, list(args))


async def test_cli_run_runs_export_tasks(collector, world, tmp_path):
    addr = collector.address
    r = await asyncio.to_thread(invoke, "run", "--policy", "oracle", "--difficulty", "easy", "--collector", addr,
                                "--name", "cli-run")
    assert r.exit_code == 0, r.output
    assert "started run-" in r.output and "succeeded" in r.output
    r = await asyncio.to_thread(invoke, "runs", "--collector", addr)
    assert r.exit_code == 0 and "cli-run" in r.output
    r = await asyncio.to_thread(invoke, "export", "--format", "transitions", "--dest", str(tmp_path / "t"),
                                "--collector", addr)
    assert r.exit_code == 0 and "transitions.jsonl" in r.output
    r = await asyncio.to_thread(invoke, "tasks", "--difficulty", "hard", "--sites", world.addr["sites"])
    assert r.exit_code == 0 and "6 tasks match" in r.output
    r = await asyncio.to_thread(invoke, "run", "--repeats", "-1", "--collector", addr)
    assert r.exit_code == 1 and "INVALID_ARGUMENT" in r.output and "spec.repeats" in r.output
    r = await asyncio.to_thread(invoke, "run", "--mode", "sideways", "--collector", addr)
    assert r.exit_code == 2  # a bad option value is refused before any call


async def test_metrics_cover_phases_and_outcomes(stub, watch, collector):
    run = (await stub.StartRun(collector_pb2.StartRunRequest(spec=collector_pb2.RunSpec(policy="oracle", task_limit=3)))).run
    await watch(stub, run.run_id)
    text = await asyncio.to_thread(scrape, collector.server.metrics_port)
    for name in (
        'webenv_collector_episodes_finished_total{outcome="passed"}',
        'webenv_collector_step_phase_seconds_count{phase="policy"}',
        'webenv_collector_step_phase_seconds_count{phase="environment"}',
        'webenv_collector_step_phase_seconds_count{phase="judge"}',
        'webenv_collector_step_phase_seconds_count{phase="store"}',
        "webenv_collector_store_batch_rows_count",
        "webenv_collector_spool_rows",
        "webenv_collector_steps_total",
        "grpc_server_handled_total",
    ):
        assert name in text, name

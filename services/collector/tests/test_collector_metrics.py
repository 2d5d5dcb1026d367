"""The collector's own metrics on /metrics: every phase of a step and every outcome of an episode is counted."""

from __future__ import annotations

import asyncio

from webenv.testing import scrape
from webenv.v1 import collector_pb2


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

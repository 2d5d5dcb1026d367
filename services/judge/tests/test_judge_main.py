"""`python -m webenv.judge` starts a serving judge; bad configuration exits 2 naming the variable."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from collections.abc import Callable

from grpc_health.v1 import health_pb2, health_pb2_grpc
from webenv.client import make_channel
from webenv.judge.examples import shop_episode, task_for
from webenv.testing import wait_for_port
from webenv.v1 import judge_pb2, judge_pb2_grpc


async def test_module_serves_health_and_evaluate(free_port: Callable[[], int], scrape: Callable[..., str]) -> None:
    port, mport = free_port(), free_port()
    env = {**os.environ, "WEBENV_GRPC_PORT": str(port), "WEBENV_METRICS_PORT": str(mport),
           "WEBENV_HOST": "127.0.0.1", "WEBENV_JUDGE_LLM_BACKEND": "none"}
    proc = await asyncio.create_subprocess_exec(sys.executable, "-m", "webenv.judge", env=env,
                                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        await asyncio.to_thread(wait_for_port, port, timeout=60)
        channel = make_channel(f"127.0.0.1:{port}", timeout=20)
        health = health_pb2_grpc.HealthStub(channel)
        for _ in range(100):
            resp = await health.Check(health_pb2.HealthCheckRequest(service="webenv.v1.JudgeService"))
            if resp.status == health_pb2.HealthCheckResponse.SERVING:
                break
        assert resp.status == health_pb2.HealthCheckResponse.SERVING
        ep = shop_episode(steps=3, seed=1)
        out = await judge_pb2_grpc.JudgeServiceStub(channel).Evaluate(
            judge_pb2.EvaluateRequest(task=task_for(ep), trajectory=ep.trajectory))
        assert out.verdict.passed
        assert "webenv_judge_evaluations_total" in scrape(mport)
        await channel.close()
    finally:
        proc.terminate()
        assert await asyncio.wait_for(proc.wait(), 30) == 0


def test_bad_configuration_exits_2() -> None:
    env = {**os.environ, "WEBENV_JUDGE_LLM_BACKEND": "transformers", "WEBENV_JUDGE_MODEL_PATH": ""}
    proc = subprocess.run([sys.executable, "-m", "webenv.judge"], env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert "WEBENV_JUDGE_MODEL_PATH" in proc.stderr
    env = {**os.environ, "WEBENV_JUDGE_LLM_BACKEND": "gpt"}
    proc = subprocess.run([sys.executable, "-m", "webenv.judge"], env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "WEBENV_JUDGE_LLM_BACKEND" in proc.stderr

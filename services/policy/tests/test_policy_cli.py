"""The console entry: build-tiny-model, a served model end to end, fail-fast settings, SIGTERM."""

from __future__ import annotations

import asyncio
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc
from webenv.client import make_channel
from webenv.policy.synthetic import random_observation, request
from webenv.testing import free_port
from webenv.v1 import policy_pb2_grpc


def clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("WEBENV_")}
    env.update(WEBENV_HOST="127.0.0.1", WEBENV_LOG_JSON="false", **extra)
    return env


def test_bad_configuration_exits_2_naming_the_variable(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "webenv.policy"], capture_output=True, text=True, timeout=60,
                          env=clean_env(WEBENV_POLICY_BACKEND="vllm"), cwd=tmp_path)
    assert proc.returncode == 2
    assert "WEBENV_POLICY_MODEL_PATH" in proc.stderr
    proc = subprocess.run([sys.executable, "-m", "webenv.policy"], capture_output=True, text=True, timeout=60,
                          env=clean_env(WEBENV_POLICY_MAX_BATCH="zero"), cwd=tmp_path)
    assert proc.returncode == 2 and "WEBENV_POLICY_MAX_BATCH" in proc.stderr


def start(env: dict[str, str], log: Path) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "webenv.policy"], env=env, stdout=log.open("w"),
                            stderr=subprocess.STDOUT)


def build_with_cli(model: Path) -> None:
    built = subprocess.run([sys.executable, "-m", "webenv.policy", "build-tiny-model", "--out", str(model)],
                           capture_output=True, text=True, timeout=300)
    assert built.returncode == 0, built.stderr[-2000:]


async def test_build_tiny_model_then_serve_and_sigterm(tmp_path):
    model = tmp_path / "tiny"
    build_with_cli(model)
    assert (model / "config.json").is_file() and (model / "tokenizer.json").is_file()
    port = free_port()
    proc = start(clean_env(WEBENV_GRPC_PORT=str(port), WEBENV_METRICS_PORT="0", WEBENV_POLICY_MODEL_PATH=str(model),
                           WEBENV_POLICY_MAX_NEW_TOKENS="8"), tmp_path / "policy.log")
    channel = make_channel(f"127.0.0.1:{port}", timeout=10)
    try:
        health = health_pb2_grpc.HealthStub(channel)
        deadline = time.monotonic() + 120
        status = None
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                status = (await health.Check(health_pb2.HealthCheckRequest())).status
            except grpc.aio.AioRpcError:
                status = None
            if status == health_pb2.HealthCheckResponse.SERVING:
                break
            await asyncio.sleep(0.3)
        assert status == health_pb2.HealthCheckResponse.SERVING
        resp = await policy_pb2_grpc.PolicyServiceStub(channel).Act(
            request(random_observation(random.Random(1), n=5), policy="llm"))
        assert resp.model == "tiny" and resp.completion_tokens > 0 and resp.action_text
    finally:
        await channel.close()
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, (tmp_path / "policy.log").read_text()[-2000:]

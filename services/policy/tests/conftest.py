"""Fixtures: a real policy server on free ports (in-process), real channels, a tiny model built locally."""

from __future__ import annotations

import contextlib
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from webenv.agent import checkpoints
from webenv.client import make_channel
from webenv.policy.app import PolicyApp, serving_app
from webenv.policy.config import Settings
from webenv.runtime import Server
from webenv.v1 import policy_pb2_grpc, trainer_pb2


@contextlib.asynccontextmanager
async def serve(**overrides) -> AsyncIterator[tuple[Server, PolicyApp]]:
    """Start the service as `python -m webenv.policy` would, on free ports, and stop it afterwards."""
    settings = Settings(grpc_port=0, metrics_port=0, host="127.0.0.1", log_json=False, grace_seconds=1, **overrides)
    async with serving_app(settings) as served:
        yield served


@contextlib.asynccontextmanager
async def stub_for(server: Server) -> AsyncIterator[policy_pb2_grpc.PolicyServiceStub]:
    channel = make_channel(f"127.0.0.1:{server.port}")
    try:
        yield policy_pb2_grpc.PolicyServiceStub(channel)
    finally:
        await channel.close()


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory) -> Path:
    """A tiny Llama + tokenizer built here (random weights: it babbles, which exercises parse failures)."""
    from webenv.llm.tinymodel import build_tiny_model
    from webenv.policy.synthetic import corpus

    return build_tiny_model(tmp_path_factory.mktemp("tiny-model"), corpus())


@pytest.fixture(scope="session")
def tiny_vlm(tmp_path_factory) -> Path:
    """A tiny Qwen2-VL-architecture VLM (random weights, a tokenizer trained here on memory-prompt text, a Qwen2-VL
    image processor capped at 16 image tokens a screenshot), built the way tiny_model is."""
    from webenv.agent.prompt import SYSTEM_PROMPT
    from webenv.llm.tinymodel import DEFAULT_TEXTS, build_tiny_vlm

    answer = "Memory: the button\nProgress: looked\nIntention: press it\nAction: click_at(120, 48)"
    return build_tiny_vlm(tmp_path_factory.mktemp("tiny-vlm"), [*DEFAULT_TEXTS, SYSTEM_PROMPT, answer], vocab_size=700)


@pytest.fixture
def screenshot():
    """`screenshot(i)`: the tiny VLM tests' page (webenv.llm.tinymodel.tiny_screenshot)."""
    from webenv.llm.tinymodel import tiny_screenshot

    return tiny_screenshot


@pytest.fixture
def serve_policy():
    """`async with serve_policy(**settings) as (server, app)`: a policy server on free ports."""
    return serve


@pytest.fixture
def policy_stub():
    """`async with policy_stub(server) as stub`: a PolicyService stub over a real channel."""
    return stub_for


def publish_lora_checkpoint(root: Path, base: Path, name: str, version: int, seed: int,
                            target=("q_proj", "v_proj")) -> Path:
    """A LoRA adapter (r=4, A and B random, so it changes the model) over ``base``, published in ``root`` as the
    trainer publishes a causal-LM checkpoint (webenv.agent.checkpoints.publish); its folder."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    torch.manual_seed(seed)
    lm = AutoModelForCausalLM.from_pretrained(base)
    peft_lm = get_peft_model(lm, LoraConfig(r=4, lora_alpha=16, target_modules=list(target), init_lora_weights=False,
                                            task_type="CAUSAL_LM"))
    staging = Path(tempfile.mkdtemp(dir=root))
    peft_lm.save_pretrained(staging)
    meta = trainer_pb2.Checkpoint(name=name, version=version, ref=f"{name}@{version}",
                                  algorithm=trainer_pb2.TRAINING_ALGORITHM_BC, model=trainer_pb2.MODEL_KIND_CAUSAL_LM)
    return checkpoints.publish(staging, root, meta)


@pytest.fixture
def publish_lora():
    """`publish_lora(root, base, name, version, seed, target=("q_proj", "v_proj"))`: a random LoRA checkpoint."""
    return publish_lora_checkpoint

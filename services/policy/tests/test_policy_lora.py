"""LoRA checkpoints served hot over one base model (transformers backend, PEFT): LoadCheckpoint in a fraction of
a model load, the adapter's version in every response, its logprobs those of base + adapter, adapters by name in
the OpenAI-compatible API, unloading, and bad or incompatible adapters refused by field (real gRPC and HTTP)."""

from __future__ import annotations

import json
import random
import tempfile
import time
from pathlib import Path

import grpc
import openai
import pytest
import torch
from peft import PeftModel
from transformers import AutoModelForCausalLM
from webenv.agent import checkpoints
from webenv.llm import encode
from webenv.llm.tinymodel import build_tiny_model
from webenv.policy.synthetic import random_observation, request
from webenv.v1 import policy_pb2, trainer_pb2

MAX_NEW = 8


def publish_full(root: Path, base: Path, name: str) -> Path:
    staging = Path(tempfile.mkdtemp(dir=root))
    for f in base.iterdir():
        if f.is_file():
            (staging / f.name).write_bytes(f.read_bytes())
    meta = trainer_pb2.Checkpoint(name=name, version=1, ref=f"{name}@1", algorithm=trainer_pb2.TRAINING_ALGORITHM_BC,
                                  model=trainer_pb2.MODEL_KIND_CAUSAL_LM)
    return checkpoints.publish(staging, root, meta)


def forward_logprobs(lm, prompt: list[int], ids: list[int]) -> torch.Tensor:
    with torch.no_grad():
        logits = lm(torch.tensor([prompt + ids])).logits[0, len(prompt) - 1 : -1]
    return torch.log_softmax(logits.float(), -1).gather(1, torch.tensor(ids).unsqueeze(1)).squeeze(1)


async def test_lora_checkpoints_load_hot_and_answer_with_their_version(serve_policy, policy_stub, tiny_model,
                                                                       tmp_path, publish_lora):
    a1 = publish_lora(tmp_path, tiny_model, "lora", 1, seed=1)
    publish_lora(tmp_path, tiny_model, "lora", 2, seed=2)
    publish_full(tmp_path, tiny_model, "full")
    req = request(random_observation(random.Random(3), n=5), policy="", episode_id="ep-lora", seed=1)
    async with serve_policy(policy_model_path=str(tiny_model), policy_checkpoint_dir=tmp_path,
                            policy_max_new_tokens=MAX_NEW, policy_http_port=0) as (server, app), \
            policy_stub(server) as stub:
        t = time.perf_counter()
        loaded = await stub.LoadCheckpoint(policy_pb2.LoadCheckpointRequest(ref="lora@1"), timeout=60)
        lora_wall = time.perf_counter() - t
        full = await stub.LoadCheckpoint(policy_pb2.LoadCheckpointRequest(ref="full"), timeout=120)
        answers = {}
        for policy in ("llm", "lora@1", "lora"):
            r = policy_pb2.ActRequest()
            r.CopyFrom(req)
            r.policy = policy
            answers[policy] = await stub.Act(r, timeout=60)
        await stub.LoadCheckpoint(policy_pb2.LoadCheckpointRequest(ref="lora@2"), timeout=60)
        answers["lora@2"] = await stub.Act(policy_pb2.ActRequest(**{**_fields(req), "policy": "lora"}), timeout=60)
        api = openai.AsyncOpenAI(base_url=f"http://127.0.0.1:{app.http_port}/v1", api_key="none", max_retries=0)
        models = {m.id async for m in api.models.list()}
        chat = await api.chat.completions.create(model="lora@1", messages=[{"role": "user", "content": "Action:"}],
                                                 max_tokens=4, logprobs=True)
        prompt = encode(app.batcher.backend.tokenizer, app.policies["llm"].generation_request(req), 2048 - MAX_NEW)
        adapters = set(app.batcher.backend.adapters)
    assert loaded.policy.version == "lora@1" and loaded.policy.backend == "transformers"
    assert full.policy.version == "full@1"
    print(f"\nLoRA LoadCheckpoint {loaded.load_seconds:.3f}s (wall {lora_wall:.3f}s) vs full model "
          f"LoadCheckpoint {full.load_seconds:.3f}s")
    assert loaded.load_seconds < full.load_seconds
    assert answers["llm"].policy_version == "" and answers["lora@1"].policy_version == "lora@1"
    assert answers["lora"].policy_version == "lora@1" and answers["lora@2"].policy_version == "lora@2"
    assert adapters == {"lora@1", "lora@2"}
    base = AutoModelForCausalLM.from_pretrained(tiny_model).eval()
    with_a1 = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(tiny_model), a1).eval()
    for policy, lm in (("llm", base), ("lora@1", with_a1)):
        ids = list(answers[policy].completion_token_ids)
        got = torch.tensor(list(answers[policy].completion_logprobs))
        assert torch.allclose(got, forward_logprobs(lm, prompt, ids), atol=2e-3), policy
    ids = list(answers["lora@1"].completion_token_ids)
    assert not torch.allclose(forward_logprobs(base, prompt, ids), forward_logprobs(with_a1, prompt, ids),
                              atol=1e-2), "the adapter changes the model"
    assert {"lora@1", "lora@2", "lora", "full@1", "full", tiny_model.name} <= models
    assert chat.model == "lora@1" and len(chat.choices[0].logprobs.content) == chat.usage.completion_tokens


def _fields(msg) -> dict:
    return {f.name: v for f, v in msg.ListFields()}


async def test_bad_and_incompatible_adapters_are_refused_by_field(serve_policy, policy_stub, tiny_model, tmp_path,
                                                                  publish_lora):
    other = build_tiny_model(tmp_path / "other-base", hidden=64, heads=2, layers=1)
    publish_lora(tmp_path, other, "wide", 1, seed=1)  # a different hidden size: shapes do not fit
    publish_lora(tmp_path, tiny_model, "ghostmod", 1, seed=1)
    cfg_path = checkpoints.resolve(tmp_path, "ghostmod@1") / "adapter_config.json"
    cfg = json.loads(cfg_path.read_text())
    cfg["target_modules"] = ["no_such_proj"]  # names no module of the base model
    cfg_path.write_text(json.dumps(cfg))
    broken = publish_lora(tmp_path, tiny_model, "broken", 1, seed=1)
    (broken / "adapter_config.json").write_text("{not json")
    async with serve_policy(policy_model_path=str(tiny_model), policy_checkpoint_dir=tmp_path,
                            policy_max_new_tokens=MAX_NEW) as (server, app), policy_stub(server) as stub:
        codes = {}
        for ref in ("wide@1", "ghostmod@1", "broken@1"):
            with pytest.raises(grpc.aio.AioRpcError) as err:
                await stub.LoadCheckpoint(policy_pb2.LoadCheckpointRequest(ref=ref), timeout=60)
            codes[ref] = (err.value.code(), err.value.details())
        req = request(random_observation(random.Random(1), n=3), policy="llm")
        ok = await stub.Act(req, timeout=60)
        adapters = dict(app.batcher.backend.adapters)
        prompt = encode(app.batcher.backend.tokenizer, app.policies["llm"].generation_request(req), 2048 - MAX_NEW)
        layers = [type(m).__name__ for m in app.batcher.backend.lm.modules() if "lora" in type(m).__module__]
    assert codes["wide@1"][0] == grpc.StatusCode.FAILED_PRECONDITION and "adapter" in codes["wide@1"][1]
    assert codes["ghostmod@1"][0] == grpc.StatusCode.FAILED_PRECONDITION and "adapter" in codes["ghostmod@1"][1]
    assert codes["broken@1"][0] == grpc.StatusCode.INVALID_ARGUMENT and "path" in codes["broken@1"][1]
    assert adapters == {} and layers == []  # nothing half-loaded: the base model answers exactly as before
    base = AutoModelForCausalLM.from_pretrained(tiny_model).eval()
    ids = list(ok.completion_token_ids)
    assert ok.policy == "llm" and ids
    assert torch.allclose(torch.tensor(list(ok.completion_logprobs)), forward_logprobs(base, prompt, ids), atol=2e-3)


async def test_lora_needs_a_transformers_base(serve_policy, policy_stub, tiny_model, tmp_path, publish_lora):
    publish_lora(tmp_path, tiny_model, "lora", 1, seed=1)
    async with serve_policy(policy_checkpoint_dir=tmp_path) as (server, _), policy_stub(server) as stub:
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await stub.LoadCheckpoint(policy_pb2.LoadCheckpointRequest(ref="lora"), timeout=60)
    assert err.value.code() == grpc.StatusCode.FAILED_PRECONDITION and "ref" in err.value.details()


async def test_evicted_versions_unload_their_adapters(serve_policy, policy_stub, tiny_model, tmp_path, publish_lora):
    publish_lora(tmp_path, tiny_model, "lora", 1, seed=1)
    publish_lora(tmp_path, tiny_model, "lora", 2, seed=2)
    req = request(random_observation(random.Random(4), n=4), policy="lora", episode_id="ep-evict", seed=1)
    async with serve_policy(policy_model_path=str(tiny_model), policy_checkpoint_dir=tmp_path,
                            policy_checkpoint_keep=1, policy_max_new_tokens=MAX_NEW) as (server, app), \
            policy_stub(server) as stub:
        await stub.LoadCheckpoint(policy_pb2.LoadCheckpointRequest(ref="lora@1"), timeout=60)
        await stub.LoadCheckpoint(policy_pb2.LoadCheckpointRequest(ref="lora@2"), timeout=60)
        after = await stub.Act(req, timeout=60)
        adapters = set(app.batcher.backend.adapters)
        models = set(app.chat_models())
        with pytest.raises(grpc.aio.AioRpcError) as gone:
            await stub.Act(policy_pb2.ActRequest(**{**_fields(req), "policy": "lora@1"}), timeout=60)
    assert adapters == {"lora@2"} and after.policy_version == "lora@2"
    assert "lora@1" not in models and {"lora", "lora@2"} <= models
    assert gone.value.code() == grpc.StatusCode.INVALID_ARGUMENT  # an unloaded version is an unknown policy

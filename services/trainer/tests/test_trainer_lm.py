"""The causal-LM job (TRL + PEFT) on a tiny Qwen3-architecture model: the model's own stored tokens are the targets
after the served prompt, SFT's loss falls, a LoRA job publishes an adapter only, and a policy-gradient step from
the model that sampled the data sees an importance ratio of 1 against the stored logprobs."""

from __future__ import annotations

import random
import threading
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer
from webenv.agent.prompt import SYSTEM_PROMPT, PromptBudget, prompt_ids, step_prompt
from webenv.agent.steps import episode_steps
from webenv.llm.tinymodel import DEFAULT_TEXTS, build_tiny_model
from webenv.trainer.algorithms import select
from webenv.trainer.lmjob import StandaloneManager
from webenv.trainer.train_lm import build_example, train_causal_lm
from webenv.v1 import collector_pb2, common_pb2, trainer_pb2

A = trainer_pb2
NEW = 12


@pytest.fixture(scope="module")
def qwen3(tmp_path_factory) -> Path:
    return build_tiny_model(tmp_path_factory.mktemp("qwen3"), [*DEFAULT_TEXTS, SYSTEM_PROMPT], vocab_size=600,
                            hidden=64, layers=2, heads=2, arch="qwen3")


def page(rng: random.Random) -> common_pb2.Observation:
    ids = rng.sample(range(1, 99), 4)
    obs = common_pb2.Observation(url=f"http://shop.web.test/p/{ids[0]}", title="Shop")
    obs.axtree = "\n".join(f'[{i}] link "item {i}"' for i in ids)
    return obs


def rollouts(model_dir: Path, n: int = 8):
    """One-step episodes answered by the model itself (greedy), with its tokens and logprobs as a policy stores them."""
    tok = AutoTokenizer.from_pretrained(model_dir)
    lm = AutoModelForCausalLM.from_pretrained(model_dir).eval()
    budget = PromptBudget(context_tokens=2048, new_tokens=NEW)
    rng = random.Random(0)
    out = []
    for i in range(n):
        ep = collector_pb2.StoredEpisode(episode_id=f"ep-{i}", run_id="r", passed=i % 4 < 2)  # 2 of 4 per task
        ep.task.task_id, ep.task.instruction = f"t{i % 2}", "Open the first item."
        ep.trajectory.steps.add(step_index=0, observation=page(rng), action_text="noop()")
        [st] = episode_steps(ep)
        prompt = prompt_ids(tok, step_prompt(st.request, budget), budget)
        with torch.no_grad():
            gen = lm.generate(torch.tensor([prompt]), max_new_tokens=NEW, do_sample=False, output_scores=True,
                              return_dict_in_generate=True, pad_token_id=tok.pad_token_id)
        ids = gen.sequences[0, len(prompt):].tolist()
        lps = [torch.log_softmax(s[0].float(), -1)[t].item() for s, t in zip(gen.scores, ids, strict=False)]
        rec = ep.trajectory.steps[0]
        rec.completion_token_ids.extend(ids)
        rec.completion_logprobs.extend(lps)
        rec.raw_output = tok.decode(ids)
        out.append(ep)
    return out, tok, budget


def job(base: Path, algorithm: int, rank: int, steps: int, lr: float, batch: int = 4) -> trainer_pb2.Job:
    spec = A.JobSpec(name="lm", algorithm=algorithm, model=A.MODEL_KIND_CAUSAL_LM, base_model_path=str(base),
                     lm=A.LanguageModelOptions(lora_rank=rank, max_new_tokens=NEW),
                     hyper=A.Hyperparameters(max_steps=steps, epochs=1000, batch_size=batch, learning_rate=lr, seed=1))
    return A.Job(job_id=f"j-{algorithm}-{rank}", spec=spec)


def test_sampled_targets_sft_loss_falls_and_pg_ratio_is_one(qwen3, tmp_path):
    episodes, tok, budget = rollouts(qwen3)
    sel = select(episodes, A.TRAINING_ALGORITHM_BC, False, sampled_targets=True)
    assert len(sel.steps) == len(episodes), "the model's own steps are examples though no candidate expresses them"
    st, w, _ = sel.steps[0]
    ex = build_example(tok, st, w, budget)
    rec = episodes[0].trajectory.steps[0]
    assert ex.input_ids[ex.prompt_len:] == list(rec.completion_token_ids), "the target is the sampled tokens"
    assert ex.input_ids[: ex.prompt_len] == prompt_ids(tok, step_prompt(st.request, budget), budget)

    manager = StandaloneManager(tmp_path, tmp_path / "work", "cpu")
    sft = tmp_path / "sft"
    sft.mkdir()
    # one batch of every example per step, so the loss is comparable from step to step
    report = train_causal_lm(manager, job(qwen3, A.TRAINING_ALGORITHM_BC, 8, 10, 5e-3, batch=8), sel, sft,
                             threading.Event())
    losses = [f["loss"] for f in manager.log if "loss" in f]
    assert report.step == 10 and all(b < a for a, b in zip(losses, losses[1:], strict=False)), losses
    assert losses[-1] < losses[0] - 0.05, losses  # the moving average; LoRA's B starts at zero
    assert (sft / "adapter_config.json").is_file() and not (sft / "model.safetensors").exists()

    manager = StandaloneManager(tmp_path, tmp_path / "work", "cpu")
    pg = tmp_path / "pg"
    pg.mkdir()
    grouped = select(episodes, A.TRAINING_ALGORITHM_GROUP_RELATIVE, False, sampled_targets=True)
    train_causal_lm(manager, job(qwen3, A.TRAINING_ALGORITHM_GROUP_RELATIVE, 0, 1, 1e-5), grouped, pg,
                    threading.Event())
    last = [f for f in manager.log if "importance_ratio" in f][-1]
    assert abs(last["importance_ratio"] - 1) < 1e-3 and last["clipped_fraction"] == 0
    assert manager.log[0]["sampled_examples"] == len(episodes) and manager.log[0]["max_staleness"] == 0
    assert (pg / "model.safetensors").is_file(), "rank 0: a full fine-tune"

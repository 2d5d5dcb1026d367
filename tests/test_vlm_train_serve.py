"""A VLM trained by the trainer and served by the policy service (a tiny Qwen2-VL-architecture VLM, random weights).

The trainer's BC job (TRL's SFTTrainer on its vision path, LoRA) on stored one-step episodes whose screenshots are in
the collector's blob store, its loss falling; the adapter it publishes loaded hot by the policy service over the same
base; the served prompt of a trained step the same ids, image tokens and all, as the prompt it was trained on; and
the coordinate action it is trained to answer parsed by the policy (ClickAt); then RL with images: the served answers'
tokens and logprobs, stored as judged rollouts, train a policy-gradient step from that version whose recomputed
logprobs are the served ones (importance ratio 1). (Four LoRA steps lower the loss but do
not teach a random model the answer: the served answer is not asserted.) Serving alone: services/policy/tests/
test_policy_vlm.py."""

from __future__ import annotations

import math
import random
import threading

import pytest
from webenv.agent import checkpoints
from webenv.agent.prompt import SYSTEM_PROMPT, PromptBudget
from webenv.client import make_channel
from webenv.collector.blobs import BlobStore
from webenv.llm.tinymodel import DEFAULT_TEXTS, build_tiny_vlm, tiny_screenshot
from webenv.llm.vision import VisionProcessor
from webenv.policy.app import serving_app
from webenv.policy.config import Settings
from webenv.policy.parse import parse_output
from webenv.trainer.algorithms import select
from webenv.trainer.lmjob import StandaloneManager
from webenv.trainer.train_lm import MissingScreenshot, attach_screenshots, build_example, train_causal_lm
from webenv.v1 import collector_pb2, common_pb2, policy_pb2, policy_pb2_grpc, trainer_pb2

A = trainer_pb2
NEW = 32
ANSWER = "Memory: the button\nProgress: looked\nIntention: press it\nAction: click_at(120, 48)"


def episodes(tok, blobs: BlobStore, n: int = 6) -> list[collector_pb2.StoredEpisode]:
    """One-step episodes as the collector stores a VLM's steps: the screenshot by key, the answer's tokens."""
    rng = random.Random(0)
    target = tok(ANSWER + tok.eos_token, add_special_tokens=False)["input_ids"]
    out = []
    for i in range(n):
        ep = collector_pb2.StoredEpisode(episode_id=f"ep-{i}", run_id="r", passed=True)
        ep.task.task_id, ep.task.instruction = f"t{i}", "Press the blue button."
        obs = common_pb2.Observation(url=f"http://shop.web.test/p/{i}", title="Shop")
        obs.axtree = "\n".join(f'[{j}] button "b{j}"' for j in rng.sample(range(1, 99), 3))
        rec = ep.trajectory.steps.add(step_index=0, observation=obs, action_text="click_at(120, 48)",
                                      raw_output=ANSWER, screenshot_key=blobs.put(tiny_screenshot(i), "png"))
        rec.completion_token_ids.extend(target)
        out.append(ep)
    return out


async def test_vlm_sft_on_screenshots_is_served_hot_and_its_logprobs_train_a_policy_gradient_step(tmp_path):
    vlm = build_tiny_vlm(tmp_path / "vlm", [*DEFAULT_TEXTS, SYSTEM_PROMPT, ANSWER], vocab_size=700)
    blobs = BlobStore(tmp_path / "blobs")
    processor = VisionProcessor.load(vlm)
    eps = episodes(processor.tokenizer, blobs)
    sel = select(eps, A.TRAINING_ALGORITHM_BC, False, sampled_targets=True)
    assert len(sel.steps) == len(eps)
    with pytest.raises(MissingScreenshot, match="WEBENV_TRAINER_BLOB_DIR"):  # a VLM job without the blob folder
        attach_screenshots([st for st, _, _ in select(eps, A.TRAINING_ALGORITHM_BC, False, sampled_targets=True).steps],
                           "")
    spec = A.JobSpec(name="vlm", algorithm=A.TRAINING_ALGORITHM_BC, model=A.MODEL_KIND_CAUSAL_LM,
                     base_model_path=str(vlm), lm=A.LanguageModelOptions(lora_rank=8, max_new_tokens=NEW),
                     hyper=A.Hyperparameters(max_steps=4, epochs=1000, batch_size=4, learning_rate=2e-2, seed=1))
    root = tmp_path / "ckpt"
    root.mkdir()
    staging = root / ".staging"
    staging.mkdir()
    manager = StandaloneManager(root, tmp_path / "work", "cpu", blob_dir=blobs.folder)
    report = train_causal_lm(manager, A.Job(job_id="vlm-1", spec=spec), sel, staging, threading.Event())
    losses = [f["loss"] for f in manager.log if "loss" in f]
    print(f"\nVLM SFT loss {losses[0]:.3f} -> {losses[-1]:.3f} over {report.step} steps, "
          f"{manager.log[-1]['tokens_per_second']:.0f} tokens/s")
    assert report.step == 4 and all(b < a for a, b in zip(losses, losses[1:], strict=False)), losses
    assert losses[-1] < losses[0] - 0.05, losses  # the moving average (6.459 -> 6.354 here); LoRA's B starts at zero
    assert (staging / "adapter_config.json").is_file() and (staging / "preprocessor_config.json").is_file()

    st, w, _ = sel.steps[0]
    assert st.request.observation.screenshot.data == tiny_screenshot(0), "the stored screenshot is back in the request"
    trained = build_example(processor, st, w, PromptBudget(context_tokens=2048, new_tokens=NEW))
    assert trained.input_ids[: trained.prompt_len].count(processor.image_token_id) > 0 and trained.images
    checkpoints.publish(staging, root, A.Checkpoint(name="vlm", version=1, ref="vlm@1", algorithm=spec.algorithm,
                                                    model=spec.model))
    req = policy_pb2.ActRequest()
    req.CopyFrom(st.request)
    req.policy, req.seed = "vlm", 1
    settings = Settings(grpc_port=0, metrics_port=0, host="127.0.0.1", log_json=False, grace_seconds=1,
                        policy_model_path=str(vlm), policy_checkpoint_dir=root, policy_max_new_tokens=NEW)
    async with serving_app(settings) as (server, app):
        channel = make_channel(f"127.0.0.1:{server.port}")
        stub = policy_pb2_grpc.PolicyServiceStub(channel)
        loaded = await stub.LoadCheckpoint(policy_pb2.LoadCheckpointRequest(ref="vlm@1"), timeout=60)
        resp = await stub.Act(req, timeout=60)
        req.seed = 2
        resp2 = await stub.Act(req, timeout=60)
        await channel.close()
        served = app.batcher.backend.prompt_ids(app.checkpoints.served()[0].generation_request(req), 2048 - NEW)
    assert loaded.policy.version == "vlm@1" and resp.policy_version == "vlm@1"
    assert served == trained.input_ids[: trained.prompt_len], "served and trained prompts are the same ids"
    assert resp.prompt_tokens == trained.prompt_len
    assert len(resp.completion_token_ids) == len(resp.completion_logprobs) == resp.completion_tokens > 0
    parsed = parse_output(ANSWER)  # what the VLM is trained to answer, through the policy's parser
    assert not parsed.failed and (parsed.action.click_at.x, parsed.action.click_at.y) == (120, 48)

    # RL with images: vlm@1's served tokens and logprobs (its screenshot in the prompt), stored as two judged
    # rollouts of one task, train a POLICY_GRADIENT step from vlm@1 that recomputes the same logprobs
    rollouts = []
    for i, (r, passed) in enumerate(((resp, True), (resp2, False))):
        ep = collector_pb2.StoredEpisode()
        ep.CopyFrom(eps[0])
        ep.episode_id, ep.passed = f"rl-{i}", passed
        rec = ep.trajectory.steps[0]
        del rec.completion_token_ids[:]
        rec.completion_token_ids.extend(r.completion_token_ids)
        # the failed rollout's behaviour logprobs as if served log 2 higher: its ratios are 1/2, so the ratio the
        # job reports is measured against the stored values (the passed rollout's, as served, give 1)
        rec.completion_logprobs.extend([lp + (0 if passed else math.log(2)) for lp in r.completion_logprobs])
        rec.policy_version = "vlm@1"
        rollouts.append(ep)
    rl_sel = select(rollouts, A.TRAINING_ALGORITHM_POLICY_GRADIENT, False, sampled_targets=True)
    assert sorted(w for _, w, _ in rl_sel.steps) == [-0.5, 0.5], "reward - the task's mean"
    rl = A.JobSpec(name="vlm", parent="vlm@1", algorithm=A.TRAINING_ALGORITHM_POLICY_GRADIENT,
                   model=A.MODEL_KIND_CAUSAL_LM, lm=A.LanguageModelOptions(max_new_tokens=NEW),
                   hyper=A.Hyperparameters(max_steps=1, batch_size=2, learning_rate=1e-4, seed=1))
    rl_staging = root / ".staging-2"
    rl_staging.mkdir()
    manager.log.clear()
    train_causal_lm(manager, A.Job(job_id="vlm-2", spec=rl), rl_sel, rl_staging, threading.Event())
    counts = next(f for f in manager.log if "sampled_examples" in f)
    assert counts["sampled_examples"] == 2 and counts["max_staleness"] == 0
    last = [f for f in manager.log if "importance_ratio" in f][-1]
    print(f"VLM policy-gradient step from vlm@1: mean importance ratio {last['importance_ratio']:.4f}, clipped "
          f"{last['clipped_fraction']:.2f}")
    assert len(resp.completion_token_ids) == len(resp2.completion_token_ids)
    assert abs(last["importance_ratio"] - 0.75) < 0.02, "the served logprobs, image tokens in the prompt, are the trained ones"
    assert abs(last["clipped_fraction"] - 0.5) < 0.01, "only the shifted rollout's ratios are outside 1 +- 0.2"
    assert (rl_staging / "adapter_config.json").is_file(), "the parent's adapter, trained further"

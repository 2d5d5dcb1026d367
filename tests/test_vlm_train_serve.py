"""A VLM trained by the trainer and served by the policy service (a tiny Qwen2-VL-architecture VLM, random weights).

The trainer's BC job (TRL's SFTTrainer on its vision path, LoRA) on stored one-step episodes whose screenshots are in
the collector's blob store, its loss falling; the adapter it publishes loaded hot by the policy service over the same
base; the served prompt of a trained step the same ids, image tokens and all, as the prompt it was trained on; and
the coordinate action it is trained to answer parsed by the policy (ClickAt). (Four LoRA steps lower the loss but do
not teach a random model the answer: the served answer is not asserted.) Serving alone: services/policy/tests/
test_policy_vlm.py."""

from __future__ import annotations

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


async def test_vlm_sft_on_screenshots_is_served_hot_with_the_trained_prompt(tmp_path):
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
        await channel.close()
        served = app.batcher.backend.prompt_ids(app.checkpoints.served()[0].generation_request(req), 2048 - NEW)
    assert loaded.policy.version == "vlm@1" and resp.policy_version == "vlm@1"
    assert served == trained.input_ids[: trained.prompt_len], "served and trained prompts are the same ids"
    assert resp.prompt_tokens == trained.prompt_len
    assert len(resp.completion_token_ids) == len(resp.completion_logprobs) == resp.completion_tokens > 0
    parsed = parse_output(ANSWER)  # what the VLM is trained to answer, through the policy's parser
    assert not parsed.failed and (parsed.action.click_at.x, parsed.action.click_at.y) == (120, 48)

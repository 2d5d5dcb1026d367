"""Causal-LM jobs on TRL + PEFT: SFT on demonstrations and passed rollouts, policy gradient on judged rollouts.

Examples. Every stored step is rebuilt as the prompt the policy service served it (webenv.agent.prompt:
``step_prompt`` + ``prompt_ids`` under one :class:`PromptBudget`, the chat template and webenv.llm.encode's
truncation: the last ``context - new_tokens`` prompt tokens), so the tokens trained on are the tokens served. The
target of a step the policy's model generated is the model's own sampled output, the stored
``StepRecord.completion_token_ids``, whatever the rule proposer makes of it; a demonstration (the oracle's steps,
which have no tokens) is its element-id action rendered in the four labelled lines the policy parses. Loss on
target tokens only.

Trainers. ``BC`` and ``FILTERED_BC`` (weight 1 on every example) train with TRL's ``SFTTrainer`` and its own loss
over a pre-tokenized dataset (``input_ids`` + ``labels``, -100 on the prompt). Every other algorithm (the learning
loop's ``POLICY_GRADIENT``, ``GROUP_RELATIVE``, ``PARTIAL_CREDIT``, ``BRANCHING``, or ``step_normalize``) trains
with :class:`PolicyGradientTrainer`, the same SFTTrainer with an importance-weighted, clipped policy-gradient
loss: per generated token, ratio = exp(logp - logp_behaviour) with the behaviour logprobs the policy stored
(``completion_logprobs``), objective min(ratio A, clip(ratio, 1 - e, 1 + e) A) with A the algorithm's example
weight (the advantage); a demonstration has no behaviour logprobs and its ratio is 1 (plain REINFORCE). The
mean ratio, the clipped share and the staleness (how many versions the behaviour policy is behind the parent
being trained) are the job's progress.

Vision-language models. A base (or parent) folder of the Qwen2-VL family (its config.json has a vision_config) trains
on screenshot + action steps: each stored step's screenshot (``StepRecord.screenshot_key``, read from the collector's
blob folder, ``WEBENV_TRAINER_BLOB_DIR``) goes back into its request's observation and the prompt is rebuilt as the
policy serves a VLM (``step_prompt(..., with_image=True)`` encoded by webenv.llm.vision's processor: the image tokens
in the user turn, the same truncation rule), so served and trained prompts are the same ids; a step without a
screenshot is a text-only prompt, as it is served. The dataset gains an ``images`` column and the job runs TRL's
SFTTrainer on its vision path (a ``ProcessorMixin`` as ``processing_class``: webenv.llm.vision.VisionProcessor), with
this module's collator, which turns the images into pixel values per batch (as TRL's own vision collator does)
after the pre-tokenized ids; the policy-gradient trainer passes the same pixel inputs (RL with images: the served
logprobs of a screenshot step are the ones it recomputes, tests/test_vlm_train_serve.py). A step whose screenshot key
names a blob the trainer cannot read fails the job.

Full fine-tune or LoRA by ``JobSpec.lm.lora_rank`` (PEFT ``LoraConfig``, "all-linear" by default). A LoRA job
publishes the adapter (``adapter_config.json`` + weights, with the tokenizer): what the policy service loads hot
over its base model. A job continuing a LoRA parent trains the parent's adapter further.

Multi-GPU is the same job under ``accelerate launch`` (services/trainer/README.md): the HF Trainer underneath takes
its processes, DeepSpeed or FSDP from accelerate's configuration; the service runs one process (CPU or one GPU).
Resume: the HF Trainer's own checkpoints every ``checkpoint_every`` steps (and at shutdown) under the job's
resume folder, picked up by ``resume_from_checkpoint``.
"""

from __future__ import annotations

import json
import math
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path

from webenv import screenshots
from webenv.agent.prompt import PromptBudget, prompt_inputs, step_prompt
from webenv.v1 import common_pb2, trainer_pb2

from .train_scorer import Report

A = trainer_pb2
#: Algorithms whose examples all weigh 1: TRL's SFT loss as it is.
SFT_ALGORITHMS = {A.TRAINING_ALGORITHM_BC, A.TRAINING_ALGORITHM_FILTERED_BC}
DEFAULT_NEW_TOKENS = 128
DEFAULT_CLIP = 0.2
SCHEDULERS = {"": "linear", "linear": "linear", "cosine": "cosine", "constant": "constant"}


class MissingScreenshot(ValueError):
    """A stored step names a screenshot the trainer cannot read (no blob folder configured, or no such blob)."""


def attach_screenshots(steps, blob_dir: str | Path) -> int:
    """Put each stored step's screenshot (its record's screenshot_key, a blob of the collector's folder
    ``blob_dir``) back into its request's observation, as the policy got it; the number attached."""
    attached = 0
    for st in steps:
        key = st.record.screenshot_key if st.record is not None else ""
        obs = st.request.observation
        if not key or obs.screenshot.data:
            continue
        if not blob_dir:
            raise MissingScreenshot(f"step {st.index} has screenshot {key}, and a vision model trains on it: set "
                                    "WEBENV_TRAINER_BLOB_DIR to the collector's blob folder")
        path = Path(blob_dir) / key[:2] / key
        if not screenshots.KEY.match(key) or not path.is_file():
            raise MissingScreenshot(f"step {st.index}: screenshot {key} is not in the blob folder {blob_dir}")
        obs.screenshot.data = path.read_bytes()
        obs.screenshot.codec = common_pb2.IMAGE_CODEC_JPEG if key.endswith(".jpg") else common_pb2.IMAGE_CODEC_PNG
        attached += 1
    return attached


def target_text(step) -> str:
    """A demonstration's answer in the four labelled lines the policy parses, ending in its element-id action. Its
    Memory is the one the next stored step's prompt shows (webenv.agent.steps), so what a model trained on it
    writes is what it is then served."""
    cand = step.candidates[step.target]
    return (f"Memory: {step.ctx.memory}\nProgress: step {step.index}\nIntention: {cand.kind}\n"
            f"Action: {cand.text}")


def version_number(version: str, family: str) -> int | None:
    """N of "<family>@N"; 0 for the base model (no version); None for another family's or another policy's."""
    if not version:
        return 0
    name, _, n = version.rpartition("@")
    return int(n) if name == family and n.isdigit() else None


@dataclass(slots=True)
class Example:
    input_ids: list[int]
    prompt_len: int
    weight: float
    old_logprobs: list[float] | None  # per target token, the behaviour policy's (sampled examples)
    staleness: int | None
    images: list[bytes] = field(default_factory=list)  # the prompt's screenshot (vision models)


def build_example(tok, step, weight: float, budget: PromptBudget, family: str = "", current: int = 0) -> Example | None:
    """One training example of a stored step (None when it has neither sampled tokens nor a demonstration).
    ``tok`` is the tokenizer, or a vision model's VisionProcessor (the step's screenshot then goes in its prompt)."""
    rec = step.record
    vision = hasattr(tok, "encode_request")
    encoded = prompt_inputs(tok, step_prompt(step.request, budget, with_image=vision), budget)
    prompt = encoded.input_ids
    if vision:
        tok = tok.tokenizer
    old = None
    staleness = None
    if rec is not None and rec.completion_token_ids:
        target = list(rec.completion_token_ids)[: budget.new_tokens]
        if len(rec.completion_logprobs) == len(rec.completion_token_ids):
            old = list(rec.completion_logprobs)[: budget.new_tokens]
        behind = version_number(rec.policy_version, family)
        staleness = None if behind is None else max(0, current - behind)
    elif step.target >= 0:
        target = tok(target_text(step) + (tok.eos_token or ""), add_special_tokens=False)["input_ids"]
        target = target[: budget.new_tokens]
    else:
        return None
    return Example(prompt + target, len(prompt), weight, old, staleness, list(encoded.images))


def as_rows(examples: list[Example], weighted: bool, vision: bool = False) -> dict[str, list]:
    """The pre-tokenized dataset columns TRL's SFTTrainer takes (plus the policy-gradient columns, and for a vision
    model the ``images`` column of TRL's vision datasets: each example's encoded screenshots)."""
    rows: dict[str, list] = {"input_ids": [], "labels": []}
    if vision:
        rows["images"] = [ex.images for ex in examples]
    if weighted:
        rows |= {"weight": [], "old_logprobs": [], "has_old": []}
    for ex in examples:
        rows["input_ids"].append(ex.input_ids)
        rows["labels"].append([-100] * ex.prompt_len + ex.input_ids[ex.prompt_len:])
        if weighted:
            n = len(ex.input_ids) - ex.prompt_len
            rows["weight"].append(float(ex.weight))
            rows["old_logprobs"].append([0.0] * ex.prompt_len + (ex.old_logprobs or [0.0] * n))
            rows["has_old"].append([0] * ex.prompt_len + [1 if ex.old_logprobs else 0] * n)
    return rows


class Collator:
    """Right-padded batches of the pre-tokenized rows; counts the tokens it hands out (tokens/s). With a vision
    model's ``processor``, rows' images become the batch's pixel values and image positions."""

    def __init__(self, pad_id: int, processor=None) -> None:
        self.pad_id, self.tokens, self.processor = pad_id, 0, processor

    def __call__(self, rows: list[dict]) -> dict:
        import torch

        width = max(len(r["input_ids"]) for r in rows)

        def padded(key: str, fill, dtype):
            return torch.tensor([list(r[key]) + [fill] * (width - len(r[key])) for r in rows], dtype=dtype)

        out = {"input_ids": padded("input_ids", self.pad_id, torch.long), "labels": padded("labels", -100, torch.long),
               "attention_mask": torch.tensor([[1] * len(r["input_ids"]) + [0] * (width - len(r["input_ids"]))
                                               for r in rows], dtype=torch.long)}
        if "weight" in rows[0]:
            out["weight"] = torch.tensor([r["weight"] for r in rows], dtype=torch.float32)
            out["old_logprobs"] = padded("old_logprobs", 0.0, torch.float32)
            out["has_old"] = padded("has_old", 0, torch.bool)
        if self.processor is not None and any(r.get("images") for r in rows):
            from webenv.llm.types import VisionPrompt

            vision = self.processor.batch([VisionPrompt(list(r["input_ids"]), list(r["images"])) for r in rows],
                                          self.pad_id, "right")
            out |= {k: vision[k] for k in ("pixel_values", "image_grid_thw", "mm_token_type_ids")}
        self.tokens += int(out["attention_mask"].sum())
        return out


def _trainer_classes():
    """TRL's SFTTrainer and the policy-gradient trainer over it (imported when a job runs)."""
    import torch
    from transformers import TrainerCallback
    from trl import SFTTrainer

    class PolicyGradientTrainer(SFTTrainer):
        """SFTTrainer with the importance-weighted, clipped policy-gradient loss over weighted examples."""

        def __init__(self, *args, clip: float = DEFAULT_CLIP, **kwargs) -> None:
            super().__init__(*args, **kwargs)
            self.clip = clip
            self.model_accepts_loss_kwargs = False  # the loss is a mean per example: Trainer divides by accumulation
            self.last_ratio, self.last_clipped = 1.0, 0.0

        def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
            weight = inputs.pop("weight")
            old, has_old = inputs.pop("old_logprobs"), inputs.pop("has_old")
            labels = inputs.pop("labels")
            vision = {k: inputs[k] for k in ("pixel_values", "image_grid_thw", "mm_token_type_ids") if k in inputs}
            out = model(input_ids=inputs["input_ids"], attention_mask=inputs["attention_mask"], use_cache=False,
                        **vision)
            logits = out.logits[:, :-1].float()
            tgt, old, has_old = labels[:, 1:], old[:, 1:], has_old[:, 1:]
            mask = tgt != -100
            logp = torch.log_softmax(logits, -1).gather(-1, tgt.clamp_min(0).unsqueeze(-1)).squeeze(-1)
            behaviour = torch.where(has_old, old, logp.detach())
            ratio = torch.exp(logp - behaviour)
            adv = weight.unsqueeze(1)
            clipped = torch.clamp(ratio, 1 - self.clip, 1 + self.clip)
            objective = torch.minimum(ratio * adv, clipped * adv)
            per_example = (objective * mask).sum(1) / mask.sum(1).clamp_min(1)
            loss = -per_example.sum() / weight.abs().sum().clamp_min(1e-6)
            counted = mask & has_old
            if counted.any():
                r = ratio.detach()[counted]
                self.last_ratio = float(r.mean())
                self.last_clipped = float(((r < 1 - self.clip) | (r > 1 + self.clip)).float().mean())
            return (loss, out) if return_outputs else loss

    return SFTTrainer, PolicyGradientTrainer, TrainerCallback


def _load_model(manager, spec, device: str):
    """(model, tokenizer, peft_config or None, is_adapter): the parent (adapter or full) or the base folder. For a
    vision-language model the tokenizer is its webenv.llm.vision.VisionProcessor."""
    from peft import LoraConfig, PeftModel
    from transformers import AutoModelForCausalLM, AutoModelForImageTextToText, AutoTokenizer
    from webenv.agent import checkpoints
    from webenv.llm import is_vision_model

    lm = spec.lm
    source = checkpoints.resolve(manager.root, spec.parent) if spec.parent else Path(spec.base_model_path)
    base = source
    if (source / "adapter_config.json").is_file():
        base = Path(json.loads((source / "adapter_config.json").read_text())["base_model_name_or_path"])
    if is_vision_model(base):
        from webenv.llm.vision import VisionProcessor

        tok = VisionProcessor.load(source)
        text_tok, model_cls = tok.tokenizer, AutoModelForImageTextToText
    else:
        tok = text_tok = AutoTokenizer.from_pretrained(source, local_files_only=True)
        model_cls = AutoModelForCausalLM
    if text_tok.pad_token is None:
        text_tok.pad_token = text_tok.eos_token
    if (source / "adapter_config.json").is_file():  # continue a LoRA parent: its adapter over its base
        model = model_cls.from_pretrained(base, local_files_only=True)
        return PeftModel.from_pretrained(model, source, is_trainable=True), tok, None, True
    model = model_cls.from_pretrained(source, local_files_only=True)
    if lm.lora_rank > 0:
        config = LoraConfig(r=lm.lora_rank, lora_alpha=lm.lora_alpha or 2 * lm.lora_rank, lora_dropout=lm.lora_dropout,
                            target_modules=list(lm.lora_target_modules) or "all-linear", task_type="CAUSAL_LM")
        return model, tok, config, True
    return model, tok, None, False


def train_causal_lm(manager, job, selected, staging: Path, stop) -> Report:
    import torch
    from datasets import Dataset
    from trl import SFTConfig
    from webenv.llm import model_context_tokens

    from . import metrics

    spec, h, lm = job.spec, job.spec.hyper, job.spec.lm
    device = manager.settings.trainer_device
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    torch.manual_seed(h.seed)
    model, tok, peft_config, adapter = _load_model(manager, spec, device)
    if manager.settings.trainer_gradient_checkpointing:
        model.gradient_checkpointing_enable()
    context = model_context_tokens(model.config)
    if manager.settings.trainer_max_lm_tokens:
        context = min(context, manager.settings.trainer_max_lm_tokens)
    budget = PromptBudget(context_tokens=context, new_tokens=lm.max_new_tokens or DEFAULT_NEW_TOKENS)
    vision = hasattr(tok, "encode_request")
    text_tok = tok.tokenizer if vision else tok
    if vision:
        attach_screenshots([st for st, _, _ in selected.steps], getattr(manager.settings, "trainer_blob_dir", ""))
    current = 0
    if spec.parent:
        from webenv.agent import checkpoints

        current = checkpoints.read_meta(checkpoints.resolve(manager.root, spec.parent)).version
    examples = [ex for st, w, _ in selected.steps
                if (ex := build_example(tok, st, w, budget, spec.name, current)) is not None]
    weighted = spec.algorithm not in SFT_ALGORITHMS or spec.options.step_normalize
    sampled = [ex for ex in examples if ex.old_logprobs is not None or ex.staleness is not None]
    stale = [ex.staleness for ex in sampled if ex.staleness is not None]
    manager.progress(job.job_id, sampled_examples=len(sampled), max_staleness=max(stale, default=0),
                     mean_staleness=sum(stale) / len(stale) if stale else 0.0)
    per_epoch = max(1, math.ceil(len(examples) / (h.batch_size * max(1, lm.gradient_accumulation_steps))))
    total = min(h.max_steps, h.epochs * per_epoch) if h.max_steps else h.epochs * per_epoch
    resume = manager.lm_resume_dir(job.job_id)
    args = SFTConfig(
        output_dir=str(resume), max_steps=total, per_device_train_batch_size=h.batch_size,
        gradient_accumulation_steps=max(1, lm.gradient_accumulation_steps), learning_rate=h.learning_rate,
        lr_scheduler_type=SCHEDULERS[lm.lr_scheduler], warmup_steps=int(lm.warmup_ratio * total), weight_decay=0.0,
        max_grad_norm=1.0, seed=h.seed, data_seed=h.seed, logging_steps=1, report_to=[],
        save_strategy="steps" if h.checkpoint_every else "no", save_steps=h.checkpoint_every or 500,
        save_total_limit=1, max_length=None, remove_unused_columns=False, dataloader_num_workers=0,
        use_cpu=device == "cpu", bf16=device == "cuda", disable_tqdm=True, gradient_checkpointing=False,
    )
    dataset = Dataset.from_dict(as_rows(examples, weighted, vision))
    collator = Collator(text_tok.pad_token_id, tok if vision else None)
    from transformers.trainer_callback import PrinterCallback as printer_cls

    sft_cls, pg_cls, callback_cls = _trainer_classes()
    t0 = time.perf_counter()
    last = Report(0, total, 1, 0.0, 0.0, 0.0)

    class Progress(callback_cls):
        """Reports each step to the job, stops at StopJob or shutdown (saving a resume checkpoint then)."""

        def on_log(self, args, state, control, logs=None, **kwargs):
            nonlocal last
            if not logs or "loss" not in logs:
                return
            elapsed = time.perf_counter() - t0
            step = state.global_step
            ema = logs["loss"] if not last.loss else 0.9 * last.loss + 0.1 * logs["loss"]
            last = Report(step, total, max(1, math.ceil(state.epoch or 0)), ema,
                          step * h.batch_size * args.gradient_accumulation_steps / max(elapsed, 1e-9), elapsed)
            tps = collator.tokens / max(elapsed, 1e-9)
            metrics.TRAIN_STEPS.inc()
            metrics.TOKENS_PER_SECOND.set(tps)
            extra = {}
            if isinstance(trainer, pg_cls):
                extra = {"importance_ratio": trainer.last_ratio, "clipped_fraction": trainer.last_clipped}
            manager.progress(job.job_id, step=step, total_steps=total, epoch=last.epoch, loss=ema,
                             examples_per_second=last.examples_per_second, tokens_per_second=tps,
                             train_seconds=elapsed, **extra)

        def on_step_end(self, args, state, control, **kwargs):
            if stop.is_set():
                control.should_training_stop = True
                control.should_save = manager.shutting_down

    kwargs = dict(model=model, args=args, train_dataset=dataset, processing_class=tok, data_collator=collator,
                  peft_config=peft_config, callbacks=[Progress()])
    trainer = pg_cls(**kwargs, clip=lm.clip_ratio or DEFAULT_CLIP) if weighted else sft_cls(**kwargs)
    trainer.remove_callback(printer_cls)  # progress goes to the job (WatchJob), not to stdout
    has_resume = resume.is_dir() and any(resume.glob("checkpoint-*"))
    trainer.train(resume_from_checkpoint=True if has_resume else None)
    if not stop.is_set() and trainer.is_world_process_zero():  # under accelerate launch, process 0 writes
        trained = trainer.model
        if adapter:
            trained.save_pretrained(staging)
        else:
            getattr(trained, "module", trained).save_pretrained(staging)
        if vision:
            tok.save_parts(staging)  # tokenizer + image processor: what the policy's backend loads
        else:
            tok.save_pretrained(staging)
        shutil.rmtree(resume, ignore_errors=True)
    return last

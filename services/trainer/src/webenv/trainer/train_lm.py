"""Fine-tuning a local Hugging Face causal LM on the policy's own prompt -> action text (the GPU path).

The prompt is WebGym's memory prompt exactly as the `llm` policy renders it (webenv.agent.prompt:
build_prompt + the tokenizer's chat template), and the target is the four labelled lines the policy
parses, ending in the element-id action the step took (oracle selectors already mapped to element ids).
Loss on target tokens only. What the model reads is sized to fit instead of skipped: when prompt +
target exceed WEBENV_TRAINER_MAX_LM_TOKENS the observation text is halved until it fits (instruction,
memory, history and the question at the end are kept whole), so no example is dropped for length.

On CUDA the model trains in bf16 autocast with AdamW; on CPU the same code runs the tiny test models.
The published folder is a save_pretrained model + tokenizer that the policy service's transformers or
vLLM backend loads as it is.
"""

from __future__ import annotations

import math
import random
import time
from pathlib import Path

from webenv.agent.prompt import build_prompt, render

from .train_scorer import Report

MIN_OBS_CHARS = 200


def target_text(step) -> str:
    cand = step.candidates[step.target]
    memory = "; ".join(step.ctx.memory.splitlines())[:400] or "(nothing yet)"
    return (f"Memory: {memory}\nProgress: step {step.index}\nIntention: {cand.kind}\n"
            f"Action: {cand.text}")


def encode(tok, step, max_tokens: int, max_chars: int = 6000) -> tuple[list[int], int]:
    """(token ids, prompt length); the observation is shortened until prompt + target fit."""
    target = target_text(step) + (tok.eos_token or "")
    target_ids = tok(target, add_special_tokens=False)["input_ids"]
    chars = max_chars
    while True:
        prompt = build_prompt(step.request, step.ctx.instruction, fmt="axtree", history_window=5, max_chars=chars)
        prompt_ids = tok(render(tok, prompt), add_special_tokens=False)["input_ids"]
        if len(prompt_ids) + len(target_ids) <= max_tokens or chars <= MIN_OBS_CHARS:
            break
        chars //= 2
    ids = (prompt_ids + target_ids)[-max_tokens:]
    return ids, max(0, len(ids) - len(target_ids))


def train_causal_lm(manager, job, selected, staging: Path, stop) -> Report:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from webenv.agent import checkpoints

    from . import metrics

    spec = job.spec
    h = spec.hyper
    base = checkpoints.resolve(manager.root, spec.parent) if spec.parent else Path(spec.base_model_path)
    device = manager.settings.trainer_device
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    tok = AutoTokenizer.from_pretrained(base, local_files_only=True)
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    model = AutoModelForCausalLM.from_pretrained(base, local_files_only=True).to(device)
    if getattr(manager.settings, "trainer_gradient_checkpointing", False):
        model.gradient_checkpointing_enable()
        model.config.use_cache = False
    limit = min(manager.settings.trainer_max_lm_tokens,
                getattr(model.config, "max_position_embeddings", manager.settings.trainer_max_lm_tokens))
    torch.manual_seed(h.seed)
    examples = [(*encode(tok, st, limit), w) for st, w, _ in selected.steps]
    opt = torch.optim.AdamW(model.parameters(), lr=h.learning_rate, weight_decay=0.0)
    per_epoch = max(1, math.ceil(len(examples) / h.batch_size))
    total = min(h.max_steps, h.epochs * per_epoch) if h.max_steps else h.epochs * per_epoch
    resume = manager.resume_path(job.job_id)
    step = 0
    if resume.is_file():
        state = torch.load(resume, map_location=device, weights_only=True)
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["optimizer"])
        step = int(state["step"])
    model.train()
    pad = tok.pad_token_id
    t0 = time.perf_counter()
    tokens = 0
    ema = None
    last = Report(step, total, 1, 0.0, 0.0, 0.0)
    amp = torch.autocast("cuda", dtype=torch.bfloat16) if device == "cuda" else torch.autocast("cpu", enabled=False)
    while step < total and not stop.is_set():
        epoch = step // per_epoch
        order = list(range(len(examples)))
        random.Random(h.seed * 1000 + epoch).shuffle(order)
        for i in range((step % per_epoch) * h.batch_size, len(order), h.batch_size):
            if step >= total or stop.is_set():
                break
            chunk = [examples[j] for j in order[i:i + h.batch_size]]
            width = max(len(ids) for ids, _, _ in chunk)
            input_ids = torch.full((len(chunk), width), pad, dtype=torch.long)
            labels = torch.full((len(chunk), width), -100, dtype=torch.long)
            mask = torch.zeros((len(chunk), width), dtype=torch.long)
            weights = torch.tensor([w for _, _, w in chunk], dtype=torch.float32, device=device)
            for r, (ids, plen, _) in enumerate(chunk):
                input_ids[r, :len(ids)] = torch.tensor(ids)
                labels[r, plen:len(ids)] = torch.tensor(ids[plen:])
                mask[r, :len(ids)] = 1
            input_ids, labels, mask = input_ids.to(device), labels.to(device), mask.to(device)
            with amp:
                logits = model(input_ids=input_ids, attention_mask=mask).logits
            logits = logits[:, :-1].float()
            tgt = labels[:, 1:]
            tok_loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.size(-1)), tgt.reshape(-1),
                                                         ignore_index=-100, reduction="none").view(tgt.shape)
            per_ex = tok_loss.sum(1) / (tgt != -100).sum(1).clamp_min(1)
            loss = (weights * per_ex).sum() / weights.abs().sum().clamp_min(1e-6)
            opt.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            step += 1
            tokens += int(mask.sum())
            ema = loss.item() if ema is None else 0.9 * ema + 0.1 * loss.item()
            elapsed = time.perf_counter() - t0
            last = Report(step, total, epoch + 1, ema, step * h.batch_size / max(elapsed, 1e-9), elapsed)
            tps = tokens / max(elapsed, 1e-9)
            metrics.TRAIN_STEPS.inc()
            metrics.TOKENS_PER_SECOND.set(tps)
            manager.progress(job.job_id, step=step, total_steps=total, epoch=epoch + 1, loss=ema,
                             examples_per_second=last.examples_per_second, tokens_per_second=tps, train_seconds=elapsed)
            if h.checkpoint_every and step % h.checkpoint_every == 0 or stop.is_set():
                torch.save({"model": model.state_dict(), "optimizer": opt.state_dict(), "step": step}, resume)
    if not stop.is_set():
        model.save_pretrained(staging)
        tok.save_pretrained(staging)
    return last

"""`webenv-worldmodel train`: train the world model on its transitions (`webenv-worldmodel dataset`).

The language model is trained from scratch on CPU (a byte-level BPE tokenizer trained on the data + a tiny
Llama), or fine-tuned from a local model directory (`--init /models/qwen`, e.g. on a GPU). Loss is computed on
the target only (the decision, the URL or the edit), not the prompt. The rest of the world model needs no
gradient: the training websites' transitions that loaded a new document are kept as exemplars (compose.py).
Writes into `--out`:
  model/               the served directory: the language model + tokenizer (save_pretrained), worldmodel.json
                       (how it was trained), exemplars.jsonl, start_states.jsonl
  checkpoint/          latest checkpoint: model, tokenizer, optimizer.pt, trainer.json (for --resume)
  metrics.jsonl        one line per logged step: step, elapsed_s, loss, eval_loss (the loss curve)
Training stops at --max-steps or --max-minutes, whichever comes first.
"""

from __future__ import annotations

import json
import math
import random
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from tqdm import tqdm
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedTokenizerBase
from webenv.worldmodel.dataset import Example, build_examples, iter_texts, read_transitions, split_examples
from webenv.worldmodel.model import TinySize, build_model, parameter_count
from webenv.worldmodel.predict import (
    EXEMPLARS_FILE,
    LINE_SURVIVAL_FILE,
    PAGE_ACTIONS_FILE,
    START_STATES_FILE,
    save_exemplars,
    save_line_survival,
    save_page_actions,
    save_start_states,
)
from webenv.worldmodel.tokenizer import train_tokenizer

META_FILE = "worldmodel.json"


@dataclass
class TrainConfig:
    """Everything a training run depends on (also saved next to the model)."""

    data: list[str]
    out: str
    init: str = ""
    history_window: int = 3
    max_lines: int = 24
    reasoning_fraction: float = 0.0
    size: str = "small"
    vocab_size: int = 4096
    max_len: int = 1024
    batch_size: int = 8
    lr: float = 2e-3
    warmup: int = 30
    max_steps: int = 1000
    max_minutes: float = 14.0
    eval_every: int = 50
    eval_examples: int = 64
    seed: int = 0
    resume: bool = False
    device: str = "auto"
    threads: int = 1
    decision_weight: float = 5.0


@dataclass
class TrainResult:
    """What a training run did; `first_loss`/`last_loss` are batch losses (token sum / batch_size*64)."""

    steps: int
    first_loss: float
    last_loss: float
    eval_loss: float
    elapsed_s: float
    parameters: int
    skipped_too_long: int
    model_dir: str
    initial_eval_loss: float = float("nan")


def _tokenize(examples: list[Example], tok: PreTrainedTokenizerBase, max_len: int) -> tuple[list[tuple[list[int], int]], int]:
    """(ids, prompt_length) per example; too long ones are skipped and counted."""
    out, skipped = [], 0
    for e in examples:
        p = tok(e.prompt, add_special_tokens=False)["input_ids"]
        t = tok(e.target, add_special_tokens=False)["input_ids"]
        ids = [tok.bos_token_id, *p, *t, tok.eos_token_id]
        if len(ids) > max_len:
            skipped += 1
            continue
        out.append((ids, len(p) + 1))
    return out, skipped


def _batch(items: list[tuple[list[int], int]], pad_id: int, device: str, decision_weight: float = 1.0) -> dict[str, torch.Tensor]:
    width = max(len(ids) for ids, _ in items)
    input_ids = torch.full((len(items), width), pad_id, dtype=torch.long)
    labels = torch.full((len(items), width), -100, dtype=torch.long)
    attn = torch.zeros((len(items), width), dtype=torch.long)
    for i, (ids, plen) in enumerate(items):
        input_ids[i, : len(ids)] = torch.tensor(ids)
        labels[i, plen : len(ids)] = torch.tensor(ids[plen:])
        attn[i, : len(ids)] = 1
    out = {"input_ids": input_ids.to(device), "labels": labels.to(device), "attention_mask": attn.to(device)}
    if decision_weight != 1.0:
        # The first target token decides "same page or navigation"; one token among ~70 gets little gradient,
        # so it is weighted up (the other tokens keep weight 1).
        weights = torch.ones((len(items), width))
        for i, (_, plen) in enumerate(items):
            weights[i, plen] = decision_weight
        out["weights"] = weights.to(device)
    return out


def _batches(data: list, batch_size: int, rng: random.Random) -> list[list]:
    """Length-bucketed batches (little padding), shuffled; items are ((ids, prompt_length), index)."""
    order = sorted(data, key=lambda x: len(x[0][0]) + rng.random())
    batches = [order[i : i + batch_size] for i in range(0, len(order), batch_size)]
    rng.shuffle(batches)
    return batches


def target_loss(model, b: dict[str, torch.Tensor], normalizer: float | None = None) -> torch.Tensor:
    """Cross-entropy on target tokens only, projecting only their hidden states onto the vocabulary.

    The prompt (the numbered state) is most of every sequence; skipping its vocabulary projection saves about a
    third of the compute of a tiny model, whose LM head is its largest matrix."""
    hidden = model.get_decoder()(input_ids=b["input_ids"], attention_mask=b["attention_mask"]).last_hidden_state
    labels = b["labels"][:, 1:]
    mask = labels != -100
    logits = model.get_output_embeddings()(hidden[:, :-1][mask])
    losses = torch.nn.functional.cross_entropy(logits.float(), labels[mask], reduction="none")
    w = b["weights"][:, 1:][mask] if "weights" in b else torch.ones_like(losses)
    # Normalise by a constant, not by this batch's token count: batches are bucketed by length, and a per-batch
    # mean gives each token of a short (same-page) batch ~10x the weight of a token of a long (navigation) one,
    # which taught the model to answer "<same>" (measured: P(<nav>) 0.28 on link clicks that navigate).
    return (losses * w).sum() / (normalizer or w.sum())


@torch.no_grad()
def evaluate_loss(model, data: list[tuple[list[int], int]], pad_id: int, device: str, batch_size: int = 8) -> float:
    """Mean target-token loss over `data`."""
    model.eval()
    total, count = 0.0, 0
    for i in range(0, len(data), batch_size):
        b = _batch(data[i : i + batch_size], pad_id, device)
        n = int((b["labels"][:, 1:] != -100).sum())
        total += float(target_loss(model, b)) * n
        count += n
    model.train()
    return total / max(count, 1)


def _save(model, tok, path: Path, cfg: TrainConfig) -> None:
    path.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(path)
    tok.save_pretrained(path)
    (path / META_FILE).write_text(json.dumps({"formats": ["axtree"], "history_window": cfg.history_window,
                                              "max_lines": cfg.max_lines, "max_len": cfg.max_len,
                                              "reasoning_fraction": cfg.reasoning_fraction, "config": asdict(cfg)}))


def train(cfg: TrainConfig, progress: bool = True) -> TrainResult:
    """Run one training; resumable from `<out>/checkpoint` when cfg.resume."""
    torch.manual_seed(cfg.seed)
    if cfg.threads:
        # One intra-op thread: on a shared 2-core machine two threads spin against each other and the other
        # processes (measured: 1.5 s/step with 1 thread vs 14-40 s with 2 under load).
        torch.set_num_threads(cfg.threads)
    rng = random.Random(cfg.seed)
    device = ("cuda" if torch.cuda.is_available() else "cpu") if cfg.device == "auto" else cfg.device
    out = Path(cfg.out)
    ckpt = out / "checkpoint"
    records = read_transitions(cfg.data)
    examples = build_examples(records, cfg.history_window, cfg.max_lines, cfg.reasoning_fraction, seed=cfg.seed)
    train_ex, test_ex = split_examples(examples)
    if not train_ex:
        raise ValueError("no training examples: every transition is in the test split")
    state = {"step": 0, "elapsed_s": 0.0}
    if cfg.resume and (ckpt / "trainer.json").exists():
        tok = AutoTokenizer.from_pretrained(ckpt)
        model = AutoModelForCausalLM.from_pretrained(ckpt)
        state = json.loads((ckpt / "trainer.json").read_text())
    elif cfg.init:
        tok = AutoTokenizer.from_pretrained(cfg.init)
        if tok.pad_token is None:
            tok.pad_token = tok.eos_token
        model = AutoModelForCausalLM.from_pretrained(cfg.init, torch_dtype=torch.bfloat16 if device == "cuda" else torch.float32)
    else:
        tok = train_tokenizer(iter_texts(train_ex), cfg.vocab_size)
        model = build_model(tok, TinySize.tiny() if cfg.size == "tiny" else TinySize(max_positions=max(cfg.max_len, 512)))
    model.to(device).train()
    train_data, skipped = _tokenize(train_ex, tok, cfg.max_len)
    eval_data, _ = _tokenize(test_ex[: cfg.eval_examples] if test_ex else train_ex[: cfg.eval_examples], tok, cfg.max_len)
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=0.01)
    if cfg.resume and (ckpt / "optimizer.pt").exists():
        opt.load_state_dict(torch.load(ckpt / "optimizer.pt"))

    def lr_at(step: int, elapsed_s: float) -> float:
        """Warmup, then cosine to 10% over whichever budget binds first: steps or minutes (so a time-limited
        run on a busy machine still anneals instead of stopping at a high learning rate)."""
        if step < cfg.warmup:
            return cfg.lr * (step + 1) / cfg.warmup
        frac = max((step - cfg.warmup) / max(1, cfg.max_steps - cfg.warmup), elapsed_s / (cfg.max_minutes * 60))
        return cfg.lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(1.0, frac))))

    out.mkdir(parents=True, exist_ok=True)
    metrics = (out / "metrics.jsonl").open("a")
    step, started = state["step"], time.monotonic() - state["elapsed_s"]
    first_loss = last_loss = eval_loss = float("nan")
    batches: list = []
    initial_eval = float("nan")
    if step == 0:
        initial_eval = evaluate_loss(model, eval_data, tok.pad_token_id, device)
        metrics.write(json.dumps({"step": 0, "elapsed_s": 0.0, "eval_loss": round(initial_eval, 4)}) + "\n")
    bar = tqdm(total=cfg.max_steps, initial=step, disable=None if progress else True, desc="train", unit="step")  # None: a terminal only
    while step < cfg.max_steps and (time.monotonic() - started) < cfg.max_minutes * 60:
        if not batches:
            batches = _batches(list(zip(train_data, range(len(train_data)), strict=True)), cfg.batch_size, rng)
        chosen = batches.pop()
        items = [x for x, _ in chosen]
        b = _batch(items, tok.pad_token_id, device, cfg.decision_weight)
        for g in opt.param_groups:
            g["lr"] = lr_at(step, time.monotonic() - started)
        loss = target_loss(model, b, normalizer=cfg.batch_size * 64.0)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        step += 1
        last_loss = float(loss.detach())
        first_loss = last_loss if math.isnan(first_loss) else first_loss
        bar.update(1)
        bar.set_postfix(loss=f"{last_loss:.3f}")
        row = {"step": step, "elapsed_s": round(time.monotonic() - started, 2), "loss": round(last_loss, 4)}
        if step % cfg.eval_every == 0 or step == cfg.max_steps:
            eval_loss = evaluate_loss(model, eval_data, tok.pad_token_id, device)
            row["eval_loss"] = round(eval_loss, 4)
            _save(model, tok, ckpt, cfg)
            torch.save(opt.state_dict(), ckpt / "optimizer.pt")
            (ckpt / "trainer.json").write_text(json.dumps({"step": step, "elapsed_s": row["elapsed_s"]}))
        metrics.write(json.dumps(row) + "\n")
        metrics.flush()
    bar.close()
    eval_loss = evaluate_loss(model, eval_data, tok.pad_token_id, device)
    elapsed = time.monotonic() - started
    metrics.write(json.dumps({"step": step, "elapsed_s": round(elapsed, 2), "eval_loss": round(eval_loss, 4), "final": True}) + "\n")
    metrics.close()
    _save(model, tok, out / "model", cfg)
    save_exemplars(records, out / "model" / EXEMPLARS_FILE, seed=cfg.seed)
    save_page_actions(records, out / "model" / PAGE_ACTIONS_FILE)
    save_start_states(records, out / "model" / START_STATES_FILE)
    save_line_survival(records, out / "model" / LINE_SURVIVAL_FILE)
    _save(model, tok, ckpt, cfg)
    torch.save(opt.state_dict(), ckpt / "optimizer.pt")
    (ckpt / "trainer.json").write_text(json.dumps({"step": step, "elapsed_s": elapsed}))
    result = TrainResult(steps=step, first_loss=first_loss, last_loss=last_loss, eval_loss=eval_loss, elapsed_s=elapsed,
                         parameters=parameter_count(model), skipped_too_long=skipped, model_dir=str(out / "model"),
                         initial_eval_loss=initial_eval)
    (out / "model" / "train.json").write_text(json.dumps(asdict(result), indent=1))
    return result


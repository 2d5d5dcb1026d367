"""Training a candidate ranker on selected steps, on CPU: the hashed scorer (webenv.agent.scorer, minutes) or
the fine-tuned encoder (webenv.agent.encoder). One loop for both: a ranker's library (`rankers.Ranker`) gives
`collate`, `scores`, `optimizers` and `clip_parameters`, and an acting wrapper gives `example`.

Loss: weighted cross-entropy of the taken candidate among the step's candidates, normalised by the
batch's total absolute weight (weights are 1 for BC and filtered BC, advantages for policy gradient); a negative
weight's term is the unlikelihood -log(1 - p) of the taken candidate, bounded where +log p is not (the group arm of
the seed-1 ablation diverged on it: training loss -32 -> -378 -> -1846, test success 21% -> 1%), plus, with
a KL coefficient, beta times the steps' mean KL to a frozen reference (`AlgorithmOptions.kl_coef`): RL from the BC
warm start made the held-out family worse with every iteration (bench/results/learning, seed 1: 26% -> 8%) while
nothing held the ranking near the warm start's.
Resumable: every `checkpoint_every` steps the model, the optimiser and the position in the schedule are
saved to the job's resume file (only the trainable parameters: the encoder's frozen layers come from its base); a restarted trainer continues from there with the same shuffles.
"""

from __future__ import annotations

import math
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from urllib.parse import urlsplit

import torch
from webenv.agent.candidates import Candidate, passage_keys
from webenv.agent.steps import accepted_answers

from .algorithms import Selected
from .rankers import Ranker


@dataclass
class Report:
    """What a training loop reports to the job."""

    step: int
    total_steps: int
    epoch: int
    loss: float
    examples_per_second: float
    train_seconds: float
    validation_loss: float = 0.0
    validation_accuracy: float = 0.0


#: A borrowed passage must read as prose: at least this many words after its heading ("Time: 41 min" is a fact of
#: another record, which on this page would look exactly like this page's own "Time: 178 min").
PROSE_WORDS = 6


def _prose(text: str) -> bool:
    body = text.split(": ", 1)[-1]
    return "; " not in text and len(body.split()) >= PROSE_WORDS


def hard_negatives(selected: Selected, n: int) -> dict[int, list[Candidate]]:
    """AlgorithmOptions.hard_negatives: per position in ``selected.steps`` (positive weight, the task's own
    instruction), up to ``n`` passage answers borrowed from other pages of the same website in the job's data, those
    sharing the most word stems with the instruction (at least one), that are not on the step's page and that the
    task's rubric does not accept (checked as the judge checks). Where the rubric has no answer fact to check (a
    navigation task), only a step that does not answer gets them: ending the task there is wrong whatever the text,
    as the page's own answer candidates at that step already are.

    Why: every policy starts on a home page, and on hand-made websites the encoder ranker answered there, at its
    first step, with a passage that shares the site's name with the question (13 of 24 development tasks,
    bench/results/learning/notes.md). On synthetic pages the passages the proposer offers mostly hold the answer,
    so in training a passage sharing words with the question was rarely the wrong action. Borrowed passages are
    such wrong actions, on every kind of page, without changing the websites."""
    if n <= 0:
        return {}

    def where(url: str) -> tuple[str, str]:  # (host, page: the URL without its fragment)
        return urlsplit(url).hostname or "", url.split("#", 1)[0]

    pool: dict[str, dict[str, tuple[str, Candidate]]] = {}  # host -> text -> (page, candidate)
    for st, _, _ in selected.steps:
        host, page = where(st.ctx.url)
        for c in st.candidates:
            if c.answer_type == "passage" and _prose(c.value):
                pool.setdefault(host, {}).setdefault(c.value, (page, c))
    keys = {text: passage_keys(text) for texts in pool.values() for text in texts}
    out: dict[int, list[Candidate]] = {}
    for i, (st, w, eid) in enumerate(selected.steps):
        task = selected.tasks.get(eid)
        if w <= 0 or task is None or st.ctx.instruction != task.instruction:
            continue
        want = passage_keys(st.ctx.instruction)
        host, page = where(st.ctx.url)
        here = {c.value for c in st.candidates if c.kind == "answer"}
        ranked = sorted((shared, t, c) for t, (url, c) in pool.get(host, {}).items()
                        if url != page and t not in here and (shared := -len(keys[t] & want)))
        borrowed = [c for _, _, c in ranked[:4 * n]]
        ok = accepted_answers(task, borrowed) if borrowed else ()
        if ok is None:  # the rubric is not checkable here: only where the step itself does not answer
            if st.target < 0 or st.candidates[st.target].kind == "answer":
                continue
            ok = ()
        chosen = [c for j, c in enumerate(borrowed) if j not in ok][:n]
        if chosen:
            out[i] = chosen
    return out


def split_examples(selected: Selected, scorer, fraction: float, seed: int, relabel_answers: bool = False,
                   negatives: int = 0):
    """(train, validation) StepExamples, held out by episode. With ``relabel_answers`` a training step with a
    positive weight at an answer the rubric accepts becomes one example per accepted answer candidate
    (StoredStep.accepted), sharing its weight: a uniform soft target over the answers that are equally right.
    With ``negatives`` (AlgorithmOptions.hard_negatives) a training step's candidates gain the passages
    `hard_negatives` borrows for it, after its own (so its targets keep their indices)."""
    episodes = sorted({eid for _, _, eid in selected.steps})
    random.Random(seed).shuffle(episodes)
    n_valid = int(len(episodes) * fraction) if len(episodes) >= 10 else 0
    held = set(episodes[:n_valid])
    extra = hard_negatives(selected, negatives)
    train, valid = [], []
    for i, (st, w, eid) in enumerate(selected.steps):
        if eid in held:  # held-out accuracy stays "the taken candidate ranked first"
            valid.append(scorer.example(st.ctx, st.candidates, st.target, w))
            continue
        cands = st.candidates + extra[i] if i in extra else st.candidates
        targets = st.accepted if relabel_answers and w > 0 and len(st.accepted) > 1 else (st.target,)
        train += [scorer.example(st.ctx, cands, t, w / len(targets)) for t in targets]
    return train, valid


def step_kl(logp: torch.Tensor, ref_logp: torch.Tensor, step_of_cand: torch.Tensor, n_steps: int) -> torch.Tensor:
    """KL(pi || pi_ref) of each step's distribution over its candidates, from flat per-candidate log-probs."""
    terms = logp.exp() * (logp - ref_logp)
    return torch.zeros(n_steps).index_add(0, step_of_cand, terms)


def _batch_loss(lib: Ranker, model: torch.nn.Module, batch: dict, reference: torch.nn.Module | None = None,
                kl_coef: float = 0.0) -> tuple[torch.Tensor, torch.Tensor]:
    from webenv.agent.scorer import step_log_probs

    scores = lib.scores(model, batch)
    n = len(batch["targets"])
    logp = step_log_probs(scores, batch["step_of_cand"], n)
    chosen = logp[batch["starts"] + batch["targets"]]
    w = batch["weights"]
    # a negative weight (a failure's advantage) pushes the taken candidate down by -log(1 - p), not by +log p:
    # bounded below by 0, its gradient fading as p -> 0 (bench/results/learning/notes.md: with +log p, group
    # advantages drove the loss to -1846 and test success from 21% to 1% in three iterations)
    push_down = -torch.log1p(-chosen.exp().clamp(max=1.0 - 1e-6))
    loss = (-(w.clamp_min(0) * chosen) + (-w).clamp_min(0) * push_down).sum() / w.abs().sum().clamp_min(1e-6)
    if reference is not None and kl_coef:
        with torch.no_grad():
            ref_logp = step_log_probs(lib.scores(reference, batch), batch["step_of_cand"], n)
        loss = loss + kl_coef * step_kl(logp, ref_logp, batch["step_of_cand"], n).mean()
    # accuracy: the step's best-scored candidate is the target
    best = torch.full((n,), -math.inf).scatter_reduce(0, batch["step_of_cand"], scores.detach(), reduce="amax")
    correct = (scores.detach()[batch["starts"] + batch["targets"]] >= best).float()
    return loss, correct


@torch.no_grad()
def evaluate(lib: Ranker, model: torch.nn.Module, examples: list, batch_size: int = 64) -> tuple[float, float]:
    if not examples:
        return 0.0, 0.0
    model.eval()
    total, right, n = 0.0, 0.0, 0
    for i in range(0, len(examples), batch_size):
        chunk = [replace(e, weight=1.0) for e in examples[i:i + batch_size]]
        loss, correct = _batch_loss(lib, model, lib.collate(chunk))
        total += loss.item() * len(chunk)
        right += correct.sum().item()
        n += len(chunk)
    model.train()
    return total / n, right / n


def trainable_state(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {name: p.detach() for name, p in model.named_parameters() if p.requires_grad}


def save_resume(model: torch.nn.Module, opts, step: int, path: Path) -> None:
    tmp = path.with_suffix(".tmp")
    torch.save({"model": trainable_state(model), "optimizers": [o.state_dict() for o in opts], "step": step}, tmp)
    tmp.replace(path)


def train(lib: Ranker, model: torch.nn.Module, train_set: list, valid_set: list, *,
          epochs: int, max_steps: int, batch_size: int, lr: float, seed: int, checkpoint_every: int,
          resume_path: Path, report: Callable[[Report], None], stopped: Callable[[], bool],
          reference: torch.nn.Module | None = None, kl_coef: float = 0.0) -> Report:
    """Optimise ``model`` (of ranker module ``lib``) in place; returns the final report. Raises nothing on stop:
    returns where it stopped. With ``reference`` and ``kl_coef`` the loss adds kl_coef * the steps' mean
    KL(model || reference) over their candidates (the reference frozen, in eval mode)."""
    per_epoch = max(1, math.ceil(len(train_set) / batch_size))
    total = min(max_steps, epochs * per_epoch) if max_steps else epochs * per_epoch
    opts = lib.optimizers(model, lr)
    clipped = lib.clip_parameters(model)
    step = 0
    if resume_path.is_file():
        state = torch.load(resume_path, map_location="cpu", weights_only=True)
        missing = set(trainable_state(model)) - set(state["model"])
        if missing:
            raise ValueError(f"resume state lacks {len(missing)} trainable tensors (e.g. {sorted(missing)[0]})")
        model.load_state_dict(state["model"], strict=False)
        for opt, st in zip(opts, state["optimizers"], strict=True):
            opt.load_state_dict(st)
        step = int(state["step"])
    model.train()
    t0 = time.perf_counter()
    done_examples = 0
    ema = None
    last = Report(step, total, step // per_epoch + 1, 0.0, 0.0, 0.0)
    while step < total:
        epoch = step // per_epoch
        order = list(range(len(train_set)))
        random.Random(seed * 1000 + epoch).shuffle(order)
        start = (step % per_epoch) * batch_size
        for i in range(start, len(order), batch_size):
            if step >= total or stopped():
                break
            batch = lib.collate([train_set[j] for j in order[i:i + batch_size]])
            loss, _ = _batch_loss(lib, model, batch, reference, kl_coef)
            for opt in opts:
                opt.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(clipped, 5.0)
            for opt in opts:
                opt.step()
            step += 1
            done_examples += len(batch["targets"])
            ema = loss.item() if ema is None else 0.9 * ema + 0.1 * loss.item()
            elapsed = time.perf_counter() - t0
            last = Report(step, total, epoch + 1, ema, done_examples / max(elapsed, 1e-9), elapsed,
                          last.validation_loss, last.validation_accuracy)
            if checkpoint_every and step % checkpoint_every == 0:
                save_resume(model, opts, step, resume_path)
            if step % 10 == 0 or step == total:
                report(last)
        if stopped():
            save_resume(model, opts, step, resume_path)
            return last
    last.validation_loss, last.validation_accuracy = evaluate(lib, model, valid_set)
    report(last)
    return last

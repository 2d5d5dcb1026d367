"""The ranker training loop's regularised terms: the KL penalty towards a reference ranker (AlgorithmOptions.kl_coef),
zero against itself, and an update under it stays nearer the reference's ranking than the same update without it;
a negative weight's bounded push-down."""

from __future__ import annotations

import copy
import random
from dataclasses import replace

import torch
from webenv.agent import scorer as lib
from webenv.agent.scorer import step_log_probs
from webenv.trainer import train_scorer


def examples(n: int, seed: int) -> list[lib.StepExample]:
    """Steps of 4 candidates with random hashed tokens; the target is candidate 0 (one the reference ranks low)."""
    rng = random.Random(seed)
    cfg = lib.ScorerConfig()
    out = []
    for _ in range(n):
        cands = [[rng.randrange(cfg.buckets) for _ in range(5)] for _ in range(4)]
        nums = [[rng.random() for _ in range(lib.N_NUMERIC)] for _ in range(4)]
        out.append(lib.StepExample(cands, nums, [rng.randrange(cfg.buckets) for _ in range(8)], target=0, weight=1.0))
    return out


def mean_kl(model, reference, steps) -> float:
    batch = lib.collate(steps)
    n = len(steps)
    with torch.no_grad():
        logp = step_log_probs(lib.scores(model, batch), batch["step_of_cand"], n)
        ref = step_log_probs(lib.scores(reference, batch), batch["step_of_cand"], n)
    return train_scorer.step_kl(logp, ref, batch["step_of_cand"], n).mean().item()


def target_p(model, steps) -> float:
    """The mean probability the model gives each step's taken candidate."""
    batch = lib.collate(steps)
    with torch.no_grad():
        logp = step_log_probs(lib.scores(model, batch), batch["step_of_cand"], len(steps))
    return logp[batch["starts"] + batch["targets"]].exp().mean().item()


def fit(model, reference, kl_coef: float, steps, tmp_path) -> None:
    train_scorer.train(lib, model, steps, [], epochs=6, max_steps=0, batch_size=8, lr=2e-2, seed=1,
                       checkpoint_every=0, resume_path=tmp_path / f"resume-{kl_coef}.pt", report=lambda r: None,
                       stopped=lambda: False, reference=reference, kl_coef=kl_coef)


def test_kl_penalty_holds_the_update_near_the_reference(tmp_path):
    torch.manual_seed(0)
    reference = lib.ScorerModel(lib.ScorerConfig()).eval().requires_grad_(False)
    steps = examples(48, seed=1)
    assert mean_kl(reference, reference, steps) == 0.0

    free, held = copy.deepcopy(reference).requires_grad_(True), copy.deepcopy(reference).requires_grad_(True)
    fit(free, None, 0.0, steps, tmp_path)
    fit(held, reference, 5.0, steps, tmp_path)
    kl_free, kl_held = mean_kl(free, reference, steps), mean_kl(held, reference, steps)
    assert kl_held < 0.5 * kl_free, (kl_held, kl_free)

    # the penalty is towards the reference only: both still moved the target up from where the reference had it
    assert target_p(free, steps) > target_p(held, steps) > target_p(reference, steps)


def test_a_failures_negative_weight_pushes_down_boundedly(tmp_path):
    """A negative advantage lowers the taken candidate's probability with a loss bounded below by 0 (the
    unlikelihood -log(1 - p)), where -w * log p would fall without bound; a positive weight is plain cross-entropy."""
    torch.manual_seed(0)
    model = lib.ScorerModel(lib.ScorerConfig())
    steps = examples(16, seed=2)
    failures = [replace(s, weight=-1.0) for s in steps]
    batch = lib.collate(failures)
    n = len(failures)
    before = target_p(model, failures)
    train_scorer.train(lib, model, failures, [], epochs=40, max_steps=0, batch_size=16, lr=5e-2, seed=1,
                       checkpoint_every=0, resume_path=tmp_path / "resume.pt", report=lambda r: None,
                       stopped=lambda: False)
    assert target_p(model, failures) < 0.5 * before
    loss, _ = train_scorer._batch_loss(lib, model, batch)
    assert 0.0 <= loss.item() < 0.1  # saturates at 0, never runs to minus infinity

    # positive weights: the same cross-entropy as before the change
    passes = [replace(s, weight=1.0) for s in steps]
    pb = lib.collate(passes)
    with torch.no_grad():
        logp = step_log_probs(lib.scores(model, pb), pb["step_of_cand"], n)
        ce = -logp[pb["starts"] + pb["targets"]].mean().item()
        got, _ = train_scorer._batch_loss(lib, model, pb)
    assert abs(got.item() - ce) < 1e-5


def test_answer_relabeling_shares_a_steps_weight_among_the_answers_the_rubric_accepts():
    """AlgorithmOptions.relabel_answers: an oracle's answer step whose rubric accepts three of the proposer's answer
    candidates becomes three examples of a third of the weight each; a failure's step and the held-out split keep
    their one target; off, nothing changes."""
    from webenv.agent.candidates import context, propose
    from webenv.agent.steps import StoredStep, accepted_answers
    from webenv.trainer.algorithms import Selected
    from webenv.v1 import common_pb2 as pb

    axtree = ('[1] heading "Fenwick X2"\n[2] term "Price"\n[3] definition "$449.00"\n[4] term "Weight"\n'
              '[5] definition "1.2 kg"\n[6] link "Home"')
    ctx = context("What is the price of the Fenwick X2?", pb.Observation(url="http://shop-0001.web.test/p/1",
                                                                          axtree=axtree), "", [], 0)
    cands = propose(ctx)
    task = pb.Task(rubric=pb.Rubric(groups=[pb.FactGroup(facts=[pb.Fact(criterion=pb.Criterion(
        answer=pb.AnswerCriterion(mode=pb.MATCH_MODE_CONTAINS, expected="449.00")))])]))
    ok = accepted_answers(task, cands)
    assert ok and all("449.00" in cands[i].action.answer.text for i in ok) and len(ok) >= 2
    assert accepted_answers(pb.Task(), cands) is None  # no answer fact: nothing to decide
    target = next(i for i in ok if cands[i].answer_type == "fact")
    step = StoredStep(0, ctx, cands, target, None, None, ok)
    sel = Selected()
    sel.steps = [(step, 1.0, "e1"), (step, -0.5, "e2")]
    scorer = lib.Scorer(lib.ScorerModel(lib.ScorerConfig()))
    on, _ = train_scorer.split_examples(sel, scorer, 0.0, 1, relabel_answers=True)
    assert sorted(e.target for e in on[:len(ok)]) == sorted(ok) and all(e.weight == 1.0 / len(ok) for e in on[:len(ok)])
    assert [(e.target, e.weight) for e in on[len(ok):]] == [(target, -0.5)]  # a failure keeps its one target
    off, _ = train_scorer.split_examples(sel, scorer, 0.0, 1)
    assert [(e.target, e.weight) for e in off] == [(target, 1.0), (target, -0.5)]


def test_hard_negatives_borrow_passages_from_the_sites_other_pages_that_the_rubric_rejects():
    """AlgorithmOptions.hard_negatives: a home-page step that clicks gains, after its own candidates, the passage of
    another page of the same site that shares the question's words, but never one the rubric accepts, one of another
    site, or one on its own page; a failure's step and the held-out split gain nothing; off, nothing changes."""
    from webenv.agent.candidates import context, propose
    from webenv.agent.steps import StoredStep
    from webenv.trainer.algorithms import Selected
    from webenv.v1 import common_pb2 as pb

    question = "When does the Fenwick Bakery open on Sundays?"

    def step(url: str, axtree: str, target_kind: str) -> StoredStep:
        ctx = context(question, pb.Observation(url=url, axtree=axtree), "", [], 0)
        cands = propose(ctx)
        return StoredStep(0, ctx, cands, next(i for i, c in enumerate(cands) if c.kind == target_kind), None, None)

    home = step("http://fenwick.web.test/", '[1] heading "Fenwick Bakery"\n[2] link "Opening hours"', "click")
    about = step("http://fenwick.web.test/about", '[1] heading "About"\n[2] paragraph "The Fenwick Bakery was '
                 'founded by two sisters on Sundays in spring."\n[3] paragraph "On Sundays the Fenwick Bakery opens at '
                 '9:00 for brunch guests."\n[4] link "Home"', "click")
    other = step("http://elsewhere.web.test/about", '[1] heading "About"\n[2] paragraph "The Fenwick Bakery of '
                 'another town opens on Sundays at noon sharp."\n[3] link "Home"', "click")
    task = pb.Task(instruction=question, rubric=pb.Rubric(groups=[pb.FactGroup(facts=[pb.Fact(
        criterion=pb.Criterion(answer=pb.AnswerCriterion(mode=pb.MATCH_MODE_CONTAINS, expected="9:00")))])]))
    sel = Selected()
    sel.steps = [(home, 1.0, "e1"), (about, 1.0, "e1"), (other, 1.0, "e2"), (home, -0.5, "e3")]
    sel.tasks = {"e1": task, "e2": task, "e3": task}
    extra = train_scorer.hard_negatives(sel, 2)
    borrowed = [c.value for c in extra[0]]
    assert borrowed == ["About: The Fenwick Bakery was founded by two sisters on Sundays in spring."]
    # the about page: its site's other page has no passage; the other site: only its own page's; a failure: none
    assert set(extra) == {0}
    scorer = lib.Scorer(lib.ScorerModel(lib.ScorerConfig()))
    on, _ = train_scorer.split_examples(sel, scorer, 0.0, 1, negatives=2)
    off, _ = train_scorer.split_examples(sel, scorer, 0.0, 1)
    assert on[0].target == off[0].target == home.target
    assert len(on[0].cand_tokens) == len(off[0].cand_tokens) + 1 and len(on) == len(off)

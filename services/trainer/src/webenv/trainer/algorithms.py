"""The training algorithms as example weights over stored, judged episodes.

- BC (behaviour cloning): every step of every selected episode is a target with weight 1. Used for the
  warm start on oracle demonstrations of the synthetic web, whose CSS-selector actions are turned into the
  element-id actions a policy sees, as targets and in the history of later steps' contexts
  (webenv.agent.steps.grounded_action).
- FILTERED_BC (WebGym's recipe): the policy's own rollouts, only those the judge passed, weight 1. This is
  REINFORCE with a binary rubric reward and no baseline: the gradient of E[R log pi] over passed episodes.
- POLICY_GRADIENT: REINFORCE with a per-task baseline, weight = reward - mean reward of the task's episodes
  in the data (the global mean for a task seen once), so failed episodes push probability away from their
  actions; weights are normalised by their absolute sum per batch.
- GROUP_RELATIVE (GRPO): episodes are grouped by ``group_id`` (a group run's k rollouts of one task; the task
  within its run for episodes collected without groups) and weighted by A = (r - mean_g) / (std_g + eps).
  Failures count (a negative advantage); a group whose rewards are all equal (all passed, all failed, or a
  single episode) carries no signal and is left out (counted as a flat group).
- PARTIAL_CREDIT: weight = the share of the rubric's fact groups the stored verdict satisfies (a group is
  satisfied when every one of its facts HOLDS), so a transaction that found the record but did not submit it
  is imitated at half weight, where filtered BC imitates nothing of it; subtask relabeling is on.
- BRANCHING (GiGPO's anchor states, made exact by ForkSession): in a branch group (an anchor and its forks, one
  ``group_id``), the steps from ``branch_step`` on are weighted by that continuation's advantage among the
  continuations from the same state, (r - mean) / (std + eps); the shared prefix, taken once, by the branch
  group's mean reward relative to the task's other branch groups (episode-level, as GiGPO's outer groups), which
  is no signal when the task has one branch group.

Options (AlgorithmOptions): the reward the advantages compare (passed, or the fact-group share); AsyncWebRL's 1/k
step normaliser (each episode's step weights divided by the number of steps it contributes); subtask relabeling
(WebGym: a rollout that satisfied every fact group of one of the task's subtasks is a success example, weight 1,
for that subtask's instruction: its steps are rebuilt with the subtask's instruction in the context). Under filtered
BC only failed rollouts are relabeled: a passed one is its whole task's example already, and relabeling it would
teach each part's instruction to go on to the other parts (on builders-f2 seed 1's data, 294 such spans against the
68 parts its failures completed, bench/results/learning/notes.md).

An episode begun along a stored one (RunSpec.starts) contributes only its own steps: the ones replayed at its start
(``start_steps``) were another episode's, and are never targets, whatever the algorithm.

Episodes that ended in an error (an environment or peer failure) are never examples, in every algorithm: they
are counted and left out before any reward or group statistic is computed, so a crashed browser is not a
reward of 0 that would push probability away from actions that were never judged.

The repetition filter (WebGym) drops as targets the steps whose action left the page unchanged, keeping
them in the history that later steps are built from (an answer leaves the page as it was by nature and is
never dropped).
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field

from webenv.agent.steps import StoredStep, episode_steps
from webenv.v1 import collector_pb2, common_pb2, trainer_pb2

A = trainer_pb2
DEFAULT_EPSILON = 1e-6


@dataclass
class Selected:
    """Steps chosen for training with their weights, and what was left out."""

    steps: list[tuple[StoredStep, float, str]] = field(default_factory=list)  # (step, weight, episode id)
    episodes: int = 0
    unmapped: int = 0
    repeated: int = 0
    policy_versions: set[str] = field(default_factory=set)
    errored: int = 0  # episodes left out because they ended in an error
    relabeled: int = 0  # examples added by subtask relabeling
    flat_groups: int = 0  # groups whose rewards were all equal (no signal)
    tasks: dict[str, common_pb2.Task] = field(default_factory=dict)  # episode id -> its task (rubric checks)


@dataclass(frozen=True)
class Span:
    """Steps ``[first, last)`` of one episode as targets with one weight (``last`` -1: to the end)."""

    episode: collector_pb2.StoredEpisode
    weight: float
    first: int = 0
    last: int = -1
    instruction: str = ""  # a subtask's, for relabeled examples


def satisfied_groups(verdict: common_pb2.Verdict) -> set[str]:
    """Fact groups of a verdict whose every fact holds."""
    holds: dict[str, bool] = {}
    for r in verdict.results:
        holds[r.group_id] = holds.get(r.group_id, True) and r.outcome == common_pb2.FACT_OUTCOME_HOLDS
    return {g for g, ok in holds.items() if ok}


def fact_group_share(ep: collector_pb2.StoredEpisode) -> float:
    """Share of the rubric's fact groups the stored verdict satisfies (passed or not for a verdict without facts)."""
    groups = [g.group_id for g in ep.task.rubric.groups] or sorted({r.group_id for r in ep.verdict.results})
    if not groups:
        return 1.0 if ep.passed else 0.0
    done = satisfied_groups(ep.verdict)
    return sum(1 for g in groups if g in done) / len(groups)


def reward(ep: collector_pb2.StoredEpisode, kind: int) -> float:
    if kind == A.REWARD_KIND_FACT_GROUPS:
        return fact_group_share(ep)
    return 1.0 if ep.passed else 0.0


def _normalised(rewards: list[float], eps: float) -> list[float] | None:
    """(r - mean) / (std + eps), or None when every reward is the same (no signal)."""
    if len(rewards) < 2 or max(rewards) - min(rewards) < 1e-12:
        return None
    mean = sum(rewards) / len(rewards)
    std = math.sqrt(sum((r - mean) ** 2 for r in rewards) / len(rewards))
    return [(r - mean) / (std + eps) for r in rewards]


def group_key(ep: collector_pb2.StoredEpisode) -> str:
    """The group an episode is compared within: its group id, else its task within its run."""
    return ep.group_id or f"{ep.run_id}/{ep.task.task_id}"


def _group_relative(episodes, kind: int, eps: float, out: Selected) -> list[Span]:
    groups: dict[str, list[collector_pb2.StoredEpisode]] = defaultdict(list)
    for ep in episodes:
        groups[group_key(ep)].append(ep)
    spans = []
    for key in sorted(groups):
        members = groups[key]
        adv = _normalised([reward(ep, kind) for ep in members], eps)
        if adv is None:
            out.flat_groups += 1
            continue
        spans += [Span(ep, a) for ep, a in zip(members, adv, strict=True)]
    return spans


def _branching(episodes, kind: int, eps: float, out: Selected) -> list[Span]:
    groups: dict[str, list[collector_pb2.StoredEpisode]] = defaultdict(list)
    for ep in episodes:
        groups[group_key(ep)].append(ep)
    by_task: dict[str, list[tuple[str, float]]] = defaultdict(list)  # task -> (group, mean reward) of branch groups
    spans = []
    for key in sorted(groups):
        members = sorted(groups[key], key=lambda e: e.episode_id)  # the anchor's id sorts before its forks'
        t = max((ep.branch_step for ep in members if ep.parent_episode_id), default=0)
        rewards = [reward(ep, kind) for ep in members]
        by_task[members[0].task.task_id].append((key, sum(rewards) / len(rewards)))
        adv = _normalised(rewards, eps)
        if adv is None:
            out.flat_groups += 1
            continue
        spans += [Span(ep, a, first=t) for ep, a in zip(members, adv, strict=True)]
    for means in by_task.values():
        adv = _normalised([m for _, m in means], eps)
        if adv is None:
            continue
        for (key, _), a in zip(means, adv, strict=True):
            members = sorted(groups[key], key=lambda e: e.episode_id)
            t = max((ep.branch_step for ep in members if ep.parent_episode_id), default=0)
            if t:
                spans.append(Span(members[0], a, first=0, last=t))
    return spans


def spans(episodes: Sequence[collector_pb2.StoredEpisode], algorithm: int,
          options: trainer_pb2.AlgorithmOptions | None = None, out: Selected | None = None) -> list[Span]:
    """What each algorithm trains on: spans of steps with their weights (errored episodes left out)."""
    options = options or trainer_pb2.AlgorithmOptions()
    out = out if out is not None else Selected()
    eps = options.advantage_epsilon or DEFAULT_EPSILON
    kind = options.reward or (A.REWARD_KIND_FACT_GROUPS if algorithm == A.TRAINING_ALGORITHM_PARTIAL_CREDIT
                              else A.REWARD_KIND_PASSED)
    kept = [ep for ep in episodes if not ep.error]
    out.errored += len(episodes) - len(kept)
    if algorithm == A.TRAINING_ALGORITHM_GROUP_RELATIVE:
        result = _group_relative(kept, kind, eps, out)
    elif algorithm == A.TRAINING_ALGORITHM_BRANCHING:
        result = _branching(kept, kind, eps, out)
    elif algorithm == A.TRAINING_ALGORITHM_POLICY_GRADIENT:
        rewards = [reward(ep, kind) for ep in kept]
        by_task: dict[str, list[float]] = defaultdict(list)
        for ep, r in zip(kept, rewards, strict=True):
            by_task[ep.task.task_id].append(r)
        overall = sum(rewards) / len(rewards) if rewards else 0.0
        result = [Span(ep, r - (sum(by_task[ep.task.task_id]) / len(by_task[ep.task.task_id])
                                if len(by_task[ep.task.task_id]) > 1 else overall))
                  for ep, r in zip(kept, rewards, strict=True)]
    elif algorithm == A.TRAINING_ALGORITHM_FILTERED_BC:
        result = [Span(ep, 1.0) for ep in kept if ep.passed]
    elif algorithm == A.TRAINING_ALGORITHM_PARTIAL_CREDIT:
        result = [Span(ep, fact_group_share(ep)) for ep in kept]
    else:
        result = [Span(ep, 1.0) for ep in kept]
    if options.relabel_subtasks or algorithm == A.TRAINING_ALGORITHM_PARTIAL_CREDIT:
        # filtered BC imitates a passed rollout as the whole task's success already: only the failures' subtasks are new
        result += relabeled([ep for ep in kept if not ep.passed] if algorithm == A.TRAINING_ALGORITHM_FILTERED_BC
                            else kept)
    return [s for s in result if abs(s.weight) >= 1e-9]


def relabeled(episodes: Sequence[collector_pb2.StoredEpisode]) -> list[Span]:
    """Subtask relabeling: each episode whose verdict satisfies a subtask's groups, as a success for that subtask."""
    out = []
    for ep in episodes:
        if not ep.task.subtasks:
            continue
        done = satisfied_groups(ep.verdict)
        for sub in ep.task.subtasks:
            if sub.instruction and sub.group_ids and set(sub.group_ids) <= done:
                out.append(Span(ep, 1.0, instruction=sub.instruction))
    return out


def select(episodes: Sequence[collector_pb2.StoredEpisode], algorithm: int, drop_repeated: bool,
           options: trainer_pb2.AlgorithmOptions | None = None, sampled_targets: bool = False) -> Selected:
    """The weighted step examples of ``algorithm`` over ``episodes``. With ``sampled_targets`` (language-model
    jobs) a step that stored the tokens its policy generated is an example whatever the rule proposer makes of it:
    its target is those tokens, not a candidate."""
    options = options or trainer_pb2.AlgorithmOptions()
    out = Selected()
    chosen: set[str] = set()
    for span in spans(episodes, algorithm, options, out):
        ep = span.episode
        first = max(span.first, ep.start_steps)  # replayed steps (RunSpec.starts) were not the policy's
        rows = []
        for st in episode_steps(ep, span.instruction):
            if st.index < first or (span.last >= 0 and st.index >= span.last):
                continue
            rec = ep.trajectory.steps[st.index]
            if drop_repeated and rec.repeated_state and rec.action.WhichOneof("kind") != "answer":
                out.repeated += 1
                continue
            if st.target < 0 and not (sampled_targets and rec.completion_token_ids):
                out.unmapped += 1
                continue
            rows.append(st)
        if not rows:
            continue
        n = (len(ep.trajectory.steps) if span.last < 0 else span.last) - first
        w = span.weight / max(n, 1) if options.step_normalize else span.weight
        out.steps += [(st, w, ep.episode_id) for st in rows]
        out.tasks.setdefault(ep.episode_id, ep.task)
        if span.instruction:
            out.relabeled += len(rows)
        if ep.episode_id not in chosen:
            chosen.add(ep.episode_id)
            out.episodes += 1
            if ep.policy_version:
                out.policy_versions.add(ep.policy_version)
    return out


def episode_weights(episodes: Sequence[collector_pb2.StoredEpisode], algorithm: int,
                    options: trainer_pb2.AlgorithmOptions | None = None) -> dict[str, list[tuple[int, int, float]]]:
    """Per episode id, its weighted spans (first, last, weight): what each algorithm makes of the data (tests,
    reports)."""
    out: dict[str, list[tuple[int, int, float]]] = defaultdict(list)
    for s in spans(episodes, algorithm, options):
        out[s.episode.episode_id + (f"#{s.instruction}" if s.instruction else "")].append((s.first, s.last, s.weight))
    return dict(out)

"""Drawing a run's episodes from the task catalog (WebGym's sampling variants), reproducibly by seed.

Group rollouts (``group_size`` k): each draw is one task run k times with distinct seeds, the group's episodes
planned next to each other so that a straggler cutoff leaves whole groups rather than one episode of many.

The frontier curriculum weighs each task by p(1 - p), p its Laplace-smoothed pass rate (passed + 1) / (tried + 2)
in the policy's stored episodes: the variance of a Bernoulli reward, which is what a group-relative or
baseline-corrected gradient can learn from (a task always solved or always failed gives every rollout the same
reward, so no signal). Smoothing instead of a floor constant: a task never tried weighs 1/4 (as much as one solved
half the time), one failed once 2/9, one failed 20 times of 20 ~0.04, so it is still drawn now and then and the
curriculum notices when it moves.

The template frontier computes the same weight on the pooled history of the task's template (``Task.template_id``,
WebArena's intent template; a task without one is its own template). Measured on the learning benchmark's
collections (bench/results/learning/notes.md): the train split holds about 2,500 tasks, so 200 rollouts an
iteration drew about 190 distinct tasks, nearly all untried, and the task frontier drew uniformly; by template
(147 of them, about 20 rollouts each over five iterations) 46 were never solved and took 32% of the rollouts, which
filtered BC learns nothing from.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from webenv.v1 import collector_pb2, common_pb2

# Hard-biased sampling weighs tasks by difficulty so hard tasks are drawn most often, easy ones still sometimes.
HARD_BIAS_WEIGHTS = {
    common_pb2.DIFFICULTY_EASY: 1.0,
    common_pb2.DIFFICULTY_MEDIUM: 2.0,
    common_pb2.DIFFICULTY_HARD: 4.0,
}


@dataclass(frozen=True)
class PlannedEpisode:
    """One episode to run: which task, its index in the run, its seed and its group (the draw it belongs to)."""

    index: int
    task: common_pb2.Task
    seed: int
    group: int = -1  # the draw's index when the run has groups (-1: none)


@dataclass(frozen=True)
class TaskHistory:
    """How often the policy was tried on one task and passed it (stored, non-errored episodes)."""

    tried: int
    passed: int


def frontier_weight(h: TaskHistory | None) -> float:
    """p(1 - p) with p = (passed + 1) / (tried + 2); 1/4 for a task never tried."""
    tried, passed = (h.tried, h.passed) if h is not None else (0, 0)
    p = (passed + 1) / (tried + 2)
    return p * (1 - p)


FRONTIERS = (collector_pb2.SAMPLING_STRATEGY_FRONTIER, collector_pb2.SAMPLING_STRATEGY_TEMPLATE_FRONTIER)


def template_of(task: common_pb2.Task) -> str:
    """The template a task's pass rate is pooled over by the template frontier (the task itself when unset)."""
    return task.template_id or task.task_id


def frontier_weights(pool: Sequence[common_pb2.Task], history: Mapping[str, TaskHistory], *,
                     by_template: bool) -> list[float]:
    """Each task's frontier weight: p(1 - p) of its own history, or of its template's pooled over ``pool``."""
    if not by_template:
        return [frontier_weight(history.get(t.task_id)) for t in pool]
    pooled: dict[str, list[int]] = {}
    for t in pool:
        h = history.get(t.task_id)
        acc = pooled.setdefault(template_of(t), [0, 0])
        if h is not None:
            acc[0] += h.tried
            acc[1] += h.passed
    return [frontier_weight(TaskHistory(*pooled[template_of(t)])) for t in pool]


def eligible(tasks: Sequence[common_pb2.Task], strategy: int) -> list[common_pb2.Task]:
    """Tasks a strategy may draw from (easy-only drops the rest)."""
    if strategy == collector_pb2.SAMPLING_STRATEGY_EASY_ONLY:
        return [t for t in tasks if t.difficulty == common_pb2.DIFFICULTY_EASY]
    return list(tasks)


def plan(
    tasks: Sequence[common_pb2.Task], *, strategy: int, episodes: int, repeats: int, seed: int, group_size: int = 1,
    history: Mapping[str, TaskHistory] | None = None,
) -> list[PlannedEpisode]:
    """The run's episodes in order.

    With ``episodes`` > 0, ``episodes / group_size`` tasks are drawn (uniformly, hard-biased or on a frontier)
    with replacement; otherwise each task is drawn ``repeats`` times (the frontier draws as many, by weight).
    Every draw yields ``group_size`` episodes with distinct seeds. Draw order is shuffled by the seed, so a
    partial run (straggler cutoff) is still a fair sample.
    """
    pool = eligible(tasks, strategy)
    rng = random.Random(seed)
    if not pool:
        return []
    k = max(group_size, 1)
    draws = episodes // k if episodes > 0 else len(pool) * max(repeats, 1)
    if strategy in FRONTIERS:
        weights = frontier_weights(pool, history or {},
                                   by_template=strategy == collector_pb2.SAMPLING_STRATEGY_TEMPLATE_FRONTIER)
        chosen = rng.choices(pool, weights=weights, k=draws)
    elif episodes > 0:
        if strategy == collector_pb2.SAMPLING_STRATEGY_HARD_BIASED:
            weights = [HARD_BIAS_WEIGHTS.get(t.difficulty, 2.0) for t in pool]
            chosen = rng.choices(pool, weights=weights, k=draws)
        elif draws <= len(pool):
            chosen = rng.sample(pool, k=draws)
        else:
            chosen = [pool[i % len(pool)] for i in range(draws)]
            rng.shuffle(chosen)
    else:
        chosen = [t for t in pool for _ in range(max(repeats, 1))]
        rng.shuffle(chosen)
    out: list[PlannedEpisode] = []
    for g, t in enumerate(chosen):
        seeds: set[int] = set()
        while len(seeds) < k:  # distinct within the group, or two of its rollouts would be the same one
            s = rng.randrange(2**31)
            if s not in seeds:
                seeds.add(s)
                out.append(PlannedEpisode(index=len(out), task=t, seed=s, group=g if k > 1 else -1))
    return out

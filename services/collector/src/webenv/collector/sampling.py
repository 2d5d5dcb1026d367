"""Drawing a run's episodes from the task catalog (WebGym's sampling variants), reproducibly by seed."""

from __future__ import annotations

import random
from collections.abc import Sequence
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
    """One episode to run: which task, its index in the run and its seed."""

    index: int
    task: common_pb2.Task
    seed: int


def eligible(tasks: Sequence[common_pb2.Task], strategy: int) -> list[common_pb2.Task]:
    """Tasks a strategy may draw from (easy-only drops the rest)."""
    if strategy == collector_pb2.SAMPLING_STRATEGY_EASY_ONLY:
        return [t for t in tasks if t.difficulty == common_pb2.DIFFICULTY_EASY]
    return list(tasks)


def plan(
    tasks: Sequence[common_pb2.Task], *, strategy: int, episodes: int, repeats: int, seed: int
) -> list[PlannedEpisode]:
    """The run's episodes in order.

    With ``episodes`` > 0 tasks are drawn (uniformly or hard-biased) with replacement; otherwise each task is run
    ``repeats`` times. Task order is shuffled by the seed, so a partial run (straggler cutoff) is still a fair sample.
    """
    pool = eligible(tasks, strategy)
    rng = random.Random(seed)
    if not pool:
        return []
    if episodes > 0:
        if strategy == collector_pb2.SAMPLING_STRATEGY_HARD_BIASED:
            weights = [HARD_BIAS_WEIGHTS.get(t.difficulty, 2.0) for t in pool]
            chosen = rng.choices(pool, weights=weights, k=episodes)
        elif episodes <= len(pool) and strategy != collector_pb2.SAMPLING_STRATEGY_HARD_BIASED:
            chosen = rng.sample(pool, k=episodes)
        else:
            chosen = [pool[i % len(pool)] for i in range(episodes)]
            rng.shuffle(chosen)
    else:
        chosen = [t for t in pool for _ in range(max(repeats, 1))]
        rng.shuffle(chosen)
    return [PlannedEpisode(index=i, task=t, seed=rng.randrange(2**31)) for i, t in enumerate(chosen)]

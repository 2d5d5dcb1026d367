"""The training algorithms as example weights over stored, judged episodes.

- BC (behaviour cloning): every step of every selected episode is a target with weight 1. Used for the
  warm start on oracle demonstrations of the synthetic web, whose CSS-selector actions are turned into the
  element-id actions a policy sees (webenv.agent.steps.target_index).
- FILTERED_BC (WebGym's recipe): the policy's own rollouts, only those the judge passed, weight 1. This is
  REINFORCE with a binary rubric reward and no baseline: the gradient of E[R log pi] over passed episodes.
- POLICY_GRADIENT: REINFORCE with a per-task baseline, weight = reward - mean reward of the task's episodes
  in the data (the global mean for a task seen once), so failed episodes push probability away from their
  actions; weights are normalised by their absolute sum per batch.

The repetition filter (WebGym) drops as targets the steps whose action left the page unchanged, keeping
them in the history that later steps are built from (an answer leaves the page as it was by nature and is
never dropped).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field

from webenv.agent.steps import StoredStep, episode_steps
from webenv.v1 import collector_pb2, trainer_pb2


@dataclass
class Selected:
    """Steps chosen for training with their weights, and what was left out."""

    steps: list[tuple[StoredStep, float, str]] = field(default_factory=list)  # (step, weight, episode id)
    episodes: int = 0
    unmapped: int = 0
    repeated: int = 0
    policy_versions: set[str] = field(default_factory=set)


def episode_weights(episodes: Sequence[collector_pb2.StoredEpisode], algorithm: int) -> list[float]:
    rewards = [1.0 if ep.passed else 0.0 for ep in episodes]
    if algorithm == trainer_pb2.TRAINING_ALGORITHM_POLICY_GRADIENT:
        by_task: dict[str, list[float]] = defaultdict(list)
        for ep, r in zip(episodes, rewards, strict=True):
            by_task[ep.task.task_id].append(r)
        overall = sum(rewards) / len(rewards) if rewards else 0.0
        return [r - (sum(by_task[ep.task.task_id]) / len(by_task[ep.task.task_id])
                     if len(by_task[ep.task.task_id]) > 1 else overall)
                for ep, r in zip(episodes, rewards, strict=True)]
    if algorithm == trainer_pb2.TRAINING_ALGORITHM_FILTERED_BC:
        return rewards
    return [1.0] * len(episodes)


def select(episodes: Sequence[collector_pb2.StoredEpisode], algorithm: int, drop_repeated: bool) -> Selected:
    out = Selected()
    for ep, w in zip(episodes, episode_weights(episodes, algorithm), strict=True):
        if abs(w) < 1e-9:
            continue
        out.episodes += 1
        if ep.policy_version:
            out.policy_versions.add(ep.policy_version)
        for st in episode_steps(ep):
            rec = ep.trajectory.steps[st.index]
            if drop_repeated and rec.repeated_state and rec.action.WhichOneof("kind") != "answer":
                out.repeated += 1
                continue
            if st.target < 0:
                out.unmapped += 1
                continue
            out.steps.append((st, w, ep.episode_id))
    return out

"""The learning loop's arms (`webenv train --algorithm ...`): how each one collects and what its training job asks.

| arm | collects (per iteration, `collect` episodes) | trains |
| --- | --- | --- |
| filtered_bc | one rollout per drawn task | FILTERED_BC: passed rollouts, weight 1 (WebGym) |
| policy_gradient | one rollout per drawn task | POLICY_GRADIENT: reward - the task's mean |
| group | `collect / k` tasks, k rollouts each (RunSpec.group_size) | GROUP_RELATIVE: (r - mean) / std in the group |
| partial | one rollout per drawn task | PARTIAL_CREDIT: share of fact groups + subtask relabeling |
| branching | `collect / k` anchors forked k - 1 times at `branch_step` | BRANCHING: advantages relative to the anchor state |

Every arm spends the same budget: `collect` episodes an iteration (rounded down to a multiple of k for the group
arms), so an ablation compares the signals, not the amounts of data. Only filtered BC (and the BC warm start)
asks the collector for passed episodes alone; the others need the failures, which is their point.
"""

from __future__ import annotations

from dataclasses import dataclass

from webenv.v1 import collector_pb2, trainer_pb2

T = trainer_pb2


@dataclass(frozen=True)
class Arm:
    """One algorithm of the ablation."""

    algorithm: int
    groups: bool = False  # collects group rollouts
    branching: bool = False  # collects branch groups

    def collect(self, spec: collector_pb2.RunSpec, *, group_size: int, branch_step: int) -> None:
        """Shape an iteration's collection run (``spec.episodes`` set to the budget beforehand)."""
        k = max(group_size, 2)
        if self.groups or self.branching:
            spec.episodes = max(k, spec.episodes - spec.episodes % k)
        if self.groups:
            spec.group_size = k
        if self.branching:
            spec.branching.count, spec.branching.at_step = k - 1, branch_step

    def job(self, spec: trainer_pb2.JobSpec, *, step_normalize: bool, kl_coef: float = 0.0,
            kl_reference: str = "") -> None:
        """Shape the iteration's training job (with ``kl_coef``, a KL penalty towards ``kl_reference``)."""
        spec.algorithm = self.algorithm
        spec.options.step_normalize = step_normalize
        if kl_coef:
            spec.options.kl_coef, spec.options.kl_reference = kl_coef, kl_reference
        if self.algorithm != T.TRAINING_ALGORITHM_FILTERED_BC:
            spec.data.filter.ClearField("passed")


ARMS = {
    "filtered_bc": Arm(T.TRAINING_ALGORITHM_FILTERED_BC),
    "policy_gradient": Arm(T.TRAINING_ALGORITHM_POLICY_GRADIENT),
    "group": Arm(T.TRAINING_ALGORITHM_GROUP_RELATIVE, groups=True),
    "partial": Arm(T.TRAINING_ALGORITHM_PARTIAL_CREDIT),
    "branching": Arm(T.TRAINING_ALGORITHM_BRANCHING, branching=True),
}

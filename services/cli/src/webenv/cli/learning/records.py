"""What the loop records: an evaluation of a version on a suite (with its Wilson interval), the phases' wall time,
what "unseen" means on each suite, and why a failed episode failed."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

from webenv.v1 import collector_pb2, common_pb2

#: What "unseen" means on each suite's rows.
SUITES = {
    "train": "seen: the training websites themselves",
    "validation": "websites never trained on, of trained families; every choice (checkpoint) is made here",
    "test": "new instances of known task templates on websites never trained on (reported, never tuned on)",
    "family": "a site family never trained on (leave-one-family-out)",
    "builders": "websites built by site builders never trained on (own markup, URL scheme, navigation, widgets and "
                "words), of trained families",
    "miniwob": "MiniWoB++ tasks, zero-shot (no MiniWoB episode is ever trained on)",
    "handmade": "websites written by hand, unlike the generator's templates (facts in prose, lists, tables), zero-shot",
}
#: The family of the MiniWoB++ tasks (the sites service's catalog), excluded from every training job.
MINIWOB_FAMILY = "miniwob"
KINDS = {common_pb2.TASK_KIND_INFORMATION: "information", common_pb2.TASK_KIND_NAVIGATION: "navigation",
         common_pb2.TASK_KIND_TRANSACTION: "transaction"}
DIFFS = {common_pb2.DIFFICULTY_EASY: "easy", common_pb2.DIFFICULTY_MEDIUM: "medium", common_pb2.DIFFICULTY_HARD: "hard"}



@dataclass
class Evaluation:
    version: str
    split: str  # the suite: train, validation, test, family:<name>, builders:<names>, miniwob
    run_id: str
    episodes: int
    passed: int
    by_kind: dict[str, list[int]] = field(default_factory=dict)  # kind -> [passed, total]
    by_difficulty: dict[str, list[int]] = field(default_factory=dict)
    truncated: int = 0  # episodes cut at their step cap
    errored: int = 0  # episodes the environment or a peer failed (counted as failures)
    tasks: str = ""  # digest of the task ids run: equal digests = the same tasks
    outcomes: dict[str, list[int]] = field(default_factory=dict)  # task id -> [passed, episodes]: paired comparisons
    by_builder: dict[str, list[int]] = field(default_factory=dict)  # "builder/kind" -> [passed, total] (synthetic)

    @property
    def rate(self) -> float:
        return self.passed / self.episodes if self.episodes else 0.0

    def interval(self) -> tuple[float, float]:
        return wilson(self.passed, self.episodes)


def wilson(k: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """Wilson score 95% interval of a binomial proportion."""
    if n == 0:
        return 0.0, 0.0
    p = k / n
    d = 1 + z * z / n
    c = (p + z * z / (2 * n)) / d
    h = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / d
    return max(0.0, c - h), min(1.0, c + h)


@dataclass
class Timing:
    collect: float = 0.0
    train: float = 0.0
    evaluate: float = 0.0
    demos: float = 0.0


def reason_key(ep: collector_pb2.StoredEpisode) -> str:
    """Why a failed episode failed, as a key that groups alike episodes: the first failing fact's criterion kind and
    reason with quoted values and numbers masked ("answer: answer does not contain '…'"), or the error, or the cap."""
    if ep.error:
        return "errored: " + re.sub(r"\d+", "N", ep.error)[:80]
    for r in ep.verdict.results:
        if r.outcome != common_pb2.FACT_OUTCOME_HOLDS:
            reason = re.sub(r"\d+", "N", re.sub(r"'[^']*'|\"[^\"]*\"", "'…'", r.reason))
            return f"{r.criterion_kind or 'fact'}: {reason[:90]}"
    return "cut at the step cap" if ep.truncated else "no failing fact recorded"

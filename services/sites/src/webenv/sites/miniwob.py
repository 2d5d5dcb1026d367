"""MiniWoB++ from the `miniwob` wheel: its html/ folder is served under miniwob.web.test, its tasks listed.

The pages reward themselves (WOB_REWARD_GLOBAL / WOB_RAW_REWARD_GLOBAL); the farm's MiniWoB adapter starts
episodes and reads the reward, so a MiniWoB task's rubric is one env_reward fact. The utterance is drawn
by the page at episode start, so the instruction here only names the task, and there is no oracle.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

from webenv.splits import split_of
from webenv.v1 import common_pb2 as pb

HOST = "miniwob.web.test"
# Tasks whose pages need more than clicks and typing (drag, canvas geometry): still listed, labelled hard.
HARD = {"bisect-angle", "chase-circle", "circle-center", "drag-box", "drag-circle", "drag-cube", "drag-items",
        "drag-items-grid", "drag-shapes", "drag-single-shape", "drag-sort-numbers", "highlight-text",
        "highlight-text-2", "moving-items", "right-angle", "simon-says", "sign-agreement", "text-transform"}


def html_dir() -> Path | None:
    """The wheel's html/ folder, found without importing miniwob (which pulls in gymnasium)."""
    spec = importlib.util.find_spec("miniwob")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(next(iter(spec.submodule_search_locations))) / "html"
    return path if (path / "miniwob").is_dir() else None


def task_names(root: Path) -> list[str]:
    return sorted(p.stem for p in (root / "miniwob").glob("*.html"))


def miniwob_tasks(root: Path) -> list[pb.Task]:
    out = []
    for name in task_names(root):
        task_id = f"miniwob/{name}"
        rubric = pb.Rubric(rubric_id=task_id, version=1)
        g = rubric.groups.add(group_id="reward", description="The page rewards the episode")
        g.facts.add(fact_id="reward.0", description="The final raw reward is positive",
                    criterion=pb.Criterion(env_reward=pb.EnvRewardCriterion(min_reward=1e-9)))
        out.append(pb.Task(
            task_id=task_id, source=pb.TASK_SOURCE_MINIWOB, kind=pb.TASK_KIND_TRANSACTION,
            instruction=f"Solve the MiniWoB++ task '{name}': follow the instruction shown at the top of the page.",
            start_url=f"http://{HOST}/miniwob/{name}.html", site=HOST, family="miniwob", split=split_of(HOST),
            difficulty=pb.DIFFICULTY_HARD if name in HARD else pb.DIFFICULTY_EASY, rubric=rubric,
            max_steps=10, timeout_seconds=10.0, category="miniwob", metadata={"miniwob_task": name},
        ))
    return out

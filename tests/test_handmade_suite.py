"""The hand-made websites' suite through the real services: the sites service serves the hand-written sites, the
learning loop finds their tasks in the catalog by their file, and the oracle solves every one of them on the farm,
graded by the judge, under the loop's step caps (the suite's ceiling is 100%, so a task a policy fails there is one it
could have solved). A loop asking for more hand-made tasks than the catalog has is refused, naming the field."""

from __future__ import annotations

import pytest
from webenv.cli.learning import HANDMADE_FILE, Loop, LoopConfig
from webenv.cli.stack import Stack
from webenv.v1 import common_pb2, task_pb2

pytestmark = pytest.mark.timeout(600)


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    s = Stack(tmp_path_factory.mktemp("handmade"), free_ports=True, sites_count=8)
    s.start(("sites", "browser", "policy", "judge", "collector"), timeout=180)
    yield s
    s.stop()


def loop_of(stack: Stack, tmp_path, **kw) -> Loop:
    cfg = LoopConfig(miniwob_tasks=0, validation_episodes=0, baselines=(), holdout_family="", heldout_builders=(),
                     out_dir=str(tmp_path), **kw)
    return Loop(cfg, collector=stack.address("collector"), trainer="127.0.0.1:1", policy=stack.address("policy"),
                sites=stack.address("sites"), say=lambda s: None)


def test_the_oracle_solves_every_hand_made_task_on_the_farm(stack, tmp_path):
    loop = loop_of(stack, tmp_path, handmade_tasks=40)
    loop.prepare()
    assert len(loop.handmade_ids) == 40 and all(t.startswith("rubric/handmade-") for t in loop.handmade_ids)
    tasks = loop.sites.ListTasks(task_pb2.ListTasksRequest(
        filter=task_pb2.TaskFilter(task_ids=list(loop.handmade_ids)), page_size=100), timeout=30).tasks
    hosts = {t.site for t in tasks}
    assert len(hosts) >= 5 and not any(h.split(".")[0] in ("shop", "forum", "wiki") or "-" in h for h in hosts), hosts
    assert all(t.source == common_pb2.TASK_SOURCE_RUBRIC_JSON and t.oracle and t.oracle[-1].HasField("answer")
               for t in tasks)
    ev = loop.evaluate_handmade("oracle", "eval-oracle-handmade")
    assert ev.split == "handmade" and ev.episodes == 40 and ev.errored == 0
    failed = sorted(t for t, (p, n) in ev.outcomes.items() if p < n)
    assert ev.passed == 40, failed
    assert set(ev.by_kind) == {"information", "navigation"}
    # what bounds a ranker here: of the 28 information tasks, those whose answer page offers an accepted candidate
    reach = loop.answer_reach("handmade", ev.run_id)
    assert reach["tasks"] == ev.by_kind["information"][1] == 28
    assert reach["one"] + len(reach["missed"]) == 28 and reach["one"] <= reach["each"] <= 28
    assert loop.result(0.0)["answer_reach"]["handmade"] == reach


def test_more_hand_made_tasks_than_the_catalog_has_are_refused(stack, tmp_path):
    with pytest.raises(ValueError, match=rf"^handmade_tasks: the catalog has 40 hand-made tasks \({HANDMADE_FILE}\)"):
        loop_of(stack, tmp_path, handmade_tasks=41).prepare()

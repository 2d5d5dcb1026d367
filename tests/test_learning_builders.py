"""The learning loop's outside suites through the real services (issue 48): the held-out site builders' websites as a
suite of their own (test split, trained families, never trained on), every MiniWoB++ task the catalog serves as the
zero-shot suite, and the report's success by site builder. A held-out builder that has train or validation websites
is refused, naming the option; an unknown builder is the catalog's INVALID_ARGUMENT naming filter.builders."""

from __future__ import annotations

import grpc
import pytest
from webenv import paging
from webenv.cli.learning import Loop, LoopConfig, write_report
from webenv.cli.stack import Stack
from webenv.v1 import common_pb2, task_pb2

pytestmark = pytest.mark.timeout(600)


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    s = Stack(tmp_path_factory.mktemp("builders"), free_ports=True, sites_count=40)
    s.start(("sites", "browser", "policy", "judge", "collector"), timeout=180)
    yield s
    s.stop()


def loop_of(stack: Stack, tmp_path, **kw) -> Loop:
    cfg = LoopConfig(**{"validation_episodes": 0, "baselines": (), "holdout_family": "", "handmade_tasks": 0,
                        "out_dir": str(tmp_path), **kw})
    return Loop(cfg, collector=stack.address("collector"), trainer="127.0.0.1:1", policy=stack.address("policy"),
                sites=stack.address("sites"), say=lambda s: None)


def test_held_out_builders_are_a_suite_of_their_own_and_miniwob_is_every_served_task(stack, tmp_path):
    loop = loop_of(stack, tmp_path, builder_episodes=6)
    loop.prepare()
    served = task_pb2.ListTasksRequest(filter=task_pb2.TaskFilter(sources=[common_pb2.TASK_SOURCE_MINIWOB]),
                                       page_size=1000)
    ids = sorted(t.task_id for t in paging.iterate(lambda r: loop.sites.ListTasks(r, timeout=60), served, "tasks"))
    assert loop.miniwob_ids == tuple(ids) and len(ids) > 100  # not only the 20 the oracle scripts

    ev = loop.evaluate_builders("oracle", "eval-oracle-builders")
    assert ev.split == "builders:govform,hashapp" and ev.episodes == 6 and ev.errored == 0
    assert ev.passed == 6, ev.outcomes
    assert {k.partition("/")[0] for k in ev.by_builder} <= {"govform", "hashapp"}
    assert sum(n for _, n in ev.by_builder.values()) == 6
    md = write_report(loop.result(0.0), tmp_path, "test")[0].read_text()
    assert "By site builder (builders:govform,hashapp; the oracle row is the ceiling)" in md
    assert "never trained on" in loop.suites()["builders:govform,hashapp"]


def test_a_held_out_builder_with_trainable_websites_is_refused(stack, tmp_path):
    with pytest.raises(ValueError, match=r"^heldout_builders: 'ledger' has train-split websites"):
        loop_of(stack, tmp_path, heldout_builders=("ledger",), miniwob_tasks=0).prepare()


def test_an_unknown_builder_is_invalid_argument_naming_the_field(stack, tmp_path):
    with pytest.raises(grpc.RpcError) as info:
        loop_of(stack, tmp_path, heldout_builders=("nosuch",), miniwob_tasks=0).prepare()
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "filter.builders" in info.value.details()

"""`webenv worldmodel build` split by site builder (issue 48): the held-out builders' websites never reach training.

Fast (no stack, no browser): the build's site picking runs against a scripted TaskService that honours the
`builders` and `split` filters as the sites service does; the picked sites file then splits the tiny web's TRANSITIONS
exports, and everything training keeps (page actions, exemplars, start pages, language-model examples) is checked to
hold training builders' websites only.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from webenv.cli.wmbuild import BuildPlan, pick_sites_by_builder
from webenv.v1 import common_pb2, task_pb2
from webenv.worldmodel import tinyweb
from webenv.worldmodel.dataset import build_examples, join_exports, split_examples
from webenv.worldmodel.predict import save_exemplars, save_line_survival, save_page_actions, save_start_states

TRAIN, VAL, TEST = common_pb2.SPLIT_TRAIN, common_pb2.SPLIT_VALIDATION, common_pb2.SPLIT_TEST
#: builder -> split of its sites as the catalog says (a train builder's website may still be a website-split test site)
BUILDERS = {"platform": TRAIN, "ledger": TRAIN, "boardroom": VAL, "hashapp": TEST, "govform": TEST}


class FakeTasks:
    """ListTasks over a small catalog: 3 families x 4 sites per builder, one task each; filters as the service's."""

    def __init__(self) -> None:
        self.tasks = []
        n = 0
        for builder, split in BUILDERS.items():
            for family in ("bank", "shop", "jobs"):
                for _ in range(4):
                    site_split = TEST if (split == TRAIN and n % 4 == 3) else split  # some website-split test sites
                    self.tasks.append(common_pb2.Task(task_id=f"t{n}", site=f"{family}-{n:04d}.web.test", family=family,
                                                      split=site_split, builder=builder))
                    n += 1

    def ListTasks(self, req: task_pb2.ListTasksRequest, timeout: float = 0) -> task_pb2.ListTasksResponse:
        f = req.filter
        out = [t for t in self.tasks if (not f.builders or t.builder in f.builders) and (not f.split or t.split == f.split)
               and (not f.families or t.family in f.families)]
        return task_pb2.ListTasksResponse(tasks=out, total_size=len(out))


def _plan() -> BuildPlan:
    return BuildPlan(train_builders=["platform", "ledger"], validation_builders=["boardroom"],
                     eval_builders=["hashapp", "govform"], sites_per_train_builder=3, sites_per_eval_builder=2)


def test_sites_are_split_by_builder() -> None:
    catalog = FakeTasks()
    plan = _plan()
    sites = pick_sites_by_builder(catalog, plan)
    builder_of = {t.site: t.builder for t in catalog.tasks}
    split_of = {t.site: t.split for t in catalog.tasks}
    by_split: dict[str, set[str]] = {}
    for host, s in sites.items():
        assert s["builder"] == builder_of[host]  # the catalog's builder of that website, recorded
        by_split.setdefault(s["split"], set()).add(s["builder"])
        if s["split"] == "train":
            assert split_of[host] == TRAIN  # never a website the catalog holds out, even of a train builder
    assert by_split == {"train": {"platform", "ledger"}, "validation": {"boardroom"}, "test": {"hashapp", "govform"}}
    assert sum(s["split"] == "train" for s in sites.values()) == 6 and sum(s["split"] == "test" for s in sites.values()) == 4
    # one family at a time: a builder's training websites are of three families, not three sites of one
    assert len({s["family"] for s in sites.values() if s["builder"] == "platform"}) == 3


def test_a_builder_in_two_splits_is_refused() -> None:
    plan = _plan()
    plan.eval_builders = ["hashapp", "ledger"]
    with pytest.raises(ValueError, match="ledger"):
        plan.check_builders()
    with pytest.raises(ValueError, match="need train builders"):
        BuildPlan(eval_builders=["hashapp"]).check_builders()
    with pytest.raises(ValueError, match="outside"):
        BuildPlan(train_builders=["platform"], outside=["webarena"]).check_builders()
    BuildPlan.preset("builders").check_builders()  # the preset's own split is disjoint
    assert BuildPlan.preset("builders").eval_builders == ["hashapp", "govform"]


def test_held_out_builders_never_reach_training(tmp_path: Path) -> None:
    files = tinyweb.write_exports(tmp_path / "exports")
    held_out = "shop-0001.web.test"
    sites = {"shop-0000.web.test": {"split": "train", "family": "shop", "builder": "platform", "suite": "train"},
             held_out: {"split": "test", "family": "shop", "builder": "hashapp", "suite": "held_out_builders"}}
    records = join_exports([files["axtree"]], [files["markdown"]], sites, "random_crawl")
    assert {r.builder for r in records if r.split == "test"} == {"hashapp"}
    assert {r.builder for r in records if r.split == "train"} == {"platform"}
    kept = {name: tmp_path / name for name in ("page_actions.jsonl", "exemplars.jsonl", "start_states.jsonl")}
    assert save_page_actions(records, kept["page_actions.jsonl"]) > 0
    assert save_exemplars(records, kept["exemplars.jsonl"]) > 0
    assert save_start_states(records, kept["start_states.jsonl"]) > 0
    # the line survival counts lines of training navigations only: no held-out page adds to it
    assert save_line_survival(records, tmp_path / "survival.json") == save_line_survival(
        [r for r in records if r.split == "train"], tmp_path / "train-only.json") > 0
    assert (tmp_path / "survival.json").read_text() == (tmp_path / "train-only.json").read_text()
    for name, path in kept.items():
        rows = [json.loads(line) for line in path.read_text().splitlines()]
        assert rows and all(r["site"] != held_out for r in rows), name
        assert held_out.split(".")[0] not in path.read_text(), name
    train_ex, _ = split_examples(build_examples(records))
    assert train_ex and all(e.record.builder == "platform" for e in train_ex)

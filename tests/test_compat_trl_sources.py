"""Several task sources in one TRL run, with the real trl classes: GRPOTrainer's dict ``environment_factory``
(`webenv.compat.trl.environment_factories`, a named factory per source or benchmark) routes each dataset row by its
``environment`` column (`webenv.compat.hf.catalog_dataset`) to its own factory, on the real stack (sites, farm,
judge as processes): a MiniWoB catalog task and a WebArena task read from a benchmark's own file (not in the
catalog: opened from the row's task_pb) train side by side, each rollout in an instance of its own source, the
instances pooled and reused between steps. The catalog-as-dataset export covers every task-file format."""

from __future__ import annotations

import json
from functools import partial
from pathlib import Path

import datasets
import pytest
from webenv.cli.stack import Stack
from webenv.compat.hf import catalog_dataset, environment_of
from webenv.compat.trl import WebTaskEnv, environment_factories
from webenv.testing import load_test_module
from webenv.v1 import common_pb2, task_pb2

pytestmark = pytest.mark.timeout(600)
ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "docs" / "benchmarks" / "examples"
_files = load_test_module(Path(__file__).with_name("test_benchmark_files_e2e.py"), "_benchmark_files_for_trl_sources")
tasks = _files.tasks  # every example file's tasks (docs/benchmarks/examples/, written for Hearth & Loaf)


def test_the_dataset_export_covers_every_format(tasks, tmp_path: Path) -> None:
    from typer.testing import CliRunner
    from webenv.cli.main import app

    ds = catalog_dataset(tasks)
    envs = {r["task_id"]: r["environment"] for r in ds}
    assert set(envs.values()) == {"webarena", "webarena-verified", "webvoyager", "online-mind2web", "assistantbench"}
    for row, task in zip(ds, tasks, strict=True):
        assert common_pb2.Task.FromString(row["task_pb"]) == task  # nothing lost
        meta = json.loads(row["metadata"])
        assert meta["benchmark"] == row["environment"] and meta["benchmark_task_id"]
        assert row["source"] == "benchmark" and row["template_id"] == task.template_id
    out = CliRunner().invoke(app, ["tasks", "--task-file", str(EXAMPLES / "webarena_verified_handmade.json"),
                                   "--export", str(tmp_path / "verified")],
                             env={"WEBENV_SITE_HEARTHLOAF": "http://hearthloaf.web.test"})
    assert out.exit_code == 0, out.output
    saved = datasets.load_from_disk(str(tmp_path / "verified"))
    assert saved.num_rows == 2 and set(saved["environment"]) == {"webarena-verified"}


def test_environment_factories_are_named_and_serve_their_own_source(tasks) -> None:
    factories = environment_factories({"miniwob": {"max_steps": 5}, "webarena": {}}, browser="127.0.0.1:1",
                                      sites="127.0.0.1:1", judge="127.0.0.1:1", max_steps=30)
    assert set(factories) == {"miniwob", "webarena"}
    mini, wa = factories["miniwob"](), factories["webarena"]()
    assert (mini.source, mini._max_steps, wa.source, wa._max_steps) == ("miniwob", 5, "webarena", 30)
    verified = next(t for t in tasks if environment_of(t) == "webarena-verified")
    with pytest.raises(ValueError, match="environment: .* is a 'webarena-verified' task"):  # before anything opens
        wa.reset(task_id=verified.task_id, task_pb=verified.SerializeToString())
    with pytest.raises(ValueError, match="sources"):
        environment_factories([])


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    with Stack(tmp_path_factory.mktemp("trl-sources"), free_ports=True, sites_count=8) as s:
        s.start(("sites", "browser", "judge"))
        yield s


def test_grpo_routes_rows_to_named_factories_and_reuses_instances(stack: Stack, tasks, tmp_path) -> None:
    import os

    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    from datasets import concatenate_datasets
    from trl import GRPOConfig, GRPOTrainer

    grpo = load_test_module(ROOT / "examples" / "trl_grpo.py", "_trl_grpo_for_sources")
    addrs = {k: stack.address(k) for k in ("browser", "sites", "judge")}
    factories = environment_factories({"miniwob": {"max_steps": 3}, "webarena": {"max_steps": 3}}, **addrs)
    webarena = next(t for t in tasks if t.task_id == "webarena/1")  # from its file, not the catalog
    rows = concatenate_datasets([catalog_dataset(addrs["sites"], task_pb2.TaskFilter(task_ids=["miniwob/click-test"])),
                                 catalog_dataset([webarena])])
    model = grpo.build_tiny(tmp_path / "tiny", partial(WebTaskEnv, **addrs), list(rows))
    config = GRPOConfig(
        output_dir=str(tmp_path / "out"), max_steps=2, per_device_train_batch_size=4, num_generations=2,
        max_completion_length=16, max_tool_calling_iterations=1, learning_rate=1e-5, beta=0.0, logging_steps=1,
        save_strategy="no", report_to="none", use_cpu=True, seed=0, shuffle_dataset=False,
        chat_template_kwargs={"enable_thinking": False})
    trainer = GRPOTrainer(model=str(model), args=config, train_dataset=concatenate_datasets([rows] * 4),
                          environment_factory=factories)
    trainer.train()
    assert trainer.state.global_step == 2
    pool: dict[str, list[WebTaskEnv]] = trainer._environment_pool
    assert set(pool) == {"miniwob", "webarena"}
    for name, instances in pool.items():
        # two rollouts of a prompt at once: two instances (the probe among them), each reused at the second step
        assert len(instances) == 2 and all(e.source == name for e in instances), name
        assert sum(e.episodes for e in instances) == 4 and all(e.episodes == 2 for e in instances), name
        assert all(environment_of(e._env.task) == name for e in instances), name
    for instances in pool.values():
        for e in instances:
            e._close()

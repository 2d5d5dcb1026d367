"""The TRL environment (`webenv.compat.trl.WebTaskEnv`) under TRL's `environment_factory` contract, on the real stack
(sites, browser farm, judge as processes): the tools TRL finds on the class and the schemas it builds from them
(`transformers.utils.get_json_schema`, as GRPOTrainer does), reset with a dataset row, tool calls, the judge's reward;
the catalog as a dataset; and docs/adapters.md's GRPO example (examples/trl_grpo.py) training with real TRL."""

from __future__ import annotations

import inspect
import json
import os
import re
import shlex
import subprocess
import sys
from functools import partial
from pathlib import Path

import datasets
import grpc
import pytest
from transformers.utils import get_json_schema
from webenv import errors
from webenv.cli.stack import Stack
from webenv.compat.trl import WebTaskEnv
from webenv.testing import ONE_FACT, one_fact_shop_task
from webenv.v1 import common_pb2, task_pb2, task_pb2_grpc

pytestmark = pytest.mark.timeout(600)
TOOLS = {"click", "fill", "select", "scroll", "go_back", "goto", "answer"}


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    with Stack(tmp_path_factory.mktemp("trl-stack"), free_ports=True, sites_count=8) as s:
        s.start(("sites", "browser", "judge"))
        yield s


def factory(stack: Stack):
    return partial(WebTaskEnv, browser=stack.address("browser"), sites=stack.address("sites"),
                   judge=stack.address("judge"))


def test_the_tools_trl_finds_and_their_schemas() -> None:
    # GRPOTrainer: the class's functions, minus reset/get_reward and private ones, are the tools
    members = {n for n, _ in inspect.getmembers(WebTaskEnv, predicate=inspect.isfunction)}
    assert {"reset", "get_reward"} <= members
    assert {n for n in members if n not in ("reset", "get_reward") and not n.startswith("_")} == TOOLS
    for name in TOOLS:
        schema = get_json_schema(getattr(WebTaskEnv(), name))["function"]
        assert schema["name"] == name and schema["description"]
        for prop in schema["parameters"].get("properties", {}).values():
            assert prop["description"] and prop["type"] in ("string", "number")


def test_a_rollout_on_miniwob_is_rewarded_by_the_judge(stack: Stack) -> None:
    env = factory(stack)()
    text = env.reset(prompt=[{"role": "user", "content": "Do the task."}], task_id="miniwob/click-test", seed=0)
    assert text.startswith("Task: Click the button.") and "URL: http://miniwob.web.test/" in text
    assert env.click("not an id!").endswith("is not an element id")
    ref = re.search(r'\[(\w+)\] button "Click Me!"', text).group(1)
    assert env.click(ref).startswith("The episode has ended.")
    assert env.click(ref) == "The episode has ended: no more actions."
    assert env.get_reward() == 1.0
    # the same instance, the next rollout (TRL reuses instances across batches): stopping without an answer is 0.0
    env.reset(task_id="miniwob/click-test", seed=1)
    assert "URL:" in env.scroll(100)
    assert env.get_reward() == 0.0
    with pytest.raises(ValueError, match="task_id"):
        env.reset(prompt="no task")
    with pytest.raises(errors.NotFound):
        env.reset(task_id="miniwob/no-such-task")
    env._close()


def test_a_rollout_on_a_synthetic_task_with_the_tools(stack: Stack) -> None:
    with grpc.insecure_channel(stack.address("sites")) as ch:
        stub = task_pb2_grpc.TaskServiceStub(ch)
        info = next(t for t in stub.ListTasks(task_pb2.ListTasksRequest(page_size=500)).tasks
                    if one_fact_shop_task(t))
    env = factory(stack)()
    page = env.reset(task_id=info.task_id)
    field, product = ONE_FACT.search(page).groups()
    page = env.fill(re.search(r"\[(\w+)\] searchbox", page).group(1), product)
    page = env.click(re.search(r'\[(\w+)\] button "Look up"', page).group(1))
    page = env.click(re.search(rf'\[(\w+)\] link "{re.escape(product)}"', page).group(1))
    value = re.search(rf'rowheader "{field}"\s*\[\w+\] cell "([^"]+)"', page, flags=re.I).group(1)
    assert "169.254" not in env.goto("http://169.254.169.254/").split("\n")[1]  # the farm's guard
    env.go_back()
    assert env.answer(f"{field}: {value}").startswith("The episode has ended.")
    assert env.get_reward() == 1.0
    env._close()


def test_the_catalog_as_a_dataset(stack: Stack, tmp_path: Path) -> None:
    from typer.testing import CliRunner
    from webenv.cli.main import app
    from webenv.compat.hf import catalog_dataset

    flt = task_pb2.TaskFilter(sources=[common_pb2.TASK_SOURCE_MINIWOB])
    with grpc.insecure_channel(stack.address("sites")) as ch:
        total = task_pb2_grpc.TaskServiceStub(ch).ListTasks(task_pb2.ListTasksRequest(filter=flt, page_size=1)).total_size
    ds = catalog_dataset(stack.address("sites"), flt)
    assert ds.num_rows == total > 0
    row = next(r for r in ds if r["task_id"] == "miniwob/click-test")
    assert row["prompt"][0]["role"] == "user" and row["source"] == "miniwob" and row["instruction"]
    assert common_pb2.Task.FromString(row["task_pb"]).task_id == "miniwob/click-test"
    out = CliRunner().invoke(app, ["tasks", "--sites", stack.address("sites"), "--source", "miniwob",
                                   "--export", str(tmp_path / "catalog")])
    assert out.exit_code == 0, out.output
    assert datasets.load_from_disk(str(tmp_path / "catalog")).num_rows == total


def test_readme_grpo_example_trains_as_written(stack: Stack, tmp_path: Path) -> None:
    """Real TRL: GRPOTrainer with WebTaskEnv as environment_factory, the judge's verdict as reward, 2 steps on CPU."""
    text = (Path(__file__).resolve().parents[1] / "docs" / "adapters.md").read_text()
    section = text[text.index("**TRL.**"):text.index("**Data for trainers.**")]
    [block] = re.findall(r"```bash\n(.*?)```", section, flags=re.S)
    command = shlex.split(block.splitlines()[0].replace("/tmp/grpo-webenv", str(tmp_path / "grpo")))
    assert command[:2] == [".venv/bin/python", "examples/trl_grpo.py"]  # as every other command of the docs
    # no address given: the stack as `webenv up` records it (stack.json), not the default ports
    env = {k: v for k, v in os.environ.items() if not (k.startswith("WEBENV_") and k.endswith("_ADDR"))}
    out = subprocess.run([sys.executable, *command[1:]], capture_output=True, text=True, timeout=420,
                         cwd=Path(__file__).resolve().parents[1],
                         env={**env, "WEBENV_STACK_FILE": str(stack.write_state())})
    assert out.returncode == 0, out.stderr[-3000:]
    summary = json.loads(out.stdout.strip().splitlines()[-1])
    assert summary["steps"] == 2 and len(summary["rewards"]) == 2  # two optimizer steps
    # every rollout was a farm session graded by the judge: the random model never passes
    assert summary["rewards"] == [0.0, 0.0] and len(summary["tool_calls"]) == 2, summary

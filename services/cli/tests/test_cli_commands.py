"""The `webenv` command against a collector over gRPC (the collector's test peers: conftest.py)."""

from __future__ import annotations

import asyncio
import io
import json
import logging
import re
from pathlib import Path

from typer.testing import CliRunner
from webenv.cli.commands import common
from webenv.cli.main import app
from webenv.cli.stack import Stack
from webenv.v1 import collector_pb2, common_pb2


def invoke(*args: str):
    common.console.width = 200  # wide enough that tables are not truncated
    return CliRunner().invoke(app, list(args))


async def test_cli_run_runs_export_tasks(collector, world, tmp_path):
    addr = collector.address
    r = await asyncio.to_thread(invoke, "run", "--policy", "oracle", "--difficulty", "easy", "--collector", addr,
                                "--name", "cli-run")
    assert r.exit_code == 0, r.output
    assert "started run-" in r.output and "succeeded" in r.output
    r = await asyncio.to_thread(invoke, "runs", "--collector", addr)
    assert r.exit_code == 0 and "cli-run" in r.output
    assert "pass rate" in r.output and "100%" in r.output  # the oracle solves every easy page walk
    r = await asyncio.to_thread(invoke, "runs", "--json", "--collector", addr)  # machine-readable: the contract's JSON
    assert r.exit_code == 0, r.output
    listed = json.loads(r.output)["runs"]
    assert [x["spec"]["name"] for x in listed] == ["cli-run"] and listed[0]["state"] == "RUN_STATE_SUCCEEDED"
    r = await asyncio.to_thread(invoke, "export", "--format", "transitions", "--dest", str(tmp_path / "t"),
                                "--collector", addr)
    assert r.exit_code == 0 and "transitions.jsonl" in r.output
    for level, n in (("task-oriented", 6), ("random-crawl", 0)):
        r = await asyncio.to_thread(invoke, "export", "--format", "jsonl", "--level", level, "--dest",
                                    str(tmp_path / level), "--collector", addr)
        assert r.exit_code == 0 and r.output.startswith(f"{n} episodes"), r.output
    assert all(o.allow_llm for o in world.judge.options)  # LLM-judged facts are graded when the judge can
    r = await asyncio.to_thread(invoke, "tasks", "--difficulty", "hard", "--sites", world.addr["sites"])
    assert r.exit_code == 0 and "6 tasks match" in r.output
    r = await asyncio.to_thread(invoke, "tasks", "--difficulty", "hard", "--json", "--sites", world.addr["sites"])
    found = json.loads(r.output)
    assert r.exit_code == 0 and found["total_size"] == 6 and {t["difficulty"] for t in found["tasks"]} == {"DIFFICULTY_HARD"}
    r = await asyncio.to_thread(invoke, "run", "--repeats", "-1", "--collector", addr)
    assert r.exit_code == 1 and "INVALID_ARGUMENT" in r.output and "spec.repeats" in r.output
    r = await asyncio.to_thread(invoke, "run", "--mode", "sideways", "--collector", addr)
    assert r.exit_code == 2  # a bad option value is refused before any call


async def test_cli_run_whose_every_episode_errored_exits_1_with_the_errors(collector, caplog):
    """An unreachable environment: the run fails, the command says why and exits 1, the collector logs it."""
    caplog.set_level(logging.WARNING, logger="webenv.collector.engine")
    r = await asyncio.to_thread(invoke, "run", "--policy", "random", "--task-limit", "7", "--env", "127.0.0.1:1",
                                "--collector", collector.address)
    assert r.exit_code == 1, r.output
    assert "7 episode(s) errored; first errors:" in r.output and "OpenSession: UNAVAILABLE" in r.output
    assert "failed: all 7 episodes errored; first error: environment failed" in r.output
    logged = [rec.getMessage() for rec in caplog.records]
    assert sum("errored: environment failed" in m for m in logged) == 5  # the first few, then a count
    assert any("failed: all 7 episodes errored" in m for m in logged)


async def test_cli_oracle_runs_only_tasks_it_can_solve(collector, world):
    world.sites.tasks.extend([
        common_pb2.Task(task_id="miniwob/unscripted", source=common_pb2.TASK_SOURCE_MINIWOB,
                        start_url="http://miniwob.web.test/x.html", difficulty=common_pb2.DIFFICULTY_EASY),
        common_pb2.Task(task_id="scripted/solvable", source=common_pb2.TASK_SOURCE_MINIWOB,
                        start_url="http://miniwob.web.test/y.html", difficulty=common_pb2.DIFFICULTY_EASY),
    ])
    addr = collector.address
    r = await asyncio.to_thread(invoke, "run", "--policy", "oracle", "--difficulty", "easy", "--horizon", "3",
                                "--collector", addr)
    assert r.exit_code == 0, r.output
    assert "started run-" in r.output and ": 7 episodes" in r.output  # 6 with an oracle + 1 scripted
    assert "left out 1 matching tasks: policy 'oracle' has no solution for them" in r.output
    r = await asyncio.to_thread(invoke, "run", "--policy", "oracle", "--task", "miniwob/unscripted", "--collector",
                                addr)
    assert r.exit_code == 1 and "FAILED_PRECONDITION" in r.output
    assert "policy 'oracle' has no solution for any of the 1 tasks matching" in r.output
    r = await asyncio.to_thread(invoke, "run", "--policy", "llm", "--collector", addr)
    assert r.exit_code == 1 and "does not offer 'llm'; it offers oracle, random, explore" in r.output


YAML_TASK = """\
name: reach_page_one
description: Go to the next page
start_url: http://shop-0000.web.test/page/0
success_criteria:
  - type: url_contains
    value: /page/1
"""


async def test_cli_runs_own_task_file_without_restarting_anything(collector, world, tmp_path):
    good = tmp_path / "mine.yaml"
    good.write_text(YAML_TASK)
    r = await asyncio.to_thread(invoke, "run", "--policy", "random", "--task-file", str(good), "--repeats", "2",
                                "--obs-format", "axtree", "--finish-fraction", "1", "--collector", collector.address)
    assert r.exit_code == 0, r.output
    assert ": 2 episodes" in r.output and "succeeded" in r.output
    r = await asyncio.to_thread(invoke, "tasks", "--task-file", str(good))
    assert r.exit_code == 0 and "yaml/reach_page_one" in r.output and "1 tasks match" in r.output
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: a b\ndescription: d\nsuccess_criteria:\n  - type: dom_contains\n")
    r = await asyncio.to_thread(invoke, "run", "--task-file", str(bad), "--task-file", str(good), "--collector",
                                collector.address)
    assert r.exit_code == 2 and "Traceback" not in r.output
    assert r.output.splitlines()[1:] == [
        f"{bad}:1: name: must be a non-empty identifier without spaces",
        f"{bad}:4: success_criteria[0].selector: required for type dom_contains",
    ], r.output
    r = await asyncio.to_thread(invoke, "run", "--task-file", str(good), "--difficulty", "easy", "--collector",
                                collector.address)
    assert r.exit_code == 2 and "leave out the task filter options" in re.sub(r"[│╭╮╰╯─\s]+", " ", r.output)


async def test_commands_find_the_stack_webenv_up_records(collector, world, tmp_path, monkeypatch):
    """`webenv up` writes .webenv/stack.json; commands use it when neither a flag nor WEBENV_*_ADDR is set."""
    stack = Stack(tmp_path, free_ports=True)
    stack.procs = {"collector": None, "sites": None}  # the addresses below, as a running `webenv up` records them
    stack.ports["collector"] = (int(collector.address.rsplit(":", 1)[1]), 0)
    stack.ports["sites"] = (int(world.addr["sites"].rsplit(":", 1)[1]), 0)
    path = stack.write_state()
    monkeypatch.setenv("WEBENV_STACK_FILE", str(path))
    monkeypatch.delenv("WEBENV_COLLECTOR_ADDR", raising=False)
    monkeypatch.delenv("WEBENV_SITES_ADDR", raising=False)
    assert common.address("collector") == collector.address
    r = await asyncio.to_thread(invoke, "runs")
    assert r.exit_code == 0 and "pass rate" in r.output
    r = await asyncio.to_thread(invoke, "tasks", "--source", "synthetic")
    assert r.exit_code == 0 and "18 tasks match" in r.output
    monkeypatch.setenv("WEBENV_COLLECTOR_ADDR", "127.0.0.1:1")  # the environment variable wins over the file
    assert common.address("collector") == "127.0.0.1:1"
    stack.remove_state()
    assert not path.exists() and common.address("sites") == "localhost:50055"


def test_dyna_needs_a_world_model_with_start_pages(tmp_path):
    """`webenv train --dyna` refuses, before starting anything, a folder that is no model or records no start page."""
    def said(res) -> str:  # the error box's text, unwrapped
        return " ".join(res.output.replace("│", " ").split())

    res = invoke("train", "--dyna", "--worldmodel", str(tmp_path / "none"), "--sim-env", "127.0.0.1:1")
    assert res.exit_code == 2 and "no config.json" in said(res) and "--worldmodel" in said(res)
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "config.json").write_text("{}")
    res = invoke("train", "--dyna", "--worldmodel", str(tmp_path / "model"), "--sim-env", "127.0.0.1:1")
    assert res.exit_code == 2 and "records no start pages" in said(res)


def test_train_refuses_out_of_range_suite_options():
    """`webenv train` refuses, before starting anything, a suite option out of range, naming the option."""
    for option, value, *rest in (("--oracle-slack", "-1"), ("--miniwob-tasks", "5000"), ("--validation-eval", "-3"),
                                 ("--family-eval", "0"), ("--kl-coef", "11"), ("--kl-coef", "nan"),
                                 ("--kl-reference", "bc"), ("--kl-reference", "parent", "--kl-coef", "0"),
                                 ("--sampling", "sideways"), ("--algorithm", "ppo")):
        res = invoke("train", option, value, *rest, "--collector", "127.0.0.1:1")
        text = " ".join(res.output.replace("│", " ").split())
        assert res.exit_code == 2 and option in text, (option, text)


def test_up_serves_a_folder_of_checkpoints(tmp_path, monkeypatch):
    """`webenv up --checkpoints DIR` (or WEBENV_POLICY_CHECKPOINT_DIR) serves the checkpoints of a folder, e.g. what
    `webenv train --stack` left in its data folder, by name from the start (the trainer publishes there too);
    `webenv run --help` says checkpoint names are policies. A real policy process is started on the folder."""
    import grpc
    import torch
    from webenv.agent import checkpoints, scorer
    from webenv.v1 import policy_pb2, policy_pb2_grpc, trainer_pb2

    def said(res) -> str:  # the output, unwrapped
        return " ".join(res.output.replace("│", " ").split())

    ckpts = tmp_path / "train-1" / "checkpoints"
    ckpts.mkdir(parents=True)
    torch.manual_seed(1)
    for version in (1, 2):
        staging = tmp_path / f"staging-{version}"
        staging.mkdir()
        scorer.save(scorer.ScorerModel(scorer.ScorerConfig(buckets=1 << 10, dim=8, hidden=16)), staging)
        checkpoints.publish(staging, ckpts, trainer_pb2.Checkpoint(
            name="agent", version=version, ref=f"agent@{version}", model=trainer_pb2.MODEL_KIND_SCORER))

    monkeypatch.delenv("WEBENV_POLICY_CHECKPOINT_DIR", raising=False)
    monkeypatch.delenv("WEBENV_POLICY_CHECKPOINTS", raising=False)
    plain = Stack(tmp_path / "data", free_ports=True)  # no folder named: the stack's own, nothing loaded at start
    assert plain.env_for("policy")["WEBENV_POLICY_CHECKPOINT_DIR"] == str(tmp_path / "data" / "checkpoints")
    assert "WEBENV_POLICY_CHECKPOINTS" not in plain.env_for("policy")
    monkeypatch.setenv("WEBENV_POLICY_CHECKPOINT_DIR", str(ckpts))  # the setting is honoured, not overwritten
    stack = Stack(tmp_path / "data", free_ports=True)
    env = stack.env_for("policy")
    assert env["WEBENV_POLICY_CHECKPOINT_DIR"] == str(ckpts.resolve()) and env["WEBENV_POLICY_CHECKPOINTS"] == "agent"
    assert stack.env_for("trainer")["WEBENV_TRAINER_CHECKPOINT_DIR"] == str(ckpts.resolve())
    monkeypatch.delenv("WEBENV_POLICY_CHECKPOINT_DIR")
    stack = Stack(tmp_path / "data", free_ports=True, checkpoints=str(ckpts))
    try:
        stack.start(("policy",))
        with grpc.insecure_channel(stack.address("policy")) as ch:
            served = policy_pb2_grpc.PolicyServiceStub(ch).ListPolicies(policy_pb2.ListPoliciesRequest(), timeout=30)
        assert {(p.name, p.version) for p in served.policies} >= {("agent", "agent@2")}, served
    finally:
        stack.stop()

    res = invoke("up", "--checkpoints", str(tmp_path / "nowhere"))
    assert res.exit_code == 2 and "--checkpoints" in said(res) and "no such folder" in said(res), res.output
    res = invoke("run", "--help")
    assert res.exit_code == 0 and "checkpoint" in said(res) and "--checkpoints" in said(res), res.output



def test_real_web_is_no_source_of_its_own():
    """Rubric JSON tasks are `rubric-json` whatever their host (a file's tasks: --from-file)."""
    r = invoke("tasks", "--source", "real-web")
    assert r.exit_code == 2 and "rubric-json" in r.output, r.output
    r = invoke("tasks", "--help")
    assert "--from-file" in r.output


def test_run_tables_fit_80_columns_and_logs():
    """`webenv run`/`runs`/`stop` tables in an 80-column terminal: no cell cut to "run…", every run id whole; a
    log (no terminal) gets the wide layout."""
    from rich.console import Console

    runs = []
    for i in range(2):
        r = collector_pb2.Run(run_id=f"run-c40e8f45921{i}", state=collector_pb2.RUN_STATE_SUCCEEDED)
        r.spec.name, r.spec.policy = "agent/eval-3-validation-with-a-long-name", "agent-ref@12"
        r.counts.planned, r.counts.finished, r.counts.passed, r.counts.errored, r.counts.steps = 200, 200, 107, 3, 12345
        r.created_at.GetCurrentTime()
        runs.append(r)
    for width, some in ((80, runs), (80, runs[:1]), (160, runs)):
        common.console.width = width
        out = Console(width=width, record=True, file=io.StringIO())
        out.print(common.run_table(some))
        text = out.export_text()
        assert "…" not in text and all(len(line) <= width for line in text.splitlines()), text
        assert all(r.run_id in text for r in some) and "succeeded" in text and "54%" in text, text
        assert "agent-ref@12" in text, text



def _descendants(pid: int) -> set[int]:
    out, todo = set(), [pid]
    while todo:
        p = todo.pop()
        for task in Path(f"/proc/{p}/task").glob("*"):
            try:
                kids = [int(k) for k in (task / "children").read_text().split()]
            except OSError:
                continue
            out.update(kids)
            todo.extend(kids)
    return out


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


def test_train_stops_its_stack_on_sigterm(tmp_path):
    """`webenv train --stack` ended by SIGTERM (a supervisor, `kill`) stops every service it started and exits 130,
    instead of leaving the stack running."""
    import signal
    import subprocess
    import sys
    import time

    proc = subprocess.Popen(
        [sys.executable, "-m", "webenv.cli", "train", "--stack", "--sites-count", "8", "--demos", "2",
         "--iterations", "1", "--data-dir", str(tmp_path / "data"), "--out", str(tmp_path / "out")],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        lines, deadline = [], time.monotonic() + 300
        while time.monotonic() < deadline:
            line = proc.stdout.readline()
            if not line:
                break
            lines.append(line)
            if "stack up" in line:
                break
        assert any("stack up" in ln for ln in lines), "".join(lines)
        started = _descendants(proc.pid)
        assert len(started) >= 5, started  # sites, browser (and its Chromium), policy, judge, collector, trainer ...
        proc.send_signal(signal.SIGTERM)
        rest, _ = proc.communicate(timeout=120)
        assert proc.returncode == 130, "".join(lines) + rest
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and any(_alive(p) for p in started):
            time.sleep(0.5)
        assert not [p for p in started if _alive(p)], "services left running after SIGTERM"
    finally:
        if proc.poll() is None:
            proc.kill()


HOLD = """import sys
if sys.argv[2] == "store":  # a collector left running by a `webenv up` that was killed: the store held, no claim
    import clickhouse_connect
    client = clickhouse_connect.get_client(dsn="chdb://" + sys.argv[1] + "/store")
else:  # a `webenv up` still starting (claimed, no stack.json), then up (stack.json written)
    from webenv.cli.stack import Stack
    stack = Stack(sys.argv[1])
    stack.claim()
print("ready", flush=True)
for line in sys.stdin:
    stack.write_state()
    print("ready", flush=True)
"""


def test_up_refuses_a_second_stack_on_its_data_folder_and_a_held_store_says_why(tmp_path, monkeypatch):
    """One stack per data folder. A second `webenv up` there, whether the first is up (stack.json) or still
    starting (no stack.json yet: the start-up race), says so and exits 1 before it starts anything; before, its
    collector failed on the store the first one held with chDB's "Error initializing EmbeddedServer: .
    (BAD_ARGUMENTS)". A store held without a stack (a collector left by a killed `webenv up`) fails the collector's
    start-up with the cause and the holder named, first in the launcher's error, not cut off by the log's tail."""
    import subprocess
    import sys

    data = tmp_path / "data"
    launched: list[str] = []
    monkeypatch.setattr(Stack, "_launch", lambda self, key, *a: launched.append(key))

    def holding(how: str) -> subprocess.Popen:
        proc = subprocess.Popen([sys.executable, "-c", HOLD, str(data), how], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, text=True)
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        return proc

    holder = holding("up")
    try:
        for said in ("still starting or not `webenv up`: no stack.json yet", "`webenv up`, pid {pid}; its addresses in"):
            res = invoke("up", "--data-dir", str(data), "--free-ports")
            text = " ".join(res.output.split())
            assert res.exit_code == 1 and not launched, res.output
            assert f"a stack is already running on {data.resolve()}" in text, text
            assert said.format(pid=holder.pid) in text and f"kill {holder.pid}" in text, text
            holder.stdin.write("write stack.json\n")  # type: ignore[union-attr]
            holder.stdin.flush()  # type: ignore[union-attr]
            assert holder.stdout.readline().strip() == "ready"  # type: ignore[union-attr]
    finally:
        holder.kill()
        holder.wait()
    monkeypatch.undo()

    holder = holding("store")
    stack = Stack(data, free_ports=True)
    try:
        stack.start(("collector",), timeout=300)  # it exits at once; a loaded machine only delays that
        raise AssertionError("the collector started on a held store")
    except RuntimeError as exc:
        first = str(exc).splitlines()[0]
    finally:
        stack.stop()
        holder.kill()
        holder.wait()
    assert first.startswith("collector exited with code 1 during start-up: StoreError: cannot connect"), first
    assert f"Cannot lock file {data.resolve() / 'store' / 'status'}" in first, first
    assert f"process {holder.pid} (" in first, first

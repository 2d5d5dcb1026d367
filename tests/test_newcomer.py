"""A newcomer's first hour, on the real stack: the README's commands as written, and what they meet.

One stack for the module, started by the README's own first line (`webenv up --free-ports &`) in a scratch
folder that links `.venv` to this checkout's, so every README line runs verbatim from there and finds the stack
through the `.webenv/stack.json` that `up` writes. The judge runs the tiny local Llama (transformers backend,
built here) so LLM-judged facts are really graded. Then, over that stack: a run that cannot work fails loudly
(exit 1, its first errors, the collector's log); task selection names what it cannot find; the oracle runs only
what it can solve; a bad task file gives one line per problem (exit 2); rubric JSON text facts are graded;
the Gymnasium environment passes `check_env` and the judge rewards it; and last, the README block line by line,
ending with `kill %1` (the stack stops cleanly and forgets its state file).
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import warnings
from pathlib import Path

import grpc
import pytest
from webenv.v1 import task_pb2, task_pb2_grpc

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.timeout(900)


def section(heading: str) -> str:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    start = text.index(heading)
    end = text.find("\n## ", start + len(heading))
    return text[start:end if end > 0 else None]


def blocks(lang: str) -> list[str]:
    """The ```lang code blocks of the README's "Using the platform" section."""
    return re.findall(rf"```{lang}\n(.*?)```", section("## Using the platform"), flags=re.S)


def clean_env() -> dict[str, str]:
    """This environment without address overrides, so commands find the stack as a newcomer's shell would."""
    env = {k: v for k, v in os.environ.items() if not (k.endswith("_ADDR") and k.startswith("WEBENV_"))}
    env.pop("WEBENV_STACK_FILE", None)
    return env


def sh(line: str, cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", "-c", line], cwd=cwd, env={**clean_env(), "COLUMNS": "200"}, capture_output=True,
                          text=True, timeout=timeout)


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    work = tmp_path_factory.mktemp("newcomer")
    (work / ".venv").symlink_to(ROOT / ".venv")
    [yaml_task] = blocks("yaml")
    (work / "my_tasks.yaml").write_text(yaml_task)
    model = work / "judge-model"
    built = subprocess.run([sys.executable, "-m", "webenv.judge", "build-tiny-model", "--out", str(model)],
                           capture_output=True, text=True, timeout=300)
    assert built.returncode == 0, built.stderr
    lines = [ln for ln in blocks("bash")[0].splitlines() if ln.strip()]
    up = lines[0].split("#")[0].strip()
    assert up.endswith("&"), lines[0]
    # (a generous LLM time limit: on a loaded 2-core machine the CPU model waits behind the farm)
    env = {**clean_env(), "WEBENV_JUDGE_LLM_BACKEND": "transformers", "WEBENV_JUDGE_MODEL_PATH": str(model),
           "WEBENV_JUDGE_LLM_TIMEOUT_SECONDS": "300"}
    log = (work / "up.log").open("w")
    proc = subprocess.Popen(["bash", "-c", f"exec {up.rstrip('&').strip()}"], cwd=work, env=env, stdout=log,
                            stderr=subprocess.STDOUT)
    state_file = work / ".webenv" / "stack.json"
    deadline = time.monotonic() + 420
    while not state_file.exists():
        assert proc.poll() is None, (work / "up.log").read_text()[-3000:]
        assert time.monotonic() < deadline, (work / "up.log").read_text()[-3000:]
        time.sleep(0.5)
    state = json.loads(state_file.read_text())
    yield {"work": work, "proc": proc, "lines": lines[1:], "state": state, "addresses": state["addresses"]}
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        proc.wait(60)
    log.close()


def webenv(stack, *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    """The CLI as a newcomer runs it from the folder `webenv up` runs in (no address flags)."""
    return subprocess.run([".venv/bin/webenv", *args], cwd=stack["work"], env={**clean_env(), "COLUMNS": "200"},
                          capture_output=True, text=True, timeout=timeout)


def test_failures_explain_themselves(stack):
    # Every episode errors (nothing listens there): exit 1, the first errors printed, the collector logs them.
    r = webenv(stack, "run", "--policy", "random", "--task-limit", "3", "--env", "127.0.0.1:1")
    assert r.returncode == 1, r.stdout + r.stderr
    assert "3 episode(s) errored; first errors:" in r.stdout and "OpenSession: UNAVAILABLE" in r.stdout
    assert "failed: all 3 episodes errored" in r.stdout
    log = (stack["work"] / ".webenv" / "logs" / "collector.log").read_text()
    assert "errored: environment failed" in log and "failed: all 3 episodes errored" in log
    # A policy the policy service does not offer is refused before anything runs.
    r = webenv(stack, "run", "--policy", "llm")
    assert r.returncode == 1 and "does not offer 'llm'" in r.stdout, r.stdout
    # Task selection names what it could not find.
    r = webenv(stack, "run", "--task", "synthetic/shop-0001/info-0", "--task", "synthetic/nowhere/info-9")
    assert r.returncode == 1 and "unknown task ids: 'synthetic/nowhere/info-9'" in r.stdout, r.stdout
    r = webenv(stack, "tasks", "--family", "casino")
    assert r.returncode == 1 and "unknown families ['casino']" in r.stdout, r.stdout
    r = webenv(stack, "run", "--source", "miniwob", "--kind", "information")
    assert r.returncode == 1 and "no task matches the task filter" in r.stdout, r.stdout
    # A bad task file: every problem, one line each, exit 2, no traceback.
    bad = stack["work"] / "bad_tasks.yaml"
    bad.write_text("name: a b\ndescription: d\nmax_steps: lots\nsuccess_criteria:\n  - type: dom_contains\n")
    r = webenv(stack, "run", "--task-file", str(bad))
    assert r.returncode == 2 and "Traceback" not in r.stdout + r.stderr
    assert r.stdout.splitlines()[1:] == [
        f"{bad}:1: name: must be a non-empty identifier without spaces",
        f"{bad}:3: max_steps: must be an integer, got str 'lots'",
        f"{bad}:5: success_criteria[0].selector: required for type dom_contains",
    ], r.stdout


def test_oracle_runs_only_what_it_can_solve(stack):
    r = webenv(stack, "run", "--policy", "oracle", "--difficulty", "easy", "--episodes", "4", "--seed", "5")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "succeeded" in r.stdout and "errored;" not in r.stdout
    skipped = re.search(r"left out (\d+) matching tasks: policy 'oracle' has no solution for them", r.stdout)
    # the easy MiniWoB++ tasks without a script (22 of the 130 have one) and the YAML examples
    assert skipped and int(skipped.group(1)) >= 90, r.stdout
    # Alone, an unscripted MiniWoB task is refused, saying why.
    r = webenv(stack, "run", "--policy", "oracle", "--task", "miniwob/book-flight")
    assert r.returncode == 1 and "has no solution for any of the 1 tasks" in r.stdout, r.stdout


def test_llm_facts_are_graded_in_runs(stack, tmp_path):
    """Rubric JSON text facts go to the judge's LLM backend (the tiny model) instead of staying undecidable."""
    r = webenv(stack, "run", "--policy", "random", "--source", "rubric-json", "--horizon", "2", "--name", "llm")
    assert r.returncode == 0, r.stdout + r.stderr
    run_id = re.search(r"started (run-\w+)", r.stdout).group(1)
    r = webenv(stack, "export", run_id, "--format", "jsonl", "--dest", str(tmp_path))
    assert r.returncode == 0, r.stdout
    episodes = [json.loads(line) for line in (tmp_path / "episodes.jsonl").read_text().splitlines()]
    llm = [f for e in episodes for f in json.loads(e["verdict_json"])["results"] if f["criterionKind"] == "llm"]
    assert len(llm) >= 3  # the shipped examples have 3 text facts
    assert {f["outcome"] for f in llm} <= {"FACT_OUTCOME_HOLDS", "FACT_OUTCOME_FAILS"}, [f.get("reason") for f in llm]


def test_gym_env_passes_check_env_and_the_judge_rewards_it(stack):
    from gymnasium.utils.env_checker import check_env
    from webenv.actions import format_action
    from webenv.compat.gym import WebEnv

    addr = stack["addresses"]
    with grpc.insecure_channel(addr["sites"]) as ch:
        task = task_pb2_grpc.TaskServiceStub(ch).GetTask(
            task_pb2.GetTaskRequest(task_id="synthetic/shop-0001/info-0"), timeout=30).task
    env = WebEnv(addr["browser"], task=task, judge=addr["judge"], max_steps=8,
                 formats=("axtree", "html", "markdown", "elements", "dom", "screenshot"))
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            check_env(env)
        assert not [str(w.message) for w in caught if "space" in str(w.message)]
        obs, info = env.reset(seed=1)
        assert obs["elements"] and obs["screenshot"][:4] == b"\x89PNG" and obs in env.observation_space
        obs, reward, terminated, truncated, info = env.step('answer("I do not know")')
        assert terminated and not truncated and reward == 0.0 and info["verdict"]["passed"] is False
        env.reset(seed=1)
        for action in task.oracle:
            obs, reward, terminated, truncated, info = env.step(format_action(action))
        assert terminated and reward == 1.0 and info["verdict"]["passed"], info.get("verdict")
    finally:
        env.close()


def test_readme_python_snippet_runs_as_written(stack):
    [snippet] = blocks("python")
    r = subprocess.run([sys.executable, "-c", snippet], cwd=stack["work"], env=clean_env(), capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "1.0 True"


def test_readme_commands_run_as_written(stack):
    """Last: the README's block line by line, as a shell runs it; `kill %1` stops the stack `up &` started."""
    work = stack["work"]
    outputs = {}
    for line in stack["lines"]:
        if line.startswith("kill %1"):
            stack["proc"].send_signal(signal.SIGTERM)
            assert stack["proc"].wait(120) == 0
            assert not (work / ".webenv" / "stack.json").exists()
            continue
        r = sh(line, work)
        command = line.split("#")[0].strip()
        outputs[command] = r.stdout
        if " replay " in command:  # a report either way; exit 1 means the replay diverged somewhere
            assert r.returncode in (0, 1) and "steps reached the recorded URL" in r.stdout, r.stdout + r.stderr
        else:
            assert r.returncode == 0, f"{line}\n{r.stdout}\n{r.stderr}"
    joined = "\n".join(outputs.values())
    assert "tasks match" in joined and "pass rate" in joined and "traces" in joined
    assert stack["proc"].poll() is not None  # the README's last line stopped the stack

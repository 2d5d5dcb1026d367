"""Every `webenv` command against services that ask for a bearer token (WEBENV_AUTH_TOKEN): with the stack's
token in its environment each works, without it each is refused with exit 1 and a message saying what to set.

The collector is the real service started with ``auth_token``; the catalog (TaskService) and the environment
(EnvironmentService) are the collector's test peers served by the services' own runtime (``webenv.runtime.Server``,
the same auth check every service runs) with the same token."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner
from webenv.cli.commands import common
from webenv.cli.main import app
from webenv.runtime import Server, ServiceSettings
from webenv.v1 import environment_pb2_grpc, task_pb2_grpc

TOKEN = "cli-s3cret"


def invoke(token: str | None, *args: str):
    common.console.width = 200
    return CliRunner().invoke(app, list(args), env={"WEBENV_AUTH_TOKEN": token})  # None: unset while it runs


@pytest.fixture
async def guarded(world):
    """The world's catalog and environment behind the runtime's bearer-token check."""
    server = Server("guarded", ServiceSettings(host="127.0.0.1", grpc_port=0, metrics_port=0, metrics_enabled=False,
                                               log_json=False, auth_token=TOKEN))
    server.add_service(task_pb2_grpc.add_TaskServiceServicer_to_server, world.sites, "webenv.v1.TaskService")
    server.add_service(environment_pb2_grpc.add_EnvironmentServiceServicer_to_server, world.env,
                       "webenv.v1.EnvironmentService")
    async with server:
        await server.set_serving()
        yield f"127.0.0.1:{server.port}"


async def test_every_command_works_with_the_stacks_token_and_is_refused_without(make_collector, guarded, tmp_path):
    collector = await make_collector(auth_token=TOKEN)
    col = ("--collector", collector.address)

    def run(token: str | None, *args: str):
        return asyncio.to_thread(invoke, token, *args)

    r = await run(TOKEN, "tasks", "--difficulty", "hard", "--sites", guarded)
    assert r.exit_code == 0 and "6 tasks match" in r.output, r.output
    r = await run(TOKEN, "run", "--policy", "oracle", "--task-limit", "2", "--name", "authed", *col)
    assert r.exit_code == 0 and "succeeded" in r.output, r.output
    run_id = r.output.split("started ", 1)[1].split()[0].rstrip(":")
    r = await run(TOKEN, "runs", *col)
    assert r.exit_code == 0 and "authed" in r.output, r.output
    r = await run(TOKEN, "export", "--format", "traces", "--dest", str(tmp_path / "x"), *col)
    assert r.exit_code == 0 and r.output.startswith("2 episodes"), r.output
    trace = str(next((tmp_path / "x").rglob("*.jsonl")))
    r = await run(TOKEN, "replay", trace, "--env", guarded)
    assert r.exit_code == 0 and "steps reached the recorded URL" in r.output, r.output
    r = await run(TOKEN, "stop", run_id, *col)
    assert r.exit_code == 0 and run_id in r.output, r.output

    for args in (("tasks", "--sites", guarded), ("run", "--policy", "oracle", "--task-limit", "1", *col),
                 ("runs", *col), ("export", "--format", "jsonl", "--dest", str(tmp_path / "y"), *col),
                 ("replay", trace, "--env", guarded), ("stop", run_id, *col)):
        for token, said in ((None, "WEBENV_AUTH_TOKEN is unset"), ("wrong", "the one in WEBENV_AUTH_TOKEN is not")):
            r = await run(token, *args)
            assert r.exit_code == 1, (args, r.output)
            assert "UNAUTHENTICATED: missing or invalid bearer token" in r.output, (args, r.output)
            assert f"{said}: set WEBENV_AUTH_TOKEN to the stack's token" in r.output, (args, r.output)
            assert "Traceback" not in r.output


# -- the commands that start or drive a whole local stack, with WEBENV_AUTH_TOKEN set ------------------------------
# `webenv up`, `webenv train`, `webenv demo` and `webenv worldmodel build` as processes, as a user runs them: every
# service they start inherits the token (so each one asks for it) and every client they make sends it.


def _env(tmp_path: Path, token: str | None = TOKEN) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("WEBENV_")}
    env |= {"WEBENV_LOG_JSON": "false", "WEBENV_STACK_FILE": str(tmp_path / "up" / "stack.json")}
    return env | ({"WEBENV_AUTH_TOKEN": token} if token else {})


def _webenv(tmp_path: Path, *args: str, token: str | None = TOKEN, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "webenv.cli", *args], env=_env(tmp_path, token), cwd=tmp_path,
                          capture_output=True, text=True, timeout=timeout)


@pytest.mark.timeout(900)
def test_up_serves_only_the_token(tmp_path: Path) -> None:
    """`webenv up` with the token: `webenv tasks` with it answers; without it `tasks` and `train` are refused."""
    up = subprocess.Popen([sys.executable, "-m", "webenv.cli", "up", "--data-dir", str(tmp_path / "up"),
                           "--free-ports", "--sites-count", "8"], env=_env(tmp_path), cwd=tmp_path,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        lines, deadline = [], time.monotonic() + 300
        while time.monotonic() < deadline:
            line = up.stdout.readline()
            if not line:
                break
            lines.append(line)
            if "Ctrl-C stops everything" in line:
                break
        assert any("Ctrl-C stops everything" in ln for ln in lines), "".join(lines)

        r = _webenv(tmp_path, "tasks", "--split", "test")
        assert r.returncode == 0 and "tasks match" in r.stdout, r.stdout + r.stderr
        r = _webenv(tmp_path, "tasks", "--split", "test", token=None)
        assert r.returncode == 1 and "UNAUTHENTICATED" in r.stdout and "WEBENV_AUTH_TOKEN is unset" in r.stdout, \
            r.stdout + r.stderr

        r = _webenv(tmp_path, "train", "--demos", "2", "--iterations", "0", "--out", str(tmp_path / "x"), token=None)
        assert r.returncode == 1 and "WEBENV_AUTH_TOKEN is unset" in r.stdout, r.stdout[-3000:] + r.stderr[-3000:]
    finally:
        up.send_signal(signal.SIGTERM)
        rest, _ = up.communicate(timeout=120)
    assert up.returncode in (0, 130), "".join(lines) + rest


@pytest.mark.timeout(600)
def test_demo_runs_with_the_token(tmp_path: Path) -> None:
    r = _webenv(tmp_path, "demo", "--episodes", "4", "--sites-count", "8", "--concurrency", "2",
                "--data-dir", str(tmp_path / "demo"), timeout=540)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert "episodes" in r.stdout and "Traceback" not in r.stdout + r.stderr, r.stdout[-3000:]


@pytest.mark.timeout(600)
def test_worldmodel_build_runs_with_the_token(tmp_path: Path) -> None:
    r = _webenv(tmp_path, "worldmodel", "build", "--out", str(tmp_path / "wm"), "--preset", "smoke", timeout=540)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert "model ready" in r.stdout, r.stdout[-3000:]


@pytest.mark.timeout(900)
def test_train_runs_with_the_token(tmp_path: Path) -> None:
    """The smallest `webenv train --stack` (2 demonstrations, one epoch of BC warm start, no RL iteration, 2 test
    episodes, one episode of each other suite): its own stack asks for the token, the loop's clients send it."""
    r = _webenv(tmp_path, "train", "--stack", "--sites-count", "48", "--data-dir", str(tmp_path / "data"),
                "--demos", "2", "--iterations", "0", "--bc-epochs", "1", "--eval", "2", "--validation-eval", "0",
                "--baseline-eval", "1", "--family-eval", "1", "--builder-eval", "1", "--miniwob-suite", "oracle",
                "--miniwob-tasks", "0", "--handmade-tasks", "0", "--no-oracle-ceiling", "--out", str(tmp_path / "learn"),
                timeout=840)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert (tmp_path / "learn" / "learning.json").exists(), r.stdout[-3000:]

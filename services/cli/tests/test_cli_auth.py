"""Every `webenv` command against services that ask for a bearer token (WEBENV_AUTH_TOKEN): with the stack's
token in its environment each works, without it each is refused with exit 1 and a message saying what to set.

The collector is the real service started with ``auth_token``; the catalog (TaskService) and the environment
(EnvironmentService) are the collector's test peers served by the services' own runtime (``webenv.runtime.Server``,
the same auth check every service runs) with the same token."""

from __future__ import annotations

import asyncio

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

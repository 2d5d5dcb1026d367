"""webenv's OpenEnv server on the real stack (sites, browser farm, judge as processes; the server as
`python -m webenv.openenv`), driven by openenv-core's own EnvClient (WebSocket /ws) and HTTP endpoints."""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys
import time
import urllib.error
import urllib.request
from contextlib import contextmanager
from pathlib import Path

import grpc
import pydantic
import pytest
from webenv.actions import format_action
from webenv.cli.stack import Stack, wait_serving
from webenv.openenv.client import WebEnvClient
from webenv.openenv.env import WebAction
from webenv.testing import free_port
from webenv.v1 import task_pb2, task_pb2_grpc

pytestmark = pytest.mark.timeout(600)
README = Path(__file__).resolve().parents[1] / "services" / "openenv" / "README.md"


@contextmanager
def serve_openenv(s: Stack, browser: str = ""):
    """``python -m webenv.openenv`` on free ports over the stack's sites and judge and ``browser`` (default: the
    stack's farm); sets ``s.openenv_url`` and ``s.openenv_metrics`` while it serves."""
    http, grpc_port, metrics_port = free_port(), free_port(), free_port()
    env = {**os.environ, "WEBENV_HTTP_PORT": str(http), "WEBENV_HTTP_HOST": "127.0.0.1",
           "WEBENV_GRPC_PORT": str(grpc_port), "WEBENV_METRICS_PORT": str(metrics_port), "WEBENV_HOST": "127.0.0.1",
           "WEBENV_BROWSER_ADDR": browser or s.address("browser"), "WEBENV_SITES_ADDR": s.address("sites"),
           "WEBENV_JUDGE_ADDR": s.address("judge"), "WEBENV_OPENENV_MAX_STEPS": "6", "WEBENV_LOG_JSON": "false"}
    with (s.data_dir / f"openenv-{http}.log").open("wb") as log:
        proc = subprocess.Popen([sys.executable, "-m", "webenv.openenv"], env=env, stdout=log, stderr=log)
    try:
        wait_serving(f"127.0.0.1:{grpc_port}", 60, proc)
        s.openenv_url, s.openenv_metrics = f"http://127.0.0.1:{http}", f"http://127.0.0.1:{metrics_port}/metrics"
        yield s
    finally:
        proc.terminate()
        proc.wait(20)


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    with Stack(tmp_path_factory.mktemp("openenv-stack"), free_ports=True, sites_count=8) as s:
        s.start(("sites", "browser", "judge"))
        with serve_openenv(s):
            yield s


def sync_client(stack: Stack):
    return WebEnvClient(base_url=stack.openenv_url).sync()


def health(url: str) -> tuple[int, dict]:
    try:
        with urllib.request.urlopen(f"{url}/health", timeout=30) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def test_health_is_its_peers_and_the_running_stack_is_found(stack: Stack, monkeypatch) -> None:
    """/health says what is behind the server: healthy with the farm, the catalog and the judge SERVING; unhealthy
    (503, naming the peer) without the farm, degraded without only the judge. Before, openenv-core's /health answered
    healthy with nothing behind it. With no address set, the server's settings take the stack `webenv up` recorded
    (stack.json) instead of the default ports; a variable set still wins over the file."""
    from starlette.testclient import TestClient
    from webenv.openenv.app import make_app
    from webenv.openenv.config import Settings
    from webenv.openenv.env import Backend

    code, body = health(stack.openenv_url)  # `python -m webenv.openenv` over the stack
    assert (code, body["status"]) == (200, "healthy") and "reason" not in body, body
    assert {name: p["status"] for name, p in body["peers"].items()} == dict.fromkeys(("browser", "sites", "judge"),
                                                                                     "SERVING"), body
    closed = f"127.0.0.1:{free_port()}"
    for name in ("BROWSER", "SITES", "JUDGE"):
        monkeypatch.delenv(f"WEBENV_{name}_ADDR", raising=False)
    monkeypatch.setenv("WEBENV_STACK_FILE", str(stack.write_state()))  # what `webenv up` records
    monkeypatch.setenv("WEBENV_JUDGE_ADDR", closed)
    answer = TestClient(make_app(Backend(Settings()))).get("/health")
    body = answer.json()
    assert (answer.status_code, body["status"]) == (200, "degraded"), body
    assert body["reason"] == f"the judge at {closed}: UNAVAILABLE", body
    assert body["peers"]["browser"] == {"address": stack.address("browser"), "status": "SERVING"}, body
    assert body["peers"]["sites"] == {"address": stack.address("sites"), "status": "SERVING"}, body
    monkeypatch.setenv("WEBENV_BROWSER_ADDR", closed)
    answer = TestClient(make_app(Backend(Settings()))).get("/health")
    assert (answer.status_code, answer.json()["status"]) == (503, "unhealthy"), answer.json()
    assert answer.json()["reason"] == (f"the browser farm at {closed}: UNAVAILABLE; the judge at {closed}: "
                                       "UNAVAILABLE"), answer.json()


def test_readme_example_runs_as_written(stack: Stack) -> None:
    [example] = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)[:1]
    out = subprocess.run([sys.executable, "-c", example], env={**os.environ, "WEBENV_OPENENV_URL": stack.openenv_url},
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.split() == ["1.0", "True", "True"], out.stdout


def test_a_synthetic_episode_is_graded_by_the_judge(stack: Stack) -> None:
    with grpc.insecure_channel(stack.address("sites")) as ch:
        stub = task_pb2_grpc.TaskServiceStub(ch)
        info = next(t for t in stub.ListTasks(task_pb2.ListTasksRequest(page_size=100)).tasks if "/shop-" in t.task_id)
        task = stub.GetTask(task_pb2.GetTaskRequest(task_id=info.task_id)).task
    with sync_client(stack) as env:
        result = env.reset(task_id=task.task_id, seed=0)
        assert result.observation.instruction == task.instruction and "[" in result.observation.axtree
        assert not result.done and env.state().task_id == task.task_id
        for action in task.oracle:
            result = env.step(WebAction(action=format_action(action)))
        assert result.done and result.reward == 1.0 and result.observation.verdict["passed"]
        assert env.state().step_count == len(task.oracle)
        with pytest.raises(RuntimeError, match="NO_EPISODE"):  # the episode ended: reset first
            env.step(WebAction(action="noop()"))


def test_browsergym_actions_and_bad_input(stack: Stack) -> None:
    with sync_client(stack) as env:
        with pytest.raises(RuntimeError, match="NO_EPISODE"):
            env.step(WebAction(action="noop()"))
        with pytest.raises(RuntimeError, match="NOT_FOUND"):
            env.reset(task_id="miniwob/no-such-task")
        with pytest.raises(RuntimeError, match="task_id"):
            env.reset()
        result = env.reset(task_id="miniwob/click-test", seed=1)
        result = env.step(WebAction(action="click(12, nonsense"))
        assert result.observation.last_action_error.startswith("could not parse action") and not result.done
        result = env.step(WebAction(action="__import__('os').system('true')", format="browsergym"))
        assert result.observation.last_action_error.startswith("ValueError: line 1: only calls of action functions")
        result = env.step(WebAction(action="press('NoSuchKey')", format="browsergym"))
        assert "not an element id" not in result.observation.last_action_error
        result = env.step(WebAction(action="goto('http://169.254.169.254/')", format="browsergym"))
        assert result.observation.last_action_error and "169.254" not in result.observation.url  # the farm's guard
        button = re.search(r'\[(\w+)\] button "Click Me!"', result.observation.axtree).group(1)
        result = env.step(WebAction(action=f"click('{button}')", format="browsergym"))
        assert result.done and result.reward == 1.0, result.observation
    with pytest.raises(pydantic.ValidationError):  # an action over the limit is refused by the model
        WebAction(action="x" * 70_000)


def test_a_misspelt_field_is_named(stack: Stack) -> None:
    """A message with a misspelt field is answered naming it, not with a bare "Invalid message" (openenv-core's) nor
    taken for a missing task_id; the session goes on."""
    from websockets.sync.client import connect

    with connect(stack.openenv_url.replace("http://", "ws://") + "/ws", open_timeout=10) as ws:
        def ask(message: dict) -> dict:
            ws.send(json.dumps(message))
            return json.loads(ws.recv(timeout=60))

        answer = ask({"type": "step", "data": {"actoin": "noop()"}})
        assert answer["type"] == "error" and answer["data"]["code"] == "VALIDATION_ERROR", answer
        message = answer["data"]["message"]
        assert message.startswith("Invalid message: ") and "actoin: extra inputs" in message, message
        assert "action: field required" in message and len(message) < 1000, message
        answer = ask({"type": "reset", "data": {"taskid": "miniwob/click-test"}})
        assert "INVALID_ARGUMENT BAD_FIELD: taskid: not a reset field" in answer["data"]["message"], answer
        assert ask({"type": "reset", "data": {"task_id": "miniwob/click-test"}})["type"] == "observation"
    with sync_client(stack) as env, pytest.raises(RuntimeError, match="BAD_FIELD: task: not a reset field"):
        env.reset(task="miniwob/click-test")


def test_concurrent_sessions_and_the_step_limit(stack: Stack) -> None:
    async def episode(seed: int) -> tuple[float, bool, int]:
        async with WebEnvClient(base_url=stack.openenv_url) as env:
            await env.reset(task_id="miniwob/click-test", seed=seed)
            result = None
            for _ in range(10):
                result = await env.step(WebAction(action="noop()"))
                if result.done:
                    break
            return result.reward, result.done, (await env.state()).step_count

    async def main() -> list[tuple[float, bool, int]]:
        return await asyncio.gather(*(episode(s) for s in range(3)))

    start = time.monotonic()
    results = asyncio.run(main())
    assert results == [(0.0, True, 6)] * 3, results  # WEBENV_OPENENV_MAX_STEPS=6 ends and grades each episode
    assert time.monotonic() - start < 120
    with urllib.request.urlopen(stack.openenv_url + "/health", timeout=5) as r:
        assert b"healthy" in r.read()
    with urllib.request.urlopen(stack.openenv_metrics, timeout=5) as r:
        text = r.read().decode()
    assert 'webenv_openenv_graded_total{passed="false"}' in text and "webenv_openenv_step_seconds_count" in text


def test_with_a_token_every_endpoint_but_health_needs_it() -> None:
    """WEBENV_AUTH_TOKEN guards the OpenEnv HTTP and WebSocket side as it guards every gRPC call (openenv-core has
    no authentication of its own); /health stays open for probes."""
    import json

    from starlette.testclient import TestClient
    from starlette.websockets import WebSocketDisconnect
    from webenv.openenv.app import make_app
    from webenv.openenv.config import Settings
    from webenv.openenv.env import Backend

    client = TestClient(make_app(Backend(Settings(auth_token="s3cret", browser_addr="127.0.0.1:1"))))
    assert client.get("/health").status_code == 503  # open, and says there is no farm behind it (not 401)
    for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": "s3cret"}):
        refused = client.post("/reset", json={}, headers=headers)
        assert refused.status_code == 401 and refused.headers["www-authenticate"].startswith("Bearer")
        assert json.loads(refused.content)["details"][0]["reason"] == "BAD_TOKEN"
    with pytest.raises(WebSocketDisconnect) as closed, client.websocket_connect("/ws"):
        pass
    assert closed.value.code == 1008
    assert client.get("/schema", headers={"Authorization": "Bearer s3cret"}).status_code != 401

"""The real platform behind the gateway, once per test session, with auth on everywhere.

``webenv up``'s launcher (webenv.cli.stack) starts sites, browser farm, policy, judge, collector, trainer and the
gateway as processes on free loopback ports, every one with the same WEBENV_AUTH_TOKEN; a tiny world model
(trained here in seconds) runs beside them. Two runs are stored before the tests: the oracle on three easy
synthetic tasks of train-split sites, keeping a11y trees, elements and JPEG screenshots, and a random policy that
fails them.
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest
from playwright.sync_api import Browser, Page, expect, sync_playwright
from webenv.cli.stack import Stack, wait_serving
from webenv.testing import find_chromium, free_port

F = ["OBSERVATION_FORMAT_AXTREE", "OBSERVATION_FORMAT_ELEMENTS", "OBSERVATION_FORMAT_SCREENSHOT"]
TASKS = {"sources": ["TASK_SOURCE_SYNTHETIC"], "difficulties": ["DIFFICULTY_EASY"], "split": "SPLIT_TRAIN"}
TRANSITION = {  # one recorded page: the world model's start state and its only training example
    "episode_id": "e0", "step_index": 0, "site": "shop-0000", "split": "train", "format": "axtree",
    "instruction": "Explore", "url": "http://shop-0000.web.test/", "state": '[0] RootWebArea "Shop"\n  [1] link "About"',
    "action_text": "click(1)", "next_url": "http://shop-0000.web.test/about",
    "next_state": '[0] RootWebArea "About"\n  [1] link "Home"', "env_kind": "browser",
}


class Proc:
    """A service process beside the stack, health-gated like the stack's own."""

    def __init__(self, name: str, argv: list[str], log_dir: Path, env: dict[str, str]) -> None:
        self.name = name
        self.port = free_port()
        self.log = log_dir / f"{name}.log"
        with self.log.open("wb") as out:
            self.proc = subprocess.Popen(argv, env={**env, "WEBENV_GRPC_PORT": str(self.port), "WEBENV_METRICS_PORT": "0"},
                                         stdout=out, stderr=subprocess.STDOUT, start_new_session=True)

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def wait_serving(self, timeout: float) -> None:
        try:
            wait_serving(self.address, timeout, self.proc, self.name)
        except RuntimeError as exc:
            raise AssertionError(f"{exc}\n{self.log.read_text()[-3000:]}") from None

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


@dataclass
class Platform:
    """The running platform and what the tests need to reach it."""

    stack: Stack
    token: str
    base_url: str
    runs: dict[str, str] = field(default_factory=dict)  # "oracle" / "random" -> run id
    procs: list[Proc] = field(default_factory=list)

    @property
    def ws_url(self) -> str:
        return self.base_url.replace("http://", "ws://")

    def client(self, token: str | None = "") -> httpx.Client:
        """An HTTP client to the gateway (with the platform's token unless told otherwise)."""
        token = self.token if token == "" else token
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        return httpx.Client(base_url=self.base_url, headers=headers, timeout=120)

    def grpc_metadata(self) -> tuple[tuple[str, str], ...]:
        return (("authorization", f"Bearer {self.token}"),)


def start_run(client: httpx.Client, spec: dict) -> str:
    """Start a run over REST and follow its NDJSON watch stream to the end; returns the run id."""
    r = client.post("/v1/runs", json={"requestId": secrets.token_hex(8), "spec": spec})
    assert r.status_code == 200, r.text
    run_id = r.json()["run"]["runId"]
    with client.stream("GET", f"/v1/runs/{run_id}:watch") as resp:
        last = None
        for line in resp.iter_lines():
            if line.strip():
                last = json.loads(line)
    assert last and "result" in last and last["result"]["run"]["state"] == "RUN_STATE_SUCCEEDED", last
    return run_id


@pytest.fixture(scope="session")
def platform(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Platform]:
    root = tmp_path_factory.mktemp("gateway-platform")
    logs = root / "logs"
    logs.mkdir()
    token = "gw-" + secrets.token_hex(8)
    env = {k: v for k, v in os.environ.items() if not k.startswith("WEBENV_")}
    env |= {"WEBENV_AUTH_TOKEN": token, "WEBENV_LOG_JSON": "false", "WEBENV_HOST": "127.0.0.1"}
    transitions = root / "transitions.jsonl"
    transitions.write_text(json.dumps(TRANSITION) + "\n")
    train = subprocess.Popen(
        [sys.executable, "-m", "webenv.worldmodel", "train", "--data", str(transitions), "--out", str(root / "wm"),
         "--size", "tiny", "--max-len", "256", "--batch-size", "1", "--max-steps", "2", "--eval-every", "2",
         "--threads", "1"], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    procs: list[Proc] = []
    stack: Stack | None = None
    try:
        out, err = train.communicate(timeout=240)
        assert train.returncode == 0, err[-3000:]
        model_dir = json.loads(out.strip().splitlines()[-1])["model_dir"]
        wm = Proc("worldmodel", [sys.executable, "-m", "webenv.worldmodel"], logs,
                  env | {"WEBENV_WORLDMODEL_MODEL_PATH": model_dir, "WEBENV_WORLDMODEL_START_STATES": str(transitions),
                         "WEBENV_WORLDMODEL_MAX_NEW_TOKENS": "16", "WEBENV_WORLDMODEL_THREADS": "1"})
        procs.append(wm)
        wm.wait_serving(120)
        stack = Stack(root / "stack", free_ports=True, sites_count=16, extra_env={
            "WEBENV_AUTH_TOKEN": token, "WEBENV_LOG_JSON": "false", "WEBENV_WORLDMODEL_ADDR": wm.address,
            "WEBENV_TRAINER_TORCH_THREADS": "1", "WEBENV_SESSION_POLL_SECONDS": "0.3",
            "WEBENV_FRAME_INTERVAL_SECONDS": "0.3", "WEBENV_MAX_BODY_MB": "4"})
        stack.start(timeout=180)
        p = Platform(stack, token, f"http://127.0.0.1:{stack.gateway_http_port}", procs=procs)
        obs = {"formats": F, "screenshot": {"codec": "IMAGE_CODEC_JPEG", "quality": 50}}
        with p.client() as c:
            p.runs["oracle"] = start_run(c, {"name": "gw-oracle", "policy": "oracle", "taskLimit": 3, "seed": 3,
                                             "concurrency": 3, "tasks": TASKS, "observationSpec": obs, "keepFormats": F})
            p.runs["random"] = start_run(c, {"name": "gw-random", "policy": "random", "taskLimit": 3, "seed": 3,
                                             "concurrency": 3, "tasks": TASKS, "horizons": {"easy": 2},
                                             "observationSpec": obs, "keepFormats": F})
        yield p
    finally:
        if stack is not None:
            stack.stop()
        for proc in procs:
            proc.stop()


# -- the console in a browser ----------------------------------------------------------------------------------------
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
        "--disable-sync", "--no-first-run", "--disable-quic"]


@pytest.fixture(scope="module")  # Playwright's sync API runs its own loop: stop it before asyncio tests run
def browser() -> Iterator[Browser]:
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=find_chromium(), args=ARGS)
        yield b
        b.close()


@pytest.fixture
def page(browser: Browser, platform) -> Iterator[Page]:
    """A signed-in console page; fails the test if the page logged any console error or threw."""
    ctx = browser.new_context(base_url=platform.base_url, viewport={"width": 1500, "height": 950})
    pg = ctx.new_page()
    problems: list[str] = []
    pg.on("console", lambda m: problems.append(f"console.{m.type}: {m.text}") if m.type == "error" else None)
    pg.on("pageerror", lambda e: problems.append(f"page error: {e}"))
    pg.goto("/console/")
    expect(pg.locator("#login-form")).to_be_visible()  # the gateway has a token: sign in first
    pg.fill("#login-token", platform.token)
    pg.click("#login-form button")
    expect(pg.locator("#runs")).to_be_visible()
    yield pg
    ctx.close()
    assert problems == []

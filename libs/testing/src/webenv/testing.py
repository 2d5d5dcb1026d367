"""Pytest fixtures shared by every service's tests (loaded as the ``webenv`` pytest plugin).

They start real things, never fakes: a real ``redis-server`` on a free loopback port, the real Chromium path,
and a helper that scrapes a real /metrics endpoint over HTTP.
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import tempfile
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType

import pytest
from webenv.runtime.ports import free_port

CHROMIUM_CANDIDATES = ("/usr/lib/chromium/chromium", "/usr/bin/chromium", "/usr/bin/chromium-browser")


def wait_for_port(port: int, host: str = "127.0.0.1", timeout: float = 20.0) -> None:
    """Block until something accepts connections on ``host:port`` (or raise TimeoutError)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with socket.socket() as s:
            s.settimeout(0.2)
            if s.connect_ex((host, port)) == 0:
                return
        time.sleep(0.05)
    raise TimeoutError(f"nothing listens on {host}:{port} after {timeout}s")


def scrape(port: int, host: str = "127.0.0.1") -> str:
    """The text of ``http://host:port/metrics``."""
    with urllib.request.urlopen(f"http://{host}:{port}/metrics", timeout=10) as resp:
        return resp.read().decode()


def find_chromium() -> str | None:
    """Path of the Debian Chromium binary (the real one, not the shell wrapper), if installed."""
    env = os.environ.get("WEBENV_FARM_CHROMIUM_PATH")
    for path in (env, *CHROMIUM_CANDIDATES):
        if path and Path(path).exists():
            return path
    return None


@pytest.fixture(scope="session")
def chromium_path() -> str:
    path = find_chromium()
    if path is None:
        pytest.fail("Chromium is not installed: run `make install` (Debian package chromium)")
    return path


@pytest.fixture(scope="session")
def redis_url() -> Iterator[str]:
    """A real redis-server for the whole test session, on a free port, without persistence."""
    exe = shutil.which("redis-server")
    if exe is None:
        pytest.fail("redis-server is not installed: run `make install` (Debian package redis-server)")
    port = free_port()
    workdir = tempfile.mkdtemp(prefix="webenv-redis-")
    proc = subprocess.Popen(
        [exe, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", workdir],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_for_port(port)
        yield f"redis://127.0.0.1:{port}/0"
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        shutil.rmtree(workdir, ignore_errors=True)


@pytest.fixture(name="free_port")
def free_port_fixture() -> Callable[[], int]:
    """The :func:`free_port` function, as a fixture."""
    return free_port


@pytest.fixture(name="scrape")
def scrape_fixture() -> Callable[..., str]:
    """The :func:`scrape` function, as a fixture."""
    return scrape


def load_test_module(path: Path, name: str) -> ModuleType:
    """Another folder's conftest as a module, so a suite elsewhere registers its fixtures instead of copying them
    (pytest loads a conftest only for its own folder)."""
    import importlib.util
    import sys

    if name in sys.modules:  # the same conftest loaded by two suites of one session: one module
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up while the class is built
    spec.loader.exec_module(module)
    return module


def assert_grounded(pairs: list[tuple[str, str]]) -> int:
    """Every (observation text, action text) pair's element action names an element id the observation shows
    (``[id] ``), never a CSS selector it did not show: exported demonstrations are what an agent can write from
    its page. Returns how many element actions were checked."""
    from webenv.actions import parse_action

    checked = 0
    for observation, text in pairs:
        action = parse_action(text)
        target = getattr(getattr(action, action.WhichOneof("kind")), "target", None)
        if target is None or not target.WhichOneof("ref"):
            continue
        checked += 1
        assert target.WhichOneof("ref") == "element_id", f"{text} names a selector, not an element id"
        assert f"[{target.element_id}] " in observation, f"{text}: no [{target.element_id}] in\n{observation[:2000]}"
    return checked


# A one-fact information task's field and product, however the task is worded ("check the warranty of "X"", "find out
# the warranty of "X"", ...): the adapters' scripted agents read them from the instruction.
ONE_FACT = re.compile(r'\bthe (\w+) of "([^"]+)"')


def one_fact_shop_task(task) -> bool:
    """A shop information task of one fact on a site the platform builder renders (whose markup the scripted agents
    of the adapter tests read), worded so that ONE_FACT finds its field and product."""
    return ("/shop-" in task.task_id and "/info-" in task.task_id and task.builder == "platform"
            and task.metadata.get("facts") == "1" and ONE_FACT.search(task.instruction) is not None)

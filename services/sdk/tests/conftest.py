"""Fixtures for the sdk tests: the echo service in-process on free ports."""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from types import ModuleType

import pytest

ECHO_PATH = Path(__file__).with_name("echo_service.py")


def load_echo() -> ModuleType:
    if "webenv_echo_service" in sys.modules:
        return sys.modules["webenv_echo_service"]
    spec = importlib.util.spec_from_file_location("webenv_echo_service", ECHO_PATH)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules["webenv_echo_service"] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="session")
def echo() -> ModuleType:
    return load_echo()


@pytest.fixture
async def echo_server(echo: ModuleType) -> AsyncIterator[object]:
    settings = echo.EchoSettings(host="127.0.0.1", grace_seconds=2)
    server = echo.build_server(settings)
    async with server:
        await server.set_serving()
        yield server

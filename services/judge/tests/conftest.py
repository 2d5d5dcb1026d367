"""Fixtures: a real judge gRPC server on free loopback ports and a stub over a real channel."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable

import pytest
from webenv.client import make_channel
from webenv.judge.config import Settings
from webenv.judge.engine import Judge
from webenv.judge.servicer import JudgeServicer
from webenv.runtime import Server
from webenv.v1 import judge_pb2_grpc


async def start_judge(judge: Judge) -> Server:
    """Start a judge server for ``judge`` on free ports (the caller stops it)."""
    settings = Settings(host="127.0.0.1", grpc_port=0, metrics_port=0, log_json=False)
    server = Server("judge", settings)
    server.add_service(judge_pb2_grpc.add_JudgeServiceServicer_to_server, JudgeServicer(judge),
                       "webenv.v1.JudgeService")
    await server.start()
    await server.set_serving()
    return server


@pytest.fixture(scope="session")
def judge_starter() -> Callable[[Judge], Awaitable[Server]]:
    """The :func:`start_judge` function, for tests that need a judge with their own engine."""
    return start_judge


@pytest.fixture(scope="session")
async def judge_server() -> AsyncIterator[Server]:
    """A judge without an LLM backend, for the whole session."""
    server = await start_judge(Judge())
    yield server
    await server.stop()


@pytest.fixture(scope="session")
async def stub(judge_server: Server) -> AsyncIterator[judge_pb2_grpc.JudgeServiceStub]:
    channel = make_channel(f"127.0.0.1:{judge_server.port}", timeout=30)
    yield judge_pb2_grpc.JudgeServiceStub(channel)
    await channel.close()

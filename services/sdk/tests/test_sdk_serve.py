"""The one start-up/shutdown order (`webenv.runtime.serve`): health NOT_SERVING while the parts start, SERVING
after, and the parts closed after the server stops — also when starting them fails half-way."""

from __future__ import annotations

import asyncio

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from webenv.runtime import ServiceSettings, serving
from webenv.testing import free_port
from webenv.v1 import policy_pb2_grpc


def _settings(port: int = 0) -> ServiceSettings:
    return ServiceSettings(host="127.0.0.1", grpc_port=port, metrics_port=0, metrics_enabled=False, grace_seconds=1,
                           log_json=False)


SERVICES = [(policy_pb2_grpc.add_PolicyServiceServicer_to_server, policy_pb2_grpc.PolicyServiceServicer(),
             "webenv.v1.PolicyService")]


async def _health(port: int) -> int:
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as ch:
        return (await health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(), timeout=5)).status


async def test_parts_start_while_not_serving_and_close_after_the_server_stops() -> None:
    events: list[str] = []
    ports: list[int] = []
    started = asyncio.Event()

    async def start() -> None:
        events.append("start")
        started.set()

    async def close() -> None:
        events.append("close")
        with pytest.raises(grpc.aio.AioRpcError):  # the server stopped first: nothing answers any more
            await _health(ports[0])

    async with serving("echo", _settings(), SERVICES, start=start, close=close) as server:
        ports.append(server.port)
        assert events == ["start"]
        assert await _health(server.port) == health_pb2.HealthCheckResponse.SERVING
    assert events == ["start", "close"]


async def test_a_failed_start_closes_the_parts_and_frees_the_port() -> None:
    closed: list[bool] = []
    seen: list[int] = []

    async def start() -> None:
        raise RuntimeError("the model does not load")

    async def close() -> None:
        closed.append(True)

    settings = _settings()
    with pytest.raises(RuntimeError, match="does not load"):
        async with serving("echo", settings, SERVICES, start=start, close=close) as server:
            seen.append(server.port)  # never reached
    assert closed == [True] and not seen


async def test_the_port_is_bound_and_not_serving_while_the_parts_start() -> None:
    go = asyncio.Event()
    port: list[int] = []

    async def start() -> None:
        await go.wait()

    settings = _settings(free_port())

    async def run() -> None:
        async with serving("echo", settings, SERVICES, start=start) as server:
            port.append(server.port)

    task = asyncio.create_task(run())
    try:
        async with asyncio.timeout(10):
            while True:  # poll until the port answers health (bound before start() returns)
                try:
                    status = await _health(settings.grpc_port)
                    break
                except grpc.aio.AioRpcError:
                    await asyncio.sleep(0.05)
        assert status == health_pb2.HealthCheckResponse.NOT_SERVING
        go.set()
        await asyncio.wait_for(task, 10)
        assert port == [settings.grpc_port]
    finally:
        task.cancel()

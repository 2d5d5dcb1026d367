"""Fixtures: one in-process sites service (gRPC + HTTP on free ports) for the whole test session."""

from __future__ import annotations

from collections.abc import AsyncIterator

import grpc
import pytest
from playwright.async_api import Browser, async_playwright
from webenv.sites.config import Settings
from webenv.sites.service import SitesService
from webenv.v1 import task_pb2_grpc

TEST_SITES = 32  # 4 sites per family: every family, both splits, fast start


def settings(**kw: object) -> Settings:
    base: dict[str, object] = dict(host="127.0.0.1", grpc_port=0, metrics_port=0, http_port=0, http_host="127.0.0.1",
                                   sites_count=TEST_SITES, log_json=False)
    base.update(kw)
    return Settings(**base)  # type: ignore[arg-type]


@pytest.fixture(scope="session")
async def sites_service() -> AsyncIterator[SitesService]:
    svc = SitesService(settings())
    async with svc:
        yield svc


@pytest.fixture(scope="session")
async def task_stub(sites_service: SitesService) -> AsyncIterator[task_pb2_grpc.TaskServiceStub]:
    async with grpc.aio.insecure_channel(f"127.0.0.1:{sites_service.port}") as channel:
        yield task_pb2_grpc.TaskServiceStub(channel)


@pytest.fixture(scope="session")
async def browser(sites_service, chromium_path) -> AsyncIterator[Browser]:
    async with async_playwright() as pw:
        b = await pw.chromium.launch(executable_path=chromium_path, args=[
            "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
            f"--host-resolver-rules=MAP *.web.test 127.0.0.1:{sites_service.http_port}"])
        yield b
        await b.close()

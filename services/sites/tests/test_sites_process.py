"""`python -m webenv.sites` as operators run it: starts (on uvloop), serves both protocols, stops on SIGTERM."""

from __future__ import annotations

import asyncio
import os
import signal
import sys

import grpc
import httpx
from grpc_health.v1 import health_pb2, health_pb2_grpc
from webenv.testing import free_port
from webenv.v1 import task_pb2, task_pb2_grpc


async def test_module_serves_and_stops_on_sigterm(tmp_path) -> None:
    grpc_port, http_port = free_port(), free_port()
    env = {**os.environ, "WEBENV_GRPC_PORT": str(grpc_port), "WEBENV_HTTP_PORT": str(http_port), "WEBENV_METRICS_PORT": "0",
           "WEBENV_HOST": "127.0.0.1", "WEBENV_HTTP_HOST": "127.0.0.1", "WEBENV_SITES_COUNT": "16", "WEBENV_GRACE_SECONDS": "1"}
    log = tmp_path / "sites.log"
    with log.open("wb") as fh:
        proc = await asyncio.create_subprocess_exec(sys.executable, "-m", "webenv.sites", env=env,
                                                    stdout=asyncio.subprocess.DEVNULL, stderr=fh)
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{grpc_port}") as ch:
            health = health_pb2_grpc.HealthStub(ch)
            for _ in range(300):
                assert proc.returncode is None, log.read_text()
                try:
                    if (await health.Check(health_pb2.HealthCheckRequest(), timeout=1)).status == 1:
                        break
                except grpc.aio.AioRpcError:
                    await asyncio.sleep(0.1)
            resp = await task_pb2_grpc.TaskServiceStub(ch).ListTasks(task_pb2.ListTasksRequest(page_size=5), timeout=10)
            assert resp.total_size > 16 * 20 and len(resp.tasks) == 5
        async with httpx.AsyncClient() as c:
            r = await c.get(f"http://127.0.0.1:{http_port}/wiki", headers={"host": "wiki-0001.web.test"})
            assert r.status_code == 200 and 'id="results"' in r.text
            r = await c.get(f"http://127.0.0.1:{http_port}/", headers={"host": "nowhere.web.test"})
            assert r.status_code == 404
        proc.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(proc.wait(), timeout=30) == 0, log.read_text()
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()

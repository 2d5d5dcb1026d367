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
            r = await c.get(f"http://127.0.0.1:{http_port}/wiki", headers={"host": "wiki-0000.web.test"})  # platform
            assert r.status_code == 200 and 'id="results"' in r.text
            r = await c.get(f"http://127.0.0.1:{http_port}/", headers={"host": "nowhere.web.test"})
            assert r.status_code == 404
        proc.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(proc.wait(), timeout=30) == 0, log.read_text()
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()


async def test_bad_task_files_exit_2_with_one_line_per_problem(tmp_path) -> None:
    """Bad YAML and rubric JSON folders are bad configuration: every problem, one line each, exit 2, no traceback."""
    ydir, rdir = tmp_path / "yaml", tmp_path / "rubric"
    ydir.mkdir()
    rdir.mkdir()
    (ydir / "a.yaml").write_text("name: a\ndescription: d\nsuccess_criteria:\n  - type: dom_contains\n")
    (ydir / "b.yaml").write_text("name: b\ndescription: d\nmax_steps: lots\nsuccess_criteria: []\n")
    (rdir / "c.json").write_text('{"task_id": "c", "website": "ftp://x", "task": "t", "fact_groups": [{"facts": ["f"]}]}')
    env = {**os.environ, "WEBENV_GRPC_PORT": "0", "WEBENV_HTTP_PORT": "0", "WEBENV_METRICS_PORT": "0",
           "WEBENV_HOST": "127.0.0.1", "WEBENV_SITES_COUNT": "8", "WEBENV_SITES_MINIWOB": "false",
           "WEBENV_SITES_YAML_DIRS": f'["{ydir}"]', "WEBENV_SITES_RUBRIC_DIRS": f'["{rdir}"]'}
    proc = await asyncio.create_subprocess_exec(sys.executable, "-m", "webenv.sites", env=env,
                                                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await asyncio.wait_for(proc.communicate(), timeout=120)
    text = err.decode()
    assert proc.returncode == 2, text
    assert "Traceback" not in text
    lines = text.strip().splitlines()
    assert lines[0] == "webenv-sites: 4 problem(s) in task files (WEBENV_SITES_YAML_DIRS, WEBENV_SITES_RUBRIC_DIRS):"
    assert lines[1:] == [
        f"{ydir / 'a.yaml'}:4: success_criteria[0].selector: required for type dom_contains",
        f"{ydir / 'b.yaml'}:3: max_steps: must be an integer, got str 'lots'",
        f"{ydir / 'b.yaml'}:4: success_criteria: must be a non-empty list",
        f"{rdir / 'c.json'}[0]: website: Value error, task 'c': start URL 'ftp://x' scheme ftp: is not http or https",
    ], text

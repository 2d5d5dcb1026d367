"""A real Prometheus server scrapes a service's /metrics and can query the RPC counters by code."""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import urllib.error
import urllib.parse
import urllib.request

import grpc
import pytest
from webenv.client import make_channel
from webenv.testing import free_port, wait_for_port
from webenv.v1 import policy_pb2, policy_pb2_grpc


def _query(port: int, expr: str) -> list[dict]:
    """Run an instant query; an empty result while Prometheus is still starting (it answers 503 then)."""
    url = f"http://127.0.0.1:{port}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
    try:
        with urllib.request.urlopen(url, timeout=5) as resp:
            return json.load(resp)["data"]["result"]
    except urllib.error.HTTPError as exc:
        if exc.code == 503:
            return []
        raise


async def test_prometheus_scrapes_rpc_metrics(echo_server, tmp_path):
    exe = shutil.which("prometheus")
    if exe is None:
        pytest.fail("prometheus is not installed: run `make install` (Debian package prometheus)")
    async with make_channel(f"127.0.0.1:{echo_server.port}") as ch:
        stub = policy_pb2_grpc.PolicyServiceStub(ch)
        for _ in range(3):
            await stub.Act(policy_pb2.ActRequest(episode_id="ok"))
        with pytest.raises(grpc.aio.AioRpcError):
            await stub.Act(policy_pb2.ActRequest(episode_id="invalid"))
    config = tmp_path / "prometheus.yml"
    config.write_text(
        "global: {scrape_interval: 1s, evaluation_interval: 1s}\n"
        "scrape_configs:\n"
        f"  - job_name: echo\n    static_configs: [{{targets: ['127.0.0.1:{echo_server.metrics_port}']}}]\n"
    )
    web = free_port()
    proc = subprocess.Popen(  # noqa: ASYNC220 - starting a server process is instantaneous
        [exe, f"--config.file={config}", f"--storage.tsdb.path={tmp_path / 'data'}",
         f"--web.listen-address=127.0.0.1:{web}"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    try:
        await asyncio.to_thread(wait_for_port, web, "127.0.0.1", 30)
        expr = 'grpc_server_handled_total{job="echo",grpc_method="Act"}'
        result: list[dict] = []
        for _ in range(60):  # the first scrape happens within a scrape interval or two
            result = await asyncio.to_thread(_query, web, expr)
            if len(result) >= 2:
                break
            await asyncio.sleep(0.5)
        by_code = {r["metric"]["grpc_code"]: float(r["value"][1]) for r in result}
        assert by_code.get("INVALID_ARGUMENT", 0) >= 1
        assert by_code.get("OK", 0) >= 3
        hist = await asyncio.to_thread(_query, web, 'grpc_server_handling_seconds_bucket{job="echo",grpc_method="Act",le="+Inf"}')
        assert hist and float(hist[0]["value"][1]) >= 4
    finally:
        proc.terminate()
        proc.wait(timeout=20)

"""The gateway's parts without the platform: path templates, request mapping, error statuses, live-stream
back-pressure, settings, and HTTPS with the auth token (a gateway process with no services behind it)."""

from __future__ import annotations

import asyncio
import json
import os
import ssl
import subprocess
import sys
from pathlib import Path

import grpc
import httpx
import pytest
from google.protobuf import descriptor_pool
from grpc_health.v1 import health_pb2, health_pb2_grpc
from webenv import errors
from webenv.gateway import app as gateway_app
from webenv.gateway import status
from webenv.gateway.config import UPSTREAMS, Settings
from webenv.gateway.live import Topic, Viewer
from webenv.gateway.transcoder import build_request, compile_template, routes_for
from webenv.testing import free_port

ROUTES = routes_for(descriptor_pool.Default().FindServiceByName(s) for s in UPSTREAMS)


def route(label: str):
    return next(r for r in ROUTES if r.label == label)


@pytest.mark.parametrize("template, path, groups", [
    ("/v1/sessions/{session_id}:step", "/v1/sessions/abc:step", ("abc",)),
    ("/v1/sessions/{session_id}:step", "/v1/sessions/a/b:step", None),
    ("/v1/tasks/{task_id=**}", "/v1/tasks/synthetic/shop-0001/info-2", ("synthetic/shop-0001/info-2",)),
    ("/v1/runs", "/v1/runs", ()),
    ("/v1/runs", "/v1/runs:export", None),
    ("/v1/a/{x.y=items/*}/z", "/v1/a/items/7/z", ("items/7",)),
])
def test_path_templates(template, path, groups):
    regex, _ = compile_template(template)
    m = regex.match(path)
    assert (m.groups() if m else None) == groups


@pytest.mark.parametrize("bad", ["v1/x", "/v1/{a}/{b=**}/c", "/v1/{a={b}}", "/v1/a}"])
def test_bad_templates_are_refused(bad):
    with pytest.raises(ValueError):
        compile_template(bad)


def test_more_specific_routes_win():
    """GET /v1/runs/x:watch is WatchRun, not GetRun of a run named 'x:watch'."""
    labels = [r.label for r in ROUTES]
    assert labels.index("GET /v1/runs/{run_id}:watch") < labels.index("GET /v1/runs/{run_id}")


def test_request_from_path_query_and_body():
    r = route("GET /v1/tasks")
    req = build_request(r, {}, [("filter.sources", "TASK_SOURCE_SYNTHETIC"), ("filter.sources", "2"),
                                ("filter.split", "SPLIT_TEST"), ("pageSize", "7")], b"")
    assert list(req.filter.sources) == [1, 2] and req.filter.split == 2 and req.page_size == 7
    r = route("POST /v1/sessions/{session_id}:step")
    req = build_request(r, {"session_id": "s1"}, [], b'{"action": {"noop": {}}, "stepIndex": 3, "sessionId": "other"}')
    assert req.session_id == "s1" and req.step_index == 3 and req.action.HasField("noop")  # the path wins
    r = route("GET /v1/episodes")
    req = build_request(r, {}, [("run_ids", "a"), ("run_ids", "b"), ("read_mask", "episodeId,task.taskId"),
                                ("filter.passed", "false")], b"")
    assert list(req.run_ids) == ["a", "b"] and list(req.read_mask.paths) == ["episode_id", "task.task_id"]
    assert req.filter.HasField("passed") and req.filter.passed is False


@pytest.mark.parametrize("query, field", [
    ([("page_size", "1"), ("page_size", "2")], "page_size"),
    ([("filter", "x")], "filter"),
    ([("filter.difficulties", "HARDEST")], "filter.difficulties"),
    ([("page_size", "99999999999")], "page_size"),
])
def test_bad_query_parameters_name_the_field(query, field):
    with pytest.raises(errors.InvalidArgument) as info:
        build_request(route("GET /v1/tasks"), {}, query, b"")
    assert info.value.metadata["field"] == field


def test_status_codes_are_grpc_gateways():
    expected = {"OK": 200, "CANCELLED": 499, "UNKNOWN": 500, "INVALID_ARGUMENT": 400, "DEADLINE_EXCEEDED": 504,
                "NOT_FOUND": 404, "ALREADY_EXISTS": 409, "PERMISSION_DENIED": 403, "UNAUTHENTICATED": 401,
                "RESOURCE_EXHAUSTED": 429, "FAILED_PRECONDITION": 400, "ABORTED": 409, "OUT_OF_RANGE": 400,
                "UNIMPLEMENTED": 501, "INTERNAL": 500, "UNAVAILABLE": 503, "DATA_LOSS": 500}
    assert {c.name: s for c, s in status.HTTP_STATUS.items()} == expected
    resp = status.error_response(errors.ResourceExhausted("full", reason="FARM_FULL", retry_after_seconds=1.5))
    body = json.loads(resp.body)
    assert resp.status_code == 429 and resp.headers["retry-after"] == "2"
    assert body["code"] == grpc.StatusCode.RESOURCE_EXHAUSTED.value[0]
    assert [d["@type"].rsplit(".", 1)[-1] for d in body["details"]] == ["ErrorInfo", "RetryInfo"]


async def test_a_slow_viewer_drops_old_frames_and_never_blocks_the_publisher():
    topic = Topic("session", "session:s")
    slow, fast, no_images = Viewer("session", 4, True), Viewer("session", 4, True), Viewer("session", 4, False)
    topic.viewers |= {slow, fast, no_images}
    got: list[int] = []

    async def read_fast() -> None:
        while (text := await fast.get()) is not None:
            got.append(json.loads(text)["n"])

    reader = asyncio.create_task(read_fast())
    for n in range(100):
        topic.publish({"type": "step", "n": n})  # synchronous: returns at once whatever the viewers do
        topic.publish({"type": "frame", "n": n}, image=True)
        await asyncio.sleep(0)
    topic.close()
    await reader
    assert len(slow.queue) == 4 and slow.dropped == 196  # only the newest four are kept for the slow one
    assert [json.loads(t)["n"] for t in slow.queue] == [98, 98, 99, 99]
    assert len(got) == 200 and fast.dropped == 0  # the reading viewer lost nothing
    assert all(json.loads(t)["type"] == "step" for t in no_images.queue)  # frames only for viewers who asked


def test_bad_settings_exit_2_naming_the_variable():
    env = {**os.environ, "WEBENV_HTTP_PORT": "70000", "WEBENV_VIEWER_QUEUE": "0"}
    proc = subprocess.run([sys.executable, "-m", "webenv.gateway"], env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert "WEBENV_HTTP_PORT" in proc.stderr and "WEBENV_VIEWER_QUEUE" in proc.stderr


def _self_signed(tmp_path) -> tuple[str, str]:
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=localhost",
                    "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost", "-keyout", str(key), "-out", str(cert)],
                   check=True, capture_output=True, timeout=60)
    return str(cert), str(key)


async def test_https_and_token_without_upstreams(tmp_path):
    """TLS on both ports from the shared settings; the token guards /v1/; a dead upstream is 503 UNAVAILABLE."""
    cert, key = _self_signed(tmp_path)
    dead = f"127.0.0.1:{free_port()}"
    settings = Settings(host="127.0.0.1", http_host="127.0.0.1", grpc_port=0, metrics_port=0, http_port=0,
                        log_json=False, tls_cert_file=cert, tls_key_file=key, auth_token="tok",
                        collector_addr=dead, upstream_timeout_seconds=2)
    async with gateway_app.Gateway(settings) as gw:
        ctx = ssl.create_default_context(cafile=cert)
        async with httpx.AsyncClient(base_url=f"https://127.0.0.1:{gw.http_port}", verify=ctx) as c:
            assert (await c.get("/healthz")).json()["status"] == "SERVING"
            assert (await c.get("/v1/runs")).status_code == 401
            r = await c.get("/v1/runs", headers={"Authorization": "Bearer tok"})
            assert r.status_code == 503 and r.json()["code"] == grpc.StatusCode.UNAVAILABLE.value[0]
            login = await c.post("/console/login", json={"token": "tok"})
            assert "secure" in login.headers["set-cookie"].lower()
        with pytest.raises(httpx.HTTPError):
            async with httpx.AsyncClient() as plain:
                await plain.get(f"http://127.0.0.1:{gw.http_port}/healthz")
        creds = grpc.ssl_channel_credentials(Path(cert).read_bytes())  # noqa: ASYNC240 - a test's small file
        async with grpc.aio.secure_channel(f"127.0.0.1:{gw.server.port}", creds) as ch:
            resp = await health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(), timeout=5)
            assert resp.status == health_pb2.HealthCheckResponse.SERVING

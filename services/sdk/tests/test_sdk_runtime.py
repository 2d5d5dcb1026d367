"""The shared runtime over real channels: health, reflection, metrics, deadlines, errors, auth, shutdown."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha.proto_reflection_descriptor_database import ProtoReflectionDescriptorDatabase
from prometheus_client.parser import text_string_to_metric_families
from webenv import errors
from webenv.client import make_channel, make_sync_channel
from webenv.runtime import ServiceSettings, describe_validation_error
from webenv.v1 import policy_pb2, policy_pb2_grpc

ECHO_PATH = Path(__file__).with_name("echo_service.py")


def sample(text: str, name: str, **labels: str) -> float:
    """The value of one sample in a /metrics text (0 when absent)."""
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()):
                return s.value
    return 0.0


async def test_health_reports_serving_after_set_serving(echo, free_port):
    server = echo.build_server(echo.EchoSettings(host="127.0.0.1"))
    async with server:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{server.port}") as ch:
            stub = health_pb2_grpc.HealthStub(ch)
            before = await stub.Check(health_pb2.HealthCheckRequest(service="webenv.v1.PolicyService"))
            assert before.status == health_pb2.HealthCheckResponse.NOT_SERVING
            await server.set_serving()
            after = await stub.Check(health_pb2.HealthCheckRequest(service="webenv.v1.PolicyService"))
            overall = await stub.Check(health_pb2.HealthCheckRequest(service=""))
            assert after.status == overall.status == health_pb2.HealthCheckResponse.SERVING


async def test_reflection_lists_services(echo_server):
    def discover() -> tuple[set[str], str]:
        # The reflection client is synchronous: run it off the loop that serves the in-process server.
        with grpc.insecure_channel(f"127.0.0.1:{echo_server.port}") as ch:
            db = ProtoReflectionDescriptorDatabase(ch)
            return set(db.get_services()), db.FindFileContainingSymbol("webenv.v1.PolicyService").package

    names, package = await asyncio.to_thread(discover)
    assert {"webenv.v1.PolicyService", "grpc.health.v1.Health"} <= names
    assert package == "webenv.v1"


async def test_metrics_count_unary_and_streaming_rpcs(echo_server, scrape):
    before = scrape(echo_server.metrics_port)
    async with make_channel(f"127.0.0.1:{echo_server.port}") as ch:
        stub = policy_pb2_grpc.PolicyServiceStub(ch)
        await stub.Act(policy_pb2.ActRequest(episode_id="ok"))
        with pytest.raises(grpc.aio.AioRpcError):
            await stub.Act(policy_pb2.ActRequest(episode_id="invalid"))
        call = stub.ActStream()
        for i in range(5):
            await call.write(policy_pb2.ActStreamRequest(tag=str(i), request=policy_pb2.ActRequest(episode_id="e")))
        await call.done_writing()
        answers = [r async for r in call]
        assert len(answers) == 5
    after = scrape(echo_server.metrics_port)
    unary = {"grpc_service": "webenv.v1.PolicyService", "grpc_method": "Act", "grpc_type": "unary"}
    bidi = {"grpc_service": "webenv.v1.PolicyService", "grpc_method": "ActStream", "grpc_type": "bidi_stream"}

    def delta(name: str, **labels: str) -> float:
        return sample(after, name, **labels) - sample(before, name, **labels)

    assert delta("grpc_server_started_total", **unary) == 2
    assert delta("grpc_server_handled_total", **unary, grpc_code="OK") == 1
    assert delta("grpc_server_handled_total", **unary, grpc_code="INVALID_ARGUMENT") == 1
    assert delta("grpc_server_handling_seconds_count", **unary) == 2
    assert delta("grpc_server_msg_received_total", **bidi) == 5
    assert delta("grpc_server_msg_sent_total", **bidi) == 5
    assert delta("grpc_server_handled_total", **bidi, grpc_code="OK") == 1


async def test_deadline_propagates_to_the_server(echo_server):
    async with make_channel(f"127.0.0.1:{echo_server.port}") as ch:
        stub = policy_pb2_grpc.PolicyServiceStub(ch)
        resp = await stub.Act(policy_pb2.ActRequest(episode_id="ok"), timeout=1.5)
        remaining = float(resp.memory)
        assert 0 < remaining <= 1.6  # grpc-timeout is sent in whole units, rounded up


async def test_default_deadline_applies_to_unary_calls(echo_server):
    async with make_channel(f"127.0.0.1:{echo_server.port}", timeout=0.3) as ch:
        stub = policy_pb2_grpc.PolicyServiceStub(ch)
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await stub.Act(policy_pb2.ActRequest(episode_id="slow:3"))
        assert info.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED


async def test_domain_error_arrives_with_code_and_error_info(echo_server):
    async with make_channel(f"127.0.0.1:{echo_server.port}") as ch:
        stub = policy_pb2_grpc.PolicyServiceStub(ch)
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await stub.Act(policy_pb2.ActRequest(episode_id="invalid"))
        err = errors.from_rpc_error(info.value)
        assert isinstance(err, errors.InvalidArgument)
        assert err.reason == "MISSING_OBSERVATION"
        assert err.metadata == {"field": "observation"}
        assert "observation: is required" in err.message

        with pytest.raises(grpc.aio.AioRpcError) as info:
            await stub.Act(policy_pb2.ActRequest(episode_id="exhausted"))
        err = errors.from_rpc_error(info.value)
        assert isinstance(err, errors.ResourceExhausted)
        assert err.retry_after_seconds == pytest.approx(1.5)


async def test_unexpected_exception_is_internal_with_its_type(echo_server):
    async with make_channel(f"127.0.0.1:{echo_server.port}") as ch:
        stub = policy_pb2_grpc.PolicyServiceStub(ch)
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await stub.Act(policy_pb2.ActRequest(episode_id="boom"))
        assert info.value.code() == grpc.StatusCode.INTERNAL
        assert "RuntimeError: kaboom" in info.value.details()


async def test_a_method_the_service_does_not_serve_is_unimplemented(echo_server):
    """The echo policy has no LoadCheckpoint: the generated base class answers, as UNIMPLEMENTED (not INTERNAL)."""
    async with make_channel(f"127.0.0.1:{echo_server.port}") as ch:
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await policy_pb2_grpc.PolicyServiceStub(ch).LoadCheckpoint(policy_pb2.LoadCheckpointRequest(ref="x@1"))
        assert info.value.code() == grpc.StatusCode.UNIMPLEMENTED
        assert isinstance(errors.from_rpc_error(info.value), errors.Unimplemented)


async def test_undecodable_requests_are_invalid_argument_on_every_kind_of_rpc(echo_server, scrape, caplog):
    """Bytes that are not the request message: INVALID_ARGUMENT naming `request`, one log line, no traceback."""
    before = scrape(echo_server.metrics_port)
    garbage = b"\xff\xff\xff\xff\x0f"
    async with grpc.aio.insecure_channel(f"127.0.0.1:{echo_server.port}") as ch:
        calls = {
            "Act": lambda: ch.unary_unary("/webenv.v1.PolicyService/Act")(garbage),
            "Check": lambda: ch.unary_unary("/grpc.health.v1.Health/Check")(garbage),
        }
        for name, call in calls.items():
            with pytest.raises(grpc.aio.AioRpcError) as info:
                await call()
            err = errors.from_rpc_error(info.value)
            assert isinstance(err, errors.InvalidArgument), (name, info.value)
            assert err.reason == "UNDECODABLE_REQUEST" and err.metadata == {"field": "request"}
        watch = ch.unary_stream("/grpc.health.v1.Health/Watch")(garbage)
        with pytest.raises(grpc.aio.AioRpcError) as info:
            async for _ in watch:
                pass
        assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        # A bidi stream: the good items before the bad one are answered, then the call ends INVALID_ARGUMENT.
        stream = ch.stream_stream("/webenv.v1.PolicyService/ActStream",
                                  request_serializer=lambda m: m if isinstance(m, bytes) else m.SerializeToString(),
                                  response_deserializer=policy_pb2.ActStreamResponse.FromString)()
        await stream.write(policy_pb2.ActStreamRequest(tag="a", request=policy_pb2.ActRequest(episode_id="e")))
        await stream.write(garbage)
        answers = []
        with pytest.raises(grpc.aio.AioRpcError) as info:
            async for r in stream:
                answers.append(r.tag)
        assert answers == ["a"]
        assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "request:" in info.value.details()
    after = scrape(echo_server.metrics_port)
    bidi = {"grpc_service": "webenv.v1.PolicyService", "grpc_method": "ActStream", "grpc_type": "bidi_stream"}
    assert sample(after, "grpc_server_handled_total", **bidi, grpc_code="INVALID_ARGUMENT") - sample(
        before, "grpc_server_handled_total", **bidi, grpc_code="INVALID_ARGUMENT") == 1
    assert not [r for r in caplog.records if r.exc_info], "a decode failure must not log a traceback"
    assert any("undecodable request" in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize("kind", ["echo", "boom-echo"])
async def test_errors_quoting_huge_input_stay_under_the_clients_metadata_limit(echo_server, kind):
    """A 200 KB input quoted by an error: the client gets the real error (bounded), not a metadata-size failure."""
    huge = "é" * 100_000
    async with make_channel(f"127.0.0.1:{echo_server.port}") as ch:
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await policy_pb2_grpc.PolicyServiceStub(ch).Act(policy_pb2.ActRequest(episode_id=f"{kind}:{huge}"))
    err = errors.from_rpc_error(info.value)
    if kind == "echo":
        assert isinstance(err, errors.InvalidArgument) and err.reason == "UNKNOWN_EPISODE"
        assert err.message.startswith("episode_id: unknown episode")  # still names the field
        assert err.metadata["field"] == "episode_id" and len(err.metadata) <= errors.MAX_METADATA_ITEMS
        assert all(len(v.encode()) <= errors.MAX_METADATA_VALUE_BYTES for v in err.metadata.values())
    else:
        assert isinstance(err, errors.Internal) and "KeyError" in err.message
    assert len(err.message.encode()) <= errors.MAX_MESSAGE_BYTES and "bytes, cut)" in err.message
    assert len(info.value.details().encode()) <= errors.MAX_MESSAGE_BYTES


def test_bounded_keeps_characters_whole():
    assert errors.bounded("short") == "short"
    cut = errors.bounded("ü" * 1000, 101)
    assert len(cut.encode()) <= 101 and cut.startswith("ü") and cut.endswith("(2000 bytes, cut)")
    assert errors.bounded("a\ud800b") == "a?b"  # a lone surrogate cannot travel in a status
    err = errors.InvalidArgument("x", metadata={f"k{i}": "v" for i in range(30)})
    assert len(err.metadata) == errors.MAX_METADATA_ITEMS and err.metadata["omitted_entries"] == "23"
    assert err.to_stream_error().message == "x"


async def test_stream_item_error_does_not_end_the_stream(echo_server):
    async with make_channel(f"127.0.0.1:{echo_server.port}") as ch:
        stub = policy_pb2_grpc.PolicyServiceStub(ch)
        requests = [policy_pb2.ActStreamRequest(tag=t, request=policy_pb2.ActRequest(episode_id=e))
                    for t, e in (("a", "x"), ("b", "invalid"), ("c", "y"))]
        answers = {r.tag: r async for r in stub.ActStream(iter(requests))}
        assert answers["a"].HasField("response") and answers["c"].HasField("response")
        err = errors.from_stream_error(answers["b"].error)
        assert isinstance(err, errors.InvalidArgument) and err.reason == "BAD_ITEM"


async def test_bearer_token_required_when_configured(echo):
    server = echo.build_server(echo.EchoSettings(host="127.0.0.1", auth_token="s3cret"))
    async with server:
        await server.set_serving()
        address = f"127.0.0.1:{server.port}"
        async with make_channel(address) as ch:
            with pytest.raises(grpc.aio.AioRpcError) as info:
                await policy_pb2_grpc.PolicyServiceStub(ch).ListPolicies(policy_pb2.ListPoliciesRequest())
            assert info.value.code() == grpc.StatusCode.UNAUTHENTICATED
            health = await health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest())
            assert health.status == health_pb2.HealthCheckResponse.SERVING  # probes need no token
        async with make_channel(address, token="wrong") as ch:
            with pytest.raises(grpc.aio.AioRpcError) as info:
                await policy_pb2_grpc.PolicyServiceStub(ch).ListPolicies(policy_pb2.ListPoliciesRequest())
            assert info.value.code() == grpc.StatusCode.UNAUTHENTICATED
        async with make_channel(address, token="s3cret") as ch:
            resp = await policy_pb2_grpc.PolicyServiceStub(ch).ListPolicies(policy_pb2.ListPoliciesRequest())
            assert resp.default_policy == "echo"


async def test_every_call_kind_carries_the_token(echo):
    """Unary, server-streaming, client-streaming and bidi calls through make_channel all send the token."""

    async def one(request: bytes, context) -> bytes:
        return request

    async def many(request: bytes, context):
        for b in request:
            yield bytes([b])

    async def gather(requests, context) -> bytes:
        return b"".join([r async for r in requests])

    async def echo_each(requests, context):
        async for r in requests:
            yield r

    server = echo.build_server(echo.EchoSettings(host="127.0.0.1", auth_token="s3cret"))
    server.grpc.add_generic_rpc_handlers((grpc.method_handlers_generic_handler("test.Kinds", {
        "One": grpc.unary_unary_rpc_method_handler(one), "Many": grpc.unary_stream_rpc_method_handler(many),
        "Gather": grpc.stream_unary_rpc_method_handler(gather),
        "Each": grpc.stream_stream_rpc_method_handler(echo_each)}),))
    async with server:
        await server.set_serving()

        for token, ok in (("s3cret", True), ("wrong", False)):

            async def requests(ok: bool = ok):
                # A refused call ends while the client may still be writing (then grpc reports the write, not the
                # status): refused streaming calls send nothing, so the status is what comes back.
                for b in (b"a", b"b") if ok else ():
                    yield b

            async with make_channel(f"127.0.0.1:{server.port}", token=token) as ch:
                calls = (
                    lambda: ch.unary_unary("/test.Kinds/One")(b"ab"),
                    lambda: _collect(ch.unary_stream("/test.Kinds/Many")(b"ab")),
                    lambda: ch.stream_unary("/test.Kinds/Gather")(requests()),
                    lambda: _collect(ch.stream_stream("/test.Kinds/Each")(requests())),
                )
                for call, want in zip(calls, (b"ab", [b"a", b"b"], b"ab", [b"a", b"b"]), strict=True):
                    if ok:
                        assert await call() == want
                    else:
                        with pytest.raises(grpc.aio.AioRpcError) as info:
                            await call()
                        assert info.value.code() == grpc.StatusCode.UNAUTHENTICATED, info.value
            await asyncio.to_thread(_every_kind_sync, f"127.0.0.1:{server.port}", token, ok)


def _every_kind_sync(address: str, token: str, ok: bool) -> None:
    """The synchronous channel sends the token on every call kind too (run off the loop serving the server)."""
    with make_sync_channel(address, token=token) as ch:
        sent = [b"a", b"b"] if ok else []
        calls = (
            lambda: ch.unary_unary("/test.Kinds/One")(b"ab"),
            lambda: list(ch.unary_stream("/test.Kinds/Many")(b"ab")),
            lambda: ch.stream_unary("/test.Kinds/Gather")(iter(sent)),
            lambda: list(ch.stream_stream("/test.Kinds/Each")(iter(sent))),
        )
        for call, want in zip(calls, (b"ab", [b"a", b"b"], b"ab", [b"a", b"b"]), strict=True):
            if ok:
                assert call() == want
            else:
                with pytest.raises(grpc.RpcError) as info:
                    call()
                assert info.value.code() == grpc.StatusCode.UNAUTHENTICATED, info.value


async def _collect(call) -> list:
    return [item async for item in call]


def _spawn(env_extra: dict[str, str]) -> subprocess.Popen[str]:
    env = {**os.environ, "WEBENV_HOST": "127.0.0.1", **env_extra}
    return subprocess.Popen([sys.executable, str(ECHO_PATH)], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


async def test_sigterm_drains_health_then_finishes_in_flight_rpc():
    proc = _spawn({"WEBENV_GRACE_SECONDS": "10"})
    try:
        line = await asyncio.to_thread(proc.stdout.readline)
        assert line.startswith("READY"), line + proc.stderr.read()
        port = int(line.split()[1])
        async with make_channel(f"127.0.0.1:{port}") as ch:
            watch = health_pb2_grpc.HealthStub(ch).Watch(health_pb2.HealthCheckRequest(service="webenv.v1.PolicyService"))
            first = await watch.read()
            assert first.status == health_pb2.HealthCheckResponse.SERVING
            slow = asyncio.ensure_future(
                policy_pb2_grpc.PolicyServiceStub(ch).Act(policy_pb2.ActRequest(episode_id="slow:1.5"))
            )
            await asyncio.sleep(0.3)  # let the slow call reach the server before the signal
            proc.send_signal(signal.SIGTERM)
            second = await watch.read()
            assert second.status == health_pb2.HealthCheckResponse.NOT_SERVING
            resp = await slow  # the in-flight RPC still completes
            assert resp.action_text == "noop()"
        assert await asyncio.to_thread(proc.wait, 15) == 0
    finally:
        if proc.poll() is None:
            proc.kill()


def test_bad_config_fails_fast_with_the_variable_name():
    proc = _spawn({"WEBENV_GRPC_PORT": "not-a-port", "WEBENV_LOG_LEVEL": "LOUD"})
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 2
    assert "WEBENV_GRPC_PORT" in err and "WEBENV_LOG_LEVEL" in err
    assert "Traceback" not in err


def test_tls_files_must_come_in_pairs(monkeypatch):
    monkeypatch.setenv("WEBENV_TLS_CERT_FILE", "/tmp/cert.pem")
    with pytest.raises(Exception) as info:
        ServiceSettings()
    assert "WEBENV_TLS_KEY_FILE" in describe_validation_error(info.value) or "WEBENV_TLS_KEY_FILE" in str(info.value)


async def test_tls_when_configured(echo, tmp_path):
    key, cert = tmp_path / "key.pem", tmp_path / "cert.pem"
    proc = await asyncio.create_subprocess_exec(
        "openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=localhost",
        "-addext", "subjectAltName=DNS:localhost", "-keyout", str(key), "-out", str(cert),
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL,
    )
    assert await proc.wait() == 0
    server = echo.build_server(echo.EchoSettings(host="127.0.0.1", tls_cert_file=str(cert), tls_key_file=str(key)))
    async with server:
        await server.set_serving()
        async with make_channel(f"localhost:{server.port}", root_certificates=cert.read_bytes()) as ch:
            resp = await policy_pb2_grpc.PolicyServiceStub(ch).ListPolicies(policy_pb2.ListPoliciesRequest())
            assert resp.default_policy == "echo"
        async with make_channel(f"localhost:{server.port}", timeout=2) as plain:  # plaintext to a TLS port fails
            with pytest.raises(grpc.aio.AioRpcError) as info:
                await policy_pb2_grpc.PolicyServiceStub(plain).ListPolicies(policy_pb2.ListPoliciesRequest())
            assert info.value.code() in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED)


async def test_clients_take_the_servers_settings_from_the_environment(echo, tmp_path, monkeypatch):
    """A client whose environment names the stack's token, CA (here the self-signed certificate itself) and message
    limit speaks TLS with the token and that limit, on both channels; a bad limit is refused naming the variable."""
    key, cert = tmp_path / "key.pem", tmp_path / "cert.pem"
    proc = await asyncio.create_subprocess_exec(
        "openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=localhost",
        "-addext", "subjectAltName=DNS:localhost", "-keyout", str(key), "-out", str(cert),
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL,
    )
    assert await proc.wait() == 0
    server = echo.build_server(echo.EchoSettings(host="127.0.0.1", auth_token="shared", tls_cert_file=str(cert),
                                                 tls_key_file=str(key), max_message_mb=8))
    big = policy_pb2.ActRequest(episode_id="x" * (5 << 20))  # over gRPC's default 4 MiB, under the servers' 8
    for name, value in (("WEBENV_AUTH_TOKEN", "shared"), ("WEBENV_TLS_CA_FILE", str(cert)),
                        ("WEBENV_MAX_MESSAGE_MB", "8")):
        monkeypatch.setenv(name, value)
    async with server:
        await server.set_serving()
        address = f"localhost:{server.port}"
        async with make_channel(address) as ch:
            assert (await policy_pb2_grpc.PolicyServiceStub(ch).Act(big)).episode_id == big.episode_id

        def sync_calls() -> None:
            with make_sync_channel(address) as ch:
                assert policy_pb2_grpc.PolicyServiceStub(ch).Act(big).episode_id == big.episode_id
            with make_sync_channel(address, token="") as ch:  # an explicit empty token sends none
                with pytest.raises(grpc.RpcError) as info:
                    policy_pb2_grpc.PolicyServiceStub(ch).ListPolicies(policy_pb2.ListPoliciesRequest())
                assert info.value.code() == grpc.StatusCode.UNAUTHENTICATED

        await asyncio.to_thread(sync_calls)
    monkeypatch.setenv("WEBENV_MAX_MESSAGE_MB", "lots")
    with pytest.raises(ValueError, match="WEBENV_MAX_MESSAGE_MB: expected a whole number of MiB"):
        make_sync_channel("localhost:1")


async def test_clients_pick_up_the_shared_token_from_the_environment(echo, monkeypatch):
    server = echo.build_server(echo.EchoSettings(host="127.0.0.1", auth_token="shared"))
    async with server:
        await server.set_serving()
        monkeypatch.setenv("WEBENV_AUTH_TOKEN", "shared")
        async with make_channel(f"127.0.0.1:{server.port}") as ch:
            resp = await policy_pb2_grpc.PolicyServiceStub(ch).ListPolicies(policy_pb2.ListPoliciesRequest())
            assert resp.default_policy == "echo"


async def test_heap_is_trimmed_once_after_a_busy_period(echo):
    """Freed heap goes back to the OS after each burst of RPCs, once, and never while the server is quiet."""
    server = echo.build_server(echo.EchoSettings(host="127.0.0.1", heap_trim_idle_seconds=0.2))
    async with server:
        await server.set_serving()
        await asyncio.sleep(0.7)
        assert server.heap.trims == 0  # nothing happened: nothing to give back
        async with make_channel(f"127.0.0.1:{server.port}") as ch:
            stub = policy_pb2_grpc.PolicyServiceStub(ch)
            await asyncio.gather(*(stub.Act(policy_pb2.ActRequest(episode_id="x" * 200_000)) for _ in range(3)))
            await trims_reach(server, 1)
            await asyncio.sleep(0.7)  # several quiet intervals more: still one trim for the one busy period
            assert server.heap.trims == 1
            await stub.Act(policy_pb2.ActRequest(episode_id="again"))
            await trims_reach(server, 2)


async def trims_reach(server, n: int, limit: float = 30.0) -> None:
    """Wait (generously: the machine may be loaded) until the server has trimmed its heap ``n`` times."""
    async with asyncio.timeout(limit):
        while server.heap.trims < n:  # noqa: ASYNC110 - polling a counter that has no event
            await asyncio.sleep(0.05)

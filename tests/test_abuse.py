"""Services under malformed and abusive requests: a seeded fuzz over every RPC of every service.

The real services run as processes (`python -m webenv.<name>`, the documented way) on free loopback ports: sites,
the browser farm on real Chromium, policy, judge, collector and trainer. `webenv.fuzz` sends, per RPC, bytes that do not
decode plus hostile messages (empty, 100 KB multi-byte strings, NUL bytes, unknown enum numbers, NaN, extreme
integers, 300-item repeated fields, deep nesting), the same bytes for the same seed. A malformed request is the
caller's fault: no call may end UNKNOWN or INTERNAL, every error message fits the sdk's bound (so no client sees
"metadata size exceeds hard limit" instead of the real error), undecodable bytes are INVALID_ARGUMENT naming
`request` with one log line and no traceback, and every service is still alive and SERVING afterwards. The
world model is fuzzed in its own suite (it needs a trained model): services/worldmodel/tests. The gateway
speaks HTTP/JSON, not gRPC, and is not fuzzed here.

Strings the fuzzer invents cannot form an address; its only addresses are loopback ones (see webenv.fuzz), and
the collector's exports are confined to a folder of the test (WEBENV_EXPORT_ROOT).
"""

from __future__ import annotations

import time
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from webenv import errors, fuzz
from webenv.cli.stack import Stack
from webenv.v1 import (
    browser_pb2,
    browser_pb2_grpc,
)

pytestmark = pytest.mark.timeout(240)

SEED = 18
PER_METHOD = 6  # hostile messages per RPC, besides one undecodable request: 36 RPCs -> 252 calls
SERVICES = {name: fuzz.SERVED_BY[name] for name in ("browser", "sites", "policy", "judge", "collector", "trainer")}


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory):
    data = tmp_path_factory.mktemp("abuse")
    st = Stack(data, free_ports=True, sites_count=20, extra_env={
        "WEBENV_LOG_JSON": "false",
        "WEBENV_EXPORT_ROOT": str(data / "exports"),
        "WEBENV_FARM_WARM_CONTEXTS": "1",
        # Runs a fuzzed spec happens to start stay small: the test is about the RPCs, not rollouts.
        "WEBENV_MAX_ACTIVE_RUNS": "1", "WEBENV_MAX_PENDING_RUNS": "2", "WEBENV_MAX_RUN_EPISODES": "20",
    })
    st.start(tuple(SERVICES), timeout=120)
    try:
        yield st
    finally:
        st.stop()


async def _serving(address: str) -> int:
    async with grpc.aio.insecure_channel(address) as ch:
        resp = await health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(), timeout=10)
        return resp.status


async def test_fuzzed_requests_get_clean_errors_and_every_service_survives(stack: Stack) -> None:
    t0 = time.monotonic()
    fuzzer = fuzz.Fuzzer(SEED)
    report = fuzz.Report()
    for name, services in SERVICES.items():
        async with grpc.aio.insecure_channel(stack.address(name), options=fuzz.CHANNEL_OPTIONS) as ch:
            for service in services:
                part = await fuzz.fuzz_service(ch, service, fuzzer, per_method=PER_METHOD, deadline=30)
                report.outcomes += part.outcomes
        async with grpc.aio.insecure_channel(stack.address("browser")) as ch:  # a fuzzed Drain may have drained it
            await browser_pb2_grpc.BrowserFarmServiceStub(ch).Drain(browser_pb2.DrainRequest(draining=False))
    elapsed = time.monotonic() - t0

    methods = {f"/{s.full_name}/{m.name}" for services in SERVICES.values() for s in services for m in s.methods}
    assert {o.method for o in report.outcomes} == methods and len(methods) == 38  # GetScreenshot joined the collector
    failures = [f"{o.method} [{o.kind}] {o.code.name}: {o.details[:300]}" for o in report.failures()]
    assert not failures, "\n".join(failures)
    assert all(len(o.details.encode()) <= errors.MAX_MESSAGE_BYTES for o in report.outcomes)
    # Undecodable bytes: INVALID_ARGUMENT that names the request, on every RPC.
    garbage = [o for o in report.outcomes if o.kind == "garbage"]
    assert len(garbage) == len(methods)
    assert all(o.code == grpc.StatusCode.INVALID_ARGUMENT and o.details.startswith("request:") for o in garbage), [
        (o.method, o.code, o.details) for o in garbage if o.code != grpc.StatusCode.INVALID_ARGUMENT]
    # Hostile messages are mostly refused as INVALID_ARGUMENT with the field named first.
    refused = [o for o in report.outcomes if o.kind == "message" and o.code == grpc.StatusCode.INVALID_ARGUMENT]
    assert len(refused) > len(methods)

    # Still alive and SERVING; nothing logged a traceback.
    assert not stack.dead()
    for name in SERVICES:
        assert await _serving(stack.address(name)) == health_pb2.HealthCheckResponse.SERVING, name
    logs = {name: (Path(stack.data_dir) / "logs" / f"{name}.log").read_text(errors="replace") for name in SERVICES}
    assert not [n for n, text in logs.items() if "Traceback" in text], {
        n: text[text.index("Traceback") - 300:][:3000] for n, text in logs.items() if "Traceback" in text}
    assert sum(text.count("undecodable request") for text in logs.values()) == len(methods)
    assert elapsed < 120, f"the fuzz took {elapsed:.0f}s"


def test_the_same_seed_sends_the_same_requests() -> None:
    a, b = fuzz.Fuzzer(SEED), fuzz.Fuzzer(SEED)
    for service in (s for services in SERVICES.values() for s in services):
        for method in service.methods:
            assert a.request(method.input_type) == b.request(method.input_type)
            assert a.garbage() == b.garbage()

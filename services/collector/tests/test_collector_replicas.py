"""Environment replicas behind one name, balanced by free capacity, over real gRPC channels on loopback.

Name resolution is the system resolver on ``localhost`` (answered from /etc/hosts: no packet leaves the machine);
the rest injects the resolver's answer, so replicas can join and leave a name while a run goes on. A replica here is
the tests' page-walk environment, optionally with a ``BrowserFarmService.GetCapacity`` that reports what the test
sets (free sessions, draining), as a farm node does.
"""

from __future__ import annotations

import grpc
import pytest
from webenv.collector.replicas import ReplicaSet, resolve_all, split_host_port
from webenv.v1 import (
    browser_pb2,
    browser_pb2_grpc,
    collector_pb2,
    collector_pb2_grpc,
)


class Capacity(browser_pb2_grpc.BrowserFarmServiceServicer):
    def __init__(self, free: int) -> None:
        self.free, self.draining, self.calls = free, False, 0

    async def GetCapacity(self, request, context):
        self.calls += 1
        return browser_pb2.GetCapacityResponse(node="n", max_sessions=64, active_sessions=64 - self.free,
                                               draining=self.draining)


async def farm(free: int | None):
    """A replica's admin side at its own address: GetCapacity answers ``free`` (None: UNIMPLEMENTED, as the world
    model's)."""
    server = grpc.aio.server()
    cap = Capacity(free or 0)
    if free is not None:
        browser_pb2_grpc.add_BrowserFarmServiceServicer_to_server(cap, server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    return server, f"127.0.0.1:{port}", cap


@pytest.fixture
async def channels():
    opened: dict[str, grpc.aio.Channel] = {}

    def channel(address: str) -> grpc.aio.Channel:
        if address not in opened:
            opened[address] = grpc.aio.insecure_channel(address)
        return opened[address]

    yield channel
    for ch in opened.values():
        await ch.close()


async def test_a_name_resolves_to_all_its_loopback_records():
    found = await resolve_all("localhost", 50051)
    assert "127.0.0.1:50051" in found and set(found) <= {"127.0.0.1:50051", "[::1]:50051"}
    assert split_host_port("dns:///farm.webenv.svc.cluster.local:50051") == ("farm.webenv.svc.cluster.local", 50051)
    for bad in ("dns:///farm", "dns:///:50051", "dns:///farm:0", "dns:///farm:http"):
        with pytest.raises(ValueError, match="env_address"):
            split_host_port(bad)


async def test_new_sessions_go_where_capacity_is_free_and_not_to_a_draining_replica(channels):
    (sa, a, cap_a), (sb, b, cap_b) = await farm(free=2), await farm(free=10)
    try:
        rs = ReplicaSet(f"{a},{b}", channels, refresh_seconds=0.01)
        picks = [await rs.pick() for _ in range(10)]
        # b reported 10 free and a 2: picks counted against what was reported spread as 8 to b, 2 to a at most
        assert picks.count(b) >= 8 and cap_a.calls and cap_b.calls
        for p in picks:
            rs.release(p)
        cap_b.draining = True
        await rs._refresh_now()
        assert {await rs.pick() for _ in range(5)} == {a}
        assert await rs.pick(exclude={a}) == a  # the only usable one, even after failing there
    finally:
        await sa.stop(0)
        await sb.stop(0)


async def test_replicas_without_capacity_rpc_are_balanced_by_sessions_open_here(channels):
    (sa, a, _), (sb, b, _) = await farm(None), await farm(None)
    try:
        rs = ReplicaSet(f"{a},{b}", channels, refresh_seconds=0.01)
        held = [await rs.pick() for _ in range(6)]
        assert held.count(a) == held.count(b) == 3
        rs.release(a)
        rs.release(a)
        assert await rs.pick() == a and await rs.pick() == a
        assert await rs.pick(exclude={a}) == b
    finally:
        await sa.stop(0)
        await sb.stop(0)


async def test_a_replica_that_leaves_the_name_drains_and_one_that_joins_takes_work(channels):
    (sa, a, _), (sb, b, _) = await farm(5), await farm(5)
    answer = [a]

    async def resolver(host: str, port: int) -> list[str]:
        assert (host, port) == ("farm.test", 50051)
        return list(answer)

    try:
        rs = ReplicaSet("dns:///farm.test:50051", channels, refresh_seconds=0.01, resolver=resolver)
        assert await rs.pick() == a
        answer[:] = [a, b]
        await rs._refresh_now()
        assert await rs.pick() == b  # joined, and freer than a (a holds one of ours)
        answer[:] = [b]
        await rs._refresh_now()
        assert {await rs.pick() for _ in range(3)} == {b}
        assert [r["address"] for r in rs.snapshot() if not r["listed"]] == [a]  # ours still runs there
        rs.release(a)
        assert a not in {r["address"] for r in rs.snapshot()}  # drained: forgotten
        answer[:] = []
        await rs._refresh_now()  # resolved to nothing: an empty answer is an answer
        with pytest.raises(LookupError, match="farm.test"):
            await rs.pick()
    finally:
        await sa.stop(0)
        await sb.stop(0)


async def test_a_run_on_a_name_spreads_episodes_over_its_replicas(make_collector, world, watch):
    a, b, env_a, env_b = world.addr["env"], world.addr["env2"], world.env, world.env2
    collector = await make_collector(env_refresh_seconds=0.05)

    async def resolver(host: str, port: int) -> list[str]:
        return [a, b]

    collector.engine.ctx.replicas.resolver = resolver
    async with grpc.aio.insecure_channel(collector.address) as ch:
        stub = collector_pb2_grpc.CollectorServiceStub(ch)
        with pytest.raises(grpc.aio.AioRpcError) as bad:
            await stub.StartRun(collector_pb2.StartRunRequest(spec=collector_pb2.RunSpec(
                policy="oracle", env_address="dns:///farm.test")))
        assert bad.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "spec.env_address" in bad.value.details()
        run = (await stub.StartRun(collector_pb2.StartRunRequest(spec=collector_pb2.RunSpec(
            policy="oracle", repeats=1, seed=3, concurrency=4, env_address="dns:///farm.test:50051")))).run
        last = await watch(stub, run.run_id)
    assert last.run.counts.passed == len(world.tasks) and last.run.counts.errored == 0
    assert env_a.opened and env_b.opened and env_a.opened + env_b.opened == len(world.tasks)

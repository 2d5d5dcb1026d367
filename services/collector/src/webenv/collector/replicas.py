"""Which environment replica a new episode opens its session on: by free capacity, over a set that may change.

A run's ``env_address`` lists environment addresses, comma separated. An entry ``dns:///name:port`` stands for
every replica behind one name, as a Kubernetes headless Service publishes them: all A and AAAA records of
``name`` (the system resolver, so /etc/hosts and the cluster's DNS both work), each served at ``port``. The name
is resolved again every ``refresh_seconds``; a replica that leaves the answer gets no new episode (its running
sessions go on; if it is really gone, their next call fails and the episode is retried on another replica), one
that joins takes new episodes from the next pick on.

Balancing is by free capacity, not by episode index: every ``refresh_seconds`` each replica is asked
``BrowserFarmService.GetCapacity`` (``max_sessions - active_sessions``, nothing while ``draining``), and the
sessions this collector opened there since that answer are subtracted, so a burst of picks between two answers
spreads instead of all landing on the replica that looked freest. A replica that does not serve GetCapacity (the
world model: UNIMPLEMENTED) is balanced by the sessions this collector has open on it; one that does not answer,
or answers draining, is picked only when no other replica is left. Index-based round-robin, the earlier rule,
sent as many episodes to a full or slower node as to an idle one.

A pick that finds the figures older than ``refresh_seconds`` waits for one refresh (shared by every pick waiting
meanwhile; GetCapacity calls are bounded by ``capacity_timeout``), so no episode is sent to a replica that had
left the name at the last refresh: at most one round trip per second is added to a few picks.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import grpc
from webenv.v1 import browser_pb2, browser_pb2_grpc

log = logging.getLogger("webenv.collector")

DNS_PREFIX = "dns:///"
UNKNOWN_FREE = 1 << 30  # a replica without GetCapacity: ranked by this collector's sessions on it alone
Resolver = Callable[[str, int], Awaitable[list[str]]]


def split_host_port(target: str, field: str = "env_address") -> tuple[str, int]:
    """``host:port`` (``[v6]:port`` too) of a ``dns:///`` entry; ValueError naming what is wrong."""
    rest = target[len(DNS_PREFIX):] if target.startswith(DNS_PREFIX) else target
    host, sep, port = rest.rpartition(":")
    host = host.strip("[]")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"{field}: {target!r} is not dns:///name:port (a port in 1..65535)")
    return host, int(port)


def join_host_port(ip: str, port: int) -> str:
    return f"[{ip}]:{port}" if ":" in ip else f"{ip}:{port}"


async def resolve_all(host: str, port: int) -> list[str]:
    """Every A and AAAA record of ``host`` as ``ip:port`` / ``[ip]:port``, sorted, without duplicates."""
    infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return sorted({join_host_port(info[4][0], port) for info in infos})


@dataclass
class Replica:
    """What this collector knows of one replica."""

    address: str
    listed: bool = True  # in the latest resolution (a static address always is)
    reachable: bool = True  # answered its latest GetCapacity (or serves none)
    draining: bool = False
    has_capacity_rpc: bool = True
    reported_free: int = UNKNOWN_FREE
    open_here: int = 0  # sessions this collector holds there now
    open_at_report: int = 0  # open_here when reported_free was read

    def free(self) -> int:
        if not self.has_capacity_rpc:
            return UNKNOWN_FREE - self.open_here
        return self.reported_free - max(self.open_here - self.open_at_report, 0)

    def usable(self) -> bool:
        return self.listed and self.reachable and not self.draining


class ReplicaSet:
    """The replicas of one ``env_address`` (static addresses and ``dns:///`` names), balanced by free capacity."""

    def __init__(self, env_address: str, channel: Callable[[str], grpc.aio.Channel], refresh_seconds: float = 1.0,
                 resolver: Resolver = resolve_all, capacity_timeout: float = 2.0) -> None:
        entries = [a.strip() for a in env_address.split(",") if a.strip()]
        self.static = [a for a in entries if not a.startswith(DNS_PREFIX)]
        self.names = [split_host_port(a) for a in entries if a.startswith(DNS_PREFIX)]
        self.channel = channel
        self.refresh_seconds = refresh_seconds
        self.resolver = resolver
        self.capacity_timeout = capacity_timeout
        self.replicas: dict[str, Replica] = {a: Replica(a) for a in self.static}
        self._refreshed = 0.0
        self._refresh: asyncio.Task | None = None
        self._turn = 0

    @property
    def single(self) -> bool:
        """One static address and nothing to resolve (a retry goes to the same node: it waits a moment first)."""
        return not self.names and len(self.static) == 1

    async def pick(self, exclude: frozenset[str] | set[str] = frozenset()) -> str:
        """The replica a new session should open on, counted as holding one more session until ``release``.

        The usable replica with the most free capacity, other than those in ``exclude`` (where an attempt of this
        episode failed) while another is left; when none is usable, any listed one (the attempt fails and is
        retried, rather than the episode waiting here). LookupError when the names resolved to nothing."""
        await self._maybe_refresh()
        listed = [r for r in self.replicas.values() if r.listed]
        if not listed:
            raise LookupError(f"no environment replica: {self.describe()} resolved to no address")
        for pool in ([r for r in listed if r.usable() and r.address not in exclude],
                     [r for r in listed if r.usable()], [r for r in listed if r.address not in exclude], listed):
            if pool:
                break
        self._turn += 1
        n = len(pool)
        best = max(range(n), key=lambda i: (pool[i].free(), -pool[i].open_here, -((i - self._turn) % n)))
        chosen = pool[best]
        chosen.open_here += 1
        return chosen.address

    def release(self, address: str) -> None:
        """The session ``pick`` counted on ``address`` is closed (or was never opened)."""
        r = self.replicas.get(address)
        if r is not None and r.open_here > 0:
            r.open_here -= 1
        if r is not None and not r.listed and r.open_here == 0 and address not in self.static:
            del self.replicas[address]  # left the name and nothing of ours runs there: forgotten

    def describe(self) -> str:
        return ",".join(self.static + [f"{DNS_PREFIX}{join_host_port(h, p) if ':' in h else f'{h}:{p}'}"
                                       for h, p in self.names])

    def snapshot(self) -> list[dict]:
        """Each replica's state (address, listed, reachable, draining, free, open here), for logs and tests."""
        return [{"address": r.address, "listed": r.listed, "reachable": r.reachable, "draining": r.draining,
                 "free": r.free(), "open_here": r.open_here} for r in self.replicas.values()]

    async def close(self) -> None:
        if self._refresh is not None:
            self._refresh.cancel()
            with contextlib.suppress(BaseException):
                await self._refresh

    # -- refresh ---------------------------------------------------------------------------------------------------
    async def _maybe_refresh(self) -> None:
        if self.single:  # nothing to choose between: no resolution, no capacity calls
            return
        if time.monotonic() - self._refreshed < self.refresh_seconds:
            return
        if self._refresh is None or self._refresh.done():
            self._refresh = asyncio.get_running_loop().create_task(self._refresh_now())
        await asyncio.shield(self._refresh)  # one refresh at a time; the picks that found it stale wait for it

    async def _refresh_now(self) -> None:
        try:
            if self.names:
                await self._resolve()
            await asyncio.gather(*(self._capacity(r) for r in list(self.replicas.values()) if r.listed))
        finally:
            self._refreshed = time.monotonic()

    async def _resolve(self) -> None:
        found: set[str] = set()
        failed = False
        for host, port in self.names:
            try:
                found.update(await asyncio.wait_for(self.resolver(host, port), self.capacity_timeout))
            except (OSError, TimeoutError) as exc:
                failed = True
                log.warning("environment name %s did not resolve: %s (keeping the last answer)", host, exc)
        if failed and not found:
            return
        for addr in found:
            r = self.replicas.get(addr)
            if r is None:
                self.replicas[addr] = Replica(addr)
                log.info("environment replica %s joined %s", addr, self.describe())
            elif not r.listed:
                r.listed = True
        for addr, r in list(self.replicas.items()):
            if addr not in found and addr not in self.static and r.listed:
                r.listed = False
                log.info("environment replica %s left %s: draining (%d sessions of this collector on it)",
                         addr, self.describe(), r.open_here)
                if r.open_here == 0:
                    del self.replicas[addr]

    async def _capacity(self, r: Replica) -> None:
        if not r.has_capacity_rpc:
            return
        stub = browser_pb2_grpc.BrowserFarmServiceStub(self.channel(r.address))
        open_before = r.open_here
        try:
            cap = await stub.GetCapacity(browser_pb2.GetCapacityRequest(), timeout=self.capacity_timeout)
        except grpc.aio.AioRpcError as exc:
            if exc.code() == grpc.StatusCode.UNIMPLEMENTED:
                r.has_capacity_rpc, r.reachable = False, True
            else:
                if r.reachable:
                    log.info("environment replica %s did not answer GetCapacity: %s", r.address, exc.code().name)
                r.reachable = False
            return
        r.reachable, r.draining = True, cap.draining
        r.reported_free = 0 if cap.draining else max(cap.max_sessions - cap.active_sessions, 0)
        r.open_at_report = open_before


class Replicas:
    """One ReplicaSet per distinct ``env_address`` value, shared by the runs that name it."""

    def __init__(self, channel: Callable[[str], grpc.aio.Channel], refresh_seconds: float = 1.0,
                 resolver: Resolver = resolve_all) -> None:
        self.channel = channel
        self.refresh_seconds = refresh_seconds
        self.resolver = resolver
        self._sets: dict[str, ReplicaSet] = {}

    def of(self, env_address: str) -> ReplicaSet:
        rs = self._sets.get(env_address)
        if rs is None:
            rs = self._sets[env_address] = ReplicaSet(env_address, self.channel, self.refresh_seconds, self.resolver)
        return rs

    async def close(self) -> None:
        for rs in self._sets.values():
            await rs.close()

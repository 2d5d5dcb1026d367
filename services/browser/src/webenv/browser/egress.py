"""The network guard below the page: every connection Chromium opens goes through this SOCKS5 proxy.

Chromium is launched with `--proxy-server=socks5://127.0.0.1:<port>` and `--proxy-bypass-list=<-loopback>`
(without it Chromium sends localhost, 127/8, [::1], 169.254/16 and fe80::/10 DIRECT: its implicit bypass
rules), so navigations, subresources, redirect hops, WebSockets, preconnects, prefetches, beacons and the
sockets of navigations the URL guard refuses all arrive here as CONNECT requests naming host and port.
SOCKS5 passes the host name (remote DNS), so this proxy resolves it, checks the very addresses it will
connect to with the guard's decision (`guard.ip_is_public`: no second look-up for a rebinding name to
change), and splices bytes; a refused CONNECT never opens an upstream socket. UDP does not go through
proxies: `--webrtc-ip-handling-policy=disable_non_proxied_udp` leaves WebRTC only TCP through the proxy
(measured: without it STUN and TURN/UDP packets reach 127.0.0.1 and ::1; with it, none), QUIC is off
(`--disable-quic`) and WebTransport fails on a proxied profile. `--host-resolver-rules=MAP * ~NOTFOUND`
(the proxy's own 127.0.0.1 excepted) makes any name Chromium would still resolve by itself fail.

Why SOCKS5 and not an HTTP proxy: over an HTTP proxy Chromium sends plain-http requests of many hosts on
one keep-alive connection, which the proxy would have to parse message by message; over SOCKS5 every
connection is a tunnel to one destination, decided once and then spliced without parsing (asyncio
protocols writing straight into the peer transport, flow control by pausing the reader).

Policy (`EgressPolicy.decide`):
- names matching the farm's mapped globs (`*.web.test`, the synthetic web) go to the sites server address,
  whatever the port: the farm's own resolver rule, and the only way a browser reaches a loopback address;
- hosts matching the allowlist (`WEBENV_FARM_ALLOW_HOSTS`, operator-trusted) connect where they resolve;
- IP literals (any spelling, IPv4-mapped/6to4/NAT64 IPv6 decoded) must be public: loopback, private,
  link-local (169.254.169.254), CGNAT, multicast, reserved, unspecified, site-local are refused, and so are the
  machine's own interface addresses even when public (they would reach the farm's own ports);
- other names: local names (`localhost`, `*.localhost`, `*.internal`, metadata) refused by name, then the
  name is resolved and refused when ANY of its addresses would be refused as a literal, or when it does not
  resolve;
- SOCKS commands other than CONNECT (BIND, UDP ASSOCIATE) are refused.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import fnmatch
import ipaddress
import logging
import socket
import struct
import threading
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from urllib.parse import urlsplit

import psutil
from webenv.browser import metrics
from webenv.browser.guard import UrlGuard, canonical_ip, ip_is_public, is_local_name

log = logging.getLogger(__name__)

# SOCKS5 reply codes (RFC 1928): what Chromium is told when a CONNECT is not carried out.
GENERAL_FAILURE, NOT_ALLOWED, HOST_UNREACHABLE, CONNECTION_REFUSED = 0x01, 0x02, 0x04, 0x05
COMMAND_NOT_SUPPORTED, ADDRESS_TYPE_NOT_SUPPORTED = 0x07, 0x08
CONNECT_TIMEOUT_S = 30.0
HANDSHAKE_MAX_BYTES = 600
HANDSHAKE_TIMEOUT_S = 10.0
#: A tunnel with no byte either way for this long is closed. Measured (bench/results/soak.md): Chromium left two
#: tunnels open for every closed session (its idle keep-alive sockets outlive the browser context), ~7 KB each
#: in this process, +8.5 MB per 1,000 episodes; a client that still wants the host reconnects. Squid's persistent
#: connection timeouts are of the same order (1-2 minutes).
IDLE_TIMEOUT_S = 60.0

Resolver = Callable[[str, int], Awaitable[list[str]]]
_ALLOWED, _REFUSED, _FAILED = (metrics.EGRESS_CONNECTIONS.labels(o) for o in ("allowed", "refused", "failed"))


class Refused(Exception):
    """A destination the egress policy refuses; str() says why, `code` is the SOCKS5 reply code."""

    def __init__(self, why: str, code: int = NOT_ALLOWED) -> None:
        super().__init__(why)
        self.code = code


@dataclass(frozen=True)
class Target:
    """Where the proxy connects: the addresses to try in order (IP literals, or the configured sites
    address), the port, and whether the destination was a mapped (sites) name."""

    addrs: tuple[str, ...]
    port: int
    mapped: bool = False


async def system_resolve(host: str, port: int) -> list[str]:
    """The host's addresses from the system resolver, in its order, without duplicates."""
    infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return list(dict.fromkeys(str(info[4][0]) for info in infos))


def machine_addrs() -> frozenset[str]:
    """The addresses of this machine's network interfaces, canonical (IPv4-mapped forms decoded)."""
    out = set()
    for addrs in psutil.net_if_addrs().values():
        for a in addrs:
            if a.family in (socket.AF_INET, socket.AF_INET6):
                ip = canonical_ip(a.address)
                if ip is not None:
                    out.add(str(ip))
    return frozenset(out)


def split_addr(addr: str) -> tuple[str, int]:
    """`host:port` or `[v6]:port` -> (host, port)."""
    host, _, port = addr.rpartition(":")
    if not host or not port.isdigit():
        raise ValueError(f"expected host:port, got {addr!r}")
    return host.strip("[]"), int(port)


@dataclass
class EgressPolicy:
    """Which (host, port) a browser may reach, and at which addresses (see the module docstring)."""

    guard: UrlGuard
    sites_addr: tuple[str, int]
    mapped: tuple[str, ...] = ("*.web.test",)
    resolve: Resolver = system_resolve
    own_addrs: frozenset[str] = field(default_factory=lambda: machine_addrs())

    async def decide(self, host: str, port: int) -> Target:
        """The addresses to connect to for a CONNECT to (host, port), or Refused naming the reason."""
        h = _norm_host(host)
        if not h:
            raise Refused("empty host", GENERAL_FAILURE)
        if not 0 < port < 65536:
            raise Refused(f"port {port} is out of range", GENERAL_FAILURE)
        if any(fnmatch.fnmatchcase(h, p) for p in self.mapped):
            return Target((self.sites_addr[0],), self.sites_addr[1], mapped=True)
        ip = canonical_ip(h)
        if self.guard.host_allowlisted(h):
            return Target((str(ip),) if ip is not None else tuple(await self._lookup(h, port)), port)
        if ip is not None:
            why = self.refusal(ip)
            if why:
                raise Refused(f"address {ip} {why}")
            return Target((str(ip),), port)
        if is_local_name(h):
            raise Refused(f"host {h!r} is a local name")
        addrs = await self._lookup(h, port)
        for a in addrs:
            ip = canonical_ip(a)
            why = self.refusal(ip) if ip is not None else "is not an address"
            if why:
                raise Refused(f"host {h!r} resolves to {a}, which {why}")
        return Target(tuple(addrs), port)

    def refusal(self, ip: ipaddress.IPv4Address | ipaddress.IPv6Address) -> str:
        """Why an address may not be reached ('' when it may): not public, or one of this machine's own (a public
        interface address would reach the farm's own ports)."""
        if not ip_is_public(ip):
            return "is not public"
        return "is this machine's own" if str(ip) in self.own_addrs else ""

    async def _lookup(self, host: str, port: int) -> list[str]:
        try:
            addrs = await self.resolve(host, port)
        except (OSError, ValueError) as exc:  # ValueError: a name IDNA cannot encode
            why = (exc.strerror if isinstance(exc, OSError) else None) or str(exc)
            raise Refused(f"host {host[:100]!r} does not resolve ({why[:100]})", HOST_UNREACHABLE) from exc
        if not addrs:
            raise Refused(f"host {host!r} does not resolve", HOST_UNREACHABLE)
        return addrs


_DEFAULT_PORTS = {"http": 80, "ws": 80, "https": 443, "wss": 443}


def _norm_host(host: str) -> str:
    return host.strip().lower().strip("[]").rstrip(".")


def _reply(code: int) -> bytes:
    return bytes([5, code, 0, 1, 0, 0, 0, 0, 0, 0])


class _Pipe(asyncio.Protocol):
    """One side of a spliced connection: what it receives is written to its peer's transport; a full
    peer buffer pauses this side's reading (and the peer's drain resumes it)."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.peer: _Pipe | None = None
        self.last_active = time.monotonic()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def _peer_transport(self) -> asyncio.Transport | None:
        return self.peer.transport if self.peer is not None else None

    def data_received(self, data: bytes) -> None:
        self.last_active = time.monotonic()
        t = self._peer_transport()
        if t is not None:
            t.write(data)

    def eof_received(self) -> bool:
        t = self._peer_transport()
        if t is not None and not t.is_closing() and t.can_write_eof():
            t.write_eof()
            return True  # keep our side open for the peer's answer
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        t = self._peer_transport()
        if t is not None:
            t.close()

    def pause_writing(self) -> None:
        t = self._peer_transport()
        if t is not None:
            t.pause_reading()

    def resume_writing(self) -> None:
        t = self._peer_transport()
        if t is not None and not t.is_closing():
            t.resume_reading()


class _Socks5(_Pipe):
    """The browser's side: a SOCKS5 handshake (no authentication, CONNECT only), then a pipe."""

    def __init__(self, proxy: EgressProxy) -> None:
        super().__init__()
        self.proxy = proxy
        proxy.clients.add(self)
        self.buf = b""
        self.stage = "greeting"  # -> "request" -> "connecting" -> "piping"
        self.task: asyncio.Task[None] | None = None
        self.timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        self.timer = asyncio.get_running_loop().call_later(HANDSHAKE_TIMEOUT_S, self._handshake_timeout)

    def _handshake_timeout(self) -> None:
        if self.stage in ("greeting", "request"):
            self._fail(GENERAL_FAILURE)

    def data_received(self, data: bytes) -> None:
        if self.stage == "piping":
            super().data_received(data)
            return
        self.buf += data
        if len(self.buf) > HANDSHAKE_MAX_BYTES:
            self._fail(GENERAL_FAILURE)
            return
        if self.stage == "greeting":
            if self.buf[0] != 5:
                self._close(b"\x05\xff")  # not SOCKS5 (an HTTP proxy request, say)
                return
            if len(self.buf) < 2 or len(self.buf) < 2 + self.buf[1]:
                return
            if 0 not in self.buf[2:2 + self.buf[1]]:
                self._close(b"\x05\xff")  # no "no authentication" method
                return
            self.buf = self.buf[2 + self.buf[1]:]
            self._write(b"\x05\x00")
            self.stage = "request"
        if self.stage == "request":
            parsed = self._parse_request()
            if parsed is None:
                return
            cmd, host, port = parsed
            if cmd != 1:
                self.proxy.refused(host, port, f"SOCKS command {cmd} is not supported (CONNECT only)")
                self._fail(COMMAND_NOT_SUPPORTED)
                return
            self.stage = "connecting"
            self.task = asyncio.get_running_loop().create_task(self._connect(host, port))

    def eof_received(self) -> bool:
        return super().eof_received() if self.stage == "piping" else False

    def _parse_request(self) -> tuple[int, str, int] | None:
        b = self.buf
        if len(b) < 5:
            return None
        if b[0] != 5:
            self._fail(GENERAL_FAILURE)
            return None
        atyp = b[3]
        if atyp == 1:
            end = 8
        elif atyp == 4:
            end = 20
        elif atyp == 3:
            end = 5 + b[4]
        else:
            self._fail(ADDRESS_TYPE_NOT_SUPPORTED)
            return None
        if len(b) < end + 2:
            return None
        if atyp == 1:
            host = socket.inet_ntop(socket.AF_INET, b[4:8])
        elif atyp == 4:
            host = socket.inet_ntop(socket.AF_INET6, b[4:20])
        else:
            host = b[5:end].decode("latin-1")
        (port,) = struct.unpack("!H", b[end:end + 2])
        self.buf = b[end + 2:]
        return b[1], host, port

    async def _connect(self, host: str, port: int) -> None:
        try:
            await self._open(host, port)
        except Exception:  # never leave the browser waiting on a tunnel that will not come
            log.exception("egress proxy: CONNECT to %s:%s failed", host[:200], port)
            _FAILED.inc()
            if self.stage == "piping":
                self.transport.close()  # type: ignore[union-attr]
            else:
                self._fail(GENERAL_FAILURE)

    async def _open(self, host: str, port: int) -> None:
        loop = asyncio.get_running_loop()
        try:
            target = await self.proxy.policy.decide(host, port)
        except Refused as exc:
            self.proxy.refused(host, port, str(exc))
            self._fail(exc.code)
            return
        upstream = _Pipe()
        err: OSError | None = None
        for addr in target.addrs:
            try:
                async with asyncio.timeout(CONNECT_TIMEOUT_S):
                    await loop.create_connection(lambda: upstream, addr, target.port)
                break
            except TimeoutError:
                err = OSError(f"connect timed out after {CONNECT_TIMEOUT_S}s")
            except OSError as exc:
                err = exc
        else:
            _FAILED.inc()
            log.debug("egress connect to %s:%s failed: %s", host[:200], port, err)
            self._fail(CONNECTION_REFUSED if isinstance(err, ConnectionRefusedError) else HOST_UNREACHABLE)
            return
        assert upstream.transport is not None
        if self.transport is None or self.transport.is_closing():
            upstream.transport.close()
            return
        _ALLOWED.inc()
        upstream.peer, self.peer = self, upstream
        if upstream.transport.is_closing():  # the upstream hung up before it was joined to the browser's side
            self.transport.close()
            return
        self.stage = "piping"
        self._write(b"\x05\x00\x00\x01\x00\x00\x00\x00\x00\x00")
        if self.buf:
            upstream.transport.write(self.buf)
            self.buf = b""

    def _write(self, data: bytes) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.write(data)

    def _close(self, data: bytes) -> None:
        self._write(data)
        if self.transport is not None:
            self.transport.close()

    def _fail(self, code: int) -> None:
        self.stage = "failed"
        self._close(_reply(code))

    def connection_lost(self, exc: Exception | None) -> None:
        self.proxy.clients.discard(self)
        if self.timer is not None:
            self.timer.cancel()
        if self.task is not None and not self.task.done():
            self.task.cancel()
        super().connection_lost(exc)


class EgressProxy:
    """A SOCKS5 server on loopback that applies an EgressPolicy to every CONNECT. Refusals are counted
    (`refusals`, `webenv_browser_egress_connections_total{outcome="refused"}`), logged, and the last 100 kept
    in `recent_refusals` for diagnostics.

    `start`/`close` serve on the calling loop; the farm uses `start_thread`/`close`, which serve on a loop of
    the proxy's own thread (uvloop when installed): measured (bench.py --guard-only, "the proxy alone") beside a
    loop kept busy in 2 ms slices the way a loaded farm's is, a proxy on that loop added 34 ms per request and
    228 ms per new connection, on its own thread 0.3 ms and 3.8 ms (a run of 2026-11-29; later runs of that
    harness variant got no answer: its pure-Python busy loop holds the GIL for whole switch intervals, which the
    farm's loop does not; the real farm with the proxy on vs off is in bench/results/browser_guard.md)."""

    def __init__(self, policy: EgressPolicy, idle_timeout: float = IDLE_TIMEOUT_S) -> None:
        self.policy = policy
        self.idle_timeout = idle_timeout
        self._sweeper: asyncio.Task[None] | None = None
        self.server: asyncio.Server | None = None
        self.port = 0
        self.recent_refusals: list[str] = []
        self.refusals = 0
        self._why: OrderedDict[tuple[str, int], str] = OrderedDict()
        self.clients: set[_Socks5] = set()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None

    def refused(self, host: str, port: int, why: str) -> None:
        _REFUSED.inc()
        self.refusals += 1
        line = f"{host[:200]}:{port}: {why}"
        log.info("network guard refused a connection to %s", line)
        self.recent_refusals.append(line)
        del self.recent_refusals[:-100]
        self._why[(_norm_host(host), port)] = f"connection refused by the network guard: {why}"
        while len(self._why) > 256:
            self._why.popitem(last=False)

    def why_refused(self, url: str) -> str | None:
        """Why the proxy refused the connection for `url`'s host and port, if it did lately."""
        try:
            parts = urlsplit(url)
            port = parts.port or _DEFAULT_PORTS.get(parts.scheme.lower(), 0)
        except ValueError:
            return None
        return self._why.get((_norm_host(parts.hostname or ""), port))

    async def start(self, host: str = "127.0.0.1", port: int = 0) -> int:
        """Listen on host:port (0 = a free port) on the running loop; returns the port."""
        self.server = await asyncio.get_running_loop().create_server(lambda: _Socks5(self), host, port)
        self.port = int(self.server.sockets[0].getsockname()[1])
        self._sweeper = asyncio.get_running_loop().create_task(self._sweep())
        return self.port

    async def _sweep(self) -> None:
        """Close tunnels idle (no byte either way) for `idle_timeout` seconds."""
        while True:
            await asyncio.sleep(min(10.0, self.idle_timeout / 2))
            now = time.monotonic()
            for c in list(self.clients):
                last = max(c.last_active, c.peer.last_active if c.peer is not None else 0.0)
                if c.stage == "piping" and now - last >= self.idle_timeout and c.transport is not None:
                    c.transport.close()  # connection_lost closes the upstream side too

    async def start_thread(self, host: str = "127.0.0.1", port: int = 0) -> int:
        """Listen on host:port on a loop of a thread of its own (uvloop when installed); returns the port."""
        started: concurrent.futures.Future[int] = concurrent.futures.Future()

        def run() -> None:
            loop = _new_loop()
            self._loop = loop
            asyncio.set_event_loop(loop)
            try:
                started.set_result(loop.run_until_complete(self.start(host, port)))
            except BaseException as exc:
                started.set_exception(exc)
                loop.close()
                return
            loop.run_forever()
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.close()

        self._thread = threading.Thread(target=run, name="egress-proxy", daemon=True)
        self._thread.start()
        return await asyncio.wrap_future(started)

    async def close(self) -> None:
        """Stop listening and close every open tunnel (call after the browsers are closed); the proxy's
        thread, when it has one, ends too."""
        loop, thread = self._loop, self._thread
        if thread is not None and loop is not None:
            self._thread = self._loop = None
            if loop.is_running():
                await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(self.close(), loop))
                loop.call_soon_threadsafe(loop.stop)
            await asyncio.to_thread(thread.join, 10)
            return
        if self.server is None:
            return
        if self._sweeper is not None:
            self._sweeper.cancel()
            self._sweeper = None
        self.server.close()
        for c in list(self.clients):
            if c.transport is not None:
                c.transport.abort()
        with contextlib.suppress(Exception):
            async with asyncio.timeout(5):
                await self.server.wait_closed()
        self.server = None


def _new_loop() -> asyncio.AbstractEventLoop:
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop is a dependency; the default loop works, at 3x the CPU
        return asyncio.new_event_loop()
    return uvloop.new_event_loop()

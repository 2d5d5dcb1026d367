"""The network guard's decision layer (pure calls with a fixed resolver: no packet leaves for the address ranges
decided on) and its SOCKS5 server over loopback."""

from __future__ import annotations

import asyncio
import socket
import struct

import pytest
from webenv.browser import egress
from webenv.browser.egress import (
    COMMAND_NOT_SUPPORTED,
    GENERAL_FAILURE,
    HOST_UNREACHABLE,
    NOT_ALLOWED,
    EgressPolicy,
    EgressProxy,
    Refused,
    split_addr,
)
from webenv.browser.guard import UrlGuard

# What the test resolver answers: names that rebind to forbidden addresses, and public ones.
DNS: dict[str, list[str]] = {
    "rebind-loopback.example": ["127.0.0.1"],
    "rebind-metadata.example": ["169.254.169.254"],
    "rebind-private.example": ["10.0.0.7"],
    "rebind-v6.example": ["::1"],
    "rebind-mapped.example": ["::ffff:192.168.1.1"],
    "rebind-ula.example": ["fd12:3456::1"],
    "mixed.example": ["93.184.216.34", "192.168.0.10"],  # one bad answer refuses the name
    "rebind-own.example": ["93.184.216.99"],  # this machine's public address
    "public.example": ["93.184.216.34", "2606:2800:220:1::1"],
    "trusted.corp": ["10.1.2.3"],
}


async def fake_resolve(host: str, port: int) -> list[str]:
    if any(len(label) > 63 for label in host.split(".")):
        raise UnicodeError("encoding with 'idna' codec failed (UnicodeError: label too long)")  # as getaddrinfo does
    if host not in DNS:
        raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
    return DNS[host]


# The machine's own addresses as the policy sees them (a public one included: a node with a public interface).
OWN = frozenset({"127.0.0.1", "::1", "10.0.0.5", "198.51.100.7", "2001:db8:1::5", "93.184.216.99"})


def policy(allow: tuple[str, ...] = ("*.web.test",)) -> EgressPolicy:
    return EgressPolicy(UrlGuard(allow_hosts=list(allow)), ("127.0.0.1", 8800), resolve=fake_resolve, own_addrs=OWN)


REFUSED = [
    # loopback in every spelling Chromium might send
    "127.0.0.1", "127.1.2.3", "2130706433", "0x7f.1", "0177.0.0.1", "::1", "[::1]", "::ffff:127.0.0.1",
    "::ffff:7f00:1", "2002:7f00:1::", "64:ff9b::7f00:1",
    # private, CGNAT, link-local and the cloud metadata address
    "10.0.0.1", "172.16.0.1", "192.168.1.1", "100.64.0.1", "169.254.169.254", "0xa9fea9fe", "fe80::1",
    "fd00:ec2::254", "fc00::1", "fec0::1", "64:ff9b::a00:1",
    # unspecified, broadcast, multicast, reserved, documentation, benchmarking
    "0.0.0.0", "::", "255.255.255.255", "224.0.0.251", "ff02::fb", "240.0.0.1", "192.0.2.1", "198.18.0.1",
    "2001:db8::1",
    # local names, whatever DNS would say
    "localhost", "LOCALHOST.", "foo.localhost", "ip6-localhost", "metadata.google.internal", "metadata",
    "x.internal",
    # names that resolve to forbidden addresses (DNS rebinding), or do not resolve
    "rebind-loopback.example", "rebind-metadata.example", "rebind-private.example", "rebind-v6.example",
    "rebind-mapped.example", "rebind-ula.example", "mixed.example", "no-such-name.example", "a" * 64 + ".example",
    # this machine's own public address, by literal and by name (it would reach the farm's own ports)
    "93.184.216.99", "rebind-own.example",
]


@pytest.mark.parametrize("host", REFUSED)
async def test_forbidden_destinations_are_refused(host):
    with pytest.raises(Refused) as exc:
        await policy().decide(host, 80)
    assert str(exc.value)
    expected = HOST_UNREACHABLE if host in ("no-such-name.example", "a" * 64 + ".example") else NOT_ALLOWED
    assert exc.value.code == expected


@pytest.mark.parametrize(("host", "addrs"), [
    ("8.8.8.8", ("8.8.8.8",)), ("2001:4860:4860::8888", ("2001:4860:4860::8888",)),
    ("[2606:4700::1111]", ("2606:4700::1111",)), ("64:ff9b::808:808", ("8.8.8.8",)),
    ("public.example", ("93.184.216.34", "2606:2800:220:1::1")), ("PUBLIC.example.", ("93.184.216.34", "2606:2800:220:1::1")),
])
async def test_public_destinations_connect_to_the_checked_addresses(host, addrs):
    t = await policy().decide(host, 443)
    assert t.addrs == addrs and t.port == 443 and not t.mapped


async def test_synthetic_web_names_go_to_the_sites_server_whatever_the_port():
    for host, port in (("shop-1.web.test", 80), ("A.WEB.TEST.", 9999), ("x.y.web.test", 443)):
        t = await policy().decide(host, port)
        assert (t.addrs, t.port, t.mapped) == (("127.0.0.1",), 8800, True)
    # the sites server's own address is only reachable through those names, never as a literal
    with pytest.raises(Refused):
        await policy().decide("127.0.0.1", 8800)
    with pytest.raises(Refused):
        await policy().decide("web.test", 80)  # the glob needs a label before .web.test


async def test_allowlisted_hosts_are_trusted_as_configured():
    p = policy(("*.web.test", "trusted.corp", "10.9.9.9"))
    assert (await p.decide("trusted.corp", 8080)).addrs == ("10.1.2.3",)
    assert (await p.decide("10.9.9.9", 80)).addrs == ("10.9.9.9",)
    with pytest.raises(Refused):
        await p.decide("10.9.9.8", 80)


@pytest.mark.parametrize("port", [0, -1, 65536])
async def test_bad_ports_and_empty_hosts_are_refused(port):
    with pytest.raises(Refused):
        await policy().decide("8.8.8.8", port)
    with pytest.raises(Refused):
        await policy().decide(" ", 80)


async def test_own_public_address_is_refused_with_its_reason():
    with pytest.raises(Refused, match="is this machine's own"):
        await policy().decide("93.184.216.99", 9451)  # e.g. the farm's metrics port on a public interface
    assert (await policy().decide("93.184.216.98", 80)).addrs == ("93.184.216.98",)


def test_machine_addrs_lists_this_machines_interfaces():
    own = egress.machine_addrs()
    assert "127.0.0.1" in own
    assert egress.EgressPolicy(UrlGuard(), ("127.0.0.1", 1)).own_addrs == own


def test_split_addr():
    assert split_addr("127.0.0.1:8800") == ("127.0.0.1", 8800)
    assert split_addr("[::1]:80") == ("::1", 80)
    assert split_addr("sites:8800") == ("sites", 8800)
    with pytest.raises(ValueError):
        split_addr("8800")


# -- the SOCKS5 server, over loopback only -----------------------------------------------------------
@pytest.fixture
async def upstream():
    """A loopback echo server standing in for the sites server; records what it received."""
    got: list[bytes] = []

    async def handle(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        data = await r.read(1000)
        got.append(data)
        w.write(b"echo:" + data)
        await w.drain()
        w.close()

    srv = await asyncio.start_server(handle, "127.0.0.1", 0)
    yield srv.sockets[0].getsockname()[1], got
    srv.close()


async def socks_connect(port: int, host: str | bytes, dport: int, cmd: int = 1, atyp: int = 3
                        ) -> tuple[asyncio.StreamReader, asyncio.StreamWriter, int]:
    r, w = await asyncio.open_connection("127.0.0.1", port)
    w.write(b"\x05\x01\x00")
    assert await r.readexactly(2) == b"\x05\x00"
    if atyp == 3:
        name = host.encode() if isinstance(host, str) else host
        addr = bytes([len(name)]) + name
    else:
        addr = socket.inet_pton(socket.AF_INET if atyp == 1 else socket.AF_INET6, host)  # type: ignore[arg-type]
    w.write(bytes([5, cmd, 0, atyp]) + addr + struct.pack("!H", dport))
    reply = await r.readexactly(10)
    return r, w, reply[1]


@pytest.mark.parametrize("where", ["this loop", "own thread"])
async def test_socks_proxy_pipes_allowed_and_refuses_forbidden(upstream, where):
    up_port, got = upstream
    proxy = EgressProxy(EgressPolicy(UrlGuard(), ("127.0.0.1", up_port), resolve=fake_resolve))
    port = await (proxy.start() if where == "this loop" else proxy.start_thread())
    try:
        r, w, code = await socks_connect(port, "shop.web.test", 80)
        assert code == 0
        w.write(b"GET / HTTP/1.1\r\n\r\n")
        assert await r.read(100) == b"echo:GET / HTTP/1.1\r\n\r\n"
        w.close()
        # the same loopback port named directly, as IPv4, IPv6 and by a name that rebinds: refused, no socket opened
        for host, atyp in (("127.0.0.1", 1), ("::1", 4), ("127.0.0.1", 3), ("localhost", 3),
                           ("rebind-loopback.example", 3)):
            r, w, code = await socks_connect(port, host, up_port, atyp=atyp)
            assert code == NOT_ALLOWED, host
            assert await r.read() == b""  # and the proxy hangs up
            w.close()
        r, w, code = await socks_connect(port, "8.8.8.8", 53, cmd=3, atyp=1)  # UDP ASSOCIATE
        assert code == COMMAND_NOT_SUPPORTED
        w.close()
        assert len(got) == 1
        assert proxy.refusals == 6 and "not public" in proxy.recent_refusals[0]
        assert "resolves to 127.0.0.1, which is not public" in (proxy.why_refused(f"http://rebind-loopback.example:{up_port}/") or "")
        assert proxy.why_refused(f"http://[::1]:{up_port}/x")
        assert proxy.why_refused("http://shop.web.test/") is None
    finally:
        await proxy.close()
    with pytest.raises(OSError):  # closed: nothing listens any more
        await asyncio.open_connection("127.0.0.1", port)


async def test_socks_handshake_times_out(monkeypatch):
    monkeypatch.setattr(egress, "HANDSHAKE_TIMEOUT_S", 0.2)
    proxy = EgressProxy(EgressPolicy(UrlGuard(), ("127.0.0.1", 9), resolve=fake_resolve))
    port = await proxy.start()
    try:
        r, w = await asyncio.open_connection("127.0.0.1", port)
        w.write(b"\x05\x01\x00\x05\x01")  # greeting, then half a request and silence
        assert await asyncio.wait_for(r.read(), 5) == b"\x05\x00" + bytes([5, GENERAL_FAILURE, 0, 1, 0, 0, 0, 0, 0, 0])
        w.close()
    finally:
        await proxy.close()


async def test_socks_proxy_rejects_other_protocols():
    proxy = EgressProxy(EgressPolicy(UrlGuard(), ("127.0.0.1", 9), resolve=fake_resolve))
    port = await proxy.start()
    try:
        r, w = await asyncio.open_connection("127.0.0.1", port)
        w.write(b"CONNECT 127.0.0.1:80 HTTP/1.1\r\n\r\n")  # an HTTP proxy request
        assert await asyncio.wait_for(r.read(), 5) in (b"", b"\x05\xff")
        w.close()
        r, w = await asyncio.open_connection("127.0.0.1", port)
        w.write(b"\x05\x01\x02")  # username/password only: no acceptable method
        assert await asyncio.wait_for(r.read(), 5) == b"\x05\xff"
        w.close()
        r, w = await asyncio.open_connection("127.0.0.1", port)
        w.write(b"\x05\x01\x00" + b"\x05" * 700)  # an endless handshake
        assert (await asyncio.wait_for(r.read(), 5)).endswith(bytes([5, GENERAL_FAILURE, 0, 1, 0, 0, 0, 0, 0, 0]))
        w.close()
    finally:
        await proxy.close()


async def test_idle_tunnels_are_closed_and_busy_ones_kept():
    """Tunnels left open by the browser after its context closed are closed once idle (the soak's growth)."""
    async def echo(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:  # a keep-alive peer
        while data := await r.read(1000):
            w.write(b"echo:" + data)
            await w.drain()
        w.close()

    srv = await asyncio.start_server(echo, "127.0.0.1", 0)
    up_port = srv.sockets[0].getsockname()[1]
    proxy = EgressProxy(EgressPolicy(UrlGuard(), ("127.0.0.1", up_port), resolve=fake_resolve), idle_timeout=0.6)
    port = await proxy.start()
    try:
        r1, w1, code1 = await socks_connect(port, "shop.web.test", 80)
        r2, w2, code2 = await socks_connect(port, "shop.web.test", 80)
        assert code1 == code2 == 0 and len(proxy.clients) == 2
        for _ in range(8):  # tunnel 2 stays busy for 1.6 s; tunnel 1 says nothing
            w2.write(b"ping")
            assert await r2.read(100) == b"echo:ping"
            await asyncio.sleep(0.2)
        assert await asyncio.wait_for(r1.read(), 5) == b""  # the proxy hung up the idle one
        assert len(proxy.clients) == 1
        w2.write(b"still")
        assert await r2.read(100) == b"echo:still"
        w1.close()
        w2.close()
    finally:
        await proxy.close()
        srv.close()

"""URL guard canonicalisation and policy (pure functions)."""

from __future__ import annotations

import pytest
from webenv.browser.guard import BlockedUrl, UrlGuard, parse_ipv4_loose

BLOCKED = [
    "file:///etc/passwd", "FILE:///etc/passwd", "view-source:http://example.com", "chrome://settings",
    "javascript:alert(1)", "data:text/html,<b>x</b>", "blob:file:///x", "filesystem:file:///x",
    "http://127.0.0.1/", "http://127.0.0.2:8080/", "http://2130706433/", "http://0x7f.1/", "http://0177.0.0.1/",
    "http://017700000001/", "http://127.1/", "http://[::1]/", "http://[::ffff:127.0.0.1]/", "http://[::ffff:7f00:1]/",
    "http://169.254.169.254/latest/meta-data/", "http://0xa9fea9fe/", "http://10.1.2.3/", "http://192.168.0.1/",
    "http://172.16.5.4/", "http://100.64.0.1/", "http://0.0.0.0/", "http://[fd00::1]/", "http://[fe80::1]/",
    "http://localhost:8000/", "http://LOCALHOST./", "http://foo.localhost/", "http://metadata.google.internal/",
    "ftp://example.com/",
]


@pytest.mark.parametrize("url", BLOCKED)
def test_blocked(url):
    with pytest.raises(BlockedUrl):
        UrlGuard(resolve=False).check(url)


@pytest.mark.parametrize("url", ["http://shop-0042.web.test/", "https://miniwob.web.test/miniwob/click-test.html",
                                 "http://8.8.8.8/", "https://example.com/a?b=c", "http://[2001:4860::8888]/"])
def test_allowed(url):
    assert UrlGuard(resolve=False).check(url) == url


def test_subresource_schemes_only_below_top_level():
    g = UrlGuard(resolve=False)
    assert g.check("data:image/png;base64,AAAA", top_level=False)
    assert g.check("about:blank", top_level=True)
    with pytest.raises(BlockedUrl):
        g.check("data:image/png;base64,AAAA", top_level=True)


def test_allowlist_and_disable():
    g = UrlGuard(allow_hosts=["*.web.test", "localhost"], resolve=False)
    assert g.check("http://localhost:9/")
    assert UrlGuard(enabled=False).check("file:///etc/passwd")


def test_loose_ipv4():
    assert str(parse_ipv4_loose("2130706433")) == "127.0.0.1"
    assert str(parse_ipv4_loose("0x7f.0.0.1")) == "127.0.0.1"
    assert str(parse_ipv4_loose("10.1")) == "10.0.0.1"
    assert parse_ipv4_loose("1.2.3.4.5") is None
    assert parse_ipv4_loose("example") is None


async def test_async_check_resolves_names_off_the_loop():
    g = UrlGuard()
    with pytest.raises(BlockedUrl):
        await g.acheck("http://localhost/")
    assert await g.acheck("http://shop-1.web.test/") == "http://shop-1.web.test/"
    # a name that does not resolve passes the guard (Chromium then fails to load it)
    assert await g.acheck("http://no-such-host.invalid/")

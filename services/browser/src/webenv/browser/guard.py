"""URL guard: decides which URLs a session may load, and which addresses a browser may reach.

Two layers use these decisions. Above the page, every request of every context to a host outside the
allowlist goes through `context.route` and `UrlGuard.check` (clear errors for refused navigations and
subresources). Below the page, every connection Chromium opens goes through the farm's egress proxy
(`egress.py`), which resolves names itself and connects only to addresses `ip_is_public` accepts (or to
the sites server, for the names the farm maps there): the route does not see redirect hops, WebSockets,
WebRTC, preconnects or the sockets a refused navigation opens, the proxy does. URLs are canonicalised first (IPv4 in decimal, octal, hex or
short forms, IPv4-mapped IPv6, upper-case schemes, trailing dots), because the blocklist is only
as good as the parser in front of it.

Policy:
- schemes: http/https load; `about:blank`, `data:`/`blob:` (non-file) are allowed for
  subresources and frames only; file:, chrome:, view-source:, javascript:, filesystem:,
  devtools: and anything else are refused.
- hosts matching an allowlist glob (the synthetic web, `*.web.test`) are trusted as configured
  (they are mapped to the sites server by --host-resolver-rules).
- other hosts must be public: IP literals and resolved names that are loopback, private,
  link-local (incl. the 169.254.169.254 metadata address), CGNAT, multicast, reserved or
  unspecified are refused; `localhost` and `*.localhost` are refused by name.
"""

from __future__ import annotations

import asyncio
import fnmatch
import ipaddress
import re
import socket
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from webenv.envcontract import web_url_problem

_ALWAYS_BLOCKED_SCHEMES = {"file", "chrome", "chrome-extension", "view-source", "javascript",
                           "filesystem", "devtools", "chrome-untrusted", "ws", "wss", "ftp"}
_SUBRESOURCE_SCHEMES = {"data", "blob", "about"}
_BLOCKED_NAMES = {"localhost", "localhost.localdomain", "ip6-localhost", "ip6-loopback",
                  "metadata.google.internal", "metadata"}


class BlockedUrl(Exception):
    """A URL the guard refuses; str() says why."""


def parse_ipv4_loose(host: str) -> ipaddress.IPv4Address | None:
    """Parse IPv4 the way browsers do (decimal `2130706433`, octal `0177.0.0.1`, hex `0x7f.1`)."""
    if not host or not all(c in "0123456789abcdefxABCDEFX." for c in host):
        return None
    parts = host.split(".")
    if parts and parts[-1] == "":
        parts = parts[:-1]
    if not 1 <= len(parts) <= 4:
        return None
    nums: list[int] = []
    for p in parts:
        try:
            if p.lower().startswith("0x"):
                nums.append(int(p[2:] or "0", 16))
            elif len(p) > 1 and p.startswith("0"):
                nums.append(int(p, 8))
            else:
                nums.append(int(p, 10))
        except ValueError:
            return None
    *head, last = nums
    if any(n > 255 for n in head) or last >= 256 ** (5 - len(nums)):
        return None
    value = 0
    for n in head:
        value = value * 256 + n
    value = value * 256 ** (5 - len(nums)) + last
    return ipaddress.IPv4Address(value)


_NAT64 = ipaddress.IPv6Network("64:ff9b::/96")


def canonical_ip(host: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    """The IP a host string denotes, or None for a name. IPv6 forms that carry an IPv4 address
    (IPv4-mapped, 6to4, the NAT64 well-known prefix) become that IPv4 address."""
    h = host.strip("[]")
    if ":" in h:
        try:
            ip6 = ipaddress.IPv6Address(h.split("%")[0])
        except ValueError:
            return None
        if ip6 in _NAT64:
            return ipaddress.IPv4Address(int(ip6) & 0xFFFFFFFF)
        return ip6.ipv4_mapped or ip6.sixtofour or ip6
    return parse_ipv4_loose(h)


def ip_is_public(ip: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
    """True for globally routable unicast addresses only (site-local fec0::/10 counts as private)."""
    if isinstance(ip, ipaddress.IPv6Address) and ip.is_site_local:
        return False
    return bool(ip.is_global) and not ip.is_multicast and not ip.is_reserved


def is_local_name(host: str) -> bool:
    """Names that denote this machine or its cloud environment whatever DNS says (canonical host)."""
    return host in _BLOCKED_NAMES or host.endswith(".localhost") or host.endswith(".internal")


@dataclass
class UrlGuard:
    """Checks URLs against the policy above. `enabled=False` turns every check off (trusted labs)."""

    allow_hosts: list[str] = field(default_factory=lambda: ["*.web.test"])
    enabled: bool = True
    resolve: bool = True
    _dns_cache: dict[str, bool] = field(default_factory=dict, repr=False)

    def host_allowlisted(self, host: str) -> bool:
        """Whether a canonical host matches one of the allowlist globs."""
        return any(fnmatch.fnmatchcase(host, pat.lower()) for pat in self.allow_hosts)

    def unlisted_url_pattern(self) -> re.Pattern[str]:
        """A regex matching every URL whose host is NOT allowlisted. The farm routes only these to
        Python; allowlisted requests are continued inside Playwright's driver, saving a Python round
        trip per request (the network events still reach the farm, one-way, for the settle rule)."""
        hosts = "|".join(re.escape(h.lower()).replace(r"\*", "[^/?#:@]*") for h in self.allow_hosts) or "(?!)"
        return re.compile(rf"^(?!https?://(?:[^/?#@]*@)?(?:{hosts})(?::\d+)?(?:[/?#]|$))", re.IGNORECASE)

    def check(self, url: str, *, top_level: bool = True) -> str:
        """Return the canonical URL, or raise BlockedUrl naming the reason."""
        if not self.enabled:
            return url
        raw = url.strip()
        try:
            parts = urlsplit(raw)
        except ValueError as exc:
            raise BlockedUrl(f"unparseable URL {raw!r}: {exc}") from exc
        scheme = parts.scheme.lower()
        if scheme in _SUBRESOURCE_SCHEMES:
            if scheme == "about" and raw.lower() in ("about:blank", "about:srcdoc"):
                return raw
            inner = raw.split(":", 1)[1].lower()
            if scheme == "blob" and (inner.startswith("file:") or inner.startswith("null")):
                raise BlockedUrl(f"scheme blob:file is not allowed: {raw[:80]!r}")
            if top_level:
                raise BlockedUrl(f"scheme {scheme}: is not allowed for top-level navigation")
            return raw
        if scheme in _ALWAYS_BLOCKED_SCHEMES or scheme not in ("http", "https"):
            raise BlockedUrl(f"scheme {scheme or '(none)'}: is not allowed (only http and https)")
        problem = web_url_problem(raw)  # the sdk's rule, which task files apply to their start URLs too
        if problem:
            raise BlockedUrl(f"URL {raw[:80]!r} {problem}")
        host = (parts.hostname or "").rstrip(".").lower()
        if self.host_allowlisted(host):
            return raw
        ip = canonical_ip(host)
        if ip is not None:
            if not ip_is_public(ip):
                raise BlockedUrl(f"address {ip} (from host {host!r}) is not public")
            return raw
        if is_local_name(host):
            raise BlockedUrl(f"host {host!r} is a local name")
        if self.resolve and not self._resolves_public(host):
            raise BlockedUrl(f"host {host!r} resolves to a non-public address")
        return raw

    async def acheck(self, url: str, *, top_level: bool = True) -> str:
        """`check` without blocking the event loop: a name that needs a DNS look-up is checked in a thread."""
        host = ""
        try:
            host = (urlsplit(url.strip()).hostname or "").rstrip(".").lower()
        except ValueError:
            pass
        if (self.enabled and self.resolve and host and host not in self._dns_cache
                and canonical_ip(host) is None and not self.host_allowlisted(host)):
            return await asyncio.to_thread(self.check, url, top_level=top_level)
        return self.check(url, top_level=top_level)

    def _resolves_public(self, host: str) -> bool:
        """DNS check against rebinding to private space; unresolvable names pass (Chromium fails them)."""
        cached = self._dns_cache.get(host)
        if cached is not None:
            return cached
        try:
            infos = socket.getaddrinfo(host, None, proto=socket.IPPROTO_TCP)
        except OSError:
            return True
        ok = True
        for info in infos:
            ip = canonical_ip(str(info[4][0]))
            if ip is not None and not ip_is_public(ip):
                ok = False
        if len(self._dns_cache) > 4096:
            self._dns_cache.clear()
        self._dns_cache[host] = ok
        return ok

"""Sessions never see each other (issue 50), on a real farm node over gRPC: two sessions open at once on the same
page share no cookies, localStorage, sessionStorage, IndexedDB, HTTP cache or service workers; a fork is
independent of its parent after the fork; a closed session is gone and its storage with it (the warm context that
served it is handed to the next session clean). The page reads every store and shows what it sees, so the test reads
it from the observation as an agent would; a local HTTP server serves it for `iso.web.test` (the node maps
`*.web.test` there), so nothing leaves loopback. Site state (the sites service's per-session carts and orders) is
checked per catalog task by `webenv validate`'s isolation check (tests/test_validate.py runs it)."""

from __future__ import annotations

import asyncio
import itertools
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from webenv import errors
from webenv.cli.stack import Stack
from webenv.client import EnvironmentClient
from webenv.v1 import environment_pb2

pytestmark = pytest.mark.timeout(300)
URL = "http://iso.web.test/"
PAGE = """<!doctype html><html><head><title>iso</title><script src="/cached.js"></script></head><body>
<input id="mark" aria-label="mark"><button id="write" onclick="save()">Write</button><p id="seen">reading</p>
<script>
function db() {
  return new Promise(ok => { const q = indexedDB.open('iso', 1); q.onupgradeneeded = () => q.result.createObjectStore('kv');
    q.onsuccess = () => ok(q.result); q.onerror = () => ok(null); });
}
async function idbGet() {
  const d = await db(); if (!d) return 'err';
  return new Promise(ok => { const g = d.transaction('kv').objectStore('kv').get('mark');
    g.onsuccess = () => ok(g.result || ''); g.onerror = () => ok('err'); });
}
async function show() {
  const sw = navigator.serviceWorker ? (await navigator.serviceWorker.getRegistrations()).length : 'none';
  document.getElementById('seen').textContent = 'seen cookie=' + (document.cookie.match(/mark=(\\w*)/) || ['', ''])[1]
    + ' local=' + (localStorage.getItem('mark') || '') + ' session=' + (sessionStorage.getItem('mark') || '')
    + ' idb=' + await idbGet() + ' sw=' + sw + ' cache=' + window.cacheServe + ' end';
}
async function save() {
  const m = document.getElementById('mark').value;
  document.getElementById('seen').textContent = 'writing';
  document.cookie = 'mark=' + m + '; max-age=3600; path=/'; localStorage.setItem('mark', m);
  sessionStorage.setItem('mark', m);
  const d = await db(); await new Promise(ok => { const tx = d.transaction('kv', 'readwrite');
    tx.objectStore('kv').put(m, 'mark'); tx.oncomplete = ok; });
  await show();
}
show();
</script></body></html>"""
SEEN = re.compile(r"seen cookie=(\w*) local=(\w*) session=(\w*) idb=(\w*) sw=(\w+) cache=(\d+) end")


class Page(BaseHTTPRequestHandler):
    served = itertools.count(1)

    def do_GET(self) -> None:
        if self.path == "/cached.js":  # cacheable for an hour: a second fetch in one context comes from its cache
            body, kind, cache = f"window.cacheServe = {next(self.served)};", "text/javascript", "max-age=3600"
        else:
            body, kind, cache = PAGE, "text/html; charset=utf-8", "no-store"
        data = body.encode()
        self.send_response(200)
        for k, v in (("Content-Type", kind), ("Cache-Control", cache), ("Content-Length", str(len(data)))):
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    server = ThreadingHTTPServer(("127.0.0.1", 0), Page)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    with Stack(tmp_path_factory.mktemp("isolation"), free_ports=True, sites_count=1) as s:
        s.http_port = server.server_address[1]  # the node maps *.web.test to this page
        yield s.add_browser_node("iso")
    server.shutdown()


async def seen(env: EnvironmentClient, sid: str, *, reload: bool = True) -> dict[str, str]:
    """What the session's page sees in each store (loaded again unless ``reload`` is False)."""
    resp = await env.step(sid, f'goto("{URL}")' if reload else "noop()")
    for _ in range(20):
        if m := SEEN.search(resp.observation.axtree):
            return dict(zip(("cookie", "local", "session", "idb", "sw", "cache"), m.groups(), strict=True))
        resp = await env.step(sid, "noop()")  # the page reads IndexedDB asynchronously
    raise AssertionError(f"the page never showed what it sees: {resp.observation.axtree[:500]}")


async def write(env: EnvironmentClient, sid: str, mark: str) -> dict[str, str]:
    await env.step(sid, f'fill("#mark", "{mark}")')
    await env.step(sid, 'click("#write")')
    return await seen(env, sid, reload=False)


def test_sessions_share_no_storage_forks_part_and_closed_sessions_are_gone(node: str) -> None:
    async def scenario() -> None:
        async with EnvironmentClient(node, timeout=60) as env:
            a, b = await asyncio.gather(env.open(start_url=URL), env.open(start_url=URL))
            sa, sb = a.session.session_id, b.session.session_id
            assert sa != sb
            mine = await write(env, sa, "alpha")
            assert mine["cookie"] == mine["local"] == mine["session"] == mine["idb"] == "alpha", mine
            again = await seen(env, sa)  # the same session loads the page again: its stores hold
            assert again["cookie"] == again["local"] == again["idb"] == "alpha", again
            other = await seen(env, sb)  # the concurrent session of the same page sees none of it
            assert (other["cookie"], other["local"], other["session"], other["idb"]) == ("", "", "", ""), other
            # its cacheable script was fetched for it, not taken from the first session's cache (the farm's contexts
            # fetched it again even within one session: measured, the served count grows on every load)
            assert other["cache"] not in (mine["cache"], again["cache"]), (mine, again, other)
            assert other["sw"] in ("0", "none") and mine["sw"] in ("0", "none")  # no service worker anywhere

            # a fork starts from the parent's cookies and localStorage, then each goes its own way
            fork = (await env.fork(sa, 1)).sessions[0].session.session_id
            copied = await seen(env, fork)
            assert copied["cookie"] == copied["local"] == "alpha", copied
            await write(env, sa, "beta")
            assert (await seen(env, fork))["local"] == "alpha"
            await write(env, fork, "gamma")
            parent = await seen(env, sa)
            assert parent["cookie"] == parent["local"] == parent["idb"] == "beta", parent
            assert (await seen(env, sb))["local"] == ""

            # closed sessions are gone, and the next sessions (on the contexts they freed) start clean
            for sid in (sa, fork):
                await env.close(sid)
                assert (await env.get(sid)).state == environment_pb2.SESSION_STATE_CLOSED
                with pytest.raises(errors.FailedPrecondition):  # a closed session takes no step
                    await env.step(sid, "noop()")
            fresh = await asyncio.gather(*(env.open(start_url=URL) for _ in range(2)))
            for f in fresh:
                now = await seen(env, f.session.session_id)
                assert (now["cookie"], now["local"], now["session"], now["idb"]) == ("", "", "", ""), now
                await env.close(f.session.session_id)
            await env.close(sb)

    asyncio.run(scenario())

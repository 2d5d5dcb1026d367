"""Sessions never see each other (issue 50), on a real farm node over gRPC: two sessions open at once on the same
page share no cookies, localStorage, sessionStorage, IndexedDB, HTTP cache or service workers; a fork is
independent of its parent after the fork; a closed session is gone and its storage with it (the warm context that
served it is handed to the next session clean). The page reads every store and shows what it sees, so the test reads
it from the observation as an agent would; a local HTTP server serves it for `iso.web.test` (the node maps
`*.web.test` there), so nothing leaves loopback. Site state (the sites service's per-session carts and orders) is
checked per catalog task by `webenv validate`'s isolation check (tests/test_validate.py runs it). Two clients of the
OpenEnv server on one task never see each other's page or episode."""

from __future__ import annotations

import asyncio
import itertools
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from webenv import errors
from webenv.cli.stack import Stack
from webenv.client import EnvironmentClient
from webenv.openenv.client import WebEnvClient
from webenv.openenv.env import WebAction
from webenv.testing import load_test_module
from webenv.v1 import environment_pb2

pytestmark = pytest.mark.timeout(300)
serve_openenv = load_test_module(Path(__file__).with_name("test_openenv.py"), "_test_openenv").serve_openenv
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
def stack(tmp_path_factory):
    """sites, judge and a farm on the synthetic web (the adapters' tests), and the node ``s.iso`` whose *.web.test is
    the page above."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), Page)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    with Stack(tmp_path_factory.mktemp("isolation"), free_ports=True, sites_count=8,
               extra_env={"WEBENV_FARM_NAV_TIMEOUT_MS": "30000"}) as s:  # a loaded machine's slow page loads
        s.start(("sites", "browser", "judge"))
        web, s.http_port = s.http_port, server.server_address[1]
        s.iso = s.add_browser_node("iso")
        s.http_port = web
        yield s
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


def test_sessions_share_no_storage_forks_part_and_closed_sessions_are_gone(stack: Stack) -> None:
    async def scenario() -> None:
        async with EnvironmentClient(stack.iso, timeout=60) as env:
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


def test_two_openenv_clients_never_see_each_other(stack: Stack) -> None:
    """Two WebSocket clients of one OpenEnv server on the same task: each its own farm session; one moving to another
    page, ending its episode or hanging up changes nothing the other sees."""
    click_test, click_button = (f"http://miniwob.web.test/miniwob/{n}.html" for n in ("click-test", "click-button"))
    with serve_openenv(stack), WebEnvClient(base_url=stack.openenv_url).sync() as a, \
            WebEnvClient(base_url=stack.openenv_url).sync() as b:
        first_a, first_b = a.reset(task_id="miniwob/click-test", seed=1), b.reset(task_id="miniwob/click-test", seed=1)
        assert first_a.observation.url == first_b.observation.url == click_test
        state_a, state_b = a.state(), b.state()
        assert state_a.farm_session_id != state_b.farm_session_id and state_a.episode_id != state_b.episode_id
        assert a.step(WebAction(action=f'goto("{click_button}")')).observation.url == click_button
        seen_b = b.step(WebAction(action="noop()")).observation
        assert seen_b.url == click_test and 'button "Click Me!"' in seen_b.axtree  # its own page (the timer runs)
        assert (a.state().step_count, b.state().step_count) == (1, 1)
        button = re.search(r'\[(\w+)\] button "Click Me!"', seen_b.axtree).group(1)
        a.close()
        done = b.step(WebAction(action=f"click({button})"))  # the other's hang-up ended nothing of this episode
        assert done.done and done.reward == 1.0 and b.state().farm_session_id == state_b.farm_session_id

"""Security refusals in a real browser, and isolation between sessions."""

from __future__ import annotations

import http.server
import threading

import pytest
from webenv import errors
from webenv.client import observation_spec
from webenv.v1 import common_pb2

F = common_pb2.ObservationFormat


@pytest.mark.parametrize("url", ["file:///etc/passwd", "http://127.0.0.2:1/", "http://169.254.169.254/latest/meta-data/",
                                 "view-source:http://pages.web.test/pages/basic"])
async def test_open_refuses_blocked_start_url(env, url):
    with pytest.raises(errors.PermissionDenied) as exc:
        await env.open(start_url=url)
    assert exc.value.reason == "URL_BLOCKED"


async def test_navigation_refusals_keep_the_session(env, page_server):
    o = await env.open(start_url=page_server.url("basic"))
    sid = o.session.session_id
    for url in ("file:///etc/passwd", f"http://127.0.0.2:{page_server.port}/pages/basic",
                "http://169.254.169.254/latest/meta-data/", "http://2130706433/", "javascript:alert(1)"):
        r = await env.step(sid, f'goto("{url}")')
        assert "refused by the URL guard" in r.observation.last_action_error, url
        assert r.observation.url.endswith("/pages/basic")
    await env.close(sid)


@pytest.fixture
def private_server():
    """A server on 127.0.0.2 holding a 'secret' page: reachable from the machine, refused to sessions."""
    class H(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            body = b"<html><body><pre>internal secret</pre></body></html>"
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *a):
            return

    srv = http.server.ThreadingHTTPServer(("127.0.0.2", 0), H)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield srv.server_address[1]
    srv.shutdown()
    srv.server_close()


async def test_redirect_to_private_address_is_refused(env, page_server, private_server):
    o = await env.open(start_url=page_server.url("basic"))
    sid = o.session.session_id
    target = f"http://127.0.0.2:{private_server}/secret"
    r = await env.step(sid, f'goto("http://pages.web.test/redirect?to={target}")',
                       spec=observation_spec([F.OBSERVATION_FORMAT_HTML]))
    assert "refused by the URL guard" in r.observation.last_action_error
    assert "127.0.0.2" not in r.observation.url
    assert "internal secret" not in r.observation.html  # nothing of the private page is observed
    await env.close(sid)


async def test_subresource_to_private_address_is_blocked(env, page_server, farm):
    o = await env.open(start_url=page_server.url("basic"))
    sid = o.session.session_id
    before = farm.farm.registry.sessions[sid].slot.state.blocked[:]
    await env.step(sid, 'goto("http://pages.web.test/redirect?to=/pages/basic")')
    r = await env.step(sid, 'noop()')
    assert r.observation.url.endswith("/pages/basic")  # a same-host redirect is fine
    page = farm.farm.registry.sessions[sid].page
    ok = await page.evaluate(f"fetch('http://127.0.0.1:{page_server.port}/pages/basic').then(() => 'ok', () => 'blocked')")
    assert ok == "blocked"
    assert len(farm.farm.registry.sessions[sid].slot.state.blocked) > len(before)
    await env.close(sid)


async def test_cookies_are_isolated_between_sessions(env, page_server):
    a = await env.open(start_url=page_server.url("cookie"))
    b = await env.open(start_url=page_server.url("cookie"))
    r = await env.step(a.session.session_id, 'click("#set")')
    assert '"set"' in r.observation.axtree
    r = await env.step(a.session.session_id, 'goto("http://pages.web.test/echo-cookie")')
    assert "secret=s3cr3t" in r.observation.axtree
    r = await env.step(b.session.session_id, 'goto("http://pages.web.test/echo-cookie")')
    assert "s3cr3t" not in r.observation.axtree
    await env.close(a.session.session_id)
    await env.close(b.session.session_id)

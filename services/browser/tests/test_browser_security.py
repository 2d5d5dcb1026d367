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


async def test_start_urls_no_browser_can_open_are_bad_requests_naming_the_field(env, farm_factory, page_server):
    """The sdk's URL rule (the one task files apply when read): a placeholder port is INVALID_ARGUMENT naming the
    field, with the URL guard on and off, instead of Chromium's "Cannot navigate to invalid URL" per episode."""
    bad = "http://pages.web.test:PORT/pages/basic"
    with pytest.raises(errors.InvalidArgument) as exc:
        await env.open(start_url=bad)
    assert (exc.value.reason, exc.value.metadata["field"]) == ("BAD_START", "start_url")
    assert "port 'PORT' is not a number" in exc.value.message
    task = common_pb2.Task(task_id="rubric/mine", source=common_pb2.TASK_SOURCE_RUBRIC_JSON, start_url=bad)
    async with farm_factory(farm_url_guard=False, farm_warm_contexts=0) as f:
        from webenv.client import EnvironmentClient

        async with EnvironmentClient(f.channel) as client:
            with pytest.raises(errors.InvalidArgument) as exc:
                await client.open(task=task)
            assert exc.value.metadata["field"] == "task.start_url" and "PORT" in exc.value.message
            o = await client.open(start_url=page_server.url("basic"))  # a navigation to it is the policy's error
            r = await client.step(o.session.session_id, f'goto("{bad}")')
            assert "navigation to" in r.observation.last_action_error and r.observation.url.endswith("/pages/basic")
            await client.close(o.session.session_id)
    o = await env.open(start_url=page_server.url("basic"))
    r = await env.step(o.session.session_id, f'goto("{bad}")')
    assert "refused by the URL guard" in r.observation.last_action_error and "port 'PORT' is not a number" in \
        r.observation.last_action_error
    await env.close(o.session.session_id)


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

"""Benchmark site state on the real farm (real Chromium, over gRPC): one ``WEBENV_BENCHMARK_SITES`` file maps the
placeholders for the loader and tells the farm each site's login (a Playwright storage_state file) and reset hook
(an HTTP endpoint). The site is a tiny HTTP server on 127.0.0.1 that reads its login cookie and localStorage, shows
the window size and position it is given, and records its ``/reset`` calls; the hand-made Hearth & Loaf site (the
sites service) is the other tab of a multi-tab start.

Shown: a task with ``require_login`` starts signed in (cookie and localStorage from the storage state), one without
does not; a task with ``require_reset`` has the site reset before it starts; two such episodes opened at once on one
site run one after the other (the second reset comes after the first session closed); a task needing a reset or a
login the configuration lacks is FAILED_PRECONDITION naming the site; a multi-tab start opens every URL in its own
tab; the task's viewport_size and geolocation reach the page."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import AsyncIterator, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import grpc
import pytest
from webenv import errors
from webenv.taskfiles import load
from webenv.testing import free_port, load_test_module
from webenv.v1 import common_pb2 as pb
from webenv.v1 import environment_pb2, environment_pb2_grpc

_e2e = load_test_module(Path(__file__).with_name("test_sites_farm_e2e.py"), "_sites_farm_e2e_for_site_state")
sites_service, _serve = _e2e.sites_service, _e2e._serve

SPEC = pb.ObservationSpec(formats=[pb.OBSERVATION_FORMAT_HTML])
PAGE = """<!doctype html><html><body><h1>Local shop</h1><p id="who">{who}</p><p id="ls"></p><p id="win"></p>
<p id="geo">no position</p><script>
document.getElementById('ls').textContent = 'token=' + localStorage.getItem('token');
document.getElementById('win').textContent = 'window ' + innerWidth + 'x' + innerHeight;
navigator.geolocation && navigator.geolocation.getCurrentPosition(
  (p) => { document.getElementById('geo').textContent = 'at ' + p.coords.latitude + ',' + p.coords.longitude; },
  (e) => { document.getElementById('geo').textContent = 'no position: ' + e.message; });
</script></body></html>"""


class LocalSite:
    """The site on 127.0.0.1: ``/`` reads the ``wa_user`` cookie, ``/reset`` records when each call began (each takes 0.3 s)."""

    def __init__(self) -> None:
        self.resets: list[tuple[float, str]] = []
        site = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                return None

            def _answer(self, body: str, ctype: str = "text/html") -> None:
                data = body.encode()
                self.send_response(200)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:
                if self.path.startswith("/favicon"):
                    self.send_response(404)
                    self.end_headers()
                    return
                cookies = dict(c.strip().split("=", 1) for c in (self.headers.get("Cookie") or "").split(";") if "=" in c)
                who = f"Signed in as {cookies['wa_user']}" if "wa_user" in cookies else "Not signed in"
                self._answer(PAGE.replace("{who}", who))

            def do_POST(self) -> None:
                if self.path == "/reset":
                    site.resets.append((time.time(), self.command))  # when it began
                    time.sleep(0.3)
                    self._answer('{"status": "reset"}', "application/json")
                else:
                    self.send_response(404)
                    self.end_headers()

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


@pytest.fixture(scope="module")
def local_site() -> Iterator[LocalSite]:
    site = LocalSite()
    yield site
    site.server.shutdown()


@pytest.fixture(scope="module")
def sites_file(local_site: LocalSite, tmp_path_factory) -> Path:
    """The one configuration: the placeholders' URLs and the local site's login and reset hook."""
    root = tmp_path_factory.mktemp("benchsites")
    (root / "auth").mkdir()
    host = "127.0.0.1"
    (root / "auth" / "localsite_state.json").write_text(json.dumps({
        "cookies": [{"name": "wa_user", "value": "alice", "domain": host, "path": "/", "expires": -1,
                     "httpOnly": False, "secure": False, "sameSite": "Lax"}],
        "origins": [{"origin": local_site.url, "localStorage": [{"name": "token", "value": "t0k"}]}]}))
    # the same site under another name, logged in and reset by commands: the login command writes the storage state
    # the first time it is needed, the reset command appends a line to a file
    state = json.loads((root / "auth" / "localsite_state.json").read_text())
    state["cookies"][0]["value"] = "bob"
    login = ["python3", "-c", f"import pathlib; pathlib.Path({str(root / 'auth' / 'cmd_state.json')!r})"
             f".write_text({json.dumps(state)!r})"]
    reset = ["python3", "-c", f"open({str(root / 'cmd_resets.log')!r}, 'a').write('reset\\n')"]
    path = root / "sites.json"
    path.write_text(json.dumps({
        "__LOCALSITE__": {"url": local_site.url, "storage_state": "auth/localsite_state.json",
                          "reset_url": f"{local_site.url}/reset"},
        "__CMDSITE__": {"url": local_site.url, "storage_state": "auth/cmd_state.json", "login_command": login,
                        "reset_command": reset},
        "__HEARTHLOAF__": "http://hearthloaf.web.test"}))
    return path


@pytest.fixture(scope="module")
async def farm(sites_service, sites_file, chromium_path, tmp_path_factory
               ) -> AsyncIterator[environment_pb2_grpc.EnvironmentServiceStub]:
    port = free_port()
    env = {"WEBENV_GRPC_PORT": str(port), "WEBENV_METRICS_PORT": "0", "WEBENV_HOST": "127.0.0.1",
           "WEBENV_FARM_CHROMIUM_PATH": chromium_path, "WEBENV_FARM_WARM_CONTEXTS": "1",
           "WEBENV_FARM_SITES_HTTP_ADDR": f"127.0.0.1:{sites_service.http_port}",
           "WEBENV_SITES_ADDR": f"127.0.0.1:{sites_service.port}", "WEBENV_LOG_LEVEL": "WARNING",
           "WEBENV_FARM_ALLOW_HOSTS": "*.web.test,127.0.0.1", "WEBENV_BENCHMARK_SITES": str(sites_file)}
    async for ch in _serve("webenv.browser", env, port, tmp_path_factory.mktemp("farm") / "farm.log"):
        yield environment_pb2_grpc.EnvironmentServiceStub(ch)


def _task(n: int, start_url: str, sites: list[str], **fields: object) -> dict[str, object]:
    """A WebArena config object (its own field names)."""
    return {"sites": sites, "task_id": n, "require_login": False, "storage_state": None, "start_url": start_url,
            "geolocation": None, "intent_template": "Say who is signed in", "instantiation_dict": {},
            "intent": "Say who is signed in", "require_reset": False, "intent_template_id": 1,
            "eval": {"eval_types": ["string_match"], "reference_answers": {"must_include": ["alice"]},
                     "reference_url": "", "program_html": []}, **fields}


@pytest.fixture(scope="module")
def tasks(sites_file: Path, tmp_path_factory) -> dict[str, pb.Task]:
    path = tmp_path_factory.mktemp("taskfile") / "webarena_local.json"
    path.write_text(json.dumps([
        _task(1, "__LOCALSITE__/", ["localsite"], require_login=True, storage_state="./.auth/localsite_state.json",
              require_reset=True),
        _task(2, "__LOCALSITE__/", ["localsite"]),
        _task(3, "__LOCALSITE__/here |AND| __HEARTHLOAF__/faq.html", ["localsite", "hearthloaf"],
              geolocation={"latitude": 48.85, "longitude": 2.35}, viewport_size={"width": 800, "height": 600}),
        _task(4, "__HEARTHLOAF__", ["hearthloaf"], require_reset=True),
        _task(5, "__HEARTHLOAF__", ["hearthloaf"], require_login=True, storage_state="./.auth/hearthloaf_state.json"),
        _task(6, "__CMDSITE__/", ["cmdsite"], require_login=True, storage_state="./.auth/cmdsite_state.json",
              require_reset=True),
        _task(7, "__LOCALSITE__/", ["localsite"], require_login=True),  # no storage_state: upstream logs nothing in
    ]))
    mp = pytest.MonkeyPatch()
    mp.setenv("WEBENV_BENCHMARK_SITES", str(sites_file))  # the loader reads the same file as the farm
    try:
        return {t.metadata["benchmark_task_id"]: t for t in load(path)}
    finally:
        mp.undo()


async def _open(farm, task: pb.Task) -> environment_pb2.OpenSessionResponse:
    return await farm.OpenSession(environment_pb2.OpenSessionRequest(task=task, observation_spec=SPEC), timeout=90)


async def _close(farm, sid: str) -> None:
    await farm.CloseSession(environment_pb2.CloseSessionRequest(session_id=sid), timeout=60)


async def test_login_and_reset_serialised_per_site(farm, tasks, local_site: LocalSite) -> None:
    before = len(local_site.resets)
    for tid in ("2", "7"):  # no login asked (or no storage_state to log in with): no cookie set, no reset called
        plain = await _open(farm, tasks[tid])
        assert "Not signed in" in plain.observation.html and "token=null" in plain.observation.html
        await _close(farm, plain.session.session_id)
    assert len(local_site.resets) == before

    spans: list[tuple[float, float]] = []

    async def episode() -> None:
        opened = await _open(farm, tasks["1"])
        t_open = time.time()
        html = opened.observation.html
        assert "Signed in as alice" in html and "token=t0k" in html, html[:500]  # cookie and localStorage
        await asyncio.sleep(1.0)  # the episode's steps
        spans.append((t_open, time.time()))  # the episode ends as its close is asked for
        await _close(farm, opened.session.session_id)

    await asyncio.gather(episode(), episode())
    resets = [t for t, method in local_site.resets[before:]]
    assert len(resets) == 2 and all(m == "POST" for _, m in local_site.resets[before:])
    first, second = sorted(spans)
    assert second[0] >= first[1], "the second episode started before the first one ended"
    assert resets[1] >= first[1], "the second reset came while the first episode was running"


async def test_reset_or_login_not_configured_is_refused_naming_the_site(farm, tasks) -> None:
    for tid, reason, key in (("4", "SITE_RESET_NOT_CONFIGURED", "reset_url"), ("5", "SITE_LOGIN_NOT_CONFIGURED",
                                                                               "storage_state")):
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await _open(farm, tasks[tid])
        e = errors.from_rpc_error(err.value)
        assert isinstance(e, errors.FailedPrecondition) and e.reason == reason, e
        assert e.metadata["site"] == "hearthloaf" and e.metadata["placeholder"] == "__HEARTHLOAF__"
        assert "'hearthloaf'" in err.value.details() and key in err.value.details()


async def test_multi_tab_start_viewport_and_geolocation(farm, tasks, local_site: LocalSite) -> None:
    task = tasks["3"]
    assert json.loads(task.metadata["start_urls"]) == [f"{local_site.url}/here", "http://hearthloaf.web.test/faq.html"]
    opened = await _open(farm, task)
    sid = opened.session.session_id
    try:
        tabs = opened.session.tabs
        assert [t.url for t in tabs] == [f"{local_site.url}/here", "http://hearthloaf.web.test/faq.html"]
        assert [t.active for t in tabs] == [False, True]  # the last start URL is the active tab, as upstream
        first = next(t.tab_id for t in tabs if not t.active)
        step = await farm.Step(environment_pb2.StepRequest(
            session_id=sid, action=pb.Action(switch_tab=pb.SwitchTabAction(tab_id=first)), observation_spec=SPEC),
            timeout=60)
        html = step.observation.html
        assert "window 800x600" in html, html[:600]
        assert "at 48.85,2.35" in html, html[:600]
    finally:
        await _close(farm, sid)


async def test_login_and_reset_by_commands(farm, tasks, sites_file: Path) -> None:
    assert not (sites_file.parent / "auth" / "cmd_state.json").exists()
    for _ in range(2):
        opened = await _open(farm, tasks["6"])
        assert "Signed in as bob" in opened.observation.html  # the storage state the login command wrote
        await _close(farm, opened.session.session_id)
    assert (sites_file.parent / "cmd_resets.log").read_text() == "reset\nreset\n"


async def test_a_malformed_viewport_or_geolocation_is_invalid_naming_it(farm, tasks) -> None:
    for key, value in (("viewport_size", '{"width": 5, "height": 600}'), ("geolocation", '{"latitude": 300}'),
                       ("start_urls", '["http://127.0.0.1/", 7]')):
        task = pb.Task()
        task.CopyFrom(tasks["2"])
        task.metadata[key] = value
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await _open(farm, task)
        e = errors.from_rpc_error(err.value)
        assert isinstance(e, errors.InvalidArgument) and e.metadata["field"] == f"task.metadata[{key}]", e

"""`webenv validate` on deliberately broken tasks (issue 50): each caught by its property, on a real farm node and
the real judge, and a sound task passing every check. The tasks are one rubric JSON task file over small pages a
local HTTP server serves for a few `*.web.test` hosts (the farm maps that domain to it, as it maps it to the sites
service), so nothing leaves loopback: the page that "calls another host" loads an image of another `*.web.test`
host, which the farm would carry to this server and `validate` refuses from the page alone."""

from __future__ import annotations

import json
import secrets
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from typer.testing import CliRunner
from webenv.cli.main import app
from webenv.cli.stack import Stack

pytestmark = pytest.mark.timeout(300)
CODE = "Zanzibar-42"
LINK = '<p><a href="/code">The code page</a></p>'
START = {  # host -> start page body (every host's /code page states the code)
    "good": LINK,
    "leak": LINK + f'<p><small>ref. {CODE}</small></p>',  # the answer on the start page, the oracle goes on
    "done": LINK,
    "flaky": LINK,  # and a token that changes on every load (below)
    "caller": LINK + '<img src="http://tracker.web.test/pixel.gif" alt="">',
    "badoracle": LINK,
}
EXPECTED_FAILURE = {"good": None, "leak": "leak", "done": "floor", "flaky": "determinism", "caller": "egress",
                    "badoracle": "oracle"}


class Pages(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        host = self.headers.get("Host", "").split(":")[0].removesuffix(".web.test")
        if self.path == "/code":
            body = f"<h1>Code</h1><p>The code is {CODE}.</p>"
        elif self.path == "/" and host in START:
            body = f"<h1>Welcome to {host}</h1>{START[host]}"
            if host == "flaky":
                body += f"<p>Visitor token {secrets.token_hex(6)}</p>"
        else:
            self.send_error(404)
            return
        data = f"<!doctype html><html><head><title>{host}</title></head><body>{body}</body></html>".encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: object) -> None:
        pass


def task(host: str) -> dict:
    criterion = {"mode": "MATCH_MODE_REGEX", "expected": f"^(done|{CODE})$"} if host == "done" else {
        "mode": "MATCH_MODE_CONTAINS", "expected": CODE}
    answer = "Not-the-code" if host == "badoracle" else CODE
    return {"task_id": f"validate/{host}", "start_url": f"http://{host}.web.test/",
            "instruction": "What is the code on the site's code page?",
            "fact_groups": [{"facts": [{"description": "the code", "criterion": {"answer": criterion}}]}],
            "oracle": ["click(\"a[href='/code']\")", f'answer("{answer}")']}


@pytest.fixture(scope="module")
def farm(tmp_path_factory):
    server = ThreadingHTTPServer(("127.0.0.1", 0), Pages)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    # a loaded CI machine takes more than the default 10 s to load a page now and then: that would be an errored task
    with Stack(tmp_path_factory.mktemp("validate"), free_ports=True, sites_count=1,
               extra_env={"WEBENV_FARM_NAV_TIMEOUT_MS": "30000"}) as s:
        s.start(("judge",))
        s.http_port = server.server_address[1]  # the node maps *.web.test to these pages
        s.browser_node = s.add_browser_node("validate")
        yield s
    server.shutdown()


def test_each_broken_task_is_caught_by_its_property(farm: Stack, tmp_path: Path) -> None:
    tasks = tmp_path / "broken.json"
    tasks.write_text(json.dumps({"tasks": [task(h) for h in START]}))
    report = tmp_path / "report.json"
    out = CliRunner().invoke(app, ["validate", "--task-file", str(tasks), "--browser", farm.browser_node,
                                   "--judge", farm.address("judge"), "--concurrency", "3", "--report", str(report)])
    assert out.exit_code == 1 and report.is_file(), (out.output, out.exception)  # tasks failed
    got = {t["task_id"].rsplit("/", 1)[-1]: t for t in json.loads(report.read_text())["tasks"]}
    assert set(got) == set(START)
    for host, expected in EXPECTED_FAILURE.items():
        t = got[host]
        failed = {name for name, c in t["checks"].items() if c["ok"] is False}
        assert t["error"] == "" and failed == ({expected} if expected else set()), (host, t)
        assert t["status"] == ("failed" if expected else "passed")
    assert "start page's text" in got["leak"]["checks"]["leak"]["why"]
    assert "done passes" in got["done"]["checks"]["floor"]["why"] and got["done"]["floor"] == 1.0
    assert "tracker.web.test" in got["caller"]["checks"]["egress"]["why"]
    assert got["good"]["oracle_score"] == 1.0 and got["good"]["floor"] == 0.0
    for host in EXPECTED_FAILURE:  # the table, and each failing task with why
        assert (f"failed rubric/validate/{host}:" in out.output) == (host != "good"), out.output

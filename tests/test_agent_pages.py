"""The agent's fact reading on hand-made websites through the real browser farm.

The pages of libs/agent/tests/pages/ (facts in prose, in bullet lists, in tables with headers; nothing like
the synthetic web's templates) are served on loopback by a plain HTTP server, opened in real Chromium by the
browser service, and the live AXTREE must yield the facts and answer candidates the sdk's fixtures expect
(the fixtures' AXTREE files are this farm's output, so the sdk's unit tests read what the farm shows).
"""

from __future__ import annotations

import functools
import http.server
import json
import threading
from pathlib import Path

import pytest
from webenv.agent.candidates import context, page_facts, parse_axtree, propose
from webenv.cli.stack import Stack
from webenv.client import make_channel
from webenv.client.environment import EnvironmentClient

PAGES = Path(__file__).resolve().parents[1] / "libs" / "agent" / "tests" / "pages"
EXPECTED = json.loads((PAGES / "expected.json").read_text())

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def farm(tmp_path_factory):
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(PAGES))
    handler.log_message = lambda *a: None
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    stack = Stack(tmp_path_factory.mktemp("pages"), free_ports=True)
    stack.http_port = srv.server_address[1]  # the farm sends *.web.test to this server
    try:
        stack.start(("browser",), timeout=180)
        yield stack.address("browser")
    finally:
        stack.stop()
        srv.shutdown()
        srv.server_close()


async def test_live_axtree_of_hand_made_pages(farm):
    async with EnvironmentClient(make_channel(farm, timeout=60)) as env:
        live = {}
        for page in sorted(EXPECTED["pages"]):
            resp = await env.open(start_url=f"http://shop.web.test/{page}.html")
            live[page] = resp.observation
            await env.close(resp.session.session_id)
    for page, want in EXPECTED["pages"].items():
        assert page_facts(parse_axtree(live[page].axtree)) == [tuple(f) for f in want["facts"]], page
    for q in EXPECTED["questions"]:
        ctx = context(q["instruction"], live[q["page"]], "", [], 0)
        answers = {c.action.answer.text for c in propose(ctx) if c.kind == "answer"}
        assert set(q["answers"]) <= answers, (q, sorted(answers))

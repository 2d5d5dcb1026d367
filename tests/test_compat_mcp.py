"""MCP tools over a farm session (`webenv.compat.mcp`), served as `python -m webenv.compat.mcp` and driven by the
official `mcp` SDK's client, over stdio and over streamable HTTP on loopback, on the real stack (sites, farm)."""

from __future__ import annotations

import asyncio
import base64
import io
import os
import re
import subprocess
import sys
import time

import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from PIL import Image
from webenv.cli.stack import Stack
from webenv.testing import free_port

pytestmark = pytest.mark.timeout(600)


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    with Stack(tmp_path_factory.mktemp("mcp-stack"), free_ports=True, sites_count=8) as s:
        s.start(("sites", "browser", "judge"))
        yield s


def text(result) -> str:
    return "\n".join(c.text for c in result.content if getattr(c, "type", "") == "text")


def ref(snapshot: str, role: str, name: str = "") -> str:
    m = re.search(rf'^\s*\[(\w+)\] {role} "{re.escape(name)}', snapshot, flags=re.M)
    assert m, snapshot[:2000]
    return m.group(1)


def server_params(stack: Stack, *args: str) -> StdioServerParameters:
    # (the client starts the server with a minimal environment; PYTHONPATH keeps this checkout's code)
    return StdioServerParameters(command=sys.executable, args=["-m", "webenv.compat.mcp", "--browser",
                                                               stack.address("browser"), *args],
                                 env={"PYTHONPATH": os.environ.get("PYTHONPATH", "")})


def test_mcp_tools_over_stdio_on_a_miniwob_task(stack: Stack) -> None:
    async def main() -> None:
        params = server_params(stack, "--sites", stack.address("sites"), "--task-id", "miniwob/choose-list",
                               "--judge", stack.address("judge"))
        async with Client(params) as client:
            names = {t.name for t in (await client.list_tools()).tools}
            assert names == {"snapshot", "navigate", "click", "type", "select", "press_key", "scroll", "go_back",
                             "screenshot", "tabs", "answer"}
            snap = text(await client.call_tool("snapshot", {}))
            wanted = re.search(r"Task: Select (.+) from the list", snap).group(1)
            snap = text(await client.call_tool("select", {"ref": ref(snap, "combobox"), "values": [wanted]}))
            assert f'option "{wanted}" selected' in snap
            shot = (await client.call_tool("screenshot", {})).content[0]
            assert shot.type == "image" and shot.mime_type == "image/png"
            assert Image.open(io.BytesIO(base64.b64decode(shot.data))).size == (1280, 720)
            # errors are tool results with isError, a message for the model
            bad = await client.call_tool("click", {"ref": "99999"})
            assert bad.is_error and "99999" in text(bad) and "Accessibility tree" in text(bad)
            bad = await client.call_tool("click", {"ref": "not a ref!"})
            assert bad.is_error and "INVALID_ARGUMENT BAD_REF: ref:" in text(bad)
            bad = await client.call_tool("press_key", {"key": "NoSuchKey"})
            assert bad.is_error and "INVALID_ARGUMENT BAD_ACTION: action.press.key" in text(bad), text(bad)
            bad = await client.call_tool("select", {"ref": "4"})  # missing argument: the SDK's schema check
            assert bad.is_error
            bad = await client.call_tool("navigate", {"url": "http://169.254.169.254/latest/meta-data/"})
            assert bad.is_error and "169.254" not in text(await client.call_tool("snapshot", {})).split("\n")[1]
            snap = text(await client.call_tool("click", {"ref": ref(snap, "button", "Submit")}))
            assert "Page URL: http://miniwob.web.test/miniwob/choose-list.html" in snap
            # the answer ends the episode; the judge grades the recorded steps: text for the model, and the same
            # verdict as structured content (the tool's output schema) for a program
            result = await client.call_tool("answer", {})
            verdict = text(result)
            assert verdict.startswith("The episode has ended. Verdict: passed (score 1)"), verdict
            assert re.search(r"^- \S+: holds", verdict, flags=re.M), verdict
            got = result.structured_content
            assert got["graded"] is True and got["passed"] is True and got["score"] == 1.0, got
            assert got["facts"] and all(f["outcome"] == "holds" and f"- {f['fact_id']}: holds" in verdict
                                        for f in got["facts"]), got
            [tool] = [t for t in (await client.list_tools()).tools if t.name == "answer"]
            assert set(tool.output_schema["required"]) == {"graded", "passed", "score", "facts"}
            late = await client.call_tool("snapshot", {})
            assert late.is_error and "FAILED_PRECONDITION EPISODE_ENDED" in text(late)

    asyncio.run(main())


def test_mcp_tools_over_streamable_http_on_a_synthetic_site(stack: Stack) -> None:
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "webenv.compat.mcp", "--browser", stack.address("browser"),
                             "--start-url", "http://shop-0000.web.test/", "--transport", "streamable-http",
                             "--port", str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)

    async def main() -> None:
        url = f"http://127.0.0.1:{port}/mcp"
        deadline = time.monotonic() + 60
        while True:
            try:
                async with Client(url) as client:
                    snap = text(await client.call_tool("snapshot", {}))
                    break
            except Exception:
                assert proc.poll() is None and time.monotonic() < deadline, proc.stderr.read().decode()[-2000:]
                await asyncio.sleep(0.5)
        async with Client(url) as client:  # a new MCP session: its own farm session, at the start URL
            snap = text(await client.call_tool("snapshot", {}))
            assert "Page URL: http://shop-0000.web.test/\n" in snap, snap[:500]
            snap = text(await client.call_tool("type", {"ref": ref(snap, "searchbox"), "text": "mug", "submit": True}))
            assert "Page URL: http://shop-0000.web.test/products?q=mug" in snap, snap[:500]
            snap = text(await client.call_tool("tabs", {"action": "new", "url": "http://shop-0000.web.test/help"}))
            assert snap.count("  [") == 2 and "[1] http://shop-0000.web.test/help (active)" in snap
            snap = text(await client.call_tool("tabs", {"action": "select", "index": 0}))
            assert "[0] http://shop-0000.web.test/products?q=mug (active)" in snap
            snap = text(await client.call_tool("tabs", {"action": "close", "index": 1}))
            assert snap.count("  [") == 1
            bad = await client.call_tool("tabs", {"action": "select", "index": 7})
            assert bad.is_error and "BAD_TAB" in text(bad)
            snap = text(await client.call_tool("go_back", {}))
            assert "Page URL: http://shop-0000.web.test/\n" in snap
            snap = text(await client.call_tool("navigate", {"url": "http://shop-0000.web.test/help"}))
            assert "Page URL: http://shop-0000.web.test/help" in snap
            assert "Page URL" in text(await client.call_tool("scroll", {"dy": 300}))
            ended = await client.call_tool("answer", {"text": "done"})  # no judge: ended, not graded
            assert not ended.is_error and "not graded" in text(ended)
            assert ended.structured_content == {"graded": False, "passed": None, "score": None, "facts": []}

    try:
        asyncio.run(main())
    finally:
        proc.terminate()
        proc.wait(20)


def test_two_mcp_clients_over_http_never_see_each_others_pages(stack: Stack) -> None:
    """Issue 50 (Playwright MCP showed one client another's page): two clients of one streamable-HTTP server, each its
    own MCP session, navigate at the same time to different pages; each sees only its own, on its own farm session,
    and a client's farm session is closed when its MCP session ends while the other's goes on."""
    import threading

    import uvicorn
    from webenv import errors
    from webenv.client import EnvironmentClient
    from webenv.compat.mcp import FarmSession, build_server
    from webenv.v1 import environment_pb2

    opened: list[FarmSession] = []

    def new_session() -> FarmSession:
        opened.append(FarmSession(stack.address("browser"), start_url="http://shop-0000.web.test/"))
        return opened[-1]

    port = free_port()
    server = uvicorn.Server(uvicorn.Config(build_server(new_session).streamable_http_app(host="127.0.0.1"),
                                           host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()

    async def alive(client: EnvironmentClient, session_id: str) -> bool:
        try:
            return (await client.get(session_id)).state == environment_pb2.SESSION_STATE_OPEN
        except errors.NotFound:
            return False

    async def main() -> None:
        url = f"http://127.0.0.1:{port}/mcp"
        deadline = time.monotonic() + 30
        while not server.started:
            assert thread.is_alive() and time.monotonic() < deadline
            await asyncio.sleep(0.1)
        farm = EnvironmentClient(stack.address("browser"))
        async with Client(url) as a:
            async with Client(url) as b:
                pages = [(a, "http://shop-0000.web.test/help"), (b, "http://shop-0001.web.test/")]
                for _ in range(2):  # concurrent navigations
                    snaps = await asyncio.gather(*(c.call_tool("navigate", {"url": u}) for c, u in pages))
                    for snap, (_, want) in zip(snaps, pages, strict=True):
                        assert f"Page URL: {want}\n" in text(snap), text(snap)[:300]
                    for (c, want), (_, other) in zip(pages, pages[::-1], strict=True):
                        snap = text(await c.call_tool("snapshot", {}))
                        assert f"Page URL: {want}\n" in snap and snap.count("  [") == 1, snap[:300]
                        assert other not in snap, snap[:300]
                    pages = [(a, "http://shop-0000.web.test/cart"), (b, "http://shop-0001.web.test/help")]
                assert len(opened) == 2 and opened[0].session_id != opened[1].session_id
                ids = [s.session_id for s in opened]
                assert all([await alive(farm, i) for i in ids])
            # b's MCP session ended (the client's DELETE): its farm session is closed, a's goes on
            deadline = time.monotonic() + 20
            while await alive(farm, ids[1]):
                assert time.monotonic() < deadline, "the ended MCP session's farm session is still open"
                await asyncio.sleep(0.2)
            assert await alive(farm, ids[0])
            snap = text(await a.call_tool("snapshot", {}))
            assert "Page URL: http://shop-0000.web.test/cart\n" in snap, snap[:300]
        deadline = time.monotonic() + 20
        while await alive(farm, ids[0]):
            assert time.monotonic() < deadline
            await asyncio.sleep(0.2)
        # MCP's session-less era has no client to key a browser by: refused, no farm session opened
        async with Client(url, mode="2026-07-28") as stateless:
            bad = await stateless.call_tool("snapshot", {})
            assert bad.is_error and "FAILED_PRECONDITION NO_MCP_SESSION" in text(bad), text(bad)
        assert len(opened) == 2
        await farm.aclose()

    try:
        asyncio.run(main())
    finally:
        server.should_exit = True
        thread.join(20)


def test_readme_mcp_example_runs_as_written(stack: Stack, tmp_path) -> None:
    """From the folder `webenv up` runs in (its .webenv/stack.json), with no address given: the server finds the
    farm and the catalog there, not at the default ports."""
    import shutil
    from pathlib import Path

    readme = (Path(__file__).resolve().parents[1] / "docs" / "adapters.md").read_text()
    section = readme[readme.index("**MCP.**"):readme.index("**TRL.**")]
    [example] = re.findall(r"```python\n(.*?)```", section, flags=re.S)
    (tmp_path / ".webenv").mkdir()
    shutil.copy(stack.write_state(), tmp_path / ".webenv" / "stack.json")
    env = {k: v for k, v in os.environ.items() if not (k.startswith("WEBENV_") and k.endswith("_ADDR"))}
    env.pop("WEBENV_STACK_FILE", None)
    out = subprocess.run([sys.executable, "-c", example], capture_output=True, text=True, timeout=180, env=env,
                         cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.split() == ["False", "True"], out.stdout


def test_mcp_http_needs_the_platform_token_when_one_is_set(stack: Stack) -> None:
    """With WEBENV_AUTH_TOKEN the streamable-HTTP endpoint refuses a request without the bearer token (401
    UNAUTHENTICATED BAD_TOKEN), as every gRPC service does; with it the MCP handshake goes on."""
    import json
    import urllib.error
    import urllib.request

    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "webenv.compat.mcp", "--browser", stack.address("browser"),
                             "--start-url", "http://shop-0000.web.test/", "--transport", "streamable-http",
                             "--port", str(port)], env={**os.environ, "WEBENV_AUTH_TOKEN": "s3cret"},
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    hello = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}}).encode()

    def post(headers: dict[str, str]) -> int:
        req = urllib.request.Request(f"http://127.0.0.1:{port}/mcp", data=hello, method="POST", headers={
            "content-type": "application/json", "accept": "application/json, text/event-stream", **headers})
        try:
            with urllib.request.urlopen(req, timeout=10) as resp:
                return resp.status
        except urllib.error.HTTPError as exc:
            if exc.code == 401:
                assert json.loads(exc.read())["details"][0]["reason"] == "BAD_TOKEN"
            return exc.code

    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                status = post({})
                break
            except (urllib.error.URLError, ConnectionError):
                assert proc.poll() is None and time.monotonic() < deadline, proc.stderr.read().decode()[-2000:]
                time.sleep(0.3)
        assert status == 401
        assert post({"authorization": "Bearer wrong"}) == 401
        assert post({"authorization": "Bearer s3cret"}) == 200
    finally:
        proc.terminate()
        proc.wait(20)

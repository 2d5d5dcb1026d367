"""MCP tools over a browser farm session per MCP client, on the official `mcp` SDK's server (`MCPServer`), stdio or
streamable HTTP:

    python -m webenv.compat.mcp --start-url http://shop-0001.web.test/
    python -m webenv.compat.mcp --task-id miniwob/click-test --browser localhost:50051 --sites localhost:50055
    python -m webenv.compat.mcp ... --transport streamable-http --port 8765      # http://127.0.0.1:8765/mcp

The farm and the catalog not named by ``--browser`` / ``--sites``: WEBENV_BROWSER_ADDR / WEBENV_SITES_ADDR, else the
running `webenv up`'s ``.webenv/stack.json``, else the default ports (`webenv.client.stack.address`).

Tools (refs are the ``[id]`` of the snapshot, webenv element ids): ``snapshot``, ``navigate(url)``,
``click(ref)``, ``type(ref, text, submit)``, ``select(ref, values)``, ``press_key(key)``, ``scroll(dy, dx)``,
``go_back``, ``screenshot`` (a PNG image), ``tabs(action, index, url)``, ``answer(text)``. Every tool but
``screenshot`` and ``answer`` answers with the page's snapshot after it (URL, title, the open tabs with their URLs,
titles and which is active, the task's instruction, the accessibility tree), as browser MCP servers do, so an agent needs no extra call to see what its action did.
``answer`` submits the final answer and ends the episode: with ``--judge`` (and a ``--task-id``) it answers with the
judge's verdict (passed, score, each rubric fact's outcome and reason), the episode's steps graded as the collector
grades runs (`webenv.client.episode.Episode`), as text for the model and as structured content for the program
(:class:`Verdict`, the tool's output schema: ``graded``, ``passed``, ``score``, ``facts``; ``graded`` false and
``passed``/``score`` null without a judge); later tool calls are refused (``FAILED_PRECONDITION EPISODE_ENDED``).
An episode an infrastructure failure cut short (the farm died, the session expired, the judge failed) is never
answered with a failed verdict: ``answer`` is the error ``<STATUS> EPISODE_INTERRUPTED: ...``.

Errors follow MCP's convention for tools: a failed call is a result with ``isError: true`` and a message for the
model (``ToolError``): an action that failed on the page (the farm's ``last_action_error``, then the snapshot), a
malformed one the farm refused (``INVALID_ARGUMENT BAD_ACTION: ...``), the farm's own errors (``RESOURCE_EXHAUSTED
FARM_FULL: ...``). Arguments that fail the tool's schema are refused by the SDK the same way. Everything goes through
the farm's EnvironmentService, so its limits and URL and network guard hold as on the gRPC path.

Clients never share a page: each MCP client gets its own farm session (:class:`FarmSession`), opened at its first tool
call and closed when its MCP session ends. Over stdio the process serves one client; over streamable HTTP each MCP
session (``Mcp-Session-Id``, the ``initialize`` handshake) is a client, and its farm session closes when the client
ends the session (``DELETE``), the server's idle timeout ends it, or the server stops. Over HTTP, MCP's 2026
session-less era has no client to key a browser by: the server does not offer it (``server/discover`` is refused, so
the SDK's clients fall back to the handshake) and refuses a tool call without a session (``FAILED_PRECONDITION
NO_MCP_SESSION``); over stdio either era is the process's one client.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Annotated, Any, Literal

import typer
from mcp.server.mcpserver import Context, Image, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.shared.exceptions import MCPError
from mcp_types import METHOD_NOT_FOUND, CallToolResult, TextContent
from typing_extensions import TypedDict  # pydantic builds the output schema from it (typing's: Python 3.12+)
from webenv import errors
from webenv.client import EnvironmentClient, make_channel, observation_spec, open_tabs, tabs_text
from webenv.client.episode import Episode
from webenv.client.stack import address
from webenv.v1 import common_pb2 as pb
from webenv.v1 import judge_pb2_grpc, task_pb2, task_pb2_grpc

__all__ = ["FarmSession", "Verdict", "build_server"]


class Fact(TypedDict):
    """One rubric fact's result."""

    fact_id: str
    outcome: str  # holds, fails, undecidable (the judge's FactOutcome, lower case)
    reason: str


class Verdict(TypedDict):
    """The ``answer`` tool's structured content: the judge's verdict of the ended episode."""

    graded: bool  # whether a judge graded the episode (the server was started with --judge)
    passed: bool | None  # None when not graded
    score: float | None
    facts: list[Fact]

_SPEC = observation_spec(("axtree",))
_SHOT = observation_spec(("screenshot",), codec=pb.IMAGE_CODEC_PNG)


def _tool_error(exc: errors.WebenvError) -> ToolError:
    return ToolError(f"{exc.code.name} {exc.reason}: {exc.message}")


class FarmSession:
    """One MCP client's farm session, opened at its first tool call (on the server's event loop)."""

    def __init__(self, browser: str, *, sites: str = "", task_id: str = "", start_url: str = "", judge: str = "",
                 timeout: float = 60.0) -> None:
        if bool(task_id) == bool(start_url):
            raise ValueError("give exactly one of task_id or start_url")
        if task_id and not sites:
            raise ValueError("task_id needs the sites address (the task catalog)")
        if judge and not task_id:
            raise ValueError("judge grades a catalog task: give task_id too")
        self.browser, self.sites, self.task_id, self.start_url, self.timeout = browser, sites, task_id, start_url, timeout
        self.judge = judge
        self.client: EnvironmentClient | None = None
        self.episode: Episode | None = None
        self.session_id = ""
        self.instruction = ""
        self.observation = pb.Observation()
        self.done = False  # the farm ended the episode (a MiniWoB task finished), answer only grades it then
        self.ended = ""  # why the episode is over (answer called): every later call is refused

    async def _open(self) -> None:
        self.client = EnvironmentClient(self.browser, timeout=self.timeout)
        task = None
        if self.task_id:
            async with make_channel(self.sites, timeout=self.timeout) as ch:
                task = (await task_pb2_grpc.TaskServiceStub(ch).GetTask(
                    task_pb2.GetTaskRequest(task_id=self.task_id))).task
        self.episode = await Episode.open(self.client, task, start_url=self.start_url, spec=_SPEC,
                                          labels={"adapter": "mcp"})
        self.session_id, self.instruction, self.observation = (self.episode.session_id, self.episode.instruction,
                                                               self.episode.observation)

    async def ensure(self) -> EnvironmentClient:
        if self.ended:
            raise ToolError(f"FAILED_PRECONDITION EPISODE_ENDED: {self.ended}; open a new MCP session for another")
        if self.client is None:
            try:
                await self._open()
            except errors.WebenvError as exc:
                self.client = None
                raise _tool_error(exc) from None
        assert self.client is not None
        return self.client

    async def act(self, action: pb.Action) -> str:
        """Run one action and answer with the snapshot after it (ToolError when it failed)."""
        await self.ensure()
        assert self.episode is not None
        try:
            resp = await self.episode.step(action)  # recorded: answer grades these steps
        except errors.WebenvError as exc:
            raise _tool_error(exc) from None
        self.observation, self.done = resp.observation, self.done or resp.done
        if resp.observation.last_action_error:
            raise ToolError(f"{resp.observation.last_action_error}\n\n{self.snapshot()}")
        return self.snapshot()

    def snapshot(self) -> str:
        o = self.observation
        tabs = tabs_text(open_tabs(o))
        task = f"Task: {self.instruction}\n" if self.instruction else ""
        return f"{task}Page URL: {o.url}\nPage title: {o.title}\nTabs:\n{tabs}\n\nAccessibility tree:\n{o.axtree}"

    async def screenshot(self) -> bytes:
        client = await self.ensure()
        try:
            resp = await client.step(self.session_id, pb.Action(noop=pb.NoopAction()), spec=_SHOT)
        except errors.WebenvError as exc:
            raise _tool_error(exc) from None
        return bytes(resp.observation.screenshot.data)

    async def answer(self, text: str) -> CallToolResult:
        """Submit the final answer, end the episode and (with a judge) grade it: the verdict as text and as
        structured content (:class:`Verdict`)."""
        await self.ensure()
        assert self.episode is not None
        if not self.done and self.episode.error is None:
            try:
                await self.episode.step(pb.Action(answer=pb.AnswerAction(text=text)))
            except errors.InvalidArgument as exc:
                raise _tool_error(exc) from None
            except errors.WebenvError as exc:  # the farm failed: interrupted; grading says so, never a failed verdict
                if not self.judge:
                    raise _tool_error(exc) from None
        self.ended = "the episode ended with answer"
        if not self.judge:
            await self.episode.close()
            return _result("Answer submitted; the episode has ended (no judge configured: not graded).",
                           Verdict(graded=False, passed=None, score=None, facts=[]))
        try:
            async with make_channel(self.judge, timeout=self.timeout) as ch:
                verdict = await self.episode.grade(judge_pb2_grpc.JudgeServiceStub(ch), deadline=self.timeout)
        except errors.WebenvError as exc:
            raise _tool_error(exc) from None
        facts = [Fact(fact_id=r.fact_id, outcome=pb.FactOutcome.Name(r.outcome).removeprefix("FACT_OUTCOME_").lower(),
                      reason=r.reason) for r in verdict.results]
        lines = "\n".join(f"- {f['fact_id']}: {f['outcome']}{f' ({r})' if (r := f['reason']) else ''}" for f in facts)
        text = (f"The episode has ended. Verdict: {'passed' if verdict.passed else 'failed'} (score {verdict.score:g})"
                f"\n{lines}").rstrip()
        return _result(text, Verdict(graded=True, passed=verdict.passed, score=verdict.score, facts=facts))

    async def close(self) -> None:
        if self.episode is not None:
            await self.episode.close()  # once, best effort (answer may have closed it, it may have expired)
            self.episode = None
        if self.client is not None:
            await self.client.aclose()
            self.client = None


def _result(text: str, verdict: Verdict) -> CallToolResult:
    return CallToolResult(content=[TextContent(type="text", text=text)], structured_content=dict(verdict))


def _target(ref: str) -> pb.ElementTarget:
    from webenv.actions import is_element_id

    if not is_element_id(ref):
        raise ToolError(f"INVALID_ARGUMENT BAD_REF: ref: {ref[:64]!r} is not a ref from the snapshot (like 12)")
    return pb.ElementTarget(element_id=ref)


_STATE_KEY = "webenv.farm_session"


def build_server(new_session: Callable[[], FarmSession]) -> MCPServer:
    """The MCP server with the browser tools, each MCP client on its own farm session from ``new_session()``: the
    stdio process's one client, or each streamable-HTTP MCP session, closed when that session ends."""
    live: set[FarmSession] = set()  # every client's open session, closed at the latest when the server stops
    closing: set[asyncio.Task[None]] = set()  # ended clients' sessions being closed
    stdio: list[FarmSession] = []  # the stdio process's one client

    @asynccontextmanager
    async def lifespan(_: MCPServer) -> AsyncIterator[None]:
        try:
            yield None
        finally:
            await asyncio.gather(*closing, return_exceptions=True)
            for s in list(live):
                await s.close()
            live.clear()

    server = MCPServer("webenv-browser", instructions="A real Chromium page of webenv's browser farm. Call snapshot "
                       "first; refs are the [id] numbers of its accessibility tree.", lifespan=lifespan)

    lowlevel = server._lowlevel_server  # (server/discover is the low-level server's handler)
    discover = lowlevel.get_request_handler("server/discover")
    assert discover is not None

    async def http_discover_refused(ctx: Any, params: Any) -> Any:
        # MCP's session-less era gives an HTTP server no client to key a browser by; refusing discovery makes the
        # SDK's clients (mode "auto") fall back to the initialize handshake, whose HTTP session is the client.
        # stdio is one client in either era.
        if ctx.request is None:
            return await discover.handler(ctx, params)
        raise MCPError(METHOD_NOT_FOUND, "this server keeps a browser per MCP session: connect with initialize")

    lowlevel.add_request_handler("server/discover", discover.params_type, http_discover_refused)

    def client_session(ctx: Context) -> FarmSession:
        if ctx.headers is None:  # stdio: the process serves one client
            if not stdio:
                stdio.append(new_session())
                live.add(stdio[0])
            return stdio[0]
        # the connection of this MCP session (the SDK keeps it on the request's ServerSession, not on the tool's
        # Context): its state lasts the session, its exit stack unwinds when the session ends
        connection = ctx.request_context.session._connection
        if connection.session_id is None:
            raise ToolError("FAILED_PRECONDITION NO_MCP_SESSION: this server keeps a browser per MCP session; "
                            "connect with the initialize handshake (the mcp SDK's Client does by default)")
        session = connection.state.get(_STATE_KEY)
        if session is None:
            session = connection.state[_STATE_KEY] = new_session()
            live.add(session)

            async def end() -> None:
                # a task of its own: the SDK bounds a connection's cleanup to a few seconds, a farm close may take longer
                async def close() -> None:
                    await session.close()
                    live.discard(session)

                task = asyncio.create_task(close())
                closing.add(task)
                task.add_done_callback(closing.discard)

            connection.exit_stack.push_async_callback(end)
        return session

    @server.tool()
    async def snapshot(ctx: Context) -> str:
        """The current page: URL, title, tabs, the task's instruction, the accessibility tree ([ref] role "name")."""
        session = client_session(ctx)
        await session.ensure()
        return session.snapshot()

    @server.tool()
    async def navigate(ctx: Context, url: str) -> str:
        """Load a URL in the active tab."""
        session = client_session(ctx)
        return await session.act(pb.Action(navigate=pb.NavigateAction(url=url)))

    @server.tool()
    async def click(ctx: Context, ref: str) -> str:
        """Click the element with this ref."""
        session = client_session(ctx)
        return await session.act(pb.Action(click=pb.ClickAction(target=_target(ref))))

    @server.tool()
    async def type(ctx: Context, ref: str, text: str, submit: bool = False) -> str:
        """Replace the text of the field with this ref; submit=True presses Enter after."""
        session = client_session(ctx)
        out = await session.act(pb.Action(fill=pb.FillAction(target=_target(ref), text=text)))
        if submit:
            out = await session.act(pb.Action(press=pb.PressAction(target=_target(ref), key="Enter")))
        return out

    @server.tool()
    async def select(ctx: Context, ref: str, values: list[str]) -> str:
        """Choose these options (by value or label) in the <select> with this ref."""
        session = client_session(ctx)
        return await session.act(pb.Action(select=pb.SelectAction(target=_target(ref), options=values)))

    @server.tool()
    async def press_key(ctx: Context, key: str) -> str:
        """Press a key or combination on the focused element (Enter, Tab, Control+a...)."""
        session = client_session(ctx)
        return await session.act(pb.Action(press=pb.PressAction(key=key)))

    @server.tool()
    async def scroll(ctx: Context, dy: float, dx: float = 0.0) -> str:
        """Scroll the page by dy (down) and dx (right) pixels."""
        session = client_session(ctx)
        return await session.act(pb.Action(scroll=pb.ScrollAction(dx=dx, dy=dy)))

    @server.tool()
    async def go_back(ctx: Context) -> str:
        """Go back in the active tab's history."""
        session = client_session(ctx)
        return await session.act(pb.Action(go_back=pb.GoBackAction()))

    @server.tool()
    async def screenshot(ctx: Context) -> Image:
        """A PNG screenshot of the active tab's viewport."""
        session = client_session(ctx)
        return Image(data=await session.screenshot(), format="png")

    @server.tool()
    async def answer(ctx: Context, text: str = "") -> Annotated[CallToolResult, Verdict]:
        """Give the final answer and end the task (the answer for tasks that ask a question; empty otherwise);
        answers with the judge's verdict when the server grades."""
        session = client_session(ctx)
        return await session.answer(text)

    @server.tool()
    async def tabs(ctx: Context, action: Literal["list", "new", "select", "close"] = "list",
                   index: int | None = None, url: str = "") -> str:
        """List the tabs, open a new one (at url), or select / close the tab at index (default: the active one)."""
        session = client_session(ctx)
        if action == "list":
            await session.ensure()
            return session.snapshot()
        if action == "new":
            return await session.act(pb.Action(new_tab=pb.NewTabAction(url=url)))
        await session.ensure()
        open_tabs = list(session.observation.tabs)
        if index is not None and not 0 <= index < len(open_tabs):
            raise ToolError(f"INVALID_ARGUMENT BAD_TAB: index: {index} is out of range ({len(open_tabs)} tabs)")
        if action == "select":
            if index is None:
                raise ToolError("INVALID_ARGUMENT BAD_TAB: index: select needs the tab's index")
            return await session.act(pb.Action(switch_tab=pb.SwitchTabAction(tab_id=open_tabs[index].tab_id)))
        tab_id = open_tabs[index].tab_id if index is not None else ""
        return await session.act(pb.Action(close_tab=pb.CloseTabAction(tab_id=tab_id)))

    return server


app = typer.Typer(add_completion=False, help="MCP browser tools, a webenv farm session per client (stdio or HTTP).")


@app.command()
def main(
    browser: str = typer.Option("", help="The farm's (or world model's) EnvironmentService (default: "
                                         "WEBENV_BROWSER_ADDR, else the running `webenv up`'s, else localhost:50051)."),
    sites: str = typer.Option("", help="TaskService, for --task-id (default: as --browser, WEBENV_SITES_ADDR ...)."),
    task_id: str = typer.Option("", help="A catalog task to open (its setup, its instruction)."),
    start_url: str = typer.Option("", help="A URL to open instead of a task."),
    judge: str = typer.Option("", help="JudgeService: the answer tool grades the task's episode."),
    transport: str = typer.Option("stdio", help="stdio or streamable-http."),
    host: str = typer.Option("127.0.0.1", help="Bind address (streamable-http)."),
    port: int = typer.Option(8765, help="Port (streamable-http); the endpoint is /mcp."),
) -> None:
    """Serve the tools until the client hangs up (stdio) or Ctrl-C (HTTP)."""
    if transport not in ("stdio", "streamable-http"):
        raise typer.BadParameter("stdio or streamable-http", param_hint="--transport")
    browser = address("browser", browser)  # a flag, WEBENV_*_ADDR, the running `webenv up`, the default port
    sites = address("sites", sites) if task_id else sites
    def new_session() -> FarmSession:  # each MCP client's
        return FarmSession(browser, sites=sites, task_id=task_id, start_url=start_url, judge=judge)

    try:
        new_session()  # the arguments are checked now, not at a client's first call
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from None
    server = build_server(new_session)
    if transport == "stdio":
        server.run("stdio")
        return
    import uvicorn
    from webenv.runtime.http import BearerAuth

    # the HTTP endpoint asks for the platform's bearer token (WEBENV_AUTH_TOKEN) as every service does
    app = BearerAuth(server.streamable_http_app(host=host), os.environ.get("WEBENV_AUTH_TOKEN", ""))
    uvicorn.run(app, host=host, port=port, log_level="warning")


if __name__ == "__main__":
    app()

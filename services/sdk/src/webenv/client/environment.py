"""Typed async client of EnvironmentService (the browser farm or the world model, by address).

    async with EnvironmentClient("localhost:50051") as env:
        opened = await env.open(start_url="http://shop-0001.web.test/", formats=["axtree"])
        r = await env.step(opened.session.session_id, 'click(12)')
        forks = await env.fork(opened.session.session_id, 4)   # 4 independent copies, each at step 0
        async with env.stream() as stream:          # many sessions on one bidi stream
            rs = await asyncio.gather(*(stream.step(sid, "noop()") for sid in sids))
        await env.close(opened.session.session_id)

Errors arrive as `webenv.errors.WebenvError` subclasses (code, reason and metadata parsed), and the client
tracks each session's step index so a retried step is answered from the server's cache, never acted twice.

One step rule for both ways of stepping (`step`, and `StepStream.step` on the bidi stream): each request carries
the session's next index; the answer moves it past the index answered. A step that timed out (DEADLINE_EXCEEDED)
moves it too, because the environment counted it (`webenv.envservice`'s one rule for the farm and the world model:
the action may have run, nothing is cached for it, a retry of that index would be STEP_INDEX_MISMATCH) — the error is raised
and the session's next step takes the next index. Any other error leaves the index where it was: the step did
not count, and the same index may be sent again.

Incremental observations (``ObservationSpec.incremental``): the client keeps each session's last whole AXTREE and
MARKDOWN and fills them back into every answer whose observation is edits (``Observation.delta``, kept for an agent
that reads the changes), so callers and every adapter see whole observations (`webenv.delta`). An answer whose base
it does not hold raises `webenv.delta.DeltaBaseLost` (the step counted), and the session's next step asks for a
whole observation.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any

import grpc
from webenv import delta, errors
from webenv.actions import parse_action
from webenv.client.channel import make_channel
from webenv.streams import Multiplexer
from webenv.v1 import common_pb2, environment_pb2, environment_pb2_grpc

__all__ = ["EnvironmentClient", "StepStream", "observation_spec", "open_tabs", "tabs_text"]

_FORMATS = {
    "axtree": common_pb2.OBSERVATION_FORMAT_AXTREE, "html": common_pb2.OBSERVATION_FORMAT_HTML,
    "markdown": common_pb2.OBSERVATION_FORMAT_MARKDOWN, "dom": common_pb2.OBSERVATION_FORMAT_DOM,
    "elements": common_pb2.OBSERVATION_FORMAT_ELEMENTS, "screenshot": common_pb2.OBSERVATION_FORMAT_SCREENSHOT,
}


def observation_spec(formats: Iterable[str | int] = ("axtree",), **screenshot: Any) -> common_pb2.ObservationSpec:
    """An ObservationSpec from format names ("axtree", "screenshot"...) or enum values; keyword arguments
    `width`, `height`, `codec`, `quality`, `set_of_marks` go to the screenshot, `max_text_chars`, `visible_only`,
    `budget_chars`, `budget_tokens`, `tokenizer`, `incremental` and `full_every` to the spec."""
    values = []
    for f in formats:
        if isinstance(f, str):
            if f.lower() not in _FORMATS:
                raise ValueError(f"unknown observation format {f!r}; known: {', '.join(_FORMATS)}")
            values.append(_FORMATS[f.lower()])
        else:
            values.append(int(f))
    spec = common_pb2.ObservationSpec(formats=values)
    spec.max_text_chars = int(screenshot.pop("max_text_chars", 0))
    spec.visible_only = bool(screenshot.pop("visible_only", False))
    spec.budget_chars = int(screenshot.pop("budget_chars", 0))
    spec.budget_tokens = int(screenshot.pop("budget_tokens", 0))
    spec.tokenizer = str(screenshot.pop("tokenizer", ""))
    spec.incremental = bool(screenshot.pop("incremental", False))
    spec.full_every = int(screenshot.pop("full_every", 0))
    if screenshot:
        spec.screenshot.CopyFrom(common_pb2.ScreenshotSpec(**screenshot))
    return spec


def open_tabs(obs: common_pb2.Observation) -> list[dict[str, Any]]:
    """The observation's open tabs in order, each ``{"title", "url", "active"}``: what every adapter shows (an
    environment that lists none, such as a recorded step, is one active tab at the observation's URL)."""
    if not obs.tabs:
        return [{"title": obs.title, "url": obs.url, "active": True}]
    return [{"title": t.title, "url": t.url, "active": t.active or (bool(t.tab_id) and t.tab_id == obs.active_tab_id)}
            for t in obs.tabs]


def tabs_text(tabs: Iterable[Mapping[str, Any]]) -> str:
    """The open tabs (`open_tabs`) as the text adapters show a model, one a line: ``  [1] URL (active) "title"``."""
    return "\n".join(f"  [{i}] {t['url']}{' (active)' if t['active'] else ''} \"{t['title']}\""
                     for i, t in enumerate(tabs))


def _action(action: str | common_pb2.Action) -> common_pb2.Action:
    return parse_action(action) if isinstance(action, str) else action


class EnvironmentClient:
    """Async EnvironmentService client over a grpc.aio channel (created from an address, or given)."""

    def __init__(self, target: str | grpc.aio.Channel, *, timeout: float = 60.0) -> None:
        self._own = isinstance(target, str)
        self.channel = make_channel(target, timeout=timeout) if isinstance(target, str) else target
        self.stub = environment_pb2_grpc.EnvironmentServiceStub(self.channel)
        self._next_index: dict[str, int] = {}
        self._specs: dict[str, common_pb2.ObservationSpec] = {}  # each session's open spec (to ask for a whole one)
        self._rebuilder = delta.Rebuilder()
        self._resync: set[str] = set()  # sessions whose next step asks for a whole observation

    async def __aenter__(self) -> EnvironmentClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close the channel if this client created it."""
        if self._own:
            await self.channel.close()

    async def _call(self, method: Any, request: Any) -> Any:
        try:
            return await method(request)
        except grpc.aio.AioRpcError as exc:
            raise errors.from_rpc_error(exc) from exc

    async def open(
        self,
        *,
        start_url: str = "",
        task: common_pb2.Task | None = None,
        formats: Iterable[str | int] = ("axtree",),
        spec: common_pb2.ObservationSpec | None = None,
        viewport: tuple[int, int] | None = None,
        seed: int = 0,
        lease_seconds: float = 0.0,
        labels: Mapping[str, str] | None = None,
        request_id: str = "",
    ) -> environment_pb2.OpenSessionResponse:
        """Open a session from a start URL or a task."""
        if bool(start_url) == (task is not None):
            raise ValueError("give exactly one of start_url or task")
        req = environment_pb2.OpenSessionRequest(
            request_id=request_id, observation_spec=spec or observation_spec(formats), seed=seed,
            lease_seconds=lease_seconds, labels=dict(labels or {}),
        )
        if task is not None:
            req.task.CopyFrom(task)
        else:
            req.start_url = start_url
        if viewport:
            req.viewport.CopyFrom(common_pb2.Viewport(width=viewport[0], height=viewport[1]))
        resp = await self._call(self.stub.OpenSession, req)
        sid = resp.session.session_id
        self._next_index[sid] = 0
        self._specs[sid] = req.observation_spec
        self._resync.discard(sid)
        self._rebuilder.rebuild(sid, resp.observation, -1)
        return resp

    def step_request(self, session_id: str, action: str | common_pb2.Action,
                     spec: common_pb2.ObservationSpec | None = None, timeout_seconds: float = 0.0
                     ) -> environment_pb2.StepRequest:
        """A StepRequest carrying the session's next step index (unset, no check, for a session this client did not
        open or fork)."""
        req = environment_pb2.StepRequest(session_id=session_id, action=_action(action),
                                          step_index=self._next_index.get(session_id),
                                          timeout_seconds=timeout_seconds)
        if spec is not None:
            req.observation_spec.CopyFrom(spec)
        whole = self._specs.get(session_id) if spec is None else spec
        if session_id in self._resync and whole is not None and whole.incremental:
            req.observation_spec.CopyFrom(whole)
            req.observation_spec.incremental = False  # the base is lost: this step's observation comes whole
        return req

    def _advance(self, session_id: str, index: int) -> None:
        if session_id in self._next_index:
            self._next_index[session_id] = max(self._next_index[session_id], index + 1)

    async def _stepped(self, send: Callable[[environment_pb2.StepRequest], Awaitable[environment_pb2.StepResponse]],
                       req: environment_pb2.StepRequest) -> environment_pb2.StepResponse:
        """Send one step and apply the step rule (the module docstring) to the session's next index."""
        try:
            resp = await send(req)
        except errors.DeadlineExceeded:
            self._advance(req.session_id, req.step_index)  # the environment counted the timed-out step
            raise
        self._advance(req.session_id, resp.step_index)
        try:
            self._rebuilder.rebuild(req.session_id, resp.observation, resp.step_index)
        except delta.DeltaBaseLost:
            self._resync.add(req.session_id)
            raise
        self._resync.discard(req.session_id)
        return resp

    async def step(self, session_id: str, action: str | common_pb2.Action, *,
                   spec: common_pb2.ObservationSpec | None = None, timeout_seconds: float = 0.0
                   ) -> environment_pb2.StepResponse:
        """Apply one action (text in the sdk grammar, or an Action)."""
        req = self.step_request(session_id, action, spec, timeout_seconds)
        return await self._stepped(lambda r: self._call(self.stub.Step, r), req)

    async def close(self, session_id: str, *, capture_evidence: bool = False) -> environment_pb2.CloseSessionResponse:
        """Close a session (optionally capturing site-state evidence first)."""
        self._next_index.pop(session_id, None)
        self._specs.pop(session_id, None)
        self._resync.discard(session_id)
        self._rebuilder.forget(session_id)
        return await self._call(self.stub.CloseSession, environment_pb2.CloseSessionRequest(
            session_id=session_id, capture_evidence=capture_evidence))

    async def fork(self, session_id: str, count: int = 1, *, lease_seconds: float = 0.0,
                   labels: Mapping[str, str] | None = None, request_id: str = "") -> environment_pb2.ForkSessionResponse:
        """Copy an open session into `count` new, independent sessions (each as `open` returns it, at step 0)."""
        resp = await self._call(self.stub.ForkSession, environment_pb2.ForkSessionRequest(
            session_id=session_id, count=count, lease_seconds=lease_seconds, labels=dict(labels or {}),
            request_id=request_id))
        for r in resp.sessions:
            self._next_index.setdefault(r.session.session_id, 0)
            self._rebuilder.rebuild(r.session.session_id, r.observation, -1)
        return resp

    async def get(self, session_id: str) -> environment_pb2.Session:
        resp = await self._call(self.stub.GetSession, environment_pb2.GetSessionRequest(session_id=session_id))
        return resp.session

    async def renew(self, session_id: str, lease_seconds: float = 0.0) -> environment_pb2.Session:
        resp = await self._call(self.stub.RenewLease, environment_pb2.RenewLeaseRequest(
            session_id=session_id, lease_seconds=lease_seconds))
        return resp.session

    def stream(self) -> StepStream:
        """One StepStream for many sessions: `await stream.step(sid, action)` from many tasks at once."""
        return StepStream(self)


class StepStream:
    """Multiplexes steps of many sessions on one bidi StepStream (`webenv.streams.Multiplexer`); answers are matched
    by tag, so each `step()` returns as soon as its own answer arrives (completion order). A step still waiting
    when the stream ends or fails raises `webenv.streams.StreamBroken` (a WebenvError)."""

    def __init__(self, client: EnvironmentClient) -> None:
        self.client = client
        self._mux = Multiplexer("StepStream", client.stub.StepStream,
                                lambda tag, step: environment_pb2.StepStreamRequest(tag=tag, step=step))

    async def __aenter__(self) -> StepStream:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose(grace=30)

    async def aclose(self, grace: float = 0.0) -> None:
        """Half-close the stream; wait up to `grace` seconds for the answers still due, then cancel it."""
        await self._mux.close(grace=grace)

    async def step(self, session_id: str, action: str | common_pb2.Action, *,
                   spec: common_pb2.ObservationSpec | None = None, timeout_seconds: float = 0.0,
                   deadline: float | None = None) -> environment_pb2.StepResponse:
        """Send one step on the stream and wait for its answer (`deadline` seconds at most: TimeoutError, the
        session's next index left where it was; a stream item has no RPC deadline of its own)."""
        req = self.client.step_request(session_id, action, spec, timeout_seconds)
        return await self.client._stepped(lambda r: self._mux.request(r, deadline=deadline), req)

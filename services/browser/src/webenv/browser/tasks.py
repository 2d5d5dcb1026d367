"""Task adapters: task-specific setup at open, env-side reward after each step, evidence at close.

- `TaskAdapter` (the base): a bare start URL (also YAML/rubric/real-web tasks: they are judged elsewhere).
- `MiniWobAdapter`: the MiniWoB++ page protocol (its core.js): open the task page, wait for
  `#sync-task-cover` (the page's `window.onload` runs `core.startEpisode()`, which creates the click
  canvas and the cover: resetting before it fails in `core.canvasClear`, and an onload that comes
  after the reset would cover the task again), end any episode, seed, `core.setDataMode("train")`,
  `core.startEpisodeReal()`, wait for `WOB_TASK_READY`; the goal is
  `core.getUtterance()`; after each step the reward globals are read in the observation's own JS
  pass (no extra round trip).
- `BenchmarkAdapter`: a published benchmark's task (WebArena, WebArena-Verified, ...): its sites' turn, reset and
  login (`webenv.browser.sitestate`, taken by `prepare` before the open waits for a slot), its `viewport_size` and
  `geolocation`, and every start URL of a multi-tab start (" |AND| ") in its own tab, the last one active.
- `SyntheticAdapter`: the synthetic web. The site session id (the `site_session` cookie) is the
  label `site_session` when given (a fork) or the farm session id; the site state is reset through
  TaskService at open (unless forked) and read back at close as evidence.

`TaskAdapter.fork` makes the adapter of a ForkSession copy (fork.py): the base and synthetic adapters copy
themselves (the synthetic one forks the site state through TaskService.ForkSiteState first); a MiniWoB episode
lives in the page's JS, which no fork can copy, so it refuses.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import grpc
from playwright.async_api import Error as PlaywrightError
from webenv import errors
from webenv.browser.actions import goto
from webenv.browser.session import BrowserSession
from webenv.browser.sitestate import Held, SiteStates, apply_storage
from webenv.envcontract import web_url_problem
from webenv.v1 import common_pb2, task_pb2, task_pb2_grpc

# A new MiniWoB++ episode on a task page: waits (up to waitMs) for the page's load event first, when core.js
# makes the episode display (the sync cover), then seeds and starts the episode. One evaluate in the page's own
# world: Playwright's wait_for_selector first injects its selector engine into a new document, which cost
# ~40 ms per OpenSession (measured: goto 72 ms, wait_for_selector 44, this reset 17, first observation 25).
MINIWOB_RESET_JS = """
async ([seed, waitMs]) => {
  if (document.readyState !== 'complete') {
    await Promise.race([new Promise((r) => window.addEventListener('load', r, {once: true})),
      new Promise((r) => setTimeout(r, waitMs))]);
  }
  if (typeof core === 'undefined') return {error: 'core.js is not loaded on this page'};
  if (!document.getElementById('sync-task-cover')) {
    return {error: 'the page never became ready (no #sync-task-cover within ' + waitMs + ' ms)'};
  }
  try { core.endEpisode(0); } catch (e) {}
  if (seed !== null && Math.seedrandom) Math.seedrandom(seed);
  core.setDataMode('train');
  core.startEpisodeReal();
  for (let i = 0; i < 100 && !window.WOB_TASK_READY; i++) await new Promise((r) => setTimeout(r, 20));
  if (!window.WOB_TASK_READY) return {error: 'WOB_TASK_READY never became true'};
  const u = core.getUtterance();
  return {utterance: typeof u === 'string' ? u : (u && u.utterance) || ''};
}
"""


@dataclass
class StepReward:
    """Env-side reward after a step."""

    reward: float = 0.0
    raw_reward: float = 0.0
    done: bool = False
    reason: str = ""


class TaskAdapter:
    """Base adapter: go to the start URL; no env-side reward; no evidence."""

    miniwob = False
    # May its start page be loaded before the session begins (BrowserPool priming)? Only where loading it
    # earlier changes nothing: a static page whose episode starts with the adapter's setup (MiniWoB), not a
    # page whose server state the setup makes first (synthetic tasks) nor an arbitrary URL.
    primable = False
    site_session = ""  # the `site_session` cookie value of a synthetic task's server-side state

    viewport: tuple[int, int] | None = None  # the task's window size, when OpenSession's viewport is unset

    def __init__(self, task: common_pb2.Task | None, start_url: str) -> None:
        self.task = task
        self.start_url = start_url

    async def prepare(self) -> None:
        """Before the open takes a slot: what the task needs of the world outside the session (its sites' turn)."""
        return None

    async def setup(self, session: BrowserSession, seed: int, nav_timeout_ms: int) -> str:
        """Prepare the session; returns the instruction for the agent."""
        if self.start_url:
            err = await goto(session, session.page, self.start_url, nav_timeout_ms)
            if err:
                raise errors.FailedPrecondition(f"start URL could not be opened: {err}", reason="START_URL_FAILED",
                                                metadata={"url": self.start_url[:200]})
        return self.task.instruction if self.task else ""

    def reward(self, raw: dict[str, Any]) -> StepReward:
        return StepReward()

    async def evidence(self, session: BrowserSession) -> str:
        return ""

    async def close(self) -> None:
        return None

    async def fork(self, site_session: str, request_id: str) -> TaskAdapter:
        """The adapter of a copy of this session (ForkSession); `site_session` names the copy's site state."""
        return TaskAdapter(self.task, self.start_url)


class MiniWobAdapter(TaskAdapter):
    """MiniWoB++ protocol; reward from the page's globals."""

    miniwob = True
    primable = True

    async def setup(self, session: BrowserSession, seed: int, nav_timeout_ms: int) -> str:
        if session.slot.primed_url != self.start_url:  # a primed context has the page loaded already
            await super().setup(session, seed, nav_timeout_ms)
        try:  # DOMContentLoaded is not enough: the episode display (click canvas, sync cover) is made on load
            res = await session.page.evaluate(MINIWOB_RESET_JS, [seed if seed else None, nav_timeout_ms])
        except PlaywrightError as exc:
            raise errors.FailedPrecondition(f"MiniWoB reset failed: {exc}", reason="MINIWOB_RESET_FAILED") from exc
        if res.get("error"):
            raise errors.FailedPrecondition(f"MiniWoB reset failed: {res['error']}", reason="MINIWOB_RESET_FAILED",
                                            metadata={"url": self.start_url[:200]})
        return str(res.get("utterance") or (self.task.instruction if self.task else ""))

    async def fork(self, site_session: str, request_id: str) -> TaskAdapter:
        raise errors.FailedPrecondition(
            "a MiniWoB episode lives in the page's JavaScript, which a fork cannot copy: open sessions with the "
            "same task and seed and replay the actions instead", reason="FORK_UNSUPPORTED",
            metadata={"task_id": self.task.task_id if self.task else ""})

    def reward(self, raw: dict[str, Any]) -> StepReward:
        m = raw.get("miniwob") or {}
        return StepReward(reward=float(m.get("reward", 0.0)), raw_reward=float(m.get("raw_reward", 0.0)),
                          done=bool(m.get("done")), reason=str(m.get("reason", "")))


class SyntheticAdapter(TaskAdapter):
    """Synthetic web: site state reset/read through TaskService."""

    def __init__(self, task: common_pb2.Task, start_url: str, sites_addr: str) -> None:
        super().__init__(task, start_url)
        self.sites_addr = sites_addr
        self.site = task.site or (urlsplit(start_url).hostname or "")
        self.site_session = ""
        self._channel: grpc.aio.Channel | None = None

    def _stub(self) -> task_pb2_grpc.TaskServiceStub:
        if self._channel is None:
            from webenv.client import make_channel

            self._channel = make_channel(self.sites_addr, timeout=10.0)
        return task_pb2_grpc.TaskServiceStub(self._channel)

    async def setup(self, session: BrowserSession, seed: int, nav_timeout_ms: int) -> str:
        forked = session.labels.get("site_session", "")
        self.site_session = forked or session.session_id
        if not forked:
            try:
                await self._stub().ResetSiteState(task_pb2.ResetSiteStateRequest(
                    site_session=self.site_session, site=self.site))
            except grpc.aio.AioRpcError as exc:
                raise errors.Unavailable(f"TaskService at {self.sites_addr} could not reset site state: "
                                         f"{exc.code().name}: {exc.details()}", reason="SITES_UNAVAILABLE",
                                         metadata={"sites_addr": self.sites_addr}) from exc
        parts = urlsplit(self.start_url)
        host = self.site or parts.hostname or ""
        if host:
            await session.slot.context.add_cookies([{
                "name": "site_session", "value": self.site_session, "domain": host, "path": "/",
            }])
        return await super().setup(session, seed, nav_timeout_ms)

    async def evidence(self, session: BrowserSession) -> str:
        """The session's site state from TaskService. Reading it failing is the infrastructure's failure, never the
        agent's: a typed error (UNAVAILABLE ``SITES_UNAVAILABLE``, INTERNAL ``SITE_STATE_GONE`` when the sites
        service lost it), so CloseSession fails and the episode is interrupted, never graded on a missing state."""
        try:
            res = await self._stub().GetSiteState(task_pb2.GetSiteStateRequest(
                site_session=self.site_session, site=self.site))
        except grpc.aio.AioRpcError as exc:
            if exc.code() == grpc.StatusCode.NOT_FOUND:
                raise errors.Internal(f"the site state of this session ({self.site_session}) is gone from "
                                      f"TaskService at {self.sites_addr}: {exc.details()}", reason="SITE_STATE_GONE",
                                      metadata={"site_session": self.site_session}) from exc
            raise errors.Unavailable(f"TaskService at {self.sites_addr} could not read the site state: "
                                     f"{exc.code().name}: {exc.details()}", reason="SITES_UNAVAILABLE",
                                     metadata={"sites_addr": self.sites_addr}) from exc
        return res.state_json

    async def fork(self, site_session: str, request_id: str) -> TaskAdapter:
        """Copy this session's site state (every site of it) into `site_session` through TaskService."""
        try:
            await self._stub().ForkSiteState(task_pb2.ForkSiteStateRequest(
                request_id=request_id, site_session=self.site_session, new_site_session=site_session))
        except grpc.aio.AioRpcError as exc:
            if exc.code() == grpc.StatusCode.NOT_FOUND:
                raise errors.FailedPrecondition(f"the site state of this session ({self.site_session}) is gone "
                                                f"from TaskService at {self.sites_addr}: {exc.details()}",
                                                reason="SITE_STATE_GONE",
                                                metadata={"site_session": self.site_session}) from exc
            raise errors.Unavailable(f"TaskService at {self.sites_addr} could not fork site state: "
                                     f"{exc.code().name}: {exc.details()}", reason="SITES_UNAVAILABLE",
                                     metadata={"sites_addr": self.sites_addr}) from exc
        child = SyntheticAdapter(self.task, self.start_url, self.sites_addr)  # type: ignore[arg-type]
        child.site_session = site_session
        return child

    async def close(self) -> None:
        if self._channel is not None:
            await asyncio.shield(self._channel.close())


def _meta_json(task: common_pb2.Task, key: str) -> Any:
    raw = task.metadata.get(key, "")
    if not raw:
        return None
    try:
        return json.loads(raw)
    except json.JSONDecodeError as exc:
        raise errors.InvalidArgument(f"task.metadata[{key}]: not JSON: {exc}", reason="BAD_TASK",
                                     metadata={"field": f"task.metadata[{key}]"}) from exc


class BenchmarkAdapter(TaskAdapter):
    """A benchmark task: site turns, resets and logins (sitestate.py), viewport, geolocation, multi-tab starts."""

    def __init__(self, task: common_pb2.Task, start_url: str, site_state: SiteStates) -> None:
        super().__init__(task, start_url)
        self.site_state = site_state
        self.held: Held | None = None
        urls = _meta_json(task, "start_urls")
        if urls is not None and (not isinstance(urls, list) or not all(isinstance(u, str) and u for u in urls)):
            raise errors.InvalidArgument("task.metadata[start_urls]: expected a JSON list of URLs", reason="BAD_TASK",
                                         metadata={"field": "task.metadata[start_urls]"})
        self.more_urls: list[str] = [u for u in (urls or [])[1:]]
        for i, u in enumerate(self.more_urls, 1):
            problem = web_url_problem(u)
            if problem:
                raise errors.InvalidArgument(f"task.metadata[start_urls][{i}]: {u[:200]!r} {problem}",
                                             reason="BAD_START", metadata={"field": f"task.metadata[start_urls][{i}]"})
        vp = _meta_json(task, "viewport_size")
        if vp is not None:
            w, h = (vp.get("width"), vp.get("height")) if isinstance(vp, dict) else (None, None)
            if not all(isinstance(x, int) and not isinstance(x, bool) and 100 <= x <= 8192 for x in (w, h)):
                raise errors.InvalidArgument("task.metadata[viewport_size]: expected {\"width\": w, \"height\": h}, "
                                             "each within 100..8192", reason="BAD_VIEWPORT",
                                             metadata={"field": "task.metadata[viewport_size]"})
            self.viewport = (w, h)  # type: ignore[assignment]
        geo = _meta_json(task, "geolocation")
        if geo is not None:
            ok = isinstance(geo, dict) and all(isinstance(geo.get(k), (int, float)) and not isinstance(geo.get(k), bool)
                                               for k in ("latitude", "longitude"))
            if not ok or not (-90 <= geo["latitude"] <= 90 and -180 <= geo["longitude"] <= 180):
                raise errors.InvalidArgument("task.metadata[geolocation]: expected {\"latitude\": -90..90, "
                                             "\"longitude\": -180..180}", reason="BAD_TASK",
                                             metadata={"field": "task.metadata[geolocation]"})
        self.geolocation = {k: float(geo[k]) for k in ("latitude", "longitude", "accuracy") if k in geo} if geo else None

    async def prepare(self) -> None:
        self.held = await self.site_state.enter(self.task)  # type: ignore[arg-type]

    async def setup(self, session: BrowserSession, seed: int, nav_timeout_ms: int) -> str:
        context = session.slot.context
        if self.held is not None and self.held.storage:
            await apply_storage(context, self.held.storage)
        if self.geolocation is not None:
            await context.grant_permissions(["geolocation"])
            await context.set_geolocation(self.geolocation)
        instruction = await super().setup(session, seed, nav_timeout_ms)
        for i, url in enumerate(self.more_urls, 1):  # a multi-tab start: each URL in its own tab, the last active
            tab = await session.new_tab()
            err = await goto(session, tab.page, url, nav_timeout_ms)
            if err:
                raise errors.FailedPrecondition(f"start URL {i} could not be opened: {err}", reason="START_URL_FAILED",
                                                metadata={"url": url[:200]})
        return instruction

    async def fork(self, site_session: str, request_id: str) -> TaskAdapter:
        return TaskAdapter(self.task, self.start_url)  # a copy takes no turn, login or reset of its own

    async def close(self) -> None:
        if self.held is not None:
            held, self.held = self.held, None
            await held.release()


def adapter_for(task: common_pb2.Task | None, start_url: str, sites_addr: str,
                site_state: SiteStates | None = None) -> TaskAdapter:
    """Choose the adapter for an OpenSession request."""
    if task is None:
        return TaskAdapter(None, start_url)
    url = task.start_url
    if task.source == common_pb2.TASK_SOURCE_MINIWOB:
        name = task.metadata.get("miniwob_task", "")
        if not url and name:
            url = f"http://miniwob.web.test/miniwob/{name}.html"
        if not url:
            raise errors.InvalidArgument("task.start_url or task.metadata[miniwob_task] is required for MiniWoB",
                                         reason="BAD_TASK", metadata={"field": "task.start_url"})
        return MiniWobAdapter(task, url)
    if not url:
        raise errors.InvalidArgument("task.start_url is required", reason="BAD_TASK",
                                     metadata={"field": "task.start_url"})
    if task.source == common_pb2.TASK_SOURCE_SYNTHETIC:
        return SyntheticAdapter(task, url, sites_addr)
    if task.source == common_pb2.TASK_SOURCE_BENCHMARK and site_state is not None:
        return BenchmarkAdapter(task, url, site_state)
    return TaskAdapter(task, url)

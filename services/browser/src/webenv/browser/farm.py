"""The farm: the RPCs' side of the browser farm, a thin facade over its two parts.

- `registry.SessionRegistry`: sessions by id, idempotency keys, leases and the reaper, draining, capacity, and
  every hand-back of a context to the pool;
- `driver.PageDriver`: one step on a session's page, perform -> settle -> observe (the package `settle/` holds
  the settle rule), returning a typed `StepResult`;
- `fork.Forker` (ForkSession) builds its copies through the same two parts.

The farm is the EnvironmentService backend (`webenv.envservice.EnvBackend`): the sdk's `EnvironmentService`
checks requests by the contract's rules, looks sessions up, answers repeated request ids and step indexes from
cache, holds the session's lock and bounds a step by its deadline. What is left here is the farm's own: its
OpenSession checks (viewport, start URL, URL guard), the order of an open (admission, task setup, first
observation), what a failed or timed-out step means for the session, rewards, and building the responses.

A step past its deadline (page JS in an infinite loop, alert storm) cannot be interrupted inside the renderer,
so the session gets a fresh context (the hung renderer is disposed with the old one), the step is answered
DEADLINE_EXCEEDED, and the reset is reported in the next observation's last_action_error. Other sessions live in
other renderer processes and are not blocked.
"""

from __future__ import annotations

import asyncio
import socket
import time

from playwright.async_api import Error as PlaywrightError
from webenv import errors
from webenv.browser import metrics
from webenv.browser.config import Settings
from webenv.browser.driver import PageDriver, StepResult
from webenv.browser.egress import EgressPolicy, EgressProxy, split_addr
from webenv.browser.fork import Forker, Snapshot
from webenv.browser.guard import BlockedUrl, UrlGuard
from webenv.browser.observe import ObserveSettings
from webenv.browser.pool import SITES_HOSTS, BrowserPool
from webenv.browser.queues import Queues
from webenv.browser.registry import SessionRegistry
from webenv.browser.session import BrowserSession
from webenv.browser.settle.waits import Settler
from webenv.browser.sitestate import SiteStates
from webenv.browser.tasks import TaskAdapter, adapter_for
from webenv.envcontract import validate_screenshot_spec, web_url_problem
from webenv.v1 import browser_pb2, common_pb2, environment_pb2


class Farm:
    """Owns the guards, the pool, the registry and the driver: the EnvironmentService backend (`EnvBackend`, served
    by the sdk's `EnvironmentService`) and what BrowserFarmService's servicer maps its RPCs to."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.node = settings.node_name or socket.gethostname()
        self.guard = UrlGuard(allow_hosts=settings.allow_host_list(), enabled=settings.farm_url_guard)
        self.egress: EgressProxy | None = None
        if settings.farm_url_guard and settings.farm_egress_proxy:
            self.egress = EgressProxy(EgressPolicy(self.guard, split_addr(settings.farm_sites_http_addr),
                                                   mapped=(SITES_HOSTS,)))
        self.pool = BrowserPool(
            chromium_path=settings.farm_chromium_path, browsers=settings.farm_browsers, warm=settings.farm_warm_contexts,
            contexts_per_browser=settings.farm_contexts_per_browser, sites_http_addr=settings.farm_sites_http_addr,
            guard=self.guard, viewport=(settings.farm_viewport_width, settings.farm_viewport_height),
            headless=settings.farm_headless, extra_args=settings.farm_extra_args, egress=self.egress,
            on_crash=lambda handle: self.registry.on_crash(handle),
            busy=self.busy, primed=settings.farm_primed_contexts,
        )
        self.registry = SessionRegistry(self.pool, node=self.node, max_sessions=settings.farm_max_sessions,
                                        reaper_interval_s=settings.farm_reaper_interval_seconds)
        self.queues = Queues.create(settings.farm_queue_open, settings.farm_queue_act, settings.farm_queue_observe)
        self.driver = PageDriver(
            self.queues,
            ObserveSettings(quiet_ms=settings.farm_settle_quiet_ms, settle_max_ms=settings.farm_settle_max_ms,
                            max_chars=settings.farm_max_text_chars, nav_timeout_ms=settings.farm_nav_timeout_ms),
            Settler(settings.farm_nav_timeout_ms, settings.farm_network_idle_ms),
            nav_timeout_ms=settings.farm_nav_timeout_ms, capture_concurrency=settings.farm_capture_concurrency,
            node=self.node)
        self.forker = Forker(settings, self.registry, self.queues, self.pool, self.driver)
        self.site_state = SiteStates()  # benchmark sites' logins, resets and turns (WEBENV_BENCHMARK_SITES)

    def busy(self) -> bool:
        """Is a session opening or stepping? The warm pool's refill waits for a moment when none is (for 1 s
        at most): a new context's renderer costs the browser ~50-100 ms of CPU, and a step beside it took
        twice as long (MiniWoB click-test step after an open: 65-73 ms beside the refill, 33 ms without)."""
        return self.registry.opening > 0 or any(q.running or q.waiting for q in (self.queues.act, self.queues.observe))

    async def start(self) -> None:
        if self.egress is not None:
            await self.egress.start_thread()
        await self.pool.start()
        self.registry.start()

    async def close(self) -> None:
        await self.registry.close()
        await self.pool.close()
        if self.egress is not None:
            await self.egress.close()

    # -- EnvironmentService backend (webenv.envservice.EnvBackend) ----------------------------------------
    @property
    def table(self) -> SessionRegistry:
        return self.registry

    @property
    def max_lease_seconds(self) -> float:
        return self.settings.farm_max_lease_seconds

    @property
    def max_wait_ms(self) -> int:
        return self.settings.farm_max_wait_ms

    @property
    def step_timeout_seconds(self) -> float:
        return self.settings.farm_step_timeout_seconds

    def check_open(self, req: environment_pb2.OpenSessionRequest) -> None:
        if req.viewport.width or req.viewport.height:
            if not (100 <= req.viewport.width <= 8192 and 100 <= req.viewport.height <= 8192):
                raise errors.InvalidArgument("viewport: width and height must both be within 100..8192",
                                             reason="BAD_VIEWPORT", metadata={"field": "viewport"})

    async def open(self, req: environment_pb2.OpenSessionRequest) -> environment_pb2.OpenSessionResponse:
        t0 = time.perf_counter()
        start = req.WhichOneof("start")
        task = req.task if start == "task" else None
        adapter = adapter_for(task, req.start_url if start == "start_url" else "", self.settings.sites_addr,
                              self.site_state)
        if adapter.start_url:
            # an http(s) URL no browser can open is a bad request, with the guard off too (other schemes: the guard's)
            problem = web_url_problem(adapter.start_url)
            if problem and adapter.start_url.strip().lower().startswith(("http:", "https:")):
                field = "start_url" if start == "start_url" else "task.start_url"
                raise errors.InvalidArgument(f"{field}: {adapter.start_url[:200]!r} {problem}", reason="BAD_START",
                                             metadata={"field": field})
            try:
                await self.guard.acheck(adapter.start_url, top_level=True)
            except BlockedUrl as exc:
                raise errors.PermissionDenied(f"start URL refused by the URL guard: {exc}", reason="URL_BLOCKED",
                                              metadata={"url": adapter.start_url[:200]}) from exc
        # a benchmark task's turn on its sites, their resets and logins (sitestate.py): waited for before admission,
        # so an episode waiting for its site holds no open slot; given back when the session ends
        await adapter.prepare()
        try:
            return await self._open(req, task, adapter, t0)
        except BaseException:
            await adapter.close()
            raise

    async def _open(self, req: environment_pb2.OpenSessionRequest, task: common_pb2.Task | None, adapter: TaskAdapter,
                    t0: float) -> environment_pb2.OpenSessionResponse:
        async with self.registry.admission():
            session: BrowserSession | None = None
            try:
                async with self.queues.open.slot():
                    vp = (req.viewport.width, req.viewport.height) if req.viewport.width else adapter.viewport
                    session = await self.registry.create(
                        vp, prime_url=adapter.start_url if adapter.primable else "", guard=self.guard, spec=req.observation_spec,
                        lease_seconds=req.lease_seconds or self.settings.farm_lease_seconds,
                        task_id=task.task_id if task else "", labels=dict(req.labels), adapter=adapter)
                    try:
                        session.instruction = await asyncio.wait_for(
                            adapter.setup(session, req.seed, self.settings.farm_nav_timeout_ms),
                            self.settings.farm_open_timeout_seconds)
                    except TimeoutError as exc:
                        raise errors.DeadlineExceeded("opening the start page took longer than "
                                                      f"{self.settings.farm_open_timeout_seconds}s",
                                                      reason="OPEN_TIMEOUT") from exc
                    await self.driver.settle_start(session)
                obs = await self.driver.first_observation(session)
                session.renew()
                me = asyncio.current_task()
                if me is not None and me.cancelling():
                    # the caller is gone, but a wait inside the open swallowed its cancellation (Python 3.11's
                    # wait_for, when what it waits for ends as the cancel comes): the open must not leave a session
                    raise asyncio.CancelledError
            except BaseException:
                if session is not None:
                    await self.registry.end(session, environment_pb2.SESSION_STATE_CLOSED)
                raise
            finally:
                if session is not None:
                    session.lock.release()
        dt = time.perf_counter() - t0
        metrics.OPEN_SECONDS.observe(dt)
        return environment_pb2.OpenSessionResponse(session=session.to_proto(), observation=obs,
                                                   instruction=session.instruction, open_seconds=dt)

    async def reopen(self, s: BrowserSession) -> environment_pb2.OpenSessionResponse:
        """The answer to a repeated open (or fork) of a session that is still open: its page as it is now."""
        async with s.lock:
            obs, _ = await self.driver.observe(s, s.spec, settle=False)
        return environment_pb2.OpenSessionResponse(session=s.to_proto(), observation=obs, instruction=s.instruction)

    async def step(self, s: BrowserSession, req: environment_pb2.StepRequest, kind: str) -> environment_pb2.StepResponse:
        spec = req.observation_spec if req.HasField("observation_spec") else s.spec
        t0 = time.perf_counter()
        try:
            result = await self.driver.step(s, req.action, kind, spec)
        except PlaywrightError as exc:
            if not s.slot.handle.alive:  # the browser died under this step
                await self.registry.end(s, environment_pb2.SESSION_STATE_CRASHED)
                raise errors.FailedPrecondition(f"session {s.session_id} was lost: its browser crashed",
                                                reason="SESSION_CRASHED",
                                                metadata={"session_id": s.session_id}) from exc
            raise errors.Internal(f"page error during {kind}: {str(exc).splitlines()[0][:300]}",
                                  reason="PAGE_ERROR", metadata={"session_id": s.session_id}) from exc
        return self._answer(s, result, time.perf_counter() - t0)

    async def step_timed_out(self, s: BrowserSession, kind: str, seconds: float) -> str:
        """The renderer may be hung (it cannot be interrupted): the session gets a fresh context (the step counts:
        the service's rule)."""
        metrics.STEP_TIMEOUTS.inc()
        await self.registry.reset_context(s, f"step {s.step_count} exceeded its {seconds:.3g}s deadline; "
                                             "the session's pages were reset to about:blank")
        return "its pages were reset"

    def _answer(self, s: BrowserSession, result: StepResult, total: float) -> environment_pb2.StepResponse:
        """The StepResponse of a step: the task's reward, the timings (also as metrics)."""
        rw = s.adapter.reward(result.raw) if s.adapter else None
        done = result.outcome.done or bool(rw and rw.done)
        if rw is not None and s.adapter and s.adapter.miniwob:
            s.env_reward = rw.raw_reward
        t = result.timings
        timings = common_pb2.StepTimings(queue_seconds=t.queue, action_seconds=t.action, settle_seconds=t.settle,
                                         observe_seconds=t.observe, total_seconds=total)
        for name, v in (("queue", t.queue), ("action", t.action), ("settle", t.settle), ("observe", t.observe),
                        ("total", total)):
            metrics.STEP_SECONDS.labels(name).observe(v)
        s.done = s.done or done
        return environment_pb2.StepResponse(
            session_id=s.session_id, step_index=s.step_count, observation=result.observation,
            reward=rw.reward if rw else 0.0, raw_reward=rw.raw_reward if rw else 0.0, done=done,
            reward_reason=rw.reason if rw else "", timings=timings, target_element_id=result.outcome.target_element_id,
        )

    async def fork_capture(self, parent: BrowserSession, req: environment_pb2.ForkSessionRequest) -> Snapshot:
        """ForkSession, under the parent's lock: its browser and site state (`webenv.browser.fork`)."""
        return await self.forker.capture(parent, req)

    async def fork_copies(self, snap: Snapshot, req: environment_pb2.ForkSessionRequest
                          ) -> list[environment_pb2.OpenSessionResponse]:
        return await self.forker.copies(snap, req)

    async def evidence(self, s: BrowserSession) -> str:
        """The task's site state at the close (synthetic sites, MiniWoB), '' without a task adapter."""
        return await s.adapter.evidence(s) if s.adapter else ""

    def network_trace(self, s: BrowserSession) -> list[common_pb2.NetworkEvent]:
        """The requests the session's pages made (`webenv.browser.nettrace`), oldest first."""
        return list(s.trace.events)

    # -- BrowserFarmService ----------------------------------------------------------------------
    def list_sessions(self, req: browser_pb2.ListSessionsRequest) -> browser_pb2.ListSessionsResponse:
        return self.registry.list(req)

    def capacity(self) -> browser_pb2.GetCapacityResponse:
        return browser_pb2.GetCapacityResponse(
            node=self.node, max_sessions=self.settings.farm_max_sessions, active_sessions=len(self.registry.sessions),
            pooled_contexts=self.pool.pooled, browsers=self.pool.browsers_alive(),
            browser_restarts=self.pool.restarts, draining=self.registry.draining,
            queues=[browser_pb2.QueueStats(name=q.name, limit=q.limit, running=q.running, waiting=q.waiting)
                    for q in self.queues.all()],
        )

    async def capture(self, req: browser_pb2.CaptureScreenshotRequest) -> browser_pb2.CaptureScreenshotResponse:
        """A preview of a session's active tab, beside its steps: no session lock, no step, no lease renewal.

        A capture may land mid-action (the page as it is at that instant) and may fail while a navigation swaps
        the document (UNAVAILABLE: try the next frame). Bounded per node, refused rather than queued, so viewers
        never take Chromium time from agents beyond WEBENV_FARM_CAPTURE_CONCURRENCY captures at once.
        """
        s = self.registry.get(req.session_id)
        spec = req.screenshot if req.HasField("screenshot") else common_pb2.ScreenshotSpec(
            codec=common_pb2.IMAGE_CODEC_JPEG, quality=60)
        validate_screenshot_spec(spec, "screenshot")
        if spec.set_of_marks:
            raise errors.InvalidArgument("screenshot.set_of_marks: not available for previews",
                                         reason="BAD_OBSERVATION_SPEC", metadata={"field": "screenshot.set_of_marks"})
        shot, url = await self.driver.capture(s, spec)
        return browser_pb2.CaptureScreenshotResponse(session=s.to_proto(), screenshot=shot, url=url)

    def drain(self, req: browser_pb2.DrainRequest) -> browser_pb2.DrainResponse:
        self.registry.draining = req.draining
        return browser_pb2.DrainResponse(capacity=self.capacity())

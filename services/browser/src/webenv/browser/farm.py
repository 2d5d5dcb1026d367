"""The farm: sessions on top of the browser pool, with queues, limits, leases and deadlines.

Settle rule after every action (bounded by the caps below and by the step deadline, no fixed sleeps):
0. a navigation of the active tab that the page itself started with the action (counted in the page,
   synchronously, by pool.NAV_WATCH_JS: link, form submission, location change), or a main-frame request
   of the active tab, or an evaluate destroyed by a commit: wait until the tab's *new* document has fired
   DOMContentLoaded (cap: WEBENV_FARM_NAV_TIMEOUT_MS); give up early when no request comes within
   NAV_START_GRACE_S (a navigation cancelled after all) or when the request ended without a new document
   for NAV_END_GRACE_S (204, download, refused);
1. main-frame navigations started by the action: wait until their requests finish or fail, then
   for DOMContentLoaded (cap: WEBENV_FARM_NAV_TIMEOUT_MS);
2. network: wait until no request of the context is in flight (cap: WEBENV_FARM_NETWORK_IDLE_MS);
3. DOM: inside the observation's JS pass (after one rendered frame for scroll-like actions), wait until no mutation for WEBENV_FARM_SETTLE_QUIET_MS
   (cap: WEBENV_FARM_SETTLE_MAX_MS); a navigation that starts during the pass (seen by the network hooks
   or counted in the page) is waited for as in 0. and the page observed again; an evaluate interrupted
   by a navigation (element resolution, the observation pass) waits for the new document's
   DOMContentLoaded and runs once more there.

A step past its deadline (page JS in an infinite loop, alert storm) cannot be interrupted inside
the renderer, so the farm gives the session a fresh context (the hung renderer is disposed with
the old one), answers DEADLINE_EXCEEDED, and reports the reset in the next observation's
last_action_error. Other sessions live in other renderer processes and are not blocked.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import time
import uuid
from collections import OrderedDict

from playwright.async_api import Error as PlaywrightError
from webenv import errors
from webenv.actions import ACTION_KINDS
from webenv.browser import metrics
from webenv.browser.actions import perform
from webenv.browser.config import Settings
from webenv.browser.egress import EgressPolicy, EgressProxy, split_addr
from webenv.browser.guard import BlockedUrl, UrlGuard
from webenv.browser.observe import ObserveSettings, interrupted_by_navigation, observe, screenshot
from webenv.browser.pool import NAV_PENDING_JS, SITES_HOSTS, BrowserHandle, BrowserPool
from webenv.browser.queues import Queues
from webenv.browser.session import BrowserSession, Tab
from webenv.browser.tasks import adapter_for
from webenv.envcontract import is_retry, validate_action, validate_lease, validate_screenshot_spec
from webenv.envcontract import validate_observation_spec as validate_spec
from webenv.v1 import browser_pb2, common_pb2, environment_pb2

log = logging.getLogger(__name__)
_CLOSED_KEEP = 2000
NAV_START_GRACE_S = 2.0  # page said "navigating" but no request came: the navigation was cancelled
NAV_END_GRACE_S = 1.0  # the request ended but no new document came: 204, download, refused


class Farm:
    """Owns the pool, the sessions and the background reaper."""

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
            on_crash=self._on_crash,
            busy=lambda: self.opening > 0,
        )
        self.queues = Queues.create(settings.farm_queue_open, settings.farm_queue_act, settings.farm_queue_observe)
        self.obs_cfg = ObserveSettings(quiet_ms=settings.farm_settle_quiet_ms, settle_max_ms=settings.farm_settle_max_ms,
                                       max_chars=settings.farm_max_text_chars, nav_timeout_ms=settings.farm_nav_timeout_ms)
        self.sessions: dict[str, BrowserSession] = {}
        self.closed: OrderedDict[str, environment_pb2.Session] = OrderedDict()
        self.open_requests: OrderedDict[str, str] = OrderedDict()
        self.opening = 0
        self.capturing = 0
        self.draining = False
        self._reaper: asyncio.Task[None] | None = None
        self._teardowns: set[asyncio.Future[None]] = set()  # session closes that outlive a cancelled caller

    async def start(self) -> None:
        if self.egress is not None:
            await self.egress.start_thread()
        await self.pool.start()
        self._reaper = asyncio.create_task(self._reap_loop(), name="lease-reaper")

    async def close(self) -> None:
        if self._reaper:
            self._reaper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._reaper
        for s in list(self.sessions.values()):
            with contextlib.suppress(Exception):
                await self._end(s, environment_pb2.SESSION_STATE_CLOSED)
        if self._teardowns:
            await asyncio.wait(list(self._teardowns), timeout=15)
        await self.pool.close()
        if self.egress is not None:
            await self.egress.close()

    # -- helpers ---------------------------------------------------------------------------------
    def _get(self, session_id: str) -> BrowserSession:
        if not session_id:
            raise errors.InvalidArgument("session_id: required", reason="BAD_SESSION_ID",
                                         metadata={"field": "session_id"})
        s = self.sessions.get(session_id)
        if s is not None:
            return s
        old = self.closed.get(session_id)
        if old is not None:
            state = environment_pb2.SessionState.Name(old.state)
            raise errors.FailedPrecondition(f"session {session_id} is no longer open ({state})",
                                            reason="SESSION_" + state.removeprefix("SESSION_STATE_"),
                                            metadata={"session_id": session_id, "state": state})
        raise errors.NotFound(f"session {session_id} does not exist on node {self.node}", reason="SESSION_NOT_FOUND",
                              metadata={"session_id": session_id})

    async def _end(self, s: BrowserSession, state: int) -> environment_pb2.Session:
        """Remove a session and close its context."""
        if self.sessions.pop(s.session_id, None) is None:
            return self.closed.get(s.session_id) or s.to_proto()
        s.state = state
        proto = s.to_proto()
        self.closed[s.session_id] = proto
        while len(self.closed) > _CLOSED_KEEP:
            self.closed.popitem(last=False)
        metrics.SESSIONS_ACTIVE.set(len(self.sessions))
        metrics.SESSIONS_CLOSED.labels(environment_pb2.SessionState.Name(state).removeprefix("SESSION_STATE_").lower()).inc()
        # Shielded: a caller that gives up (grpc cancels CloseSession when the client's deadline passes, as under
        # load) must not stop the context from being closed and counted; uncounted, a browser retired for
        # recycling never saw its last context go and lived on with its Chromium processes (issue 18's soak).
        teardown = asyncio.ensure_future(self._release(s, state))
        self._teardowns.add(teardown)
        teardown.add_done_callback(self._teardowns.discard)
        await asyncio.shield(teardown)
        return proto

    async def _release(self, s: BrowserSession, state: int) -> None:
        if s.adapter:
            with contextlib.suppress(Exception):
                await s.adapter.close()
        if state != environment_pb2.SESSION_STATE_CRASHED:
            await self.pool.release(s.slot.handle, s.slot.context)
        else:
            self.pool.lost(s.slot.handle)

    async def _on_crash(self, handle: BrowserHandle) -> None:
        for s in [s for s in self.sessions.values() if s.slot.handle is handle]:
            log.warning("session %s lost: its browser crashed", s.session_id)
            await self._end(s, environment_pb2.SESSION_STATE_CRASHED)

    async def _reap_loop(self) -> None:
        while True:
            await asyncio.sleep(self.settings.farm_reaper_interval_seconds)
            now = time.monotonic()
            for s in list(self.sessions.values()):
                if s.lease_expired(now) and not s.lock.locked():
                    log.info("session %s lease expired", s.session_id)
                    with contextlib.suppress(Exception):
                        await self._end(s, environment_pb2.SESSION_STATE_EXPIRED)

    def admit(self, n: int) -> None:
        """Can `n` more sessions open here (OpenSession, ForkSession)? UNAVAILABLE while draining, RESOURCE_EXHAUSTED
        FARM_FULL past WEBENV_FARM_MAX_SESSIONS (sessions open and opening)."""
        if self.draining:
            raise errors.Unavailable(f"node {self.node} is draining; open the session elsewhere", reason="DRAINING")
        if len(self.sessions) + self.opening + n > self.settings.farm_max_sessions:
            raise errors.ResourceExhausted(
                f"node {self.node} is at its limit of {self.settings.farm_max_sessions} sessions"
                + (f" ({len(self.sessions) + self.opening} open or opening, {n} asked for)" if n > 1 else ""),
                reason="FARM_FULL", retry_after_seconds=2.0,
                metadata={"max_sessions": str(self.settings.farm_max_sessions)})

    # -- EnvironmentService ----------------------------------------------------------------------
    async def open(self, req: environment_pb2.OpenSessionRequest) -> environment_pb2.OpenSessionResponse:
        t0 = time.perf_counter()
        start = req.WhichOneof("start")
        if start is None:
            raise errors.InvalidArgument("start_url or task is required", reason="BAD_START",
                                         metadata={"field": "start"})
        validate_spec(req.observation_spec, "observation_spec")
        if req.viewport.width or req.viewport.height:
            if not (100 <= req.viewport.width <= 8192 and 100 <= req.viewport.height <= 8192):
                raise errors.InvalidArgument("viewport: width and height must both be within 100..8192",
                                             reason="BAD_VIEWPORT", metadata={"field": "viewport"})
        validate_lease(req.lease_seconds, self.settings.farm_max_lease_seconds)
        if req.request_id and req.request_id in self.open_requests:
            sid = self.open_requests[req.request_id]
            if sid in self.sessions:
                return await self._reopen_answer(self.sessions[sid])
        task = req.task if start == "task" else None
        adapter = adapter_for(task, req.start_url if start == "start_url" else "", self.settings.sites_addr)
        if adapter.start_url:
            try:
                await self.guard.acheck(adapter.start_url, top_level=True)
            except BlockedUrl as exc:
                raise errors.PermissionDenied(f"start URL refused by the URL guard: {exc}", reason="URL_BLOCKED",
                                              metadata={"url": adapter.start_url[:200]}) from exc
        self.admit(1)
        self.opening += 1
        session: BrowserSession | None = None
        try:
            async with self.queues.open.slot():
                vp = (req.viewport.width, req.viewport.height) if req.viewport.width else None
                slot = await self.pool.acquire(vp)
                session = BrowserSession(
                    session_id=uuid.uuid4().hex, slot=slot, guard=self.guard, spec=req.observation_spec,
                    lease_seconds=req.lease_seconds or self.settings.farm_lease_seconds, node=self.node,
                    task_id=task.task_id if task else "", labels=dict(req.labels), adapter=adapter,
                )
                # Busy until it is open, so the lease reaper leaves it alone: a lease shorter than the open (or an
                # open slowed by load) had the reaper close the context under it, and OpenSession ended INTERNAL.
                await session.lock.acquire()
                self.sessions[session.session_id] = session
                metrics.SESSIONS_ACTIVE.set(len(self.sessions))
                try:
                    session.instruction = await asyncio.wait_for(
                        adapter.setup(session, req.seed, self.settings.farm_nav_timeout_ms),
                        self.settings.farm_open_timeout_seconds)
                except TimeoutError as exc:
                    raise errors.DeadlineExceeded("opening the start page took longer than "
                                                  f"{self.settings.farm_open_timeout_seconds}s", reason="OPEN_TIMEOUT") from exc
                await self._settle(session, -1)
            obs, raw = await self._observe(session, session.spec)
            await self._fill_tabs(session, obs)
            session.renew()
        except BaseException:
            if session is not None:
                await self._end(session, environment_pb2.SESSION_STATE_CLOSED)
            raise
        finally:
            self.opening -= 1
            if session is not None:
                session.lock.release()
        if req.request_id:
            self.open_requests[req.request_id] = session.session_id
            while len(self.open_requests) > _CLOSED_KEEP:
                self.open_requests.popitem(last=False)
        dt = time.perf_counter() - t0
        metrics.OPEN_SECONDS.observe(dt)
        return environment_pb2.OpenSessionResponse(session=session.to_proto(), observation=obs,
                                                   instruction=session.instruction, open_seconds=dt)

    async def _reopen_answer(self, s: BrowserSession) -> environment_pb2.OpenSessionResponse:
        async with s.lock:
            obs, _ = await self._observe(s, s.spec, settle=False)
        return environment_pb2.OpenSessionResponse(session=s.to_proto(), observation=obs, instruction=s.instruction)

    async def _fill_tabs(self, s: BrowserSession, obs: common_pb2.Observation) -> None:
        """Tabs with titles: the active one from the observation, others asked for (only when there are some)."""
        del obs.tabs[:]
        obs.tabs.extend(s.tab_messages())

        async def title(tab: common_pb2.Tab) -> None:
            if tab.active:
                tab.title = obs.title
                return
            page = s.tabs[tab.tab_id].page if tab.tab_id in s.tabs else None
            if page is not None:
                with contextlib.suppress(Exception):
                    tab.title = await asyncio.wait_for(page.title(), 1.0)

        await asyncio.gather(*(title(t) for t in obs.tabs))
        obs.active_tab_id = s.active_tab_id

    async def _observe(self, s: BrowserSession, spec: common_pb2.ObservationSpec, settle: bool = True,
                       frame_wait: bool = False) -> tuple[common_pb2.Observation, dict]:
        cdp = await s.cdp() if common_pb2.OBSERVATION_FORMAT_SCREENSHOT in spec.formats else None
        return await observe(s.page, cdp, spec, self.obs_cfg, settle=settle,
                             miniwob=bool(s.adapter and s.adapter.miniwob), frame_wait=frame_wait)

    async def step(self, req: environment_pb2.StepRequest, deadline: float | None = None) -> environment_pb2.StepResponse:
        s = self._get(req.session_id)
        kind = validate_action(req.action, self.settings.farm_max_wait_ms)
        if req.HasField("observation_spec"):
            validate_spec(req.observation_spec, "observation_spec")
        if req.timeout_seconds < 0:
            raise errors.InvalidArgument("timeout_seconds: must be >= 0", reason="BAD_TIMEOUT",
                                         metadata={"field": "timeout_seconds"})
        async with s.lock:
            if s.session_id not in self.sessions:
                self._get(req.session_id)  # raises with the final state
            if is_retry(req.step_index, s.step_count, s.last_response.step_index if s.last_response else None,
                        s.last_action, req.action):
                return s.last_response
            s.renew()
            timeout = req.timeout_seconds or self.settings.farm_step_timeout_seconds
            if deadline is not None:
                timeout = min(timeout, max(0.05, deadline))
            t0 = time.perf_counter()
            try:
                resp = await asyncio.wait_for(self._step(s, req, kind, t0), timeout)
            except PlaywrightError as exc:
                if not s.slot.handle.alive:  # the browser died under this step
                    await self._end(s, environment_pb2.SESSION_STATE_CRASHED)
                    raise errors.FailedPrecondition(f"session {s.session_id} was lost: its browser crashed",
                                                    reason="SESSION_CRASHED",
                                                    metadata={"session_id": s.session_id}) from exc
                raise errors.Internal(f"page error during {kind}: {str(exc).splitlines()[0][:300]}",
                                      reason="PAGE_ERROR", metadata={"session_id": s.session_id}) from exc
            except TimeoutError as exc:
                metrics.STEP_TIMEOUTS.inc()
                s.last_response = None  # a retry of the timed-out step must not get the step before it
                await self._reset_context(s, f"step {s.step_count} exceeded its {timeout:.3g}s deadline; "
                                             "the session's pages were reset to about:blank")
                s.step_count += 1
                raise errors.DeadlineExceeded(
                    f"step {s.step_count - 1} of session {s.session_id} ({kind}) exceeded {timeout:.3g}s; "
                    "its pages were reset", reason="STEP_TIMEOUT",
                    metadata={"session_id": s.session_id, "kind": kind}) from exc
            s.step_count += 1
            s.last_response, s.last_action = resp, req.action
            s.renew()
            return resp

    async def _reset_context(self, s: BrowserSession, why: str) -> None:
        """Replace a session's context (hung renderer): the old one is disposed in the background."""
        old = s.slot
        try:
            slot = await self.pool.acquire()
        except Exception as exc:  # pragma: no cover - browser gone as well
            log.warning("could not reset session %s: %s", s.session_id, exc)
            return
        s.attach(slot)
        s.pending_error = why

        async def dispose() -> None:
            await self.pool.release(old.handle, old.context)

        asyncio.get_running_loop().create_task(dispose())

    async def _adopt_popup(self, s: BrowserSession) -> bool:
        """The page opened a new tab: wait (bounded) for its page and make it the active tab."""
        deadline = time.perf_counter() + min(3.0, self.settings.farm_nav_timeout_ms / 1000)
        while time.perf_counter() < deadline:
            fresh = [p for p in s.slot.context.pages if not s.knows(p) and not p.is_closed()]
            if fresh:
                for page in fresh:
                    s.adopt(page)
                s.slot.state.popups = 0
                return True
            await asyncio.sleep(0.01)
        return False

    async def _nav_started(self, s: BrowserSession, tab: Tab) -> bool:
        """Did the page start a navigation of its tab (pool.NAV_WATCH_JS)? Reads and clears the count; an
        evaluate destroyed under us means a new document has committed already."""
        if s.tabs.get(tab.tab_id) is not tab or tab.page.is_closed():
            return False
        try:
            return bool(await asyncio.wait_for(tab.page.evaluate(NAV_PENDING_JS), 5.0))
        except TimeoutError:
            return False
        except PlaywrightError as exc:
            return interrupted_by_navigation(exc) and not tab.page.is_closed()

    async def _await_new_document(self, s: BrowserSession, tab: Tab, loads_before: int, nav_before: int,
                                  cap: float) -> None:
        """A navigation of `tab` has started (maybe not yet seen by the network hooks): wait, bounded, until
        its new document has fired DOMContentLoaded."""
        st = s.slot.state
        start = time.perf_counter()
        ended: float | None = None
        while tab.loads <= loads_before and not tab.page.is_closed():
            now = time.perf_counter()
            if now >= cap:
                return
            if st.nav_count == nav_before and not st.navs:
                if now - start >= NAV_START_GRACE_S:
                    return  # no request came: cancelled
            elif not st.navs:
                ended = ended or now
                if now - ended >= NAV_END_GRACE_S:
                    return  # the request is over and no document came
            else:
                ended = None
            st.changed.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(st.changed.wait(), min(0.02, max(0.001, cap - now)))

    async def _settle(self, s: BrowserSession, nav_before: int, started: bool = False, tab: Tab | None = None,
                      loads_before: int = 0) -> float:
        t0 = time.perf_counter()
        st = s.slot.state
        nav_cap = t0 + self.settings.farm_nav_timeout_ms / 1000
        net_cap = t0 + self.settings.farm_network_idle_ms / 1000
        if tab is not None and tab is s.tabs.get(s.active_tab_id) and (
                started or (st.nav_count != nav_before and any(p is tab.page for p in st.nav_pages))):
            await self._await_new_document(s, tab, loads_before, nav_before, nav_cap)
        if st.nav_count != nav_before or st.navs or st.popups:
            while st.navs and time.perf_counter() < nav_cap:
                st.changed.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(st.changed.wait(), nav_cap - time.perf_counter())
            opener = s.page
            popup_cap = min(nav_cap, time.perf_counter() + 3.0)
            while st.popups and time.perf_counter() < popup_cap:  # a popup's page event comes after its request
                if len(s.slot.context.pages) > len(s.tabs):
                    for page in s.slot.context.pages:
                        if not s.knows(page):
                            s.adopt(page)
                    break
                await asyncio.sleep(0.005)
            st.popups = 0
            for page in st.nav_pages:  # a popup (target=_blank, window.open) becomes the active tab
                if not s.knows(page) and not page.is_closed():
                    s.adopt(page)
            st.nav_pages.clear()
            if s.page is not opener and not opener.is_closed():
                # the popup is adopted already: clear the opener's in-page popup count (see POPUP_WATCH_JS)
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(opener.evaluate("() => { window.__webenvPopups = 0; }"), 1.0)
            with contextlib.suppress(Exception):
                await s.page.wait_for_load_state("domcontentloaded",
                                                 timeout=max(1.0, (nav_cap - time.perf_counter()) * 1000))
            net_cap = time.perf_counter() + self.settings.farm_network_idle_ms / 1000
        while st.inflight and time.perf_counter() < net_cap:
            st.changed.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(st.changed.wait(), net_cap - time.perf_counter())
        return time.perf_counter() - t0

    async def _step(self, s: BrowserSession, req: environment_pb2.StepRequest, kind: str, t0: float
                    ) -> environment_pb2.StepResponse:
        spec = req.observation_spec if req.HasField("observation_spec") else s.spec
        what = ACTION_KINDS[kind]  # navigates, may start a navigation, shows in the next frame
        queue = self.queues.open if what.navigates else self.queues.act
        st = s.slot.state
        blocked_before = len(st.blocked)
        async with queue.slot() as waited_act:
            ta = time.perf_counter()
            await s.ensure_tab()
            nav_before = st.begin_step()
            tab = s.tab
            loads_before = tab.loads
            outcome = await perform(s, req.action, kind, nav_timeout_ms=self.settings.farm_nav_timeout_ms)
            ts = time.perf_counter()
            action_s = ts - ta
            started = what.may_navigate and await self._nav_started(s, tab)
            await s.ensure_tab()
            # navigate/go_back/go_forward/new_tab waited for their own DOMContentLoaded already
            await self._settle(s, nav_before, started, None if what.navigates else tab, loads_before)
            settle_s = time.perf_counter() - ts
        metrics.ACTIONS.labels(kind).inc()
        error = outcome.error
        if st.take_violation():
            with contextlib.suppress(Exception):
                await s.page.goto("about:blank")
            error = f"a redirect was refused by the URL guard: {st.blocked[-1]}" + (f" ({error})" if error else "")
        elif not error and len(st.blocked) > blocked_before and s.page.url in ("about:blank", "") \
                or (not error and len(st.blocked) > blocked_before and "chrome-error" in s.page.url):
            error = f"navigation refused by the URL guard: {st.blocked[-1]}"
        if s.pending_error:
            error = f"{s.pending_error}; {error}" if error else s.pending_error
            s.pending_error = ""
        if error:
            metrics.ACTION_ERRORS.labels(kind).inc()
        async with self.queues.observe.slot() as waited_obs:
            to = time.perf_counter()
            for _ in range(3):
                nav_seen = st.nav_count
                st.nav_pages.clear()
                tab = s.tab
                loads_seen = tab.loads
                obs, raw = await self._observe(s, spec, frame_wait=what.next_frame)
                if raw.get("popups") and await self._adopt_popup(s):
                    settle_s += await self._settle(s, -1)
                    continue
                if st.nav_count == nav_seen and not st.navs and not raw.get("navPending") \
                        and tab.loads == loads_seen:
                    break
                # a navigation (or popup) started while the DOM settled: wait for it, observe again
                started = bool(raw.get("navPending")) and await self._nav_started(s, tab)
                settle_s += await self._settle(s, nav_seen, started, tab, loads_seen)
            observe_s = time.perf_counter() - to
        obs.last_action_error = error
        await self._fill_tabs(s, obs)
        rw = s.adapter.reward(raw) if s.adapter else None
        done = outcome.done or bool(rw and rw.done)
        if rw is not None and s.adapter and s.adapter.miniwob:
            s.env_reward = rw.raw_reward
        total = time.perf_counter() - t0
        timings = common_pb2.StepTimings(queue_seconds=waited_act + waited_obs, action_seconds=action_s,
                                         settle_seconds=settle_s, observe_seconds=observe_s, total_seconds=total)
        for name, v in (("queue", waited_act + waited_obs), ("action", action_s), ("settle", settle_s),
                        ("observe", observe_s), ("total", total)):
            metrics.STEP_SECONDS.labels(name).observe(v)
        s.done = s.done or done
        return environment_pb2.StepResponse(
            session_id=s.session_id, step_index=s.step_count, observation=obs,
            reward=rw.reward if rw else 0.0, raw_reward=rw.raw_reward if rw else 0.0, done=done,
            reward_reason=rw.reason if rw else "", timings=timings, target_element_id=outcome.target_element_id,
        )

    async def close_session(self, req: environment_pb2.CloseSessionRequest) -> environment_pb2.CloseSessionResponse:
        s = self._get(req.session_id)
        async with s.lock:
            evidence = ""
            if req.capture_evidence and s.adapter and s.session_id in self.sessions:
                evidence = await s.adapter.evidence(s)
            proto = await self._end(s, environment_pb2.SESSION_STATE_CLOSED)
        return environment_pb2.CloseSessionResponse(session=proto, site_state_json=evidence, env_reward=s.env_reward)

    def get_session(self, session_id: str) -> environment_pb2.Session:
        if session_id in self.closed and session_id not in self.sessions:
            return self.closed[session_id]
        return self._get(session_id).to_proto()

    def renew(self, req: environment_pb2.RenewLeaseRequest) -> environment_pb2.Session:
        validate_lease(req.lease_seconds, self.settings.farm_max_lease_seconds)
        s = self._get(req.session_id)
        s.renew(req.lease_seconds)
        return s.to_proto()

    # -- BrowserFarmService ----------------------------------------------------------------------
    def list_sessions(self, req: browser_pb2.ListSessionsRequest) -> browser_pb2.ListSessionsResponse:
        size = req.page_size or 100
        if size < 0:
            raise errors.InvalidArgument("page_size: must be >= 0", reason="BAD_PAGE_SIZE",
                                         metadata={"field": "page_size"})
        size = min(size, 1000)
        try:
            offset = int(req.page_token) if req.page_token else 0
        except ValueError as exc:
            raise errors.InvalidArgument("page_token: not a token this node issued", reason="BAD_PAGE_TOKEN",
                                         metadata={"field": "page_token"}) from exc
        items = sorted(self.sessions.values(), key=lambda x: (x.created_wall, x.session_id))
        want = dict(req.labels)
        items = [x for x in items if all(x.labels.get(k) == v for k, v in want.items())]
        page = items[offset:offset + size]
        nxt = str(offset + size) if offset + size < len(items) else ""
        return browser_pb2.ListSessionsResponse(sessions=[x.to_proto() for x in page], next_page_token=nxt)

    def capacity(self) -> browser_pb2.GetCapacityResponse:
        return browser_pb2.GetCapacityResponse(
            node=self.node, max_sessions=self.settings.farm_max_sessions, active_sessions=len(self.sessions),
            pooled_contexts=self.pool.pooled, browsers=self.pool.browsers_alive(),
            browser_restarts=self.pool.restarts, draining=self.draining,
            queues=[browser_pb2.QueueStats(name=q.name, limit=q.limit, running=q.running, waiting=q.waiting)
                    for q in self.queues.all()],
        )

    async def capture(self, req: browser_pb2.CaptureScreenshotRequest) -> browser_pb2.CaptureScreenshotResponse:
        """A preview of a session's active tab, beside its steps: no session lock, no step, no lease renewal.

        A capture may land mid-action (the page as it is at that instant) and may fail while a navigation swaps
        the document (UNAVAILABLE: try the next frame). Bounded per node, refused rather than queued, so viewers
        never take Chromium time from agents beyond WEBENV_FARM_CAPTURE_CONCURRENCY captures at once.
        """
        s = self._get(req.session_id)
        spec = req.screenshot if req.HasField("screenshot") else common_pb2.ScreenshotSpec(
            codec=common_pb2.IMAGE_CODEC_JPEG, quality=60)
        validate_screenshot_spec(spec, "screenshot")
        if spec.set_of_marks:
            raise errors.InvalidArgument("screenshot.set_of_marks: not available for previews",
                                         reason="BAD_OBSERVATION_SPEC", metadata={"field": "screenshot.set_of_marks"})
        if self.capturing >= self.settings.farm_capture_concurrency:
            metrics.CAPTURES.labels("busy").inc()
            raise errors.ResourceExhausted(
                f"{self.capturing} captures are running on node {self.node} (WEBENV_FARM_CAPTURE_CONCURRENCY)",
                reason="CAPTURE_BUSY", retry_after_seconds=0.5)
        self.capturing += 1
        try:
            tab = s.tab
            shot = await asyncio.wait_for(screenshot(tab.page, tab.cdp, spec, {}, None), 5.0)
        except (PlaywrightError, TimeoutError) as exc:
            metrics.CAPTURES.labels("failed").inc()
            raise errors.Unavailable(f"session {s.session_id} could not be captured now (page busy or navigating): "
                                     f"{str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__}",
                                     reason="CAPTURE_FAILED", retry_after_seconds=0.5) from exc
        finally:
            self.capturing -= 1
        metrics.CAPTURES.labels("ok").inc()
        return browser_pb2.CaptureScreenshotResponse(session=s.to_proto(), screenshot=shot, url=tab.page.url)

    def drain(self, req: browser_pb2.DrainRequest) -> browser_pb2.DrainResponse:
        self.draining = req.draining
        return browser_pb2.DrainResponse(capacity=self.capacity())

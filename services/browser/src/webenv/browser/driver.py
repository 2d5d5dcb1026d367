"""The page driver: one step of one session on its page, perform -> settle -> observe, and nothing about
sessions as a set (ids, leases, limits: `registry.py`) or about the RPC (validation, the step cache, deadlines,
rewards: `farm.py`).

A step runs its action in the `open` queue (navigate, back/forward, new tab) or the `act` queue (the rest), then
settles, then observes in the `observe` queue: a popup or a navigation that starts while the observation pass waits
for a quiet DOM is waited for and the page observed again (the settle rule and the place of each of its parts:
the package `settle/`, whose `__init__.py` writes the rule).
The result is a `StepResult`: what the caller needs to answer, with the time of each phase.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import dataclass
from typing import Any

from playwright.async_api import Error as PlaywrightError
from webenv import delta, errors
from webenv.actions import ACTION_KINDS
from webenv.browser import metrics
from webenv.browser.actions import ActionOutcome, perform
from webenv.browser.observe import ObserveSettings, observe, screenshot
from webenv.browser.queues import Queues
from webenv.browser.session import BrowserSession
from webenv.browser.settle.passes import observe_settled
from webenv.browser.settle.waits import Settler
from webenv.v1 import common_pb2


@dataclass
class PhaseTimings:
    """Seconds per phase of a step (StepTimings without the total, which the caller measures)."""

    queue: float = 0.0
    action: float = 0.0
    settle: float = 0.0
    observe: float = 0.0


@dataclass
class StepResult:
    """What one step did on the page.

    `error` is the observation's last_action_error (the action's own failure, a guard refusal, a reset of the
    session's pages reported late); `violation` is the redirect the URL guard refused during the step ('' when
    none; the page was blanked); `passes` counts the observation passes beyond the first and `retry_reason`
    says what the page was last waited for after a pass ("popup" or "navigation"; '' when none was)."""

    observation: common_pb2.Observation
    raw: dict[str, Any]  # the observation pass's JS result (the task adapter reads rewards from it)
    outcome: ActionOutcome
    timings: PhaseTimings
    error: str = ""
    violation: str = ""
    passes: int = 0
    retry_reason: str = ""


class PageDriver:
    """Drives sessions' pages: steps, first observations and previews, with the farm's queues and caps."""

    def __init__(self, queues: Queues, obs_cfg: ObserveSettings, settler: Settler, nav_timeout_ms: int,
                 capture_concurrency: int, node: str) -> None:
        self.queues = queues
        self.obs_cfg = obs_cfg
        self.settler = settler
        self.nav_timeout_ms = nav_timeout_ms
        self.capture_concurrency = capture_concurrency
        self.node = node
        self.capturing = 0

    async def observe(self, s: BrowserSession, spec: common_pb2.ObservationSpec, settle: bool = True,
                      frame_wait: bool = False, quiet_since_action: bool = False, fresh: bool = True
                      ) -> tuple[common_pb2.Observation, dict[str, Any]]:
        """One observation pass of the active tab (without the tabs' titles: `fill_tabs`); with an incremental
        spec and not `fresh`, a walk of what changed since the last pass."""
        cdp = await s.cdp() if common_pb2.OBSERVATION_FORMAT_SCREENSHOT in spec.formats else None
        return await observe(s.page, cdp, spec, self.obs_cfg, settle=settle,
                             miniwob=bool(s.adapter and s.adapter.miniwob), frame_wait=frame_wait,
                             quiet_since_action=quiet_since_action, fresh=fresh, text=s.tab.text)

    async def fill_tabs(self, s: BrowserSession, obs: common_pb2.Observation) -> None:
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

    async def settle_start(self, s: BrowserSession) -> None:
        """After a session's start page is set up (in the open queue): wait for whatever is still loading."""
        await self.settler.settle(s, -1)

    async def first_observation(self, s: BrowserSession) -> common_pb2.Observation:
        """The observation OpenSession answers (outside the open queue), with the tabs."""
        obs, _ = await self.observe(s, s.spec)
        await self.fill_tabs(s, obs)
        return obs

    async def step(self, s: BrowserSession, action: common_pb2.Action, kind: str,
                   spec: common_pb2.ObservationSpec) -> StepResult:
        """perform -> settle -> observe for a validated action."""
        what = ACTION_KINDS[kind]  # navigates, may start a navigation, shows in the next frame
        queue = self.queues.open if what.navigates else self.queues.act
        st = s.slot.state
        blocked_before = len(st.blocked)
        timings = PhaseTimings()
        async with queue.slot() as waited_act:
            ta = time.perf_counter()
            await s.ensure_tab()
            nav_before = st.begin_step()
            tab = tab_acted = s.tab
            loads_before = tab.loads
            outcome = await perform(s, action, kind, nav_timeout_ms=self.nav_timeout_ms)
            ts = time.perf_counter()
            timings.action = ts - ta
            started = what.may_navigate and await self.settler.nav_started(s, tab)
            await s.ensure_tab()
            # navigate/go_back/go_forward/new_tab waited for their own DOMContentLoaded already
            await self.settler.settle(s, nav_before, started, None if what.navigates else tab, loads_before)
            timings.settle = time.perf_counter() - ts
        metrics.ACTIONS.labels(kind).inc()
        error, violation = outcome.error, ""
        if st.take_violation():
            violation = st.last_blocked()
            with contextlib.suppress(Exception):
                await s.page.goto("about:blank")
            error = f"a redirect was refused by the URL guard: {violation}" + (f" ({error})" if error else "")
        elif not error and len(st.blocked) > blocked_before and s.page.url in ("about:blank", "") \
                or (not error and len(st.blocked) > blocked_before and "chrome-error" in s.page.url):
            error = f"navigation refused by the URL guard: {st.last_blocked()}"
        if s.pending_error:
            error = f"{s.pending_error}; {error}" if error else s.pending_error
            s.pending_error = ""
        if error:
            metrics.ACTION_ERRORS.labels(kind).inc()
        fresh = delta.full_due(spec, s.step_count)  # a whole observation is due: the page walked whole
        async with self.queues.observe.slot() as waited_obs:
            to = time.perf_counter()
            seen = await observe_settled(
                self.settler, s, lambda same_doc: self.observe(s, spec, frame_wait=what.next_frame,
                                                               quiet_since_action=same_doc, fresh=fresh),
                navigates=what.navigates, acted_tab=tab_acted, loads_before=loads_before)
            timings.settle += seen.settle_seconds
            timings.observe = time.perf_counter() - to
        timings.queue = waited_act + waited_obs
        obs = seen.observation
        obs.last_action_error = error
        await self.fill_tabs(s, obs)
        return StepResult(observation=obs, raw=seen.raw, outcome=outcome, timings=timings, error=error,
                          violation=violation, passes=seen.passes, retry_reason=seen.reason)

    async def capture(self, s: BrowserSession, spec: common_pb2.ScreenshotSpec
                      ) -> tuple[common_pb2.Screenshot, str]:
        """A preview of the active tab beside the session's steps (no lock): bounded per node, refused rather
        than queued. Returns the screenshot and the URL it shows."""
        if self.capturing >= self.capture_concurrency:
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
        return shot, tab.page.url

"""Steps 0.-2. of the settle rule (`settle/__init__.py`): after an action, wait for the navigation the page started,
the main-frame navigations and popups, and the network, each capped; `Settler` is the one place that decides when
to wait, on the facts `settle.watchers.ContextState` and the tabs' load counts hold."""

from __future__ import annotations

import asyncio
import contextlib
import time

from playwright.async_api import Error as PlaywrightError
from webenv.browser.errortext import interrupted_by_navigation
from webenv.browser.session import BrowserSession, Tab
from webenv.browser.settle.watchers import NAV_PENDING_JS

NAV_START_GRACE_S = 2.0  # page said "navigating" but no request came: the navigation was cancelled
NAV_END_GRACE_S = 1.0  # the request ended but no new document came: 204, download, refused
POPUP_WAIT_S = 3.0  # a popup's page event comes after its request; popups that never come are given up


class Settler:
    """Steps 0.-2. of the rule for one session at a time (stateless between calls: the facts are the
    context's `ContextState` and the tabs' load counts)."""

    def __init__(self, nav_timeout_ms: int, network_idle_ms: int) -> None:
        self.nav_timeout_s = nav_timeout_ms / 1000
        self.network_idle_s = network_idle_ms / 1000

    async def nav_started(self, s: BrowserSession, tab: Tab) -> bool:
        """Did the page start a navigation of its tab (watchers.NAV_WATCH_JS)? Reads and clears the count; an
        evaluate destroyed under us means a new document has committed already."""
        if s.tabs.get(tab.tab_id) is not tab or tab.page.is_closed():
            return False
        try:
            return bool(await asyncio.wait_for(tab.page.evaluate(NAV_PENDING_JS), 5.0))
        except TimeoutError:
            return False
        except PlaywrightError as exc:
            return interrupted_by_navigation(exc) and not tab.page.is_closed()

    async def adopt_popup(self, s: BrowserSession) -> bool:
        """The page opened a new tab (seen by the observation pass): wait (bounded) for its page and make it
        the active tab."""
        deadline = time.perf_counter() + min(POPUP_WAIT_S, self.nav_timeout_s)
        while time.perf_counter() < deadline:
            fresh = [p for p in s.slot.context.pages if not s.knows(p) and not p.is_closed()]
            if fresh:
                for page in fresh:
                    s.adopt(page)
                s.slot.state.forget_popups()
                return True
            await asyncio.sleep(0.01)
        return False

    async def _await_new_document(self, s: BrowserSession, tab: Tab, loads_before: int, nav_before: int,
                                  cap: float) -> None:
        """0.: a navigation of `tab` has started (maybe not yet seen by the network hooks): wait, bounded,
        until its new document has fired DOMContentLoaded."""
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
            await st.wait_change(min(0.02, max(0.001, cap - now)))

    async def settle(self, s: BrowserSession, nav_before: int, started: bool = False, tab: Tab | None = None,
                     loads_before: int = 0) -> float:
        """Wait as the rule says after an action (or after an observation pass saw a navigation start).

        `nav_before`: the context's navigation count before the action (-1: wait for whatever is loading);
        `started`: the page said it started a navigation of `tab` (`nav_started`); `tab`/`loads_before`:
        the tab the action ran in and its load count then (None for actions that waited for their own load).
        Returns the seconds spent."""
        t0 = time.perf_counter()
        st = s.slot.state
        nav_cap = t0 + self.nav_timeout_s
        net_cap = t0 + self.network_idle_s
        if tab is not None and tab is s.tabs.get(s.active_tab_id) and (
                started or (st.nav_count != nav_before and st.navigated(tab.page))):
            await self._await_new_document(s, tab, loads_before, nav_before, nav_cap)
        if st.nav_count != nav_before or st.navs or st.popups:
            while st.navs and time.perf_counter() < nav_cap:
                await st.wait_change(nav_cap - time.perf_counter())
            opener = s.page
            popup_cap = min(nav_cap, time.perf_counter() + POPUP_WAIT_S)
            while st.popups and time.perf_counter() < popup_cap:  # a popup's page event comes after its request
                if len(s.slot.context.pages) > len(s.tabs):
                    for page in s.slot.context.pages:
                        if not s.knows(page):
                            s.adopt(page)
                    break
                await asyncio.sleep(0.005)
            st.forget_popups()
            for page in st.take_nav_pages():  # a popup (target=_blank, window.open) becomes the active tab
                if not s.knows(page) and not page.is_closed():
                    s.adopt(page)
            if s.page is not opener and not opener.is_closed():
                # the popup is adopted already: clear the opener's in-page popup count (see POPUP_WATCH_JS)
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(opener.evaluate("() => { window.__webenvPopups = 0; }"), 1.0)
            with contextlib.suppress(Exception):
                await s.page.wait_for_load_state("domcontentloaded",
                                                 timeout=max(1.0, (nav_cap - time.perf_counter()) * 1000))
            net_cap = time.perf_counter() + self.network_idle_s
        while st.inflight and time.perf_counter() < net_cap:
            await st.wait_change(net_cap - time.perf_counter())
        return time.perf_counter() - t0

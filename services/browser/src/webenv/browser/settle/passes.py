"""The end of step 3. of the settle rule (`settle/__init__.py`): observe; when a popup or a navigation started
while the pass waited for a quiet DOM, wait for it as steps 0.-2. do (`waits.Settler`) and observe again, at most
PASSES passes. The DOM-quiet window counts from the action only on the document the action ran in."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from webenv.browser.session import BrowserSession, Tab
from webenv.browser.settle.waits import Settler
from webenv.v1 import common_pb2

PASSES = 3

#: One observation pass of the session's active tab; its argument is `quiet_since_action` (observe.observe).
ObservePass = Callable[[bool], Awaitable[tuple[common_pb2.Observation, dict[str, Any]]]]


@dataclass
class Observed:
    """The last pass's observation and raw JS result, the passes beyond the first, what the page was last waited
    for after a pass ("popup", "navigation", or '') and the seconds those waits took."""

    observation: common_pb2.Observation
    raw: dict[str, Any]
    passes: int
    reason: str
    settle_seconds: float


async def observe_settled(settler: Settler, s: BrowserSession, observe_pass: ObservePass, *, navigates: bool,
                          acted_tab: Tab, loads_before: int) -> Observed:
    """Observe after an action that ran in `acted_tab` (its load count then: `loads_before`; `navigates`: the
    action waited for its own document, so no pass counts quiet from the action)."""
    st = s.slot.state
    passes, reason, waited = 0, "", 0.0
    for attempt in range(PASSES):
        passes = attempt
        nav_seen = st.begin_pass()
        tab = s.tab
        loads_seen = tab.loads
        # the quiet window counts from the action only on the document the action ran in (a new document, its
        # frames loading, gets a full window from now)
        same_doc = attempt == 0 and not navigates and tab is acted_tab and tab.loads == loads_before
        obs, raw = await observe_pass(same_doc)
        if raw.get("popups") and await settler.adopt_popup(s):
            waited += await settler.settle(s, -1)
            reason = "popup"
            continue
        if st.nav_count == nav_seen and not st.navs and not raw.get("navPending") and tab.loads == loads_seen:
            break
        # a navigation (or popup) started while the DOM settled: wait for it, observe again
        started = bool(raw.get("navPending")) and await settler.nav_started(s, tab)
        waited += await settler.settle(s, nav_seen, started, tab, loads_seen)
        reason = "navigation"
    return Observed(obs, raw, passes, reason, waited)

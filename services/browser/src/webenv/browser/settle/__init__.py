"""The settle rule: when a page is ready to be observed after an action (no fixed sleeps, every wait capped).

This package holds the whole rule; its layout is the map (each module says which step it is):

| module | part of the rule |
| --- | --- |
| `settle/watchers.py` | the facts: `ContextState` (requests in flight, main-frame navigations, popups, refused URLs), filled by the network hooks and the in-page init scripts (`NAV_WATCH_JS`, `POPUP_WATCH_JS`, `QUIET_WATCH_JS`, `CLICK_WATCH_JS`) that `watch_context` installs when the pool makes a context: a warm context exists before its session does, and a hook added later would miss its first document's requests; the facts change only through ContextState's own methods |
| `settle/waits.py` | steps 0.-2. and popup adoption (`Settler`): the one place that decides when to wait |
| `settle/quiet.js` | step 3.'s DOM-quiet wait, run inside the observation pass's own evaluate (observe.py puts it at the head of observe.js: one round trip instead of two, ~15 ms per step), driven by `observe.ObserveSettings` |
| `settle/passes.py` | the end of step 3.: a popup or navigation seen during a pass is waited for and the page observed again |
| `settle/retry.py` | the retry of an evaluate that a navigation interrupts (the observation pass, the resolution of an action's target), on the named `errortext.RETRY_CASES` (Playwright reports the race only as error text) |

Outside it: `driver.PageDriver.step` runs perform -> settle -> observe (it calls `Settler.nav_started` and
`Settler.settle` after the action, then `passes.observe_settled`); `session.Tab.loads` counts each tab's
DOMContentLoaded events; the caps are settings (`config.py`, `WEBENV_FARM_*`).

The rule, after every action (bounded by the caps below and by the step deadline):
0. a navigation of the active tab that the page itself started with the action (counted in the page,
   synchronously, by `NAV_WATCH_JS`: link, form submission, location change), or a main-frame request of the
   active tab, or an evaluate destroyed by a commit: wait until the tab's *new* document has fired
   DOMContentLoaded (cap: WEBENV_FARM_NAV_TIMEOUT_MS); give up early when no request comes within
   NAV_START_GRACE_S (a navigation cancelled after all) or when the request ended without a new document for
   NAV_END_GRACE_S (204, download, refused);
1. main-frame navigations started by the action: wait until their requests finish or fail, adopt popups as the
   active tab, then wait for DOMContentLoaded (cap: WEBENV_FARM_NAV_TIMEOUT_MS);
2. network: wait until no request of the context is in flight (cap: WEBENV_FARM_NETWORK_IDLE_MS);
3. DOM: inside the observation's JS pass (and one rendered frame for scroll-like actions, waited for beside it),
   wait until no mutation for WEBENV_FARM_SETTLE_QUIET_MS (cap: WEBENV_FARM_SETTLE_MAX_MS), counted from the
   page's last mutation or input event (`QUIET_WATCH_JS`) after an action on the same document, else from the
   pass's start (a first observation, a new document whose frames may still load); a same-origin iframe whose
   document has not come or is still parsing is waited for as the main document is (the quiet window counts from
   its DOMContentLoaded; cap: WEBENV_FARM_NAV_TIMEOUT_MS, once per iframe); a navigation that starts during the
   pass (seen by the network hooks or counted in the page) is waited for as in 0. and the page observed again (at
   most 3 passes); an evaluate interrupted by a navigation (element resolution, the observation pass) waits for
   the new document's DOMContentLoaded and runs once more there.

The package imports none of its modules here (import the one you need: `webenv.browser.settle.waits`, ...), so
the pool can import the watchers without the session and driver behind the waits.
"""

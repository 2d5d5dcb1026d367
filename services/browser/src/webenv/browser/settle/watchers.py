"""The settle rule's eyes on every browser context: the in-page watcher scripts and the network hooks, and the
facts they record (`ContextState`) for the session that owns the context.

`watch_context` installs them when the pool makes a context (before its first page, so a warm context has them
from its first document): the init scripts count, synchronously with an action, new-tab attempts
(POPUP_WATCH_JS), cross-document navigations the document starts (NAV_WATCH_JS, read and cleared by
NAV_PENDING_JS), listeners of clicks (CLICK_WATCH_JS, for observe.js) and the page's last mutation or input
(QUIET_WATCH_JS); the network hooks keep the requests in flight and the main-frame navigations, and the URLs the
guards refused. `settle/waits.py` decides with these facts when a step has settled; `settle/quiet.js` reads the
quiet stamp.
Counting in the page rather than racing Playwright's asynchronous page events is what makes a step's end
deterministic (the measured reasons are by each script).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from playwright.async_api import BrowserContext, Page, Request, Route
from webenv.browser import metrics
from webenv.browser.egress import EgressProxy
from webenv.browser.errortext import SOCKS_REFUSED
from webenv.browser.guard import BlockedUrl, UrlGuard

# Counts, in the page itself and synchronously with the click, every attempt to open a new tab
# (window.open, links and forms with a target): the farm then waits for the popup deterministically
# instead of racing the browser's asynchronous page events.
POPUP_WATCH_JS = """
(() => {
  const mark = () => {
    try { window.top.__webenvPopups = (window.top.__webenvPopups || 0) + 1; }
    catch (e) { window.__webenvPopups = (window.__webenvPopups || 0) + 1; }
  };
  const same = (t) => !t || ['_self', '_parent', '_top'].includes(String(t).toLowerCase());
  const open = window.open;
  window.open = function (...args) { mark(); return open.apply(this, args); };
  document.addEventListener('click', (e) => {
    const a = e.target && e.target.closest ? e.target.closest('a[href][target], area[href][target]') : null;
    if (a && !same(a.target) && !e.defaultPrevented) mark();
  }, true);
  document.addEventListener('submit', (e) => { if (e.target && !same(e.target.target)) mark(); }, true);
})();
"""

# Counts, in the top document and synchronously with the action, every cross-document navigation of this
# tab that the document starts: the Navigation API's `navigate` event (links, location changes, form
# submissions, history traversals) and the `submit` event (a form's navigation only starts a task later).
# A navigation cancelled by preventDefault or intercepted (same-document) is taken back. The settle rule
# reads and clears the count right after the action (NAV_PENDING_JS): a navigation whose request the farm
# has not seen yet (a loaded event loop, a slow renderer) is then still waited for.
NAV_WATCH_JS = """
(() => {
  if (window !== window.top) return;
  const pending = new Set();
  let seq = 0;
  Object.defineProperty(window, '__webenvNavPending', {get: () => pending.size, configurable: true});
  Object.defineProperty(window, '__webenvNavClear', {value: () => pending.clear(), configurable: true});
  const mark = (e) => {
    const id = ++seq;
    pending.add(id);
    setTimeout(() => { if (e.defaultPrevented) pending.delete(id); }, 0);  // a later listener cancelled it
    return id;
  };
  const same = (t) => !t || ['_self', '_parent', '_top'].includes(String(t).toLowerCase());
  window.addEventListener('submit', (e) => {
    const f = e.target, s = e.submitter;
    if (!f || e.defaultPrevented) return;
    const attr = (name, dflt) => (s && s.hasAttribute && s.hasAttribute(name) ? s.getAttribute(name) : dflt);
    if (!same(attr('formtarget', f.target)) || String(attr('formmethod', f.method || '')).toLowerCase() === 'dialog') return;
    mark(e);
  });
  if (window.navigation) window.navigation.addEventListener('navigate', (e) => {
    if (e.destination.sameDocument || e.hashChange || e.downloadRequest) return;
    const id = mark(e);
    const intercept = e.intercept;
    if (typeof intercept === 'function') {
      e.intercept = function (...args) { pending.delete(id); return intercept.apply(this, args); };
    }
  });
})();
"""
# When the top document last changed or last received input (performance.now(); 0: neither since it began):
# the observation pass's DOM-quiet wait (observe.js) counts its window from the later of the two instead of
# from its own start, so the time a step already spent after the action (the navigation check, the round trips)
# counts as quiet time. A MutationObserver from the document's first moment (parser insertions included) and
# capture-phase listeners of the events an action causes (trusted mouse/keyboard input, fill, select, scroll).
# Measured on MiniWoB++ click-test: the pass waited 15-18 ms after a click, now 0-5 ms (the click's own
# mutations are older than the window by the time the pass starts).
QUIET_WATCH_JS = """
(() => {
  if (window !== window.top) return;
  let last = 0;
  const stamp = () => { last = performance.now(); };
  new MutationObserver(stamp).observe(document, {subtree: true, childList: true, attributes: true, characterData: true});
  for (const t of ['pointerdown', 'pointerup', 'mousedown', 'mouseup', 'click', 'keydown', 'keyup', 'input', 'change',
                   'wheel', 'scroll', 'focusin']) {
    window.addEventListener(t, stamp, {capture: true, passive: true});
  }
  Object.defineProperty(window, '__webenvQuietSince', {get: () => last, configurable: true});
})();
"""
# Which elements a page script listens to for clicks (a listener is invisible to the page's DOM otherwise):
# observe.js prints a role-less element with one as `clickable`, with an id an agent can click (MiniWoB's
# colour boxes, calendar cells, tic-tac-toe squares, svg pie slices). A WeakSet: nothing is added to the DOM.
CLICK_WATCH_JS = """
(() => {
  const add = EventTarget.prototype.addEventListener;
  const CLICKS = new Set(['click', 'mousedown', 'mouseup', 'pointerdown', 'pointerup', 'dblclick']);
  const marked = new WeakSet();
  Object.defineProperty(window, '__webenvClickable', {value: (el) => marked.has(el), configurable: true});
  // observe.js: an incremental pass walks an element given a click handler since its last pass again
  const changed = (el) => {
    const since = window.__webenvListenAdded;
    if (since && since.length <= 20000) since.push(el);
  };
  EventTarget.prototype.addEventListener = function (type, ...rest) {
    if (CLICKS.has(type) && this && this.nodeType === 1 && !marked.has(this)) {
      marked.add(this);
      changed(this);
    }
    return add.call(this, type, ...rest);
  };
  const onclick = Object.getOwnPropertyDescriptor(HTMLElement.prototype, 'onclick');  // observe.js reads el.onclick
  if (onclick && onclick.set) {
    Object.defineProperty(HTMLElement.prototype, 'onclick', {...onclick, set(v) {
      if (this && this.nodeType === 1) changed(this);
      return onclick.set.call(this, v);
    }});
  }
})();
"""
#: Every context's init scripts (the pool installs them when it creates a context).
INIT_JS = POPUP_WATCH_JS + NAV_WATCH_JS + CLICK_WATCH_JS + QUIET_WATCH_JS

# Read and clear the count of NAV_WATCH_JS (0 on pages where the init script did not run).
NAV_PENDING_JS = "() => { const n = window.__webenvNavPending || 0; if (n) window.__webenvNavClear(); return n; }"


@dataclass
class ContextState:
    """Per-context facts the network hooks record for the session that owns the context: refused URLs, and
    requests in flight (all, and main-frame navigations) for the settle rule (`settle/waits.py`, which reads them).
    Outside this module they change only through the methods below."""

    blocked: list[str] = field(default_factory=list)
    violation: bool = False
    inflight: set[Request] = field(default_factory=set)
    navs: set[Request] = field(default_factory=set)
    nav_count: int = 0
    nav_pages: list[Page] = field(default_factory=list)
    popups: int = 0
    changed: asyncio.Event = field(default_factory=asyncio.Event)

    def begin_step(self) -> int:
        """Forget the navigations and popups seen before a step; returns the navigation count the settle
        rule compares against after the action."""
        self.nav_pages.clear()
        self.popups = 0
        return self.nav_count

    def begin_pass(self) -> int:
        """Forget the navigating pages seen so far before an observation pass; returns the navigation count
        the pass is compared against (a navigation during the pass means observe again)."""
        self.nav_pages.clear()
        return self.nav_count

    def take_nav_pages(self) -> list[Page]:
        """The pages whose main frame navigated since the last call (popups among them); clears the list."""
        pages, self.nav_pages = self.nav_pages, []
        return pages

    def navigated(self, page: Page) -> bool:
        """Did `page`'s main frame start a navigation since the step (or pass) began?"""
        return any(p is page for p in self.nav_pages)

    def forget_popups(self) -> None:
        """The popups counted so far are adopted (or given up on)."""
        self.popups = 0

    async def wait_change(self, seconds: float) -> None:
        """Wait, at most `seconds`, for the next request event of the context (never raises)."""
        self.changed.clear()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.changed.wait(), max(0.0, seconds))

    def take_violation(self) -> bool:
        """Was a redirect refused by the URL guard since the last call? Reads and clears the flag."""
        seen, self.violation = self.violation, False
        return seen

    def last_blocked(self) -> str:
        """The latest URL the guards refused in this context ('' when none)."""
        return self.blocked[-1] if self.blocked else ""

    def done(self, request: Request) -> None:
        self.inflight.discard(request)
        self.navs.discard(request)
        self.changed.set()


def _route_handler(state: ContextState, guard: UrlGuard) -> Callable[[Route, Request], Awaitable[None]]:
    """Guard check of every request to a host outside the allowlist (subresources included)."""

    async def handle(route: Route, request: Request) -> None:
        top = False
        if request.is_navigation_request():
            try:
                top = request.frame.parent_frame is None
            except Exception:  # the request of a popup comes before its frame exists
                top = True
        try:
            await guard.acheck(request.url, top_level=top)
        except BlockedUrl as exc:
            state.blocked.append(f"{request.url[:200]}: {exc}")
            metrics.BLOCKED_REQUESTS.inc()
            with contextlib.suppress(Exception):
                await route.abort("blockedbyclient")
            return
        with contextlib.suppress(Exception):
            await route.continue_()

    return handle

def _request_watch(state: ContextState, guard: UrlGuard) -> Callable[[Request], None]:
    """Track requests in flight and main-frame navigations for the settle rule (one-way events, the
    request does not wait for them). Playwright's route does not see redirect hops, so a hop to a
    refused address is checked here and marks the context: the farm blanks the page before
    anything of it is observed."""

    def on_request(request: Request) -> None:
        state.inflight.add(request)
        if request.is_navigation_request():
            try:
                frame = request.frame
                if frame.parent_frame is None:
                    state.navs.add(request)
                    state.nav_count += 1
                    state.nav_pages.append(frame.page)
            except Exception:  # the request of a popup comes before its frame exists
                state.navs.add(request)
                state.nav_count += 1
                state.popups += 1
        if request.redirected_from is None:
            return
        try:
            guard.check(request.url, top_level=False)
        except BlockedUrl as exc:
            state.blocked.append(f"redirect to {request.url[:200]}: {exc}")
            state.violation = True
            metrics.BLOCKED_REQUESTS.inc()

    return on_request

def _failure_watch(state: ContextState, egress: EgressProxy | None) -> Callable[[Request], None]:
    """A request the egress proxy refused (below the route: a redirect hop, a name that resolves to a
    private address) is recorded with the proxy's reason, so a refused navigation is reported as such."""

    def on_failed(request: Request) -> None:
        state.done(request)
        if egress is None or not SOCKS_REFUSED.matches(request.failure or ""):
            return
        why = egress.why_refused(request.url)
        if why:
            state.blocked.append(f"{request.url[:200]}: {why}")

    return on_failed


async def watch_context(context: BrowserContext, guard: UrlGuard, egress: EgressProxy | None) -> ContextState:
    """Install the watcher scripts and the network hooks on a new context; returns the facts they fill."""
    state = ContextState()
    await context.add_init_script(INIT_JS)
    if guard.enabled:
        await context.route(guard.unlisted_url_pattern(), _route_handler(state, guard))
    context.on("request", _request_watch(state, guard))
    context.on("requestfinished", state.done)
    context.on("requestfailed", _failure_watch(state, egress))
    return state

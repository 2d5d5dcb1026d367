"""ForkSession: N independent copies of a live session, for group rollouts (GRPO) and tree search.

What a copy keeps, taken from the parent under its step lock (so no step of the parent runs in between) and
rebuilt in a fresh context of the warm pool:

- the active tab's page: its current URL, loaded again (GET) from the server, whose state is the fork's own copy;
- the tab's history behind the current entry (Page.getNavigationHistory): each earlier URL is committed in the
  copy's tab as an empty `Cache-Control: no-store` document answered by the farm itself (no request reaches the
  site, so a GET with side effects is not repeated, and no page is parsed), and going back to it loads the URL from
  the site as a new document, as a browser going back to an uncached page does. Entries ahead of the current one
  (go_forward) are dropped, and so are entries more than MAX_HISTORY (20) behind: each entry is one document
  commit, ~45 ms at load 12-15 on 2 cores, half of a one-copy fork after 5 steps (~270 ms: three entries, the
  page's load ~70 ms, restore ~30 ms, observation ~25 ms). Adding the entries with history.pushState in one
  placeholder would be cheaper but is wrong: Chromium treats entries pushed by one document as one document, so
  going back between two of them changed the URL without loading the page (tried);
- cookies (every origin, httpOnly included) and localStorage (every origin: set from a throwaway page whose
  requests are answered locally, as Playwright restores a storage state);
- sessionStorage of the current page's origin (set by a script that runs before the page's own during the
  rebuild, then removed);
- form fields of the top document that differ from their defaults: input values, checkboxes and radios, the
  selected options of selects, textareas (set through the native setters, then `input` and `change` events,
  so frameworks that listen see them); the focused element;
- scroll positions: the window's and every scrolled element's;
- for synthetic tasks, the site's server-side state, copied through TaskService.ForkSiteState into a site session
  of the fork's own (its `site_session` cookie points there), so carts, logins and orders diverge.

What it cannot keep: anything that lives only in the page's JavaScript heap (an SPA's variables and store, timers,
closures, a MiniWoB episode, which is why MiniWoB sessions answer FAILED_PRECONDITION), DOM the scripts changed
after load (expanded menus, inserted rows, an open <dialog>, a modal the parent closed by a click: the synthetic
shop's "added to cart" modal is back in a copy forked after it was closed; fields and scrolled elements are matched by their
position in the document, so a field a script inserted is not found), JS dialogs (alert/confirm), a page that was
the answer to a POST (it is loaded by GET), IndexedDB, Cache Storage, service workers (blocked by the farm anyway),
open connections and requests in flight, fields inside frames, file inputs, other tabs (a fork has one tab), and
the parent's step count (a fork starts at step 0).

The parent's elements are matched by index in document order (`querySelectorAll('*')`), a static list taken
before any event fires, so a `change` handler that inserts nodes does not shift later fields. Measured cost
(`bench.py --fork-only`): bench/results/browser.md, section Session fork.

The RPC around it is the sdk's (`webenv.envservice.EnvironmentService.ForkSession`): the count and lease checks,
the parent's lookup, the request id, admission, the parent's lock held for `capture` only; `copies` then builds
the copies beside the parent's next steps.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
import uuid
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from playwright.async_api import Error as PlaywrightError
from playwright.async_api import Route
from webenv import errors
from webenv.browser import metrics
from webenv.browser.actions import goto
from webenv.browser.pool import Slot
from webenv.browser.session import BrowserSession, TaskHooks
from webenv.v1 import environment_pb2

if TYPE_CHECKING:
    from webenv.browser.config import Settings
    from webenv.browser.driver import PageDriver
    from webenv.browser.pool import BrowserPool
    from webenv.browser.queues import Queues
    from webenv.browser.registry import SessionRegistry

MAX_HISTORY = 20  # earlier entries rebuilt per copy: each is a document commit (module docstring), bounding a fork

# The page state a fork carries (top document only): changed form fields, scrolls, focus, sessionStorage.
CAPTURE_JS = """
() => {
  const all = Array.from(document.querySelectorAll('*'));
  const index = new Map(all.map((e, i) => [e, i]));
  const fields = [];
  for (const el of document.querySelectorAll('input, select, textarea')) {
    const i = index.get(el), tag = el.tagName;
    if (tag === 'SELECT') {
      const opts = Array.from(el.options);
      if (opts.some((o) => o.selected !== o.defaultSelected)) fields.push({i, tag, sel: opts.map((o) => o.selected)});
    } else if (el.type === 'checkbox' || el.type === 'radio') {
      if (el.checked !== el.defaultChecked) fields.push({i, tag, checked: el.checked});
    } else if (el.type !== 'file' && el.value !== el.defaultValue) {
      fields.push({i, tag, value: el.value});
    }
  }
  const root = document.scrollingElement;
  const scrolls = [];
  for (const [i, el] of all.entries()) {
    if (el !== root && (el.scrollTop || el.scrollLeft)) scrolls.push({i, tag: el.tagName, top: el.scrollTop, left: el.scrollLeft});
  }
  const active = document.activeElement;
  let session = [];
  try { session = Object.entries(sessionStorage); } catch (e) {}
  return {fields, scrolls, x: window.scrollX, y: window.scrollY, origin: location.origin, session,
          focus: active && active !== document.body && index.has(active) ? index.get(active) : null};
}
"""

RESTORE_JS = """
(st) => {
  const all = document.querySelectorAll('*');  // static: handlers that insert nodes do not shift the indexes
  const same = (el, tag) => el && el.tagName === tag;
  let missed = 0;
  const changed = [];
  for (const f of st.fields) {
    const el = all[f.i];
    if (!same(el, f.tag)) { missed++; continue; }
    if (f.sel) Array.from(el.options).forEach((o, k) => { o.selected = !!f.sel[k]; });
    else if ('checked' in f) el.checked = f.checked;
    else {
      const d = Object.getOwnPropertyDescriptor(Object.getPrototypeOf(el), 'value');
      if (d && d.set) d.set.call(el, f.value); else el.value = f.value;
    }
    changed.push(el);
  }
  for (const el of changed) {
    el.dispatchEvent(new Event('input', {bubbles: true}));
    el.dispatchEvent(new Event('change', {bubbles: true}));
  }
  for (const s of st.scrolls) {
    const el = all[s.i];
    if (!same(el, s.tag)) { missed++; continue; }
    el.scrollTop = s.top; el.scrollLeft = s.left;
  }
  if (st.focus !== null && all[st.focus] && all[st.focus].focus) all[st.focus].focus({preventScroll: true});
  window.scrollTo(st.x, st.y);
  return missed;
}
"""

SET_LOCAL_STORAGE_JS = "(items) => { localStorage.clear(); for (const i of items) localStorage.setItem(i.name, i.value); }"


def _session_storage_script(origin: str, items: list[list[str]]) -> str:
    """Runs before the page's own scripts in every document of the rebuild: the parent's sessionStorage."""
    return (f"(() => {{ if (location.origin !== {json.dumps(origin)}) return; try {{ sessionStorage.clear(); "
            f"for (const [k, v] of {json.dumps(items)}) sessionStorage.setItem(k, v); }} catch (e) {{}} }})();")


async def _placeholder(route: Route) -> None:
    """An earlier history entry: an empty document that the browser may not keep (no-store), answered here, so
    the entry exists at once (no server round trip, no GET side effect) and going back to it loads the URL anew."""
    if route.request.is_navigation_request() and route.request.frame.parent_frame is None:
        await route.fulfill(body="<!doctype html><title></title>", content_type="text/html",
                            headers={"Cache-Control": "no-store"})
    else:
        await route.fallback()


@dataclass
class Snapshot:
    """What the parent looked like when the fork was asked for."""

    parent: BrowserSession
    cookies: list[dict[str, Any]]
    local_storage: list[dict[str, Any]]  # [{origin, localStorage: [{name, value}]}]
    history: list[str]  # URLs up to and including the current entry
    page: dict[str, Any]
    viewport: tuple[int, int] | None
    adapters: list[TaskHooks | None] = field(default_factory=list)
    ids: list[str] = field(default_factory=list)  # the copies' session ids
    started: float = 0.0  # time.perf_counter() when the fork was asked for (webenv_browser_fork_seconds)


class Forker:
    """ForkSession's copies for the farm that owns it (`Farm.fork_capture` / `Farm.fork_copies`), handed the
    farm's parts it needs: the registry (new sessions, ends), the open queue, the pool's viewport and the page
    driver (settle and the first observation)."""

    def __init__(self, settings: Settings, registry: SessionRegistry, queues: Queues, pool: BrowserPool,
                 driver: PageDriver) -> None:
        self.settings, self.registry, self.queues, self.pool, self.driver = settings, registry, queues, pool, driver

    async def capture(self, parent: BrowserSession, req: environment_pb2.ForkSessionRequest) -> Snapshot:
        """Under the parent's lock (the service holds it): the parent's state and its copies' ids."""
        t0 = time.perf_counter()
        ids = [uuid.uuid4().hex for _ in range(req.count)]
        snap = await self._capture(parent, ids, req.request_id or uuid.uuid4().hex)
        snap.started = t0
        return snap

    async def copies(self, snap: Snapshot, req: environment_pb2.ForkSessionRequest
                     ) -> list[environment_pb2.OpenSessionResponse]:
        """The copies, built at once; all or nothing: no copy is left open when one failed."""
        made: list[BrowserSession] = []
        try:
            answers = await asyncio.gather(*(self._make(snap, sid, adapter, req, made)
                                             for sid, adapter in zip(snap.ids, snap.adapters, strict=True)),
                                           return_exceptions=True)
            failed = [a for a in answers if isinstance(a, BaseException)]
            if failed:
                raise failed[0]
        except BaseException:
            for s in made:
                with contextlib.suppress(Exception):
                    await self.registry.end(s, environment_pb2.SESSION_STATE_CLOSED)
            raise
        metrics.FORK_SECONDS.observe(time.perf_counter() - snap.started)
        return answers  # type: ignore[return-value]

    async def _capture(self, parent: BrowserSession, ids: list[str], request_id: str) -> Snapshot:
        """The parent's state, and its task adapters' copies (site state forked now, before its next step)."""
        adapters: list[TaskHooks | None] = [None] * len(ids)
        if parent.adapter is not None:
            adapter = parent.adapter
            adapters = list(await asyncio.gather(*(adapter.fork(sid, f"{request_id}-{k}") for k, sid in enumerate(ids))))
        page = parent.page
        try:
            storage = await parent.slot.context.storage_state()
            nav = await (await parent.cdp()).send("Page.getNavigationHistory")
            state = await page.evaluate(CAPTURE_JS)
        except PlaywrightError as exc:
            raise errors.Unavailable(f"session {parent.session_id} could not be read for a fork (page busy or "
                                     f"navigating): {str(exc).splitlines()[0][:200]}", reason="FORK_CAPTURE_FAILED",
                                     retry_after_seconds=0.5, metadata={"session_id": parent.session_id}) from exc
        entries = [e["url"] for e in nav["entries"][:nav["currentIndex"] + 1]]
        while len(entries) > 1 and entries[0] == "about:blank":
            entries.pop(0)
        entries = entries[-(MAX_HISTORY + 1):]
        if entries and entries[-1] != page.url:  # the tab's own URL is the truth (a same-document change)
            entries[-1] = page.url
        vp = page.viewport_size
        return Snapshot(parent=parent, cookies=storage["cookies"], local_storage=storage.get("origins", []),
                        history=entries or [page.url], page=state,
                        viewport=(vp["width"], vp["height"]) if vp else None, adapters=adapters, ids=ids)

    async def _make(self, snap: Snapshot, sid: str, adapter: TaskHooks | None,
                    req: environment_pb2.ForkSessionRequest, made: list[BrowserSession]
                    ) -> environment_pb2.OpenSessionResponse:
        """One copy: a warm context, its storage, its history, its page state; then its first observation."""
        parent = snap.parent
        t0 = time.perf_counter()
        async with self.queues.open.slot():
            s = await self.registry.create(
                snap.viewport if snap.viewport != self.pool.viewport else None, session_id=sid,
                prepare=lambda slot: self._storage(slot, snap, adapter), guard=parent.guard, spec=parent.spec,
                lease_seconds=req.lease_seconds or parent.lease_seconds, task_id=parent.task_id,
                labels=self._labels(parent, req, adapter), adapter=adapter, instruction=parent.instruction)
            made.append(s)  # registered and locked: busy until ready, the lease reaper leaves it alone
            try:
                await asyncio.wait_for(self._rebuild(s, snap), self.settings.farm_open_timeout_seconds)
                obs = await self.driver.first_observation(s)
                s.renew()
            except TimeoutError as exc:
                raise errors.DeadlineExceeded(f"rebuilding the page of a fork took longer than "
                                              f"{self.settings.farm_open_timeout_seconds}s", reason="OPEN_TIMEOUT") from exc
            finally:
                s.lock.release()
        return environment_pb2.OpenSessionResponse(session=s.to_proto(), observation=obs, instruction=s.instruction,
                                                   open_seconds=time.perf_counter() - t0)

    @staticmethod
    def _labels(parent: BrowserSession, req: environment_pb2.ForkSessionRequest, adapter: TaskHooks | None
                ) -> dict[str, str]:
        """The parent's labels with the request's; a `site_session` label (tasks.py) names the copy's own."""
        labels = {**parent.labels, **req.labels}
        if "site_session" in labels and adapter is not None and adapter.site_session:
            labels["site_session"] = adapter.site_session
        return labels

    async def _storage(self, slot: Slot, snap: Snapshot, adapter: TaskHooks | None) -> None:
        """Cookies (the synthetic site's session cookie pointing at the fork's site state) and localStorage."""
        cookies = [dict(c) for c in snap.cookies]
        old = snap.parent.adapter.site_session if snap.parent.adapter else ""
        for c in cookies:
            if old and adapter is not None and c["name"] == "site_session" and c["value"] == old:
                c["value"] = adapter.site_session
        if cookies:
            await slot.context.add_cookies(cookies)  # type: ignore[arg-type]
        origins = [o for o in snap.local_storage if o.get("localStorage")]
        if not origins:
            return
        page = await slot.context.new_page()  # before the session exists: never one of its tabs

        async def blank(route: Route) -> None:  # answered here: no request leaves the browser
            await route.fulfill(body="<html></html>", content_type="text/html")

        try:
            await page.route("**/*", blank)
            for o in origins:
                await page.goto(o["origin"] + "/", wait_until="commit")
                await page.evaluate(SET_LOCAL_STORAGE_JS, o["localStorage"])
        finally:
            await page.close()

    async def _rebuild(self, s: BrowserSession, snap: Snapshot) -> None:
        """History up to the current entry, sessionStorage before the page's scripts, then the page's fields."""
        page = s.page
        st = snap.page
        script = None
        if st["session"]:
            cdp = await s.cdp()
            await cdp.send("Page.enable")  # new-document scripts of this CDP session run only with Page enabled
            script = (await cdp.send("Page.addScriptToEvaluateOnNewDocument",
                                     {"source": _session_storage_script(st["origin"], st["session"])}))["identifier"]
        nav_ms = self.settings.farm_nav_timeout_ms
        earlier = snap.history[:-1]
        if earlier:
            def match(url: str) -> bool:
                return url in earlier

            await page.route(match, _placeholder)
            try:
                for url in earlier:
                    with contextlib.suppress(PlaywrightError):
                        await page.goto(url, wait_until="commit", timeout=nav_ms)
            finally:
                await page.unroute(match, _placeholder)
        err = await goto(s, page, snap.history[-1], nav_ms)
        if err:
            raise errors.FailedPrecondition(f"the fork could not load the parent's page: {err}",
                                            reason="FORK_LOAD_FAILED", metadata={"url": snap.history[-1][:200]})
        if script is not None:
            await (await s.cdp()).send("Page.removeScriptToEvaluateOnNewDocument", {"identifier": script})
        await self.driver.settle_start(s)
        await page.evaluate(RESTORE_JS, st)

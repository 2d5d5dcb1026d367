"""Chromium processes and the warm pool of browser contexts.

One session = one BrowserContext (cookies, storage and cache isolated) on one of several Chromium
processes. Contexts are created ahead of time (guard route installed, first page open at
about:blank) so OpenSession only has to take one and navigate. A browser is retired after
`contexts_per_browser` contexts (it finishes its live sessions, then closes) and replaced at once
when it crashes; the sessions on a crashed browser are reported through `on_crash` (to the session
registry). Every context gets the settle rule's eyes when it is made (`settle.watchers.watch_context`: the in-page
init scripts and the network hooks that fill its `ContextState`; `settle/` says what it does with them).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import re
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

import psutil
from playwright.async_api import Browser, BrowserContext, Page, Playwright, async_playwright
from webenv.browser import metrics
from webenv.browser.egress import EgressProxy
from webenv.browser.guard import UrlGuard
from webenv.browser.settle.watchers import ContextState, watch_context

log = logging.getLogger(__name__)

# Playwright passes its own --disable-features list; passing the switch ourselves replaces it, so we
# read Playwright's list from its driver and append the two omnibox features (measured on
# this project's machines: halves memory per context and cuts new_context+new_page from ~300 ms to ~165 ms).
_FALLBACK_DISABLED = [
    "AvoidUnnecessaryBeforeUnloadCheckSync", "DestroyProfileOnBrowserClose", "HttpsUpgrades",
    "HttpsFirstBalancedModeAutoEnable", "LensOverlay", "MediaRouter", "PaintHolding",
    "ThirdPartyStoragePartitioning", "AvoidCorsURLLoaderRestartOnRedirect", "TcpPortRandomizationWin",
    "OptimizationHints", "NetworkTimeServiceQuerying", "AimEnabled", "PreconnectToSearch",
    "msForceBrowserSignIn", "msEdgeUpdateLaunchServicesPreferredVersion",
]
_EXTRA_DISABLED = ["WebUIOmniboxPopup", "WebUIOmniboxAimPopup"]

def playwright_disabled_features() -> list[str]:
    """Playwright's own --disable-features list, read from the installed driver (fallback: a copy)."""
    try:
        import playwright

        bundle = Path(playwright.__file__).parent / "driver" / "package" / "lib" / "coreBundle.js"
        text = bundle.read_text(encoding="utf-8", errors="replace")
        m = re.search(r"disabledFeatures = \[(.*?)\]\.filter", text, re.S)
        if m:
            body = re.sub(r"//[^\n]*", "", m.group(1))
            names = re.findall(r'"([A-Za-z0-9]+)"', body)
            if names:
                return names
    except OSError:
        pass
    return list(_FALLBACK_DISABLED)


SITES_HOSTS = "*.web.test"
PRIME_WINDOW = 32  # the last opens whose start pages decide what is primed
PRIME_TIMEOUT_MS = 10000  # the synthetic web: names the farm itself maps to the sites server


def network_args(sites_http_addr: str, egress_port: int | None) -> list[str]:
    """How the browser reaches the network. Without the egress proxy: a host-resolver rule maps the synthetic
    web to the sites server and everything else goes direct. With it (egress.py): every connection, loopback
    included, through the proxy (which maps the synthetic web itself), WebRTC without non-proxied UDP, and no
    name resolved by Chromium itself (the proxy's own address excepted)."""
    if egress_port is None:
        return [f"--host-resolver-rules=MAP {SITES_HOSTS} {sites_http_addr}"]
    return [f"--proxy-server=socks5://127.0.0.1:{egress_port}", "--proxy-bypass-list=<-loopback>",
            "--webrtc-ip-handling-policy=disable_non_proxied_udp",
            "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1"]


def chromium_args(sites_http_addr: str, marker: str, extra: str = "", egress_port: int | None = None) -> list[str]:
    """Launch switches: headless on a small machine (no sandbox, GPU, background networking, updates, sync or QUIC),
    the network (`network_args`) and a marker to find the pid."""
    features = playwright_disabled_features() + _EXTRA_DISABLED
    args = [
        "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
        "--disable-sync", "--no-first-run", "--disable-quic", "--disable-features=" + ",".join(features),
        *network_args(sites_http_addr, egress_port), "--mute-audio",
        "--disable-notifications", "--deny-permission-prompts", f"--webenv-browser={marker}",
    ]
    return args + [a for a in extra.split() if a]


@dataclass
class BrowserHandle:
    """One Chromium process and its bookkeeping."""

    index: int
    browser: Browser
    marker: str
    contexts_created: int = 0
    live_contexts: int = 0
    retiring: bool = False
    alive: bool = True

    def pid(self) -> int | None:
        """The browser process id (found by the marker switch)."""
        for proc in psutil.process_iter(["cmdline"]):
            cmd = proc.info.get("cmdline") or []
            if f"--webenv-browser={self.marker}" in cmd and not any(c.startswith("--type=") for c in cmd):
                return int(proc.pid)
        return None


class Abandoned(Exception):
    """The acquire a context was being made for was given up on (its caller cancelled)."""


@dataclass
class _Order:
    """One acquire's request for a context; `abandoned` once its caller is gone."""

    abandoned: bool = False

    @staticmethod
    def check(order: _Order | None) -> None:
        if order is not None and order.abandoned:
            raise Abandoned


@dataclass
class Slot:
    """A context ready for a session: its browser, its first page and its guard state."""

    handle: BrowserHandle
    context: BrowserContext
    page: Page
    state: ContextState
    primed_url: str = ""  # its page was loaded at this URL before its session began (BrowserPool, priming)


class BrowserPool:
    """Launches browsers, keeps `warm` contexts ready and recycles browsers."""

    def __init__(
        self,
        *,
        chromium_path: str,
        browsers: int,
        warm: int,
        contexts_per_browser: int,
        sites_http_addr: str,
        guard: UrlGuard,
        viewport: tuple[int, int],
        headless: bool = True,
        extra_args: str = "",
        egress: EgressProxy | None = None,
        on_crash: Callable[[BrowserHandle], Awaitable[None]] | None = None,
        busy: Callable[[], bool] | None = None,
        primed: int = 0,
    ) -> None:
        self.chromium_path = chromium_path
        self.n_browsers = browsers
        self.warm_target = warm
        self.primed_target = primed
        self.contexts_per_browser = contexts_per_browser
        self.sites_http_addr = sites_http_addr
        self.guard = guard
        self.viewport = viewport
        self.headless = headless
        self.extra_args = extra_args
        self.egress = egress  # started by the farm before the pool
        self.on_crash = on_crash
        self.busy: Callable[[], bool] = busy or (lambda: False)
        self.handles: list[BrowserHandle] = []
        self.restarts = 0
        self._pw: Playwright | None = None
        self._warm: list[Slot] = []
        self._primed: dict[str, list[Slot]] = {}  # by URL, see `acquire`
        self._recent: collections.deque[str] = collections.deque(maxlen=PRIME_WINDOW)
        self._refill_task: asyncio.Task[None] | None = None
        self._refill_wakeup = asyncio.Event()
        self._launch_lock = asyncio.Lock()
        self._closing = False
        self._next_index = 0
        self._chores: set[asyncio.Future[None]] = set()  # clean-ups of contexts whose acquirer was cancelled
        metrics.CONTEXTS_LIVE.set_function(self.live_contexts)

    # -- lifecycle -------------------------------------------------------------------------------
    async def start(self) -> None:
        """Start Playwright, launch the browsers and fill the warm pool once."""
        self._pw = await async_playwright().start()
        for _ in range(self.n_browsers):
            await self._launch()
        await self._fill_warm()
        self._refill_task = asyncio.create_task(self._refill_loop(), name="pool-refill")

    async def close(self) -> None:
        """Close every context and browser, then Playwright."""
        self._closing = True
        if self._refill_task:
            self._refill_task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._refill_task
        if self._chores:
            await asyncio.wait(list(self._chores), timeout=15)
        for slot in self._warm + [p for slots in self._primed.values() for p in slots]:
            with contextlib.suppress(Exception):
                await slot.context.close()
        self._warm.clear()
        self._primed.clear()
        for h in self.handles:
            h.alive = False
            with contextlib.suppress(Exception):
                await asyncio.wait_for(h.browser.close(), 10)
        self.handles.clear()
        metrics.BROWSERS.set(0)
        metrics.CONTEXTS_POOLED.set(0)
        if self._pw:
            with contextlib.suppress(Exception):
                await self._pw.stop()

    @property
    def pooled(self) -> int:
        return len(self._warm)

    def live_contexts(self) -> int:
        """Contexts alive in the pool's browsers as Playwright knows them (made by this pool or not, owned or
        not): the sessions' contexts plus the warm and primed ones, unless some leaked."""
        return sum(len(h.browser.contexts) for h in self.handles if h.alive)

    def browsers_alive(self) -> int:
        return sum(1 for h in self.handles if h.alive)

    async def _launch(self) -> BrowserHandle:
        assert self._pw is not None
        marker = uuid.uuid4().hex[:12]
        browser = await self._pw.chromium.launch(
            executable_path=self.chromium_path,
            headless=self.headless,
            args=chromium_args(self.sites_http_addr, marker, self.extra_args, self.egress.port if self.egress else None),
            handle_sigint=False,
            handle_sigterm=False,
            handle_sighup=False,
        )
        handle = BrowserHandle(index=self._next_index, browser=browser, marker=marker)
        self._next_index += 1
        browser.on("disconnected", lambda _b: self._on_disconnected(handle))
        self.handles.append(handle)
        metrics.BROWSERS.set(self.browsers_alive())
        return handle

    def _on_disconnected(self, handle: BrowserHandle) -> None:
        if not handle.alive or self._closing:
            handle.alive = False
            return
        handle.alive = False
        log.warning("browser %s disconnected (crash?), replacing it", handle.index)
        asyncio.get_running_loop().create_task(self._replace(handle, "crash"))

    async def _replace(self, handle: BrowserHandle, reason: str) -> None:
        self._warm = [s for s in self._warm if s.handle is not handle]
        metrics.CONTEXTS_POOLED.set(len(self._warm))
        self._primed = {u: [s for s in slots if s.handle is not handle] for u, slots in self._primed.items()}
        metrics.CONTEXTS_PRIMED.set(self.primed_count())
        if handle in self.handles:
            self.handles.remove(handle)
        self.restarts += 1
        metrics.BROWSER_RESTARTS.labels(reason).inc()
        if self.on_crash and reason == "crash":
            with contextlib.suppress(Exception):
                await self.on_crash(handle)
        if not self._closing:
            async with self._launch_lock:
                if sum(1 for h in self.handles if h.alive and not h.retiring) < self.n_browsers:
                    await self._launch()
            self._refill_wakeup.set()

    def _pick_browser(self) -> BrowserHandle | None:
        live = [h for h in self.handles if h.alive and not h.retiring]
        return min(live, key=lambda h: h.live_contexts) if live else None

    # -- contexts --------------------------------------------------------------------------------
    async def _new_slot(self, viewport: tuple[int, int] | None = None, order: _Order | None = None) -> Slot:
        """A new context on the least loaded browser, its hooks installed and its first page open. For an
        `order` given up on meanwhile the context is closed as soon as it exists (the browser makes it anyway
        once asked) and `Abandoned` raised: abandoned opens cost a context made and closed, no pages."""
        handle = self._pick_browser()
        if handle is None:
            async with self._launch_lock:
                handle = self._pick_browser() or await self._launch()
        handle.contexts_created += 1
        handle.live_contexts += 1
        context: BrowserContext | None = None
        try:
            w, h = viewport or self.viewport
            context = await handle.browser.new_context(
                viewport={"width": w, "height": h},
                service_workers="block",
                accept_downloads=False,
            )
            _Order.check(order)
            state = await watch_context(context, self.guard, self.egress)
            _Order.check(order)
            page = await context.new_page()
        except BaseException:  # a context half made is closed, not left in the browser unowned
            handle.live_contexts -= 1
            if context is not None:
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(asyncio.shield(context.close()), 10)
            raise
        if handle.contexts_created >= self.contexts_per_browser and not handle.retiring:
            handle.retiring = True
            log.info("browser %s retiring after %s contexts", handle.index, handle.contexts_created)
            asyncio.get_running_loop().create_task(self._ensure_capacity())
        return Slot(handle, context, page, state)

    async def _ensure_capacity(self) -> None:
        async with self._launch_lock:
            while sum(1 for h in self.handles if h.alive and not h.retiring) < self.n_browsers:
                await self._launch()
                self.restarts += 1
                metrics.BROWSER_RESTARTS.labels("recycle").inc()

    async def acquire(self, viewport: tuple[int, int] | None = None, prime_url: str = "") -> Slot:
        """A context for a new session: one primed at `prime_url` when there is one (and the viewport is the
        default), else a warm one when the viewport matches, else a fresh one. `prime_url` (only for start
        pages that may be loaded ahead: `tasks.TaskAdapter.primable`) also counts towards what is primed next.

        The context is taken or made in a task of its own, which a cancelled caller (an OpenSession whose client
        gave up, a run stopped right after it started) does not interrupt: the context it ends with is closed
        (`_orphaned`). Cancelled mid-way, Playwright's `new_context` still made the context in the browser, and
        nobody held it: 20 runs of 16 episodes stopped 0.5 s after their start left 73 Chromium processes
        (1.7 GB PSS) behind a farm with no session open, and the 39 opens tests/test_browser_limits.py gives up
        on at random points left 13 contexts nobody owned (0 now)."""
        order = _Order()
        task = asyncio.ensure_future(self._acquire(viewport, prime_url, order))
        try:
            return await asyncio.shield(task)
        except asyncio.CancelledError:
            order.abandoned = True
            task.add_done_callback(self._orphaned)
            raise

    def _orphaned(self, task: asyncio.Future[Slot]) -> None:
        """An acquire whose caller was cancelled: close the context it took or made."""
        if task.cancelled() or task.exception() is not None:
            return
        self._chore(self._discard(task.result()))

    def _chore(self, coro: Awaitable[None]) -> None:
        """Run a clean-up in the background, kept referenced until it ends (the pool's close waits for it)."""
        chore = asyncio.ensure_future(coro)
        self._chores.add(chore)
        chore.add_done_callback(self._chores.discard)

    async def _acquire(self, viewport: tuple[int, int] | None, prime_url: str, order: _Order) -> Slot:
        slot: Slot | None = None
        if prime_url and self.primed_target:
            self._recent.append(prime_url)
            if viewport in (None, self.viewport):
                slot = await self._take_primed(prime_url)
                if slot is not None:
                    metrics.OPEN_CONTEXTS.labels("primed").inc()
                    self._refill_wakeup.set()
                    return slot
        while self._warm:
            cand = self._warm.pop()
            if cand.handle.alive and not cand.page.is_closed():
                slot = cand
                break
            await self._discard(cand)
        metrics.CONTEXTS_POOLED.set(len(self._warm))
        self._refill_wakeup.set()
        if slot is None:
            metrics.OPEN_CONTEXTS.labels("new").inc()
            return await self._new_slot(viewport, order)
        metrics.OPEN_CONTEXTS.labels("warm").inc()
        if viewport and viewport != self.viewport:
            try:
                await slot.page.set_viewport_size({"width": viewport[0], "height": viewport[1]})
            except BaseException:  # the warm context taken is closed, not dropped
                self._chore(self._discard(slot))
                raise
        return slot

    async def release(self, slot_handle: BrowserHandle, context: BrowserContext) -> None:
        """Close a session's context; a retiring browser with no contexts left is closed."""
        try:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(context.close(), 10)
        finally:  # counted even when the close is cancelled, or the browser would never retire
            slot_handle.live_contexts -= 1
        if slot_handle.retiring and slot_handle.live_contexts <= 0 and slot_handle.alive:
            slot_handle.alive = False
            if slot_handle in self.handles:
                self.handles.remove(slot_handle)
            with contextlib.suppress(Exception):
                await asyncio.wait_for(slot_handle.browser.close(), 10)
            metrics.BROWSERS.set(self.browsers_alive())

    def lost(self, slot_handle: BrowserHandle) -> None:
        """A session's context died with its browser (a crash): count it out; there is nothing to close."""
        slot_handle.live_contexts -= 1

    async def _discard(self, slot: Slot) -> None:
        await self.release(slot.handle, slot.context)

    def primed_count(self) -> int:
        return sum(len(v) for v in self._primed.values())

    async def _take_primed(self, url: str) -> Slot | None:
        slots = self._primed.get(url) or []
        while slots:
            cand = slots.pop()
            if cand.handle.alive and not cand.page.is_closed() and cand.page.url == url:
                metrics.CONTEXTS_PRIMED.set(self.primed_count())
                return cand
            await self._discard(cand)
        metrics.CONTEXTS_PRIMED.set(self.primed_count())
        return None

    async def _yield_to_work(self) -> None:
        # Creating a context costs the browser ~100+ ms of CPU; doing it while a session is opening or
        # stepping slows that open down several times and the step twice (measured), so refills yield to
        # opens and steps (`busy`, Farm.busy) for 1 s at most.
        waited = 0.0
        while self.busy() and waited < 1.0:
            await asyncio.sleep(0.02)
            waited += 0.02

    async def _fill_primed(self) -> None:
        """Keep `primed_target` contexts with their page loaded at the start pages most asked for lately (one
        each, round robin over them); a primed context of a URL no longer among them is closed."""
        wanted = [u for u, _ in collections.Counter(self._recent).most_common(self.primed_target)]
        for url in [u for u in self._primed if u not in wanted]:
            for slot in self._primed.pop(url):
                await self._discard(slot)
        while not self._closing and wanted and self.primed_count() < self.primed_target:
            url = min(wanted, key=lambda u: len(self._primed.get(u, [])))
            await self._yield_to_work()
            try:
                slot = await self._new_slot()
            except Exception as exc:  # browser died under us; the crash path relaunches
                log.warning("primed context creation failed: %s", exc)
                return
            try:
                await slot.page.goto(url, wait_until="load", timeout=PRIME_TIMEOUT_MS)
                if slot.page.url != url:
                    raise RuntimeError(f"it went on to {slot.page.url[:200]}")
            except Exception as exc:  # a start page that does not load (or redirects) is not primed again
                log.info("start page %s not primed: %s", url[:200], str(exc).splitlines()[0][:200] if str(exc) else exc)
                await self._discard(slot)
                self._recent = collections.deque((u for u in self._recent if u != url), maxlen=PRIME_WINDOW)
                wanted.remove(url)
                continue
            slot.primed_url = url
            self._primed.setdefault(url, []).append(slot)
            metrics.CONTEXTS_PRIMED.set(self.primed_count())

    async def _fill_warm(self) -> None:
        while not self._closing and len(self._warm) < self.warm_target:
            await self._yield_to_work()
            try:
                slot = await self._new_slot()
            except Exception as exc:  # browser died under us; the crash path relaunches
                log.warning("warm context creation failed: %s", exc)
                await asyncio.sleep(0.2)
                return
            self._warm.append(slot)
            metrics.CONTEXTS_POOLED.set(len(self._warm))

    async def _refill_loop(self) -> None:
        while not self._closing:
            await self._refill_wakeup.wait()
            self._refill_wakeup.clear()
            await self._fill_warm()
            if self.primed_target:
                await self._fill_primed()

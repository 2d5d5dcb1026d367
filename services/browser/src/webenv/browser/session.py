"""A session: one browser context with its tabs; its lease and step bookkeeping are the sdk's `EnvSession`."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from typing import Any, Protocol

from playwright.async_api import CDPSession, Page
from webenv.browser.guard import UrlGuard
from webenv.browser.nettrace import NetworkTrace
from webenv.browser.observe import PageText
from webenv.browser.pool import Slot
from webenv.envservice import EnvSession
from webenv.v1 import common_pb2, environment_pb2


class TaskHooks(Protocol):
    """What the farm asks of a session's task adapter (`webenv.browser.tasks.TaskAdapter` implements it).

    Declared here rather than imported from tasks: tasks drives sessions (it imports this module), so a session
    naming TaskAdapter closed an import loop actions -> session -> tasks -> actions (tools/imports.py)."""

    miniwob: bool
    start_url: str
    site_session: str

    def reward(self, raw: dict[str, Any]) -> Any: ...

    async def evidence(self, session: BrowserSession) -> str: ...

    async def close(self) -> None: ...

    async def fork(self, site_session: str, request_id: str) -> TaskHooks: ...


@dataclass
class Tab:
    """One tab; the CDP session (for screenshots) is opened on first use."""

    tab_id: str
    page: Page
    cdp: CDPSession | None = None
    loads: int = 0  # DOMContentLoaded events of the tab's documents (the settle rule waits for a new one)
    text: PageText = field(default_factory=PageText)  # its page's last incremental pass (observe.py)


@dataclass
class BrowserSession(EnvSession):
    """State of one session: its context, tabs and task adapter (id, lease, steps and the step lock: EnvSession)."""

    slot: Slot
    guard: UrlGuard
    spec: common_pb2.ObservationSpec
    node: str
    adapter: TaskHooks | None = None
    tabs: dict[str, Tab] = field(default_factory=dict)
    active_tab_id: str = ""
    pending_error: str = ""
    _next_tab: int = 0
    _pages: dict[int, str] = field(default_factory=dict)
    trace: NetworkTrace = field(default_factory=NetworkTrace)  # its pages' requests, every context it had

    def __post_init__(self) -> None:
        super().__post_init__()
        self.attach(self.slot)

    # -- tabs ------------------------------------------------------------------------------------
    def attach(self, slot: Slot) -> None:
        """Adopt a (new) context: its first page becomes tab 0 and popups become tabs."""
        self.slot = slot
        self.tabs.clear()
        self._pages.clear()
        slot.context.on("page", self._on_page)
        self.trace.attach(slot.context)
        self._add_page(slot.page)

    def _add_page(self, page: Page) -> Tab:
        key = id(page)
        if key in self._pages:
            tab = self.tabs[self._pages[key]]
        else:
            tab = Tab(str(self._next_tab), page)
            self._next_tab += 1
            self.tabs[tab.tab_id] = tab
            self._pages[key] = tab.tab_id
            page.on("close", lambda p: self._on_close(p))

            def loaded(_: Page, tab: Tab = tab) -> None:
                tab.loads += 1

            page.on("domcontentloaded", loaded)
        self.active_tab_id = tab.tab_id
        return tab

    def knows(self, page: Page) -> bool:
        return id(page) in self._pages

    def adopt(self, page: Page) -> None:
        """Make a page found by the network hooks (a popup) a tab before its 'page' event arrives."""
        self._add_page(page)

    def _on_page(self, page: Page) -> None:
        if self.state == environment_pb2.SESSION_STATE_OPEN:
            self._add_page(page)

    def _on_close(self, page: Page) -> None:
        tab_id = self._pages.pop(id(page), None)
        if tab_id is None:
            return
        self.tabs.pop(tab_id, None)
        if self.active_tab_id == tab_id:
            self.active_tab_id = next(reversed(self.tabs), "") if self.tabs else ""

    @property
    def tab(self) -> Tab:
        return self.tabs[self.active_tab_id]

    @property
    def page(self) -> Page:
        return self.tab.page

    async def ensure_tab(self) -> None:
        """A session always has a tab: reopen a blank one when the last was closed."""
        if not self.tabs or self.active_tab_id not in self.tabs:
            if self.tabs:
                self.active_tab_id = next(reversed(self.tabs))
            else:
                await self.new_tab()

    async def new_tab(self) -> Tab:
        page = await self.slot.context.new_page()
        return self._add_page(page)

    def switch_tab(self, tab_id: str) -> bool:
        if tab_id not in self.tabs:
            return False
        self.active_tab_id = tab_id
        return True

    async def close_tab(self, tab_id: str) -> None:
        tab = self.tabs.get(tab_id)
        if tab is None:
            return
        with contextlib.suppress(Exception):
            await tab.page.close()
        self._on_close(tab.page)
        await self.ensure_tab()

    async def cdp(self) -> CDPSession:
        """The active tab's CDP session (opened once per tab)."""
        tab = self.tab
        if tab.cdp is None:
            tab.cdp = await self.slot.context.new_cdp_session(tab.page)
        return tab.cdp

    def tab_messages(self) -> list[common_pb2.Tab]:
        out = []
        for tid, tab in self.tabs.items():
            title = ""
            out.append(common_pb2.Tab(tab_id=tid, url=tab.page.url, title=title, active=tid == self.active_tab_id))
        return out

    # -- proto -----------------------------------------------------------------------------------
    def to_proto(self) -> environment_pb2.Session:
        return environment_pb2.Session(
            session_id=self.session_id, state=self.state, task_id=self.task_id,  # type: ignore[arg-type]
            env_kind=common_pb2.ENV_KIND_BROWSER, step_count=self.step_count, tabs=self.tab_messages(),
            created_at=self.created_at(), lease_expires_at=self.lease_expires_at(), node=self.node,
            labels=self.labels,
        )

    def summary(self) -> dict[str, Any]:
        return {"session_id": self.session_id, "state": self.state, "steps": self.step_count}

"""The session registry: the farm's `SessionTable` (webenv.envservice), and the only code that hands contexts back
to the pool.

The table (sdk) keeps sessions by id and the final state of the last 2000 ended ones (a late call gets the final
state instead of NOT_FOUND), the request ids of OpenSession and ForkSession, the lease reaper and admission
(DRAINING, the session limit); what is the farm's is here: a new session gets a context from the pool, an ended
one gives it back (`release`: closed or expired) or reports it lost (crashed), the sessions of a crashed browser
end CRASHED, a hung renderer's session gets a fresh context, ListSessions pages the open ones, and the limit's
refusal is RESOURCE_EXHAUSTED `FARM_FULL`. Contexts come from and go back to the pool only through the pool's
own methods (`acquire`, `release`, `lost`): nothing here writes a pool or browser field. What happens on a
session's page is the page driver's (`driver.py`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

from webenv import errors, paging
from webenv.browser import metrics
from webenv.browser.pool import BrowserHandle, BrowserPool, Slot
from webenv.browser.session import BrowserSession
from webenv.envservice import ENDED_KEPT, SessionTable
from webenv.v1 import browser_pb2, environment_pb2

log = logging.getLogger(__name__)


class SessionRegistry(SessionTable[BrowserSession]):
    """Open sessions, recently closed ones, idempotency keys, leases and admission for one node."""

    def __init__(self, pool: BrowserPool, *, node: str, max_sessions: int, reaper_interval_s: float) -> None:
        super().__init__(where=f"node {node}", max_sessions=max_sessions, reaper_interval_seconds=reaper_interval_s,
                         ended_kept=ENDED_KEPT, request_ids_kept=ENDED_KEPT, closed_counter=metrics.SESSIONS_CLOSED)
        self.pool = pool
        self.node = node
        # read at scrape time, as the pool's live contexts are: a value set on each change was the last writer's,
        # which in a process with several farms (the tests) could be another farm's count long after
        metrics.SESSIONS_ACTIVE.set_function(lambda: len(self.sessions))

    def list(self, req: browser_pb2.ListSessionsRequest) -> browser_pb2.ListSessionsResponse:
        items = sorted(self.sessions.values(), key=lambda x: (x.created_wall, x.session_id))
        want = dict(req.labels)
        items = [x for x in items if all(x.labels.get(k) == v for k, v in want.items())]
        page, nxt = paging.page_of(req, items, default=100, maximum=1000)
        return browser_pb2.ListSessionsResponse(sessions=[x.to_proto() for x in page], next_page_token=nxt)

    def full(self, n: int) -> errors.WebenvError:
        """RESOURCE_EXHAUSTED `FARM_FULL` past WEBENV_FARM_MAX_SESSIONS (sessions open and opening)."""
        return errors.ResourceExhausted(
            f"node {self.node} is at its limit of {self.max_sessions} sessions"
            + (f" ({len(self.sessions) + self.opening} open or opening, {n} asked for)" if n > 1 else ""),
            reason="FARM_FULL", retry_after_seconds=2.0, metadata={"max_sessions": str(self.max_sessions)})

    async def create(self, viewport: tuple[int, int] | None, *, session_id: str = "", prime_url: str = "",
                     prepare: Callable[[Slot], Awaitable[None]] | None = None, **fields: Any) -> BrowserSession:
        """A new session on a context from the pool (`prepare`d first, e.g. a fork's cookies: the context goes
        back to the pool when that fails), registered and locked: busy until its open finishes, so the lease
        reaper leaves it alone (a lease shorter than the open, or an open slowed by load, had the reaper close
        the context under it, and OpenSession ended INTERNAL). The caller releases the lock. `prime_url`: the
        start page, when it may be loaded ahead (`BrowserPool.acquire`)."""
        slot = await self.pool.acquire(viewport, prime_url)
        if prepare is not None:
            try:
                await prepare(slot)
            except BaseException:
                await self.pool.release(slot.handle, slot.context)
                raise
        s = BrowserSession(session_id=session_id or uuid.uuid4().hex, slot=slot, node=self.node, **fields)
        await s.lock.acquire()
        self.add(s)
        return s

    async def release(self, s: BrowserSession, state: int) -> None:
        """An ended session's teardown: its task adapter, then its context back to the pool (lost when crashed)."""
        if s.adapter:
            with contextlib.suppress(Exception):
                await s.adapter.close()
        if state != environment_pb2.SESSION_STATE_CRASHED:
            await self.pool.release(s.slot.handle, s.slot.context)
        else:
            self.pool.lost(s.slot.handle)

    async def on_crash(self, handle: BrowserHandle) -> None:
        """The pool's crash callback: the sessions on a crashed browser end CRASHED."""
        for s in [s for s in self.sessions.values() if s.slot.handle is handle]:
            log.warning("session %s lost: its browser crashed", s.session_id)
            await self.end(s, environment_pb2.SESSION_STATE_CRASHED)

    async def reset_context(self, s: BrowserSession, why: str) -> None:
        """Give a session a fresh context (its renderer hung past a step's deadline); the old one is disposed in
        the background, and `why` reported in the next observation's last_action_error."""
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

"""The session registry: the node's sessions as a set, and the only code that hands contexts back to the pool.

It keeps sessions by id (and the last _CLOSED_KEEP closed ones, so a late call gets the final state instead of
NOT_FOUND), OpenSession's idempotency keys, the capacity and draining checks, the lease reaper, and the ends of
sessions (closed, expired, crashed). Contexts come from and go back to the pool only through the pool's own
methods (`acquire`, `release`, `lost`): nothing here writes a pool or browser field. What happens on a session's
page is the page driver's (`driver.py`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections import OrderedDict
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from webenv import errors, paging
from webenv.browser import metrics
from webenv.browser.pool import BrowserHandle, BrowserPool, Slot
from webenv.browser.session import BrowserSession
from webenv.idempotency import RequestCache
from webenv.v1 import browser_pb2, environment_pb2

log = logging.getLogger(__name__)
_CLOSED_KEEP = 2000


class SessionRegistry:
    """Open sessions, recently closed ones, idempotency keys, leases and admission for one node."""

    def __init__(self, pool: BrowserPool, *, node: str, max_sessions: int, reaper_interval_s: float) -> None:
        self.pool = pool
        self.node = node
        self.max_sessions = max_sessions
        self.reaper_interval_s = reaper_interval_s
        self.sessions: dict[str, BrowserSession] = {}
        self.closed: OrderedDict[str, environment_pb2.Session] = OrderedDict()
        self.open_requests: RequestCache[str] = RequestCache(_CLOSED_KEEP)  # OpenSession request id -> session id
        self.opening = 0
        self.draining = False
        self._reaper: asyncio.Task[None] | None = None
        self._teardowns: set[asyncio.Future[None]] = set()  # session closes that outlive a cancelled caller

    def start(self) -> None:
        self._reaper = asyncio.create_task(self._reap_loop(), name="lease-reaper")

    async def close(self) -> None:
        """Stop the reaper and close every session (the pool itself is closed by its owner)."""
        if self._reaper:
            self._reaper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._reaper
        for s in list(self.sessions.values()):
            with contextlib.suppress(Exception):
                await self.end(s, environment_pb2.SESSION_STATE_CLOSED)
        if self._teardowns:
            await asyncio.wait(list(self._teardowns), timeout=15)

    # -- lookups ---------------------------------------------------------------------------------
    def get(self, session_id: str) -> BrowserSession:
        """An open session, or the error that says why there is none (bad id, closed and how, unknown)."""
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

    def still_open(self, s: BrowserSession) -> None:
        """Under the session's lock: raise the final state when the session ended while the caller waited."""
        if s.session_id not in self.sessions:
            self.get(s.session_id)

    def proto(self, session_id: str) -> environment_pb2.Session:
        """GetSession: an open session, or a recently closed one with its final state."""
        if session_id in self.closed and session_id not in self.sessions:
            return self.closed[session_id]
        return self.get(session_id).to_proto()

    def list(self, req: browser_pb2.ListSessionsRequest) -> browser_pb2.ListSessionsResponse:
        items = sorted(self.sessions.values(), key=lambda x: (x.created_wall, x.session_id))
        want = dict(req.labels)
        items = [x for x in items if all(x.labels.get(k) == v for k, v in want.items())]
        page, nxt = paging.page_of(req, items, default=100, maximum=1000)
        return browser_pb2.ListSessionsResponse(sessions=[x.to_proto() for x in page], next_page_token=nxt)

    # -- opening ---------------------------------------------------------------------------------
    def reopened(self, request_id: str) -> BrowserSession | None:
        """The open session an earlier OpenSession with this request_id made, if any."""
        sid = self.open_requests.get(request_id)
        return self.sessions.get(sid) if sid else None

    @contextlib.asynccontextmanager
    async def admission(self, n: int = 1) -> AsyncIterator[None]:
        """Admit `n` more sessions (OpenSession, ForkSession): UNAVAILABLE `DRAINING` while draining,
        RESOURCE_EXHAUSTED `FARM_FULL` past WEBENV_FARM_MAX_SESSIONS (sessions open and opening); they count as
        opening until the block ends (the pool's warm refills yield to opens)."""
        if self.draining:
            raise errors.Unavailable(f"node {self.node} is draining; open the session elsewhere", reason="DRAINING")
        if len(self.sessions) + self.opening + n > self.max_sessions:
            raise errors.ResourceExhausted(
                f"node {self.node} is at its limit of {self.max_sessions} sessions"
                + (f" ({len(self.sessions) + self.opening} open or opening, {n} asked for)" if n > 1 else ""),
                reason="FARM_FULL", retry_after_seconds=2.0, metadata={"max_sessions": str(self.max_sessions)})
        self.opening += n
        try:
            yield
        finally:
            self.opening -= n

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
        self.sessions[s.session_id] = s
        metrics.SESSIONS_ACTIVE.set(len(self.sessions))
        return s

    def remember(self, request_id: str, session_id: str) -> None:
        """OpenSession's idempotency key (the last _CLOSED_KEEP kept)."""
        self.open_requests.put(request_id, session_id)

    # -- leases ----------------------------------------------------------------------------------
    def renew(self, session_id: str, seconds: float) -> environment_pb2.Session:
        s = self.get(session_id)
        s.renew(seconds)
        return s.to_proto()

    async def _reap_loop(self) -> None:
        while True:
            await asyncio.sleep(self.reaper_interval_s)
            now = time.monotonic()
            for s in list(self.sessions.values()):
                if s.lease_expired(now) and not s.lock.locked():
                    log.info("session %s lease expired", s.session_id)
                    with contextlib.suppress(Exception):
                        await self.end(s, environment_pb2.SESSION_STATE_EXPIRED)

    # -- ends ------------------------------------------------------------------------------------
    async def end(self, s: BrowserSession, state: int) -> environment_pb2.Session:
        """Remove a session and close its context (a second end answers the first one's final state)."""
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
        # recycling never saw its last context go and lived on with its Chromium processes (seen in the soak).
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

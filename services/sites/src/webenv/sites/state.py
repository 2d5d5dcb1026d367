"""Server-side site state per browser session: carts, orders, posts, bookings, logins.

State lives in this process (the web server and TaskService share one event loop, so no locks are
needed). A session maps site hosts to plain JSON-able dicts, created on first use. Snapshots and forks
are deep copies, so a fork diverges without touching its parent. Idempotency keys (request_id) make a
retried snapshot or fork return the same id instead of making a second copy.
"""

from __future__ import annotations

import copy
import json
import uuid
from collections import OrderedDict
from typing import Any

from webenv.idempotency import RequestCache

State = dict[str, Any]
REQUEST_IDS_KEPT = 100_000  # SnapshotSiteState / ForkSiteState request ids remembered for retries


def default_state(host: str, family: str, record_key: str | None) -> State:
    """A fresh site's state; its shape is what rubric site-state paths address."""
    st: State = {"site": host, "family": family, "auth": {"logged_in": False, "user": None}}
    if family == "shop":
        st["cart"] = {"items": []}
        st["orders"] = []
    if record_key:
        st[record_key] = []
    return st


def valid_session_id(value: str) -> bool:
    """Session ids are 1-128 characters of [A-Za-z0-9._-] (cookie-safe, log-safe)."""
    return 0 < len(value) <= 128 and all(ch.isascii() and (ch.isalnum() or ch in "-_.") for ch in value)


class SessionNotFound(KeyError):
    """The site session (or snapshot) is not known."""


class StateStore:
    """site_session -> host -> state, with LRU eviction beyond `max_sessions`."""

    def __init__(self, max_sessions: int = 100_000, max_snapshots: int = 10_000) -> None:
        self._sessions: OrderedDict[str, dict[str, State]] = OrderedDict()
        self._snapshots: OrderedDict[str, dict[str, State]] = OrderedDict()
        self._idempotent: RequestCache[str] = RequestCache(REQUEST_IDS_KEPT)  # request id -> snapshot or session id
        self.max_sessions = max_sessions
        self.max_snapshots = max_snapshots

    # --- sessions -------------------------------------------------------------------------------
    @staticmethod
    def new_session_id() -> str:
        return uuid.uuid4().hex

    def exists(self, session: str) -> bool:
        return session in self._sessions

    def ensure(self, session: str) -> dict[str, State]:
        sites = self._sessions.get(session)
        if sites is None:
            sites = self._sessions[session] = {}
            while len(self._sessions) > self.max_sessions:
                self._sessions.popitem(last=False)
        else:
            self._sessions.move_to_end(session)
        return sites

    def get(self, session: str, host: str, factory: Any) -> State:
        """The state of one site in a session, created by `factory()` on first use."""
        sites = self.ensure(session)
        st = sites.get(host)
        if st is None:
            st = sites[host] = factory()
        return st

    def reset(self, session: str, host: str | None = None) -> None:
        sites = self.ensure(session)
        if host:
            sites.pop(host, None)
        else:
            sites.clear()

    def dump(self, session: str, host: str | None = None, factory: Any = None) -> str:
        if session not in self._sessions:
            raise SessionNotFound(session)
        if host:
            return json.dumps(self.get(session, host, factory), sort_keys=True)
        return json.dumps(self._sessions[session], sort_keys=True)

    # --- snapshot / fork ------------------------------------------------------------------------
    def snapshot(self, session: str, request_id: str = "") -> str:
        again = self._idempotent.get(request_id)
        if again is not None:
            return again
        if session not in self._sessions:
            raise SessionNotFound(session)
        snap_id = "snap-" + uuid.uuid4().hex
        self._snapshots[snap_id] = copy.deepcopy(self._sessions[session])
        while len(self._snapshots) > self.max_snapshots:
            self._snapshots.popitem(last=False)
        self._idempotent.put(request_id, snap_id)
        return snap_id

    def fork_done(self, request_id: str) -> bool:
        """Whether a snapshot or fork with this idempotency key already happened."""
        return request_id in self._idempotent

    def fork(self, *, session: str = "", snapshot_id: str = "", new_session: str = "", request_id: str = "") -> str:
        again = self._idempotent.get(request_id)
        if again is not None:
            return again
        if snapshot_id:
            if snapshot_id not in self._snapshots:
                raise SessionNotFound(snapshot_id)
            source = self._snapshots[snapshot_id]
        else:
            if session not in self._sessions:
                raise SessionNotFound(session)
            source = self._sessions[session]
        new_id = new_session or self.new_session_id()
        self.ensure(new_id)
        self._sessions[new_id] = copy.deepcopy(source)
        self._idempotent.put(request_id, new_id)
        return new_id

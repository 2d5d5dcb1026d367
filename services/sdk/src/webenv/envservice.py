"""One EnvironmentService: the per-RPC lifecycle every implementation shares, and the backend each one plugs in.

The browser farm (real Chromium) and the world model (simulated pages) serve one contract, and a client switches
between them by address. Each used to write the lifecycle of a call itself — check the request, look the session
up, answer a repeated request id, take the session's lock, apply the step_index rule, bound the step by its
deadline, keep the last answer for a retry, count, evict — and the two copies had drifted: the world model had no
step deadline and did not close an OpenSession answer that reached no one; the farm did not expire a session
when it was next asked for, nor sweep before refusing a full node. Here that lifecycle is written once (an ended
episode's short lease stays the world model's: a browser tab can still act after a task's reward):

* :class:`EnvSession` — what the lifecycle keeps of a session (id, lease, step count, the last answered step and
  its action, the step lock, state); each implementation's session type extends it with its own state (a
  browser context and its tabs, a simulated page and its memory).
* :class:`SessionTable` — the node's sessions: open ones by id, the final state of the last ``ended_kept`` ended
  ones (a late call gets SESSION_CLOSED / SESSION_EXPIRED, not NOT_FOUND), the request ids of OpenSession and
  ForkSession (:class:`webenv.idempotency.RequestCache`, bounded), admission (DRAINING, the session limit, after
  a sweep), the lease reaper (and expiry at lookup), and every end of a session, whose teardown (the farm's
  context going back to its pool) is the implementation's :meth:`SessionTable.release` and outlives a caller
  that gives up.
* :class:`EnvBackend` — what differs: how a session is opened, stepped, forked and what evidence its close
  carries. Small on purpose: what the two services really do differently.
* :class:`EnvironmentService` — the servicer: the RPCs over a backend, with the rules of `webenv.envcontract`
  (field-naming INVALID_ARGUMENT, step_index, leases, fork counts, StepStream).
* :class:`TaskCatalog` — OpenSession's task given by id alone (``{"task": {"taskId": ...}}``, what a client in
  another language or over REST sends) is resolved through TaskService.GetTask before the backend sees it; an
  environment without a catalog answers INVALID_ARGUMENT saying the whole task is needed.

Deadlines: a Step is bounded by its ``timeout_seconds``, else the backend's default (the farm's
WEBENV_FARM_STEP_TIMEOUT_SECONDS; none for the world model), and never beyond the RPC's own deadline less
:data:`DEADLINE_MARGIN_SECONDS` (an answer after it reaches no one). A step past its deadline counts, for every
backend, decided here once (DEADLINE_EXCEEDED ``STEP_TIMEOUT`` naming the next index): the farm cannot tell whether
a hung renderer acted, and a client (the sdk's EnvironmentClient) moves to the next index after a timeout whichever
environment it talks to. What the session is left like is the backend's: the farm resets the hung renderer's
context; the world model's page did not change.
An OpenSession that completes within the margin of its caller's deadline is closed at once and answered
DEADLINE_EXCEEDED ``OPEN_TOO_LATE``, and one whose RPC ends cancelled after the answer (the caller went away) is
closed when grpc reports it: before, such a session held its browser context until its idle lease (seen in CI as
a stray session after opens given up midway).

The sdk imports no service: the farm and the world model import this module (tests/test_structure.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import OrderedDict
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any, Generic, Protocol, TypeVar

import grpc
from google.protobuf.timestamp_pb2 import Timestamp
from webenv import delta, errors
from webenv.budget import apply_budget
from webenv.client.channel import make_channel
from webenv.envcontract import (
    is_retry,
    require_session_id,
    session_ended,
    session_not_found,
    step_stream,
    task_reference,
    validate_action,
    validate_fork_count,
    validate_lease,
    validate_observation_spec,
)
from webenv.idempotency import RequestCache
from webenv.v1 import common_pb2, environment_pb2, environment_pb2_grpc, task_pb2, task_pb2_grpc

log = logging.getLogger("webenv.envservice")

#: What an answer needs to reach its caller before the caller's deadline (seconds).
DEADLINE_MARGIN_SECONDS = 0.05
#: The shortest step deadline: a step asked with less time left still gets this much (seconds).
MIN_STEP_SECONDS = 0.05
#: Ended sessions whose final state is kept, and request ids kept per RPC (OpenSession, ForkSession).
ENDED_KEPT = 2000
REQUEST_IDS_KEPT = 2000


def timestamp(wall: float) -> Timestamp:
    """A protobuf Timestamp of a wall-clock time (seconds since the epoch)."""
    ts = Timestamp()
    ts.FromNanoseconds(int(wall * 1e9))
    return ts


@dataclass(kw_only=True)
class EnvSession:
    """What the shared lifecycle keeps of one session; `lock` serialises its steps (one at a time), its close and
    its fork's capture. Subclasses add their own state and :meth:`to_proto`."""

    session_id: str
    lease_seconds: float
    task_id: str = ""
    labels: dict[str, str] = field(default_factory=dict)
    instruction: str = ""
    state: int = environment_pb2.SESSION_STATE_OPEN
    step_count: int = 0
    done: bool = False
    env_reward: float = 0.0  # the environment's own episode reward (MiniWoB's), sent with CloseSession
    created_wall: float = field(default_factory=time.time)
    lease_deadline: float = 0.0  # time.monotonic() at which the lease runs out
    last_response: environment_pb2.StepResponse | None = None  # the last step answered, for its retry
    last_action: common_pb2.Action | None = None  # of last_response: a retry must carry the same action
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    observation_spec: common_pb2.ObservationSpec | None = None  # the spec of the open, for steps that name none
    obs_base: delta.Base | None = None  # the last observation sent, which incremental ones are edits to (webenv.delta)

    def __post_init__(self) -> None:
        if not self.lease_deadline:
            self.renew()

    def renew(self, seconds: float = 0.0) -> None:
        """Push the lease deadline `seconds` (the session's lease length when 0) from now."""
        if seconds > 0:
            self.lease_seconds = seconds
        self.lease_deadline = time.monotonic() + self.lease_seconds

    def lease_expired(self, now: float | None = None) -> bool:
        return (now if now is not None else time.monotonic()) >= self.lease_deadline

    def lease_expires_at(self) -> Timestamp:
        """The lease's end as a wall-clock Timestamp (Session.lease_expires_at)."""
        return timestamp(time.time() + max(0.0, self.lease_deadline - time.monotonic()))

    def created_at(self) -> Timestamp:
        return timestamp(self.created_wall)

    def to_proto(self) -> environment_pb2.Session:  # pragma: no cover - every implementation has its own
        raise NotImplementedError


S = TypeVar("S", bound=EnvSession)
T = TypeVar("T")
M = TypeVar("M", environment_pb2.OpenSessionRequest, environment_pb2.StepRequest)


class SessionTable(Generic[S]):
    """The open sessions of one node, the final states of recently ended ones, request ids, admission and leases.

    `where` names the node in NOT_FOUND messages (``node farm-1``, ``world model wm-0``); `kind` the sessions in
    the limit's message. `done_lease_seconds`: a session whose episode ended (``done``) keeps at most this lease
    after its last step, for its CloseSession and a retry of that step, then is swept (None: its full lease). The
    metrics, when given: a gauge of open sessions, a counter of sessions opened, a counter of ends by final state
    (one label, lower-case: ``closed``, ``expired``, ``crashed``)."""

    def __init__(self, *, where: str, max_sessions: int, reaper_interval_seconds: float = 1.0,
                 ended_kept: int = ENDED_KEPT, request_ids_kept: int = REQUEST_IDS_KEPT,
                 done_lease_seconds: float | None = None, kind: str = "sessions", open_gauge: Any = None,
                 opened_counter: Any = None, closed_counter: Any = None) -> None:
        self.where = where
        self.kind = kind
        self.max_sessions = max_sessions
        self.reaper_interval_seconds = reaper_interval_seconds
        self.ended_kept = ended_kept
        self.done_lease_seconds = done_lease_seconds
        self.sessions: dict[str, S] = {}  # open sessions only
        self.ended: OrderedDict[str, environment_pb2.Session] = OrderedDict()  # final states, the last `ended_kept`
        self.open_requests: RequestCache[str] = RequestCache(request_ids_kept)  # OpenSession request id -> session
        self.fork_requests: RequestCache[list[str]] = RequestCache(request_ids_kept)  # ForkSession's -> the copies
        self.opening = 0  # sessions admitted and not yet open (admission)
        self.draining = False
        self._open_gauge, self._opened, self._closed = open_gauge, opened_counter, closed_counter
        self._reaper: asyncio.Task[None] | None = None
        self._teardowns: set[asyncio.Future[None]] = set()  # releases that outlive a cancelled caller

    # -- life of the table -------------------------------------------------------------------------
    def start(self) -> None:
        """Start the lease reaper (every `reaper_interval_seconds`)."""
        self._reaper = asyncio.create_task(self._reap_loop(), name="lease-reaper")

    async def close(self) -> None:
        """Stop the reaper, close every open session and wait (15 s at most) for their teardowns."""
        if self._reaper is not None:
            self._reaper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._reaper
        for s in list(self.sessions.values()):
            with contextlib.suppress(Exception):
                await self.end(s, environment_pb2.SESSION_STATE_CLOSED)
        if self._teardowns:
            await asyncio.wait(list(self._teardowns), timeout=15)

    async def _reap_loop(self) -> None:
        while True:
            await asyncio.sleep(self.reaper_interval_seconds)
            self.sweep()

    def sweep(self) -> int:
        """End every session past its lease that is not busy (mid-step, opening, closing) EXPIRED; how many."""
        now = time.monotonic()
        gone = [s for s in self.sessions.values() if s.lease_expired(now) and not s.lock.locked()]
        for s in gone:
            log.info("session %s lease expired", s.session_id)
            self.end_soon(s, environment_pb2.SESSION_STATE_EXPIRED)
        return len(gone)

    # -- lookups -----------------------------------------------------------------------------------
    def live(self, session_id: str) -> S | None:
        """The open session of this id (one past its lease and not busy is ended here, as the sweep would)."""
        s = self.sessions.get(session_id)
        if s is not None and s.lease_expired() and not s.lock.locked():
            self.end_soon(s, environment_pb2.SESSION_STATE_EXPIRED)
            return None
        return s

    def get(self, session_id: str) -> S:
        """An open session, or the error that says why there is none: INVALID_ARGUMENT naming `session_id` when it
        is empty, FAILED_PRECONDITION SESSION_<STATE> when it ended, NOT_FOUND SESSION_NOT_FOUND otherwise."""
        require_session_id(session_id)
        s = self.live(session_id)
        if s is not None:
            return s
        old = self.ended.get(session_id)
        if old is not None:
            raise session_ended(session_id, environment_pb2.SessionState.Name(old.state))
        raise session_not_found(session_id, self.where)

    def still_open(self, s: S) -> None:
        """Under the session's lock: raise its final state when it ended while the caller waited for the lock."""
        if s.session_id not in self.sessions:
            self.get(s.session_id)

    def proto(self, session_id: str) -> environment_pb2.Session:
        """GetSession: an open session, or an ended one's final state (the last `ended_kept`)."""
        require_session_id(session_id)
        s = self.live(session_id)
        if s is None and session_id in self.ended:
            return self.ended[session_id]
        return (s or self.get(session_id)).to_proto()

    def reopened(self, request_id: str) -> S | None:
        """The open session an earlier OpenSession with this request_id made, if any."""
        sid = self.open_requests.get(request_id)
        return self.live(sid) if sid else None

    # -- admission ---------------------------------------------------------------------------------
    @contextlib.asynccontextmanager
    async def admission(self, n: int = 1) -> AsyncIterator[None]:
        """Admit `n` more sessions (OpenSession, ForkSession): :meth:`draining_error` while draining,
        :meth:`full` past `max_sessions` (open and opening, after a sweep of expired ones); they count as opening
        until the block ends."""
        if self.draining:
            raise self.draining_error()
        if len(self.sessions) + self.opening + n > self.max_sessions:
            self.sweep()
        if len(self.sessions) + self.opening + n > self.max_sessions:
            raise self.full(n)
        self.opening += n
        try:
            yield
        finally:
            self.opening -= n

    def draining_error(self) -> errors.WebenvError:
        return errors.Unavailable(f"{self.where} is draining; open the session elsewhere", reason="DRAINING")

    def full(self, n: int) -> errors.WebenvError:
        """The refusal of `n` more sessions past the limit (RESOURCE_EXHAUSTED with a retry hint)."""
        more = f", {n} more asked for" if n > 1 else ""
        return errors.ResourceExhausted(f"{len(self.sessions)} {self.kind} are open{more} (limit {self.max_sessions})",
                                        reason="TOO_MANY_SESSIONS", retry_after_seconds=1.0)

    def add(self, s: S) -> None:
        """Register a new session (open from now on, for lookups, limits and the reaper)."""
        self.sessions[s.session_id] = s
        if self._opened is not None:
            self._opened.inc()
        self._count()

    # -- ends --------------------------------------------------------------------------------------
    def end_soon(self, s: S, state: int) -> environment_pb2.Session:
        """Drop a session now, keeping its final state; its teardown (:meth:`release`) runs in the background.
        A second end answers the first one's final state."""
        proto, _ = self._drop(s, state)
        return proto

    async def end(self, s: S, state: int) -> environment_pb2.Session:
        """Drop a session and wait for its teardown. Shielded: a caller that gives up (grpc cancels CloseSession
        when the client's deadline passes, as under load) must not stop the teardown; in the farm, a browser
        retired for recycling never saw an uncounted context go and lived on with its Chromium processes (seen in
        the soak)."""
        proto, teardown = self._drop(s, state)
        if teardown is not None:
            await asyncio.shield(teardown)
        return proto

    def _drop(self, s: S, state: int) -> tuple[environment_pb2.Session, asyncio.Future[None] | None]:
        if self.sessions.pop(s.session_id, None) is None:
            return self.ended.get(s.session_id) or s.to_proto(), None
        s.state = state
        proto = s.to_proto()
        self.ended[s.session_id] = proto
        while len(self.ended) > self.ended_kept:
            self.ended.popitem(last=False)
        if self._closed is not None:
            self._closed.labels(environment_pb2.SessionState.Name(state).removeprefix("SESSION_STATE_").lower()).inc()
        self._count()
        teardown = asyncio.ensure_future(self.release(s, state))
        self._teardowns.add(teardown)
        teardown.add_done_callback(self._torn_down)
        return proto, teardown

    def _torn_down(self, teardown: asyncio.Future[None]) -> None:
        self._teardowns.discard(teardown)
        if not teardown.cancelled() and teardown.exception() is not None:  # retrieved: end() re-raises it
            log.warning("a session's teardown failed: %r", teardown.exception())

    async def release(self, s: S, state: int) -> None:
        """What an ended session leaves to free (nothing here; the farm hands its context back to the pool)."""

    def _count(self) -> None:
        if self._open_gauge is not None:
            self._open_gauge.set(len(self.sessions))


class EnvBackend(Protocol[S, T]):
    """What an implementation plugs into :class:`EnvironmentService`: its sessions and what it does to them.

    The service has checked the request's shape, the session (open, under its lock where said) and the step_index
    before a method runs; a method raises a `webenv.errors.WebenvError` for what it refuses."""

    @property
    def table(self) -> SessionTable[S]: ...

    @property
    def max_lease_seconds(self) -> float: ...

    @property
    def max_wait_ms(self) -> int: ...

    @property
    def step_timeout_seconds(self) -> float | None:
        """A step's deadline when its request sets none (None: only the RPC's)."""
        ...

    def check_open(self, request: environment_pb2.OpenSessionRequest) -> None:
        """The implementation's own OpenSession checks (after start and spec, before the lease)."""
        ...

    async def open(self, request: environment_pb2.OpenSessionRequest) -> environment_pb2.OpenSessionResponse:
        """A new session, admitted (``table.admission``) and registered (``table.add``) by the backend."""
        ...

    async def reopen(self, s: S) -> environment_pb2.OpenSessionResponse:
        """The answer to a repeated OpenSession (or ForkSession) request id: the session as it is now."""
        ...

    async def step(self, s: S, request: environment_pb2.StepRequest, kind: str) -> environment_pb2.StepResponse:
        """One step, under the session's lock, answered with ``step_index = s.step_count`` (the service counts it)."""
        ...

    async def step_timed_out(self, s: S, kind: str, seconds: float) -> str:
        """Under the lock, after a step ran past its deadline of `seconds`: tidy the session and say what was done
        (a clause of the DEADLINE_EXCEEDED message). Whether the step counted is the service's rule, not this."""
        ...

    async def fork_capture(self, parent: S, request: environment_pb2.ForkSessionRequest) -> T:
        """Under the parent's lock (no step of it in between): what the copies are made of."""
        ...

    async def fork_copies(self, snapshot: T, request: environment_pb2.ForkSessionRequest
                          ) -> list[environment_pb2.OpenSessionResponse]:
        """The copies (registered), after the parent's lock is released; all or nothing."""
        ...

    async def evidence(self, s: S) -> str:
        """CloseSession's ``site_state_json`` when ``capture_evidence`` is set."""
        ...

    def network_trace(self, s: S) -> list[common_pb2.NetworkEvent]:
        """CloseSession's ``network_events`` when ``capture_evidence`` is set: the requests the session's pages made
        (empty for an environment without a network)."""
        ...


class TaskCatalog:
    """TaskService at `address`, for the tasks OpenSession is given by id alone (`envcontract.task_reference`).

    A channel per lookup (an open by id is a client's convenience, not the rollout path, which sends whole tasks).
    An id the catalog lacks is INVALID_ARGUMENT ``UNKNOWN_TASK`` naming ``task.task_id``; a catalog that does not
    answer is UNAVAILABLE ``SITES_UNAVAILABLE``."""

    def __init__(self, address: str, timeout: float = 10.0) -> None:
        self.address = address
        self.timeout = timeout

    async def get(self, task_id: str) -> common_pb2.Task:
        async with make_channel(self.address, timeout=self.timeout) as channel:
            try:
                resp = await task_pb2_grpc.TaskServiceStub(channel).GetTask(task_pb2.GetTaskRequest(task_id=task_id))
            except grpc.aio.AioRpcError as exc:
                if exc.code() == grpc.StatusCode.NOT_FOUND:
                    raise errors.InvalidArgument(
                        f"task.task_id: {task_id[:200]!r} is not in the task catalog at {self.address}",
                        reason="UNKNOWN_TASK", metadata={"field": "task.task_id"}) from exc
                raise errors.Unavailable(f"TaskService at {self.address} could not resolve task {task_id[:200]!r}: "
                                         f"{exc.code().name}: {(exc.details() or '')[:300]}", reason="SITES_UNAVAILABLE",
                                         metadata={"sites_addr": self.address}) from exc
        return resp.task


def _copy(request: M) -> M:
    out = type(request)()
    out.CopyFrom(request)
    return out


#: The cap on the tree a budget prunes from (the environment's own cap, 200,000 characters on the farm, would cut an
#: 8,000-element page before its pruning sees the end of it).
BUDGET_SOURCE_CHARS = 2_000_000


def _with_elements(spec: common_pb2.ObservationSpec) -> common_pb2.ObservationSpec:
    """The spec a budget observes with: ELEMENTS added (what it reads visibility from), the whole tree."""
    out = common_pb2.ObservationSpec()
    out.CopyFrom(spec)
    out.max_text_chars = max(out.max_text_chars, BUDGET_SOURCE_CHARS)
    if common_pb2.OBSERVATION_FORMAT_ELEMENTS not in out.formats:
        out.formats.append(common_pb2.OBSERVATION_FORMAT_ELEMENTS)
    return out


def _budgeted(spec: common_pb2.ObservationSpec | None) -> bool:
    """Whether the spec asks for a budget (in characters or in tokens)."""
    return spec is not None and bool(spec.budget_chars or spec.budget_tokens)


def _elements_added(spec: common_pb2.ObservationSpec | None) -> bool:
    return _budgeted(spec) and common_pb2.OBSERVATION_FORMAT_ELEMENTS not in spec.formats  # type: ignore[union-attr]


def _remaining(context: grpc.aio.ServicerContext | None) -> float | None:
    """Seconds left before the caller's deadline, less the margin its answer needs (None: no deadline)."""
    t = context.time_remaining() if context is not None else None
    return None if t is None else max(0.0, t - DEADLINE_MARGIN_SECONDS)


class EnvironmentService(environment_pb2_grpc.EnvironmentServiceServicer, Generic[S, T]):
    """EnvironmentService over a backend. ``step`` (no RPC context) is what StepStream's items run; `catalog`
    resolves a task given by id alone (None: such a task is INVALID_ARGUMENT)."""

    def __init__(self, backend: EnvBackend[S, T], catalog: TaskCatalog | None = None) -> None:
        self.backend = backend
        self.table = backend.table
        self.catalog = catalog
        self._closing: set[asyncio.Task[None]] = set()

    async def _resolve_task(self, request: environment_pb2.OpenSessionRequest) -> environment_pb2.OpenSessionRequest:
        """The request with its task given by id alone replaced by the catalog's task (the request as it is else)."""
        task_id = task_reference(request.task) if request.WhichOneof("start") == "task" else ""
        if not task_id:
            return request
        if self.catalog is None:
            raise errors.InvalidArgument(
                f"task: only task_id {task_id[:200]!r} is given and {self.table.where} has no task catalog to resolve "
                "it; send the whole task (as TaskService.GetTask returns it) or a start_url", reason="BAD_TASK",
                metadata={"field": "task"})
        resolved = environment_pb2.OpenSessionRequest()
        resolved.CopyFrom(request)
        resolved.task.CopyFrom(await self.catalog.get(task_id))
        return resolved

    async def OpenSession(self, request: environment_pb2.OpenSessionRequest,
                          context: grpc.aio.ServicerContext | None) -> environment_pb2.OpenSessionResponse:
        if request.WhichOneof("start") is None:
            raise errors.InvalidArgument("start_url or task is required", reason="BAD_START",
                                         metadata={"field": "start"})
        validate_observation_spec(request.observation_spec, "observation_spec")
        request = await self._resolve_task(request)
        self.backend.check_open(request)
        validate_lease(request.lease_seconds, self.backend.max_lease_seconds)
        asked = request.observation_spec
        again = self.table.reopened(request.request_id)
        if again is not None:  # the same open again: its observation within the same budget
            resp = await self.backend.reopen(again)
            apply_budget(resp.observation, asked, drop_elements=_elements_added(asked))
            again.obs_base = None  # the client's base may be this answer or a later one: the next step is whole
            return resp
        if _budgeted(asked):  # the elements tell the budget what is in view
            request = _copy(request)
            request.observation_spec.CopyFrom(_with_elements(asked))
        resp = await self.backend.open(request)
        sid = resp.session.session_id
        apply_budget(resp.observation, asked, drop_elements=_elements_added(asked))
        if sid in self.table.sessions:
            self.table.sessions[sid].observation_spec = asked
            self.table.sessions[sid].obs_base = delta.encode(resp.observation, asked, -1, None)
        self.table.open_requests.put(request.request_id, sid)
        if context is None:
            return resp
        left = context.time_remaining()
        if left is not None and left < DEADLINE_MARGIN_SECONDS:
            await self._close_unseen(sid)
            raise errors.DeadlineExceeded(f"the session opened {max(left, 0.0) * 1000:.0f} ms before the caller's "
                                          "deadline, too late to reach it; it was closed", reason="OPEN_TOO_LATE")
        loop = asyncio.get_running_loop()

        def ended(ctx: grpc.aio.ServicerContext) -> None:
            if ctx.cancelled():  # the answer did not reach its caller
                task = loop.create_task(self._close_unseen(sid))
                self._closing.add(task)
                task.add_done_callback(self._closing.discard)

        context.add_done_callback(ended)
        return resp

    async def _close_unseen(self, session_id: str) -> None:
        """Close a session whose caller never got its OpenSession answer (best effort: it may be closed already)."""
        s = self.table.sessions.get(session_id)
        if s is None:
            return
        with contextlib.suppress(Exception):
            async with s.lock:
                await self.table.end(s, environment_pb2.SESSION_STATE_CLOSED)
            log.info("session %s closed: its OpenSession answer did not reach the caller in time", session_id)

    async def Step(self, request: environment_pb2.StepRequest,
                   context: grpc.aio.ServicerContext | None) -> environment_pb2.StepResponse:
        return await self.step(request, deadline=_remaining(context))

    async def step(self, request: environment_pb2.StepRequest, deadline: float | None = None
                   ) -> environment_pb2.StepResponse:
        """One step: check, lock, retry or act within the deadline (seconds from now), count and keep the answer."""
        b = self.backend
        s = self.table.get(request.session_id)
        kind = validate_action(request.action, b.max_wait_ms)
        if request.HasField("observation_spec"):
            validate_observation_spec(request.observation_spec, "observation_spec")
        if request.timeout_seconds < 0:
            raise errors.InvalidArgument("timeout_seconds: must be >= 0", reason="BAD_TIMEOUT",
                                         metadata={"field": "timeout_seconds"})
        async with s.lock:
            self.table.still_open(s)
            last_index = s.last_response.step_index if s.last_response is not None else None
            if is_retry(request, s.step_count, last_index, s.last_action):
                return s.last_response  # type: ignore[return-value]  # a retried step: from cache, not acted twice
            s.renew()
            asked = request.observation_spec if request.HasField("observation_spec") else s.observation_spec
            budget = _budgeted(asked)
            if budget:  # the elements tell the budget what is in view
                request = _copy(request)
                request.observation_spec.CopyFrom(_with_elements(asked))
            timeout = request.timeout_seconds or b.step_timeout_seconds
            if deadline is not None:
                timeout = min(timeout, max(MIN_STEP_SECONDS, deadline)) if timeout else max(MIN_STEP_SECONDS, deadline)
            if timeout is None:
                resp = await b.step(s, request, kind)
            else:
                try:
                    resp = await asyncio.wait_for(b.step(s, request, kind), timeout)
                except TimeoutError as exc:
                    raise await self._timed_out(s, kind, timeout) from exc
            if budget:
                apply_budget(resp.observation, asked, drop_elements=_elements_added(asked))
            s.obs_base = delta.encode(resp.observation, asked, s.step_count, s.obs_base,
                                      keep=s.observation_spec is not None and s.observation_spec.incremental)
            s.step_count += 1
            s.last_response, s.last_action = resp, request.action
            s.renew()
            if s.done and self.table.done_lease_seconds is not None:  # kept for its close and a retry, then swept
                s.lease_deadline = time.monotonic() + min(s.lease_seconds, self.table.done_lease_seconds)
            return resp

    async def _timed_out(self, s: S, kind: str, seconds: float) -> errors.DeadlineExceeded:
        """The one rule for a step past its deadline, for every backend: it counts (the action may have run, and the
        farm cannot undo a hung renderer's), nothing is cached for it (a retry of its index is STEP_INDEX_MISMATCH,
        never the step before it), and the error names the next index (``expected``, as STEP_INDEX_MISMATCH does),
        which the sdk's EnvironmentClient moves to by itself."""
        done = await self.backend.step_timed_out(s, kind, seconds)
        index = s.step_count
        s.step_count += 1
        s.last_response, s.last_action = None, None
        s.renew()
        return errors.DeadlineExceeded(
            f"step {index} of session {s.session_id} ({kind}) exceeded {seconds:.3g}s; {done}; the step counted: the "
            f"next is step_index {index + 1}", reason="STEP_TIMEOUT",
            metadata={"session_id": s.session_id, "kind": kind, "expected": str(index + 1)})

    async def StepStream(self, request_iterator: AsyncIterator[environment_pb2.StepStreamRequest],
                         context: grpc.aio.ServicerContext | None
                         ) -> AsyncIterator[environment_pb2.StepStreamResponse]:
        """Each item is `step` in its own task; answers leave in completion order (`webenv.envcontract`)."""
        async for msg in step_stream(request_iterator, self.step):
            yield msg

    async def CloseSession(self, request: environment_pb2.CloseSessionRequest,
                           context: grpc.aio.ServicerContext | None) -> environment_pb2.CloseSessionResponse:
        """After a step in flight (the session's lock); a session that ended meanwhile answers how it ended."""
        s = self.table.get(request.session_id)
        async with s.lock:
            self.table.still_open(s)
            evidence = await self.backend.evidence(s) if request.capture_evidence else ""
            trace = self.backend.network_trace(s) if request.capture_evidence else []
            proto = await self.table.end(s, environment_pb2.SESSION_STATE_CLOSED)
        return environment_pb2.CloseSessionResponse(session=proto, site_state_json=evidence, env_reward=s.env_reward,
                                                    network_events=trace)

    async def ForkSession(self, request: environment_pb2.ForkSessionRequest,
                          context: grpc.aio.ServicerContext | None) -> environment_pb2.ForkSessionResponse:
        """`count` copies of an open session: admitted as `count` opens, captured under the parent's lock, built
        after it (the farm's rebuild takes ~100s of ms per copy; the parent may step meanwhile); a repeated
        request id answers the same copies while they are all open."""
        t0 = time.perf_counter()
        validate_fork_count(request.count)
        validate_lease(request.lease_seconds, self.backend.max_lease_seconds)
        parent = self.table.get(request.session_id)
        ids = self.table.fork_requests.get(request.request_id)
        if ids is not None:
            copies = [self.table.live(sid) for sid in ids]
            if all(c is not None for c in copies):
                for c in copies:
                    if c is not None:
                        c.obs_base = None  # as a repeated open's: the next step is whole
                return environment_pb2.ForkSessionResponse(
                    sessions=[await self.backend.reopen(c) for c in copies if c is not None])
        async with self.table.admission(request.count):
            async with parent.lock:
                self.table.still_open(parent)
                snapshot = await self.backend.fork_capture(parent, request)
            answers = await self.backend.fork_copies(snapshot, request)
        self.table.fork_requests.put(request.request_id, [a.session.session_id for a in answers])
        for a in answers:
            copy = self.table.sessions.get(a.session.session_id)
            if copy is not None:
                copy.obs_base = delta.encode(a.observation, copy.observation_spec, -1, None)
        return environment_pb2.ForkSessionResponse(sessions=answers, fork_seconds=time.perf_counter() - t0)

    async def GetSession(self, request: environment_pb2.GetSessionRequest,
                         context: grpc.aio.ServicerContext | None) -> environment_pb2.GetSessionResponse:
        """An open session, or an ended one's final state."""
        return environment_pb2.GetSessionResponse(session=self.table.proto(request.session_id))

    async def RenewLease(self, request: environment_pb2.RenewLeaseRequest,
                         context: grpc.aio.ServicerContext | None) -> environment_pb2.RenewLeaseResponse:
        validate_lease(request.lease_seconds, self.backend.max_lease_seconds)
        s = self.table.get(request.session_id)
        s.renew(request.lease_seconds)
        return environment_pb2.RenewLeaseResponse(session=s.to_proto())

"""EnvironmentService backed by the world model: simulated sessions through the farm's own contract.

A session starts from a recorded page — the model directory's start states (the first page of every collected
episode), the files of WEBENV_WORLDMODEL_START_STATES, or `task.metadata["start_state"]` (a11y-tree text) — and
every Step asks the world model for the next page; the session keeps the pages its documents loaded and its
history (compose.PageMemory), as a browser tab does. `answer(...)` ends the episode (done), the horizon
truncates it. Sessions are marked ENV_KIND_WORLD_MODEL, so a collector pointed at this address stores simulated
episodes as such. Observations carry AXTREE and MARKDOWN (rendered from the tree with the links' targets);
other formats are left out.

An element action addressed by an element id answers that id as `target_element_id` (the farm's, for click,
hover, fill, select and scroll_element); one whose element is not on the page does nothing and answers the farm's
`element N not found on the page` as `last_action_error`. A CSS selector cannot be resolved without a DOM: its
target_element_id is empty (`python -m webenv.worldmodel conformance` measures what agrees with the farm).

Requests are checked by the same rules as the farm's (`webenv.envcontract`): malformed actions and observation
specs, leases, repeated step indexes, unknown and ended sessions get the same answers from both.

Sessions are bounded and evicted as the farm's are (its `registry.py`): only open sessions are held whole; one that
ends — closed, idle past its lease, or an ended episode (done or truncated) left unclosed
WEBENV_WORLDMODEL_DONE_LEASE_SECONDS after its last step — is dropped, swept every
WEBENV_WORLDMODEL_REAPER_INTERVAL_SECONDS (and at once when it is next asked for), and only its final state is kept,
for the last WEBENV_WORLDMODEL_ENDED_SESSIONS_KEPT ended sessions: acting on one is FAILED_PRECONDITION
`SESSION_CLOSED` / `SESSION_EXPIRED`, on one forgotten or never opened NOT_FOUND `SESSION_NOT_FOUND`. The request
ids of OpenSession and ForkSession are kept in the sdk's `RequestCache`, the last WEBENV_WORLDMODEL_REQUEST_IDS_KEPT
each. The gauge `webenv_worldmodel_simulated_sessions_open` is the number of sessions held.

A start page with no recorded state is taken once from the real page through the browser farm when
WEBENV_WORLDMODEL_FARM_ADDR names one (`farmstart.py`); without a farm such a start is FAILED_PRECONDITION
`START_STATE_UNKNOWN` naming the field.

ForkSession copies everything a simulated session is — its page, the pages its documents loaded, its history and
position, and the action history the model is conditioned on — so a copy predicts exactly as the parent would
have (PageView is never changed in place: copying the containers is the whole copy, microseconds). A copy starts
at step 0 with the parent's remaining horizon, so a rollout from the fork is truncated where the parent's would be.

Each session keeps a value memory (consistency.py): an item's price, a quantity, a text the agent typed stay on later
predicted pages what the session first showed, the last WEBENV_WORLDMODEL_VALUES_KEPT values per session (0: off);
it is the session's, so it goes when the session is dropped, and a fork copies it.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import logging
import socket
import time
import uuid
from collections import OrderedDict
from dataclasses import dataclass, field

import grpc
from google.protobuf.timestamp_pb2 import Timestamp
from webenv import errors
from webenv.actions import format_action
from webenv.envcontract import (
    is_retry,
    require_session_id,
    session_ended,
    session_not_found,
    step_stream,
    validate_action,
    validate_fork_count,
    validate_lease,
    validate_observation_spec,
)
from webenv.idempotency import RequestCache
from webenv.v1 import common_pb2, environment_pb2, environment_pb2_grpc
from webenv.worldmodel import metrics
from webenv.worldmodel.compose import PageMemory, PageView
from webenv.worldmodel.consistency import VALUES_KEPT, ValueMemory
from webenv.worldmodel.farmstart import FarmStarts
from webenv.worldmodel.formats import axtree_to_markdown
from webenv.worldmodel.page import parse
from webenv.worldmodel.predict import Predictor, Query, advance
from webenv.worldmodel.servicer import ready

log = logging.getLogger("webenv.worldmodel")
REQUEST_IDS_KEPT = 10_000  # OpenSession / ForkSession request ids remembered for retries (each)
ENDED_KEPT = 2000  # ended sessions whose final state is remembered (the farm's number)
_SUPPORTED = {common_pb2.OBSERVATION_FORMAT_AXTREE, common_pb2.OBSERVATION_FORMAT_MARKDOWN}
#: Actions whose StepResponse.target_element_id the farm fills (browser/actions.py: pointer and element actions).
_RESOLVED = frozenset({"click", "hover", "fill", "select", "scroll_element"})


def _ts(t: float) -> Timestamp:
    ts = Timestamp()
    ts.FromNanoseconds(int(t * 1e9))
    return ts


def _element_id(action: common_pb2.Action) -> str:
    """The element id an element action's target names (empty for a CSS selector or an action without a target)."""
    kind = action.WhichOneof("kind")
    msg = getattr(action, kind) if kind else None
    if msg is None or "target" not in msg.DESCRIPTOR.fields_by_name or not msg.HasField("target"):
        return ""
    return msg.target.element_id if msg.target.WhichOneof("ref") == "element_id" else ""


def _title(state: str) -> str:
    """The page's title as the tree shows it: its first level-1 heading."""
    for line in state.split("\n"):
        s = line.strip()
        if " heading " in s and "level=1" in s:
            return s.split('"', 1)[1].rsplit('"', 1)[0] if '"' in s else ""
    return ""


@dataclass
class SimSession:
    """One simulated session."""

    session_id: str
    page: PageView
    instruction: str
    task_id: str
    horizon: int
    lease_seconds: float
    labels: dict[str, str]
    formats: list[int]
    created: float = field(default_factory=time.time)
    lease_expires: float = 0.0
    status: int = environment_pb2.SESSION_STATE_OPEN
    step_count: int = 0
    done: bool = False
    memory: PageMemory = field(default_factory=PageMemory)
    history: list[tuple[str, str]] = field(default_factory=list)
    values: ValueMemory | None = None  # what the session has shown (consistency.py); None: the memory is off
    last: environment_pb2.StepResponse | None = None
    last_action: common_pb2.Action | None = None  # of `last`: a retry must carry the same action
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)


class SimulatedEnvironment(environment_pb2_grpc.EnvironmentServiceServicer):
    """Sessions whose observations come from the world model."""

    def __init__(self, predictor: Predictor | None, start_states: dict[str, tuple[PageView, str]] | None = None,
                 horizon: int = 30, lease_seconds: float = 300.0, max_sessions: int = 1000,
                 max_state_chars: int = 200_000, max_lease_seconds: float = 3600.0, max_wait_ms: int = 10_000, *,
                 done_lease_seconds: float = 30.0, reaper_interval_seconds: float = 1.0,
                 ended_kept: int = ENDED_KEPT, request_ids_kept: int = REQUEST_IDS_KEPT,
                 farm: FarmStarts | None = None, values_kept: int = VALUES_KEPT) -> None:
        self._predictor = predictor  # None while the model loads
        self.start_states = start_states or {}
        self.horizon = horizon
        self.lease_seconds = lease_seconds
        self.max_lease_seconds = max_lease_seconds
        self.max_wait_ms = max_wait_ms
        self.max_sessions = max_sessions
        self.max_state_chars = max_state_chars
        self.done_lease_seconds = done_lease_seconds
        self.reaper_interval_seconds = reaper_interval_seconds
        self.ended_kept = ended_kept
        self.farm = farm
        self.values_kept = values_kept  # entity values kept per session (consistency.py); 0: no value memory
        self.sessions: dict[str, SimSession] = {}  # open sessions only
        self.ended: OrderedDict[str, environment_pb2.Session] = OrderedDict()  # final states, the last `ended_kept`
        self._by_request: RequestCache[str] = RequestCache(request_ids_kept)  # OpenSession request id -> session id
        self._forks_by_request: RequestCache[list[str]] = RequestCache(request_ids_kept)  # ForkSession's -> copies
        self._reaper: asyncio.Task[None] | None = None
        self.node = socket.gethostname()

    @property
    def predictor(self) -> Predictor:
        return ready(self._predictor)

    @predictor.setter
    def predictor(self, predictor: Predictor) -> None:
        """The loaded world model (the service answers UNAVAILABLE until it is set)."""
        self._predictor = predictor

    # --- the sessions' lives --------------------------------------------------------------------------
    def start(self) -> None:
        """Start the sweep of idle and ended sessions (the farm's lease reaper)."""
        self._reaper = asyncio.create_task(self._reap_loop(), name="worldmodel-session-reaper")

    async def close(self) -> None:
        if self._reaper is not None:
            self._reaper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._reaper
        if self.farm is not None:
            await self.farm.close()

    async def _reap_loop(self) -> None:
        while True:
            await asyncio.sleep(self.reaper_interval_seconds)
            self.sweep()

    def sweep(self) -> int:
        """End every session past its lease that is not mid-step (EXPIRED); how many ended."""
        now = time.time()
        gone = [s for s in self.sessions.values() if now >= s.lease_expires and not s.lock.locked()]
        for s in gone:
            self._end(s, environment_pb2.SESSION_STATE_EXPIRED)
        return len(gone)

    def _end(self, s: SimSession, state: int) -> environment_pb2.Session:
        """Drop a session, keeping only its final state (the last `ended_kept`)."""
        if self.sessions.pop(s.session_id, None) is None:
            return self.ended.get(s.session_id) or self._session_pb(s)
        s.status = state
        proto = self._session_pb(s)
        self.ended[s.session_id] = proto
        while len(self.ended) > self.ended_kept:
            self.ended.popitem(last=False)
        name = environment_pb2.SessionState.Name(state).removeprefix("SESSION_STATE_").lower()
        if state == environment_pb2.SESSION_STATE_EXPIRED:
            log.info("simulated session %s expired", s.session_id)
        metrics.SIM_SESSIONS_CLOSED.labels(state=name).inc()
        metrics.SIM_SESSIONS_OPEN.set(len(self.sessions))
        return proto

    def _add(self, s: SimSession) -> None:
        self.sessions[s.session_id] = s
        metrics.SIM_SESSIONS_OPENED.inc()
        metrics.SIM_SESSIONS_OPEN.set(len(self.sessions))

    def _lookup(self, session_id: str) -> SimSession | None:
        """The open session of this id (one past its lease is ended here, as the sweep would), else None."""
        s = self.sessions.get(session_id)
        if s is not None and time.time() >= s.lease_expires and not s.lock.locked():
            self._end(s, environment_pb2.SESSION_STATE_EXPIRED)
            return None
        return s

    def _open(self, session_id: str) -> SimSession:
        """An open session, or the error that says why there is none (bad id, ended and how, unknown)."""
        require_session_id(session_id)
        s = self._lookup(session_id)
        if s is not None:
            return s
        old = self.ended.get(session_id)
        if old is not None:
            raise session_ended(session_id, environment_pb2.SessionState.Name(old.state))
        raise session_not_found(session_id, f"world model {self.node}")

    def _still_open(self, s: SimSession) -> None:
        """Under the session's lock: the session's final state when it ended while the caller waited."""
        if s.session_id not in self.sessions:
            self._open(s.session_id)

    def _room(self, n: int) -> None:
        """RESOURCE_EXHAUSTED `TOO_MANY_SESSIONS` when `n` more sessions would pass the limit (after a sweep)."""
        if len(self.sessions) + n > self.max_sessions:
            self.sweep()
        if len(self.sessions) + n > self.max_sessions:
            more = f", {n} more asked for" if n > 1 else ""
            raise errors.ResourceExhausted(f"{len(self.sessions)} simulated sessions are open{more} "
                                           f"(limit {self.max_sessions})", reason="TOO_MANY_SESSIONS",
                                           retry_after_seconds=1.0)

    # --- helpers ------------------------------------------------------------------------------------
    def _session_pb(self, s: SimSession) -> environment_pb2.Session:
        return environment_pb2.Session(
            session_id=s.session_id, state=s.status, task_id=s.task_id, env_kind=common_pb2.ENV_KIND_WORLD_MODEL,
            step_count=s.step_count,
            tabs=[common_pb2.Tab(tab_id="0", url=s.page.url, title=_title(s.page.state), active=True)],
            created_at=_ts(s.created), lease_expires_at=_ts(s.lease_expires), node=self.node, labels=s.labels)

    def _observation(self, s: SimSession, formats: list[int]) -> common_pb2.Observation:
        title = _title(s.page.state)
        obs = common_pb2.Observation(url=s.page.url, title=title, active_tab_id="0",
                                     tabs=[common_pb2.Tab(tab_id="0", url=s.page.url, title=title, active=True)])
        for f in formats:
            if f == common_pb2.OBSERVATION_FORMAT_AXTREE:
                obs.axtree = s.page.state
            elif f == common_pb2.OBSERVATION_FORMAT_MARKDOWN:
                obs.markdown = axtree_to_markdown(s.page.state, s.page.links)
            obs.formats.append(f)
        return obs

    @staticmethod
    def _formats(spec: common_pb2.ObservationSpec, default: list[int]) -> list[int]:
        """The requested formats the model can simulate, in request order.

        As the contract says of ``Observation.formats``, formats that cannot be produced are left out rather
        than failing the call: a collector that asks the farm for AXTREE + HTML must be able to switch to the
        world model by address alone. Only a request none of whose formats can be simulated is refused.
        """
        validate_observation_spec(spec, "observation_spec")
        formats = list(spec.formats) or default
        kept = [f for f in formats if f in _SUPPORTED]
        if not kept:
            bad = ", ".join(common_pb2.ObservationFormat.Name(f) for f in formats)
            raise errors.InvalidArgument(
                f"observation_spec.formats: {bad} cannot be simulated (AXTREE and MARKDOWN can)",
                reason="FORMAT_NOT_SUPPORTED", metadata={"field": "observation_spec.formats"})
        return kept

    # --- RPCs -------------------------------------------------------------------------------------------
    async def OpenSession(self, request: environment_pb2.OpenSessionRequest, context: grpc.aio.ServicerContext) -> environment_pb2.OpenSessionResponse:
        t0 = time.perf_counter()
        which = request.WhichOneof("start")
        if which is None:
            raise errors.InvalidArgument("start_url or task is required", reason="BAD_START", metadata={"field": "start"})
        formats = self._formats(request.observation_spec, [common_pb2.OBSERVATION_FORMAT_AXTREE])
        validate_lease(request.lease_seconds, self.max_lease_seconds)
        again = self._lookup(self._by_request.get(request.request_id) or "")
        if again is not None:
            return environment_pb2.OpenSessionResponse(session=self._session_pb(again), instruction=again.instruction,
                                                       observation=self._observation(again, again.formats))
        task = request.task if which == "task" else None
        url = task.start_url if task is not None else request.start_url
        field_name = "task.start_url" if task is not None else "start_url"
        instruction = task.instruction if task is not None else ""
        if task is not None and task.metadata.get("start_state"):
            page, field_name = PageView(url, task.metadata["start_state"]), "task.metadata.start_state"
        elif url in self.start_states:
            page, recorded_instruction = self.start_states[url]
            instruction = instruction or recorded_instruction
        elif self.farm is not None:
            self._room(1)  # a full service does not open a farm session first
            page, farm_instruction = await self.farm.start_page(request)
            instruction = farm_instruction or instruction
        else:
            raise errors.FailedPrecondition(
                f"{field_name}: no recorded start state for {url!r}, and no browser farm to take it from (set "
                "WEBENV_WORLDMODEL_FARM_ADDR, add it to WEBENV_WORLDMODEL_START_STATES or give "
                "task.metadata['start_state'])", reason="START_STATE_UNKNOWN", metadata={"field": field_name, "url": url})
        if len(page.state) > self.max_state_chars:
            raise errors.InvalidArgument(f"{field_name}: the start page's {len(page.state)} characters exceed the limit "
                                         f"of {self.max_state_chars}", reason="STATE_TOO_LARGE",
                                         metadata={"field": field_name})
        self._room(1)
        lease = request.lease_seconds or self.lease_seconds
        s = SimSession(session_id=uuid.uuid4().hex, page=page, instruction=instruction,
                       task_id=task.task_id if task is not None else "",
                       horizon=(task.max_steps if task is not None and task.max_steps else self.horizon),
                       lease_seconds=lease, labels=dict(request.labels), formats=formats)
        s.memory.navigated(page)
        if self.values_kept:
            s.values = ValueMemory(self.values_kept)
            s.values.start(page)  # in line, no await: nothing else takes the room reserved above before _add
        s.lease_expires = time.time() + lease
        self._add(s)
        self._by_request.put(request.request_id, s.session_id)
        return environment_pb2.OpenSessionResponse(session=self._session_pb(s), observation=self._observation(s, formats),
                                                   instruction=instruction, open_seconds=time.perf_counter() - t0)

    async def ForkSession(self, request: environment_pb2.ForkSessionRequest, context: grpc.aio.ServicerContext) -> environment_pb2.ForkSessionResponse:
        t0 = time.perf_counter()
        validate_fork_count(request.count)
        validate_lease(request.lease_seconds, self.max_lease_seconds)
        parent = self._open(request.session_id)
        copies = self._forks_by_request.get(request.request_id)
        if copies is not None and all(sid in self.sessions for sid in copies):
            forks = [self.sessions[sid] for sid in copies]
            return environment_pb2.ForkSessionResponse(sessions=[environment_pb2.OpenSessionResponse(
                session=self._session_pb(f), observation=self._observation(f, f.formats), instruction=f.instruction)
                for f in forks])
        self._room(request.count)
        answers = []
        async with parent.lock:  # between steps: the copy is of one state
            self._still_open(parent)
            for _ in range(request.count):
                t1 = time.perf_counter()
                lease = request.lease_seconds or parent.lease_seconds
                m = parent.memory
                f = dataclasses.replace(
                    parent, session_id=uuid.uuid4().hex, horizon=max(1, parent.horizon - parent.step_count),
                    lease_seconds=lease, labels={**parent.labels, **request.labels}, created=time.time(),
                    lease_expires=time.time() + lease, step_count=0, last=None, last_action=None,
                    memory=PageMemory(pages=dict(m.pages), history=list(m.history), position=m.position),
                    history=list(parent.history), lock=asyncio.Lock(),
                    values=parent.values.copy() if parent.values is not None else None)
                self._add(f)
                answers.append(environment_pb2.OpenSessionResponse(
                    session=self._session_pb(f), observation=self._observation(f, f.formats), instruction=f.instruction,
                    open_seconds=time.perf_counter() - t1))
        self._forks_by_request.put(request.request_id, [a.session.session_id for a in answers])
        return environment_pb2.ForkSessionResponse(sessions=answers, fork_seconds=time.perf_counter() - t0)

    async def Step(self, request: environment_pb2.StepRequest, context: grpc.aio.ServicerContext) -> environment_pb2.StepResponse:
        return await self._step(request)

    async def _step(self, request: environment_pb2.StepRequest) -> environment_pb2.StepResponse:
        t0 = time.perf_counter()
        s = self._open(request.session_id)
        validate_action(request.action, self.max_wait_ms)
        if request.timeout_seconds < 0:
            raise errors.InvalidArgument("timeout_seconds: must be >= 0", reason="BAD_TIMEOUT",
                                         metadata={"field": "timeout_seconds"})
        formats = self._formats(request.observation_spec, s.formats) if request.HasField("observation_spec") else s.formats
        async with s.lock:
            self._still_open(s)
            if is_retry(request.step_index, s.step_count, s.last.step_index if s.last is not None else None,
                        s.last_action, request.action):
                return s.last  # type: ignore[return-value]  # a retried step: answered from cache, not acted twice
            if s.done:
                raise errors.FailedPrecondition("the episode has ended", reason="EPISODE_DONE",
                                                metadata={"session_id": s.session_id})
            kind = request.action.WhichOneof("kind")
            action_text = format_action(request.action)
            element = _element_id(request.action)
            error, latency, page = "", 0.0, s.page
            if element and element not in {n.node_id for n in parse(s.page.state)}:
                error = f"element {element} not found on the page"  # the farm's words; nothing was done
            else:
                query = Query(s.page, action_text, history=list(s.history), instruction=s.instruction,
                              memory=s.memory)
                pred = await self.predictor.predict(query)
                if s.values is not None:  # the values this session has shown (consistency.py)
                    kept = await asyncio.to_thread(s.values.step, s.page, action_text, pred.page, pred.navigated)
                    if kept is not pred.page:
                        pred = dataclasses.replace(pred, page=kept)
                advance(s.memory, query, pred)
                latency, page = pred.latency_seconds, pred.page
            s.history.append((s.page.url, action_text))
            s.page = page
            index = s.step_count
            s.step_count += 1
            done = kind == "answer"
            truncated = not done and s.step_count >= s.horizon
            s.done = done or truncated
            # an ended episode is kept for its CloseSession and a retried last step, then evicted
            s.lease_expires = time.time() + (min(s.lease_seconds, self.done_lease_seconds) if s.done else s.lease_seconds)
            total = time.perf_counter() - t0
            resp = environment_pb2.StepResponse(
                session_id=s.session_id, step_index=index, observation=self._observation(s, formats), done=done,
                truncated=truncated, target_element_id=element if kind in _RESOLVED and not error else "",
                timings=common_pb2.StepTimings(action_seconds=latency, total_seconds=total,
                                               queue_seconds=max(0.0, total - latency)))
            resp.observation.last_action_error = error
            s.last, s.last_action = resp, request.action
        metrics.SIM_STEPS.inc()
        metrics.SIM_STEP_SECONDS.observe(total)
        return resp

    async def StepStream(self, request_iterator, context: grpc.aio.ServicerContext):
        """Each item runs as its own task and answers leave in completion order (`webenv.envcontract`, as the
        farm's); concurrent items share backend calls (the LLM layer's Batcher)."""
        async for msg in step_stream(request_iterator, self._step):
            yield msg

    async def CloseSession(self, request: environment_pb2.CloseSessionRequest, context: grpc.aio.ServicerContext) -> environment_pb2.CloseSessionResponse:
        s = self._open(request.session_id)
        async with s.lock:  # after a step in flight, as the farm's
            self._still_open(s)
            evidence = json.dumps({"simulated": True, "url": s.page.url, "steps": s.step_count}) if request.capture_evidence else ""
            proto = self._end(s, environment_pb2.SESSION_STATE_CLOSED)
        return environment_pb2.CloseSessionResponse(session=proto, site_state_json=evidence)

    async def GetSession(self, request: environment_pb2.GetSessionRequest, context: grpc.aio.ServicerContext) -> environment_pb2.GetSessionResponse:
        """An open session, or an ended one's final state (the last WEBENV_WORLDMODEL_ENDED_SESSIONS_KEPT)."""
        require_session_id(request.session_id)
        s = self._lookup(request.session_id)
        if s is None and request.session_id in self.ended:
            return environment_pb2.GetSessionResponse(session=self.ended[request.session_id])
        return environment_pb2.GetSessionResponse(session=self._session_pb(s or self._open(request.session_id)))

    async def RenewLease(self, request: environment_pb2.RenewLeaseRequest, context: grpc.aio.ServicerContext) -> environment_pb2.RenewLeaseResponse:
        validate_lease(request.lease_seconds, self.max_lease_seconds)
        s = self._open(request.session_id)
        if request.lease_seconds:
            s.lease_seconds = request.lease_seconds
        s.lease_expires = time.time() + s.lease_seconds
        return environment_pb2.RenewLeaseResponse(session=self._session_pb(s))

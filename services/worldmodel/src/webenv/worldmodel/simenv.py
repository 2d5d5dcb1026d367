"""EnvironmentService backed by the world model: simulated sessions through the farm's own contract.

A session starts from a task's start state — given in `task.metadata["start_state"]` (axtree text), or a
state recorded for its start URL in the transitions files of WEBENV_WORLDMODEL_START_STATES — and every Step
asks the model for the next a11y tree and URL. `answer(...)` ends the episode (done), the horizon truncates
it. Sessions are marked ENV_KIND_WORLD_MODEL, so a collector pointed at this address stores simulated
episodes as such. Observations carry AXTREE (and MARKDOWN, derived from it); other formats are refused.
"""

from __future__ import annotations

import asyncio
import json
import socket
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import grpc
from google.protobuf.timestamp_pb2 import Timestamp
from webenv import errors
from webenv.actions import format_action
from webenv.v1 import common_pb2, environment_pb2, environment_pb2_grpc
from webenv.worldmodel import metrics
from webenv.worldmodel.batcher import Batcher
from webenv.worldmodel.dataset import read_transitions
from webenv.worldmodel.formats import Format, axtree_to_markdown, parse_line
from webenv.worldmodel.predict import Query
from webenv.worldmodel.servicer import ready

_SUPPORTED = {common_pb2.OBSERVATION_FORMAT_AXTREE, common_pb2.OBSERVATION_FORMAT_MARKDOWN}
_NO_CHANGE = {"wait", "noop", "scroll", "hover"}


def load_start_states(paths: list[str]) -> dict[str, tuple[str, str]]:
    """url -> (state, instruction) from transitions files: the first state recorded at each URL."""
    out: dict[str, tuple[str, str]] = {}
    for r in sorted(read_transitions([Path(p) for p in paths]), key=lambda r: r.step_index):
        if r.format == Format.AXTREE:
            out.setdefault(r.url, (r.state, r.instruction))
    return out


def _ts(t: float) -> Timestamp:
    ts = Timestamp()
    ts.FromNanoseconds(int(t * 1e9))
    return ts


def _title(state: str) -> str:
    first = parse_line(state.split("\n", 1)[0])
    return first.name or "" if first.role == "RootWebArea" else ""


@dataclass
class SimSession:
    """One simulated session."""

    session_id: str
    url: str
    state: str
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
    history: list[tuple[str, str]] = field(default_factory=list)
    last: environment_pb2.StepResponse | None = None
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)


class SimulatedEnvironment(environment_pb2_grpc.EnvironmentServiceServicer):
    """Sessions whose observations come from the world model."""

    def __init__(self, batcher: Batcher | None, start_states: dict[str, tuple[str, str]] | None = None, horizon: int = 30,
                 lease_seconds: float = 300.0, max_sessions: int = 1000, max_state_chars: int = 200_000) -> None:
        self._batcher = batcher  # None while the model loads
        self.start_states = start_states or {}
        self.horizon = horizon
        self.lease_seconds = lease_seconds
        self.max_sessions = max_sessions
        self.max_state_chars = max_state_chars
        self.sessions: dict[str, SimSession] = {}
        self._by_request: dict[str, str] = {}
        self.node = socket.gethostname()

    @property
    def batcher(self) -> Batcher:
        return ready(self._batcher)

    # --- helpers ------------------------------------------------------------------------------------
    def _expire(self) -> None:
        now = time.time()
        for s in self.sessions.values():
            if s.status == environment_pb2.SESSION_STATE_OPEN and now > s.lease_expires:
                s.status = environment_pb2.SESSION_STATE_EXPIRED
                metrics.SIM_SESSIONS_OPEN.dec()

    def _get(self, session_id: str) -> SimSession:
        self._expire()
        s = self.sessions.get(session_id)
        if s is None:
            raise errors.NotFound(f"session_id: no session {session_id!r}", reason="SESSION_NOT_FOUND",
                                  metadata={"session_id": session_id})
        return s

    def _open(self, session_id: str) -> SimSession:
        s = self._get(session_id)
        if s.status != environment_pb2.SESSION_STATE_OPEN:
            name = environment_pb2.SessionState.Name(s.status)
            raise errors.FailedPrecondition(f"session {session_id} is {name}", reason="SESSION_NOT_OPEN",
                                            metadata={"session_id": session_id, "state": name})
        return s

    def _session_pb(self, s: SimSession) -> environment_pb2.Session:
        return environment_pb2.Session(
            session_id=s.session_id, state=s.status, task_id=s.task_id, env_kind=common_pb2.ENV_KIND_WORLD_MODEL,
            step_count=s.step_count, tabs=[common_pb2.Tab(tab_id="0", url=s.url, title=_title(s.state), active=True)],
            created_at=_ts(s.created), lease_expires_at=_ts(s.lease_expires), node=self.node, labels=s.labels)

    def _observation(self, s: SimSession, formats: list[int], error: str = "") -> common_pb2.Observation:
        title = _title(s.state)
        obs = common_pb2.Observation(url=s.url, title=title, active_tab_id="0", last_action_error=error,
                                     tabs=[common_pb2.Tab(tab_id="0", url=s.url, title=title, active=True)])
        for f in formats:
            if f == common_pb2.OBSERVATION_FORMAT_AXTREE:
                obs.axtree = s.state
            elif f == common_pb2.OBSERVATION_FORMAT_MARKDOWN:
                obs.markdown = axtree_to_markdown(s.state)
            obs.formats.append(f)
        return obs

    @staticmethod
    def _formats(spec: common_pb2.ObservationSpec, default: list[int]) -> list[int]:
        """The requested formats the model can simulate, in request order.

        As the contract says of ``Observation.formats``, formats that cannot be produced are left out rather
        than failing the call: a collector that asks the farm for AXTREE + HTML must be able to switch to the
        world model by address alone. Only a request none of whose formats can be simulated is refused.
        """
        formats = list(spec.formats) or default
        kept = [f for f in formats if f in _SUPPORTED]
        if not kept:
            bad = [common_pb2.ObservationFormat.Name(f) if f in common_pb2.ObservationFormat.values() else str(f)
                   for f in formats]
            raise errors.InvalidArgument(
                f"observation_spec.formats: {', '.join(bad)} cannot be simulated (AXTREE and MARKDOWN can)",
                reason="FORMAT_NOT_SUPPORTED", metadata={"field": "observation_spec.formats"})
        return kept

    # --- RPCs -------------------------------------------------------------------------------------------
    async def OpenSession(self, request: environment_pb2.OpenSessionRequest, context: grpc.aio.ServicerContext) -> environment_pb2.OpenSessionResponse:  # noqa: N802
        t0 = time.perf_counter()
        if request.request_id and request.request_id in self._by_request:
            s = self.sessions[self._by_request[request.request_id]]
            return environment_pb2.OpenSessionResponse(session=self._session_pb(s), observation=self._observation(s, s.formats),
                                                       instruction=s.instruction)
        formats = self._formats(request.observation_spec, [common_pb2.OBSERVATION_FORMAT_AXTREE])
        which = request.WhichOneof("start")
        task = request.task if which == "task" else None
        url = task.start_url if task is not None else request.start_url
        if which is None:
            raise errors.InvalidArgument("start: set start_url or task", reason="START_MISSING", metadata={"field": "start"})
        instruction = task.instruction if task is not None else ""
        if task is not None and task.metadata.get("start_state"):
            state = task.metadata["start_state"]
        elif url in self.start_states:
            state, recorded_instruction = self.start_states[url]
            instruction = instruction or recorded_instruction
        else:
            raise errors.NotFound(f"start: no recorded start state for {url!r} (give task.metadata['start_state'])",
                                  reason="START_STATE_UNKNOWN", metadata={"url": url})
        if len(state) > self.max_state_chars:
            raise errors.InvalidArgument(f"start_state: {len(state)} characters exceeds the limit of {self.max_state_chars}",
                                         reason="STATE_TOO_LARGE", metadata={"field": "task.metadata.start_state"})
        self._expire()
        open_now = sum(1 for x in self.sessions.values() if x.status == environment_pb2.SESSION_STATE_OPEN)
        if open_now >= self.max_sessions:
            raise errors.ResourceExhausted(f"{open_now} simulated sessions are open (limit {self.max_sessions})",
                                           reason="TOO_MANY_SESSIONS", retry_after_seconds=1.0)
        lease = request.lease_seconds or self.lease_seconds
        s = SimSession(session_id=uuid.uuid4().hex, url=url, state=state, instruction=instruction,
                       task_id=task.task_id if task is not None else "",
                       horizon=(task.max_steps if task is not None and task.max_steps else self.horizon),
                       lease_seconds=lease, labels=dict(request.labels), formats=formats)
        s.lease_expires = time.time() + lease
        self.sessions[s.session_id] = s
        if request.request_id:
            self._by_request[request.request_id] = s.session_id
        metrics.SIM_SESSIONS_OPENED.inc()
        metrics.SIM_SESSIONS_OPEN.inc()
        return environment_pb2.OpenSessionResponse(session=self._session_pb(s), observation=self._observation(s, formats),
                                                   instruction=instruction, open_seconds=time.perf_counter() - t0)

    async def Step(self, request: environment_pb2.StepRequest, context: grpc.aio.ServicerContext) -> environment_pb2.StepResponse:  # noqa: N802
        return await self._step(request)

    async def _step(self, request: environment_pb2.StepRequest) -> environment_pb2.StepResponse:
        t0 = time.perf_counter()
        s = self._open(request.session_id)
        if not request.HasField("action") or request.action.WhichOneof("kind") is None:
            raise errors.InvalidArgument("action: must be set", reason="ACTION_MISSING", metadata={"field": "action"})
        formats = self._formats(request.observation_spec, s.formats)
        async with s.lock:
            if request.step_index >= 0 and s.last is not None and request.step_index == s.last.step_index:
                return s.last  # a retried step: answered from cache, not acted twice
            if request.step_index >= 0 and request.step_index != s.step_count:
                raise errors.FailedPrecondition(
                    f"step_index: expected {s.step_count}, got {request.step_index}", reason="STEP_INDEX_MISMATCH",
                    metadata={"expected": str(s.step_count)})
            if s.done:
                raise errors.FailedPrecondition("the episode has ended", reason="EPISODE_DONE",
                                                metadata={"session_id": s.session_id})
            kind = request.action.WhichOneof("kind")
            action_text = format_action(request.action)
            done = kind == "answer"
            predict_s = 0.0
            if not done and kind not in _NO_CHANGE:
                pred = await self.batcher.predict(Query(state=s.state, url=s.url, action_text=action_text,
                                                        history=list(s.history), instruction=s.instruction,
                                                        as_edit=self.batcher.predictor.backend.info.as_edit))
                predict_s = pred.latency_seconds
                s.history.append((s.url, action_text))
                s.state, s.url = pred.next_state, pred.next_url
            else:
                s.history.append((s.url, action_text))
            index = s.step_count
            s.step_count += 1
            truncated = not done and s.step_count >= s.horizon
            s.done = done or truncated
            s.lease_expires = time.time() + s.lease_seconds
            total = time.perf_counter() - t0
            resp = environment_pb2.StepResponse(
                session_id=s.session_id, step_index=index, observation=self._observation(s, formats), done=done,
                truncated=truncated, timings=common_pb2.StepTimings(action_seconds=predict_s, total_seconds=total,
                                                                    queue_seconds=max(0.0, total - predict_s)))
            s.last = resp
        metrics.SIM_STEPS.inc()
        metrics.SIM_STEP_SECONDS.observe(total)
        return resp

    async def StepStream(self, request_iterator, context: grpc.aio.ServicerContext):  # noqa: ANN001, ANN201, N802
        out: asyncio.Queue[environment_pb2.StepStreamResponse | None] = asyncio.Queue()
        pending: set[asyncio.Task[None]] = set()

        async def one(item: environment_pb2.StepStreamRequest) -> None:
            try:
                await out.put(environment_pb2.StepStreamResponse(tag=item.tag, response=await self._step(item.step)))
            except errors.WebenvError as exc:
                await out.put(environment_pb2.StepStreamResponse(tag=item.tag, error=exc.to_stream_error()))
            except Exception as exc:  # noqa: BLE001 (one item's failure must not end the stream)
                await out.put(environment_pb2.StepStreamResponse(tag=item.tag, error=errors.Internal(str(exc)).to_stream_error()))

        async def reader() -> None:
            async for item in request_iterator:
                t = asyncio.create_task(one(item))
                pending.add(t)
                t.add_done_callback(pending.discard)
            while pending:
                await asyncio.gather(*list(pending))
            await out.put(None)

        read = asyncio.create_task(reader())
        try:
            while (resp := await out.get()) is not None:
                yield resp
        finally:
            read.cancel()
            for t in list(pending):
                t.cancel()

    async def CloseSession(self, request: environment_pb2.CloseSessionRequest, context: grpc.aio.ServicerContext) -> environment_pb2.CloseSessionResponse:  # noqa: N802
        s = self._get(request.session_id)
        if s.status == environment_pb2.SESSION_STATE_OPEN:
            s.status = environment_pb2.SESSION_STATE_CLOSED
            metrics.SIM_SESSIONS_OPEN.dec()
        evidence = json.dumps({"simulated": True, "url": s.url, "steps": s.step_count}) if request.capture_evidence else ""
        return environment_pb2.CloseSessionResponse(session=self._session_pb(s), site_state_json=evidence)

    async def GetSession(self, request: environment_pb2.GetSessionRequest, context: grpc.aio.ServicerContext) -> environment_pb2.GetSessionResponse:  # noqa: N802
        return environment_pb2.GetSessionResponse(session=self._session_pb(self._get(request.session_id)))

    async def RenewLease(self, request: environment_pb2.RenewLeaseRequest, context: grpc.aio.ServicerContext) -> environment_pb2.RenewLeaseResponse:  # noqa: N802
        if request.lease_seconds < 0:
            raise errors.InvalidArgument("lease_seconds: must not be negative", reason="BAD_LEASE",
                                         metadata={"field": "lease_seconds"})
        s = self._open(request.session_id)
        if request.lease_seconds:
            s.lease_seconds = request.lease_seconds
        s.lease_expires = time.time() + s.lease_seconds
        return environment_pb2.RenewLeaseResponse(session=self._session_pb(s))

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

`SimulatedEnvironment` is an EnvironmentService backend (`webenv.envservice.EnvBackend`), served by the sdk's
`EnvironmentService`, the same lifecycle code as the farm's: requests are checked by the contract's rules
(malformed actions and observation specs, leases, fork counts), repeated request ids and step indexes are answered
from cache, a session steps under its lock, a step is bounded by its `timeout_seconds` and the RPC's deadline (no
default: a step past it is DEADLINE_EXCEEDED `STEP_TIMEOUT` and changed nothing, so it can be sent again), and an
OpenSession answer that reached no one is closed. What is the world model's is here: start pages, formats,
predictions, the episode's end and the copies of a fork.

Sessions are bounded and evicted by the sdk's `SessionTable`, as the farm's are: only open sessions are held
whole; one that ends — closed, idle past its lease, or an ended episode (done or truncated) left unclosed
WEBENV_WORLDMODEL_DONE_LEASE_SECONDS after its last step — is dropped, swept every
WEBENV_WORLDMODEL_REAPER_INTERVAL_SECONDS (and at once when it is next asked for), and only its final state is kept,
for the last WEBENV_WORLDMODEL_ENDED_SESSIONS_KEPT ended sessions: acting on one is FAILED_PRECONDITION
`SESSION_CLOSED` / `SESSION_EXPIRED`, on one forgotten or never opened NOT_FOUND `SESSION_NOT_FOUND`. The request
ids of OpenSession and ForkSession are kept in the sdk's `RequestCache`, the last WEBENV_WORLDMODEL_REQUEST_IDS_KEPT
each. Past WEBENV_WORLDMODEL_MAX_SESSIONS (after a sweep) OpenSession and ForkSession are RESOURCE_EXHAUSTED
`TOO_MANY_SESSIONS`. The gauge `webenv_worldmodel_simulated_sessions_open` is the number of sessions held.

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

Each session keeps its site state too (sitestate.py): the fields the agent set and the forms it submitted, given as
the CloseSession evidence (`site_state_json`), against which the judge grades a simulated transaction
(webenv/judge/simulated.py); a fork copies it.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import socket
import time
import uuid
from collections import OrderedDict
from dataclasses import dataclass, field

from webenv import errors
from webenv.actions import format_action
from webenv.envcontract import validate_observation_spec
from webenv.envservice import EnvSession, SessionTable
from webenv.v1 import common_pb2, environment_pb2
from webenv.worldmodel import metrics
from webenv.worldmodel.compose import PageMemory, PageView
from webenv.worldmodel.consistency import VALUES_KEPT, ValueMemory
from webenv.worldmodel.farmstart import FarmStarts
from webenv.worldmodel.formats import axtree_to_markdown
from webenv.worldmodel.page import parse
from webenv.worldmodel.predict import Predictor, Query, advance
from webenv.worldmodel.servicer import ready
from webenv.worldmodel.sitestate import SiteLedger

log = logging.getLogger("webenv.worldmodel")
REQUEST_IDS_KEPT = 10_000  # OpenSession / ForkSession request ids remembered for retries (each)
ENDED_KEPT = 2000  # ended sessions whose final state is remembered (the farm's number)
_SUPPORTED = {common_pb2.OBSERVATION_FORMAT_AXTREE, common_pb2.OBSERVATION_FORMAT_MARKDOWN}
#: Actions whose StepResponse.target_element_id the farm fills (browser/actions.py: pointer and element actions).
_RESOLVED = frozenset({"click", "hover", "fill", "select", "scroll_element"})


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
class SimSession(EnvSession):
    """One simulated session (id, lease, steps and the step lock: EnvSession)."""

    page: PageView
    horizon: int
    formats: list[int]
    node: str = ""
    memory: PageMemory = field(default_factory=PageMemory)
    history: list[tuple[str, str]] = field(default_factory=list)
    values: ValueMemory | None = None  # what the session has shown (consistency.py); None: the memory is off
    site: SiteLedger = field(default_factory=SiteLedger)  # the forms the agent submitted (sitestate.py)

    def to_proto(self) -> environment_pb2.Session:
        return environment_pb2.Session(
            session_id=self.session_id, state=self.state, task_id=self.task_id,  # type: ignore[arg-type]
            env_kind=common_pb2.ENV_KIND_WORLD_MODEL, step_count=self.step_count,
            tabs=[common_pb2.Tab(tab_id="0", url=self.page.url, title=_title(self.page.state), active=True)],
            created_at=self.created_at(), lease_expires_at=self.lease_expires_at(), node=self.node,
            labels=self.labels)


class SimulatedEnvironment:
    """Sessions whose observations come from the world model: the EnvironmentService backend
    (`webenv.envservice.EnvBackend`) that `EnvironmentService(SimulatedEnvironment(...))` serves."""

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
        self.step_timeout_seconds: float | None = None  # only the request's timeout and the RPC's deadline
        self.max_state_chars = max_state_chars
        self.farm = farm
        self.values_kept = values_kept  # entity values kept per session (consistency.py); 0: no value memory
        self.node = socket.gethostname()
        self.table: SessionTable[SimSession] = SessionTable(
            where=f"world model {self.node}", kind="simulated sessions", max_sessions=max_sessions,
            reaper_interval_seconds=reaper_interval_seconds, ended_kept=ended_kept, request_ids_kept=request_ids_kept,
            done_lease_seconds=done_lease_seconds, open_gauge=metrics.SIM_SESSIONS_OPEN,
            opened_counter=metrics.SIM_SESSIONS_OPENED, closed_counter=metrics.SIM_SESSIONS_CLOSED)

    @property
    def predictor(self) -> Predictor:
        return ready(self._predictor)

    @predictor.setter
    def predictor(self, predictor: Predictor) -> None:
        """The loaded world model (the service answers UNAVAILABLE until it is set)."""
        self._predictor = predictor

    @property
    def sessions(self) -> dict[str, SimSession]:
        """The open sessions."""
        return self.table.sessions

    @property
    def ended(self) -> OrderedDict[str, environment_pb2.Session]:
        """The final states of the last `ended_kept` ended sessions."""
        return self.table.ended

    # --- the sessions' lives --------------------------------------------------------------------------
    def start(self) -> None:
        """Start the sweep of idle and ended sessions (the farm's lease reaper)."""
        self.table.start()

    async def close(self) -> None:
        await self.table.close()
        if self.farm is not None:
            await self.farm.close()

    # --- helpers ------------------------------------------------------------------------------------
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

    # --- EnvironmentService backend (webenv.envservice.EnvBackend) -------------------------------------
    def check_open(self, request: environment_pb2.OpenSessionRequest) -> None:
        """Some format of the spec can be simulated (FORMAT_NOT_SUPPORTED otherwise)."""
        self._formats(request.observation_spec, [common_pb2.OBSERVATION_FORMAT_AXTREE])

    async def open(self, request: environment_pb2.OpenSessionRequest) -> environment_pb2.OpenSessionResponse:
        t0 = time.perf_counter()
        formats = self._formats(request.observation_spec, [common_pb2.OBSERVATION_FORMAT_AXTREE])
        task = request.task if request.WhichOneof("start") == "task" else None
        url = task.start_url if task is not None else request.start_url
        field_name = "task.start_url" if task is not None else "start_url"
        instruction = task.instruction if task is not None else ""
        async with self.table.admission(1):  # a full service does not open a farm session first
            if task is not None and task.metadata.get("start_state"):
                page, field_name = PageView(url, task.metadata["start_state"]), "task.metadata.start_state"
            elif url in self.start_states:
                page, recorded_instruction = self.start_states[url]
                instruction = instruction or recorded_instruction
            elif self.farm is not None:
                page, farm_instruction = await self.farm.start_page(request)
                instruction = farm_instruction or instruction
            else:
                raise errors.FailedPrecondition(
                    f"{field_name}: no recorded start state for {url!r}, and no browser farm to take it from (set "
                    "WEBENV_WORLDMODEL_FARM_ADDR, add it to WEBENV_WORLDMODEL_START_STATES or give "
                    "task.metadata['start_state'])", reason="START_STATE_UNKNOWN",
                    metadata={"field": field_name, "url": url})
            if len(page.state) > self.max_state_chars:
                raise errors.InvalidArgument(f"{field_name}: the start page's {len(page.state)} characters exceed the "
                                             f"limit of {self.max_state_chars}", reason="STATE_TOO_LARGE",
                                             metadata={"field": field_name})
            s = SimSession(session_id=uuid.uuid4().hex, page=page, instruction=instruction,
                           task_id=task.task_id if task is not None else "",
                           horizon=(task.max_steps if task is not None and task.max_steps else self.horizon),
                           lease_seconds=request.lease_seconds or self.lease_seconds, labels=dict(request.labels),
                           formats=formats, node=self.node)
            s.memory.navigated(page)
            if self.values_kept:
                s.values = ValueMemory(self.values_kept)
                s.values.start(page)
            self.table.add(s)
        return environment_pb2.OpenSessionResponse(session=s.to_proto(), observation=self._observation(s, formats),
                                                   instruction=instruction, open_seconds=time.perf_counter() - t0)

    async def reopen(self, s: SimSession) -> environment_pb2.OpenSessionResponse:
        return environment_pb2.OpenSessionResponse(session=s.to_proto(), instruction=s.instruction,
                                                   observation=self._observation(s, s.formats))

    async def step(self, s: SimSession, request: environment_pb2.StepRequest, kind: str) -> environment_pb2.StepResponse:
        """The next page from the model; `answer(...)` ends the episode, the horizon truncates it. A step of an
        ended episode is FAILED_PRECONDITION `EPISODE_DONE` (a browser tab can still act; a simulated episode has
        no page after its end)."""
        t0 = time.perf_counter()
        formats = self._formats(request.observation_spec, s.formats) if request.HasField("observation_spec") else s.formats
        if s.done:
            raise errors.FailedPrecondition("the episode has ended", reason="EPISODE_DONE",
                                            metadata={"session_id": s.session_id})
        action_text = format_action(request.action)
        element = _element_id(request.action)
        error, latency, page = "", 0.0, s.page
        if element and element not in {n.node_id for n in parse(s.page.state)}:
            error = f"element {element} not found on the page"  # the farm's words; nothing was done
        else:
            query = Query(s.page, action_text, history=list(s.history), instruction=s.instruction, memory=s.memory)
            pred = await self.predictor.predict(query)
            if s.values is not None:  # the values this session has shown (consistency.py)
                kept = await asyncio.to_thread(s.values.step, s.page, action_text, pred.page, pred.navigated)
                if kept is not pred.page:
                    pred = dataclasses.replace(pred, page=kept)
            advance(s.memory, query, pred)
            s.site.step(s.page.url, s.page.state, request.action, element, pred.navigated)
            latency, page = pred.latency_seconds, pred.page
        s.history.append((s.page.url, action_text))
        s.page = page
        done = kind == "answer"
        truncated = not done and s.step_count + 1 >= s.horizon  # the service counts this step when it is answered
        s.done = done or truncated  # an ended episode is kept for its CloseSession and a retried last step
        total = time.perf_counter() - t0
        resp = environment_pb2.StepResponse(
            session_id=s.session_id, step_index=s.step_count, observation=self._observation(s, formats), done=done,
            truncated=truncated, target_element_id=element if kind in _RESOLVED and not error else "",
            timings=common_pb2.StepTimings(action_seconds=latency, total_seconds=total,
                                           queue_seconds=max(0.0, total - latency)))
        resp.observation.last_action_error = error
        metrics.SIM_STEPS.inc()
        metrics.SIM_STEP_SECONDS.observe(total)
        return resp

    async def step_timed_out(self, s: SimSession, kind: str, seconds: float) -> str:
        """The simulated page did not change (its page, memory and history change after the prediction); the step
        counts all the same, as on the farm (the service's rule)."""
        return "the simulated page did not change"

    async def fork_capture(self, parent: SimSession, request: environment_pb2.ForkSessionRequest
                           ) -> list[environment_pb2.OpenSessionResponse]:
        """The copies themselves, under the parent's lock: copying the containers is the whole copy (microseconds)."""
        answers = []
        for _ in range(request.count):
            t1 = time.perf_counter()
            lease = request.lease_seconds or parent.lease_seconds
            m = parent.memory
            f = dataclasses.replace(
                parent, session_id=uuid.uuid4().hex, horizon=max(1, parent.horizon - parent.step_count),
                lease_seconds=lease, labels={**parent.labels, **request.labels}, created_wall=time.time(),
                lease_deadline=time.monotonic() + lease, step_count=0, last_response=None, last_action=None,
                memory=PageMemory(pages=dict(m.pages), history=list(m.history), position=m.position),
                history=list(parent.history), lock=asyncio.Lock(),
                values=parent.values.copy() if parent.values is not None else None, site=parent.site.copy())
            self.table.add(f)
            answers.append(environment_pb2.OpenSessionResponse(
                session=f.to_proto(), observation=self._observation(f, f.formats), instruction=f.instruction,
                open_seconds=time.perf_counter() - t1))
        return answers

    async def fork_copies(self, snapshot: list[environment_pb2.OpenSessionResponse],
                          request: environment_pb2.ForkSessionRequest) -> list[environment_pb2.OpenSessionResponse]:
        return snapshot  # made under the parent's lock already

    async def evidence(self, s: SimSession) -> str:
        return json.dumps({"simulated": True, "url": s.page.url, "steps": s.step_count, **s.site.evidence()})

    def network_trace(self, s: SimSession) -> list[common_pb2.NetworkEvent]:
        return []  # a simulated site makes no requests

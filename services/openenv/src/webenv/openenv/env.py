"""The OpenEnv environment: one OpenEnv session = one episode of a catalog task on the browser farm, graded by the
judge at its end.

    reset(task_id="miniwob/click-test", seed=0)   -> WebObservation (instruction, url, axtree, ...)
    step(WebAction(action='click(4)'))            -> WebObservation (reward and done; verdict at the end)
    step(WebAction(action="click('4')", format="browsergym"))   # BrowserGym's action strings (webenv.compat)

An episode ends with an ``answer`` (BrowserGym: ``send_msg_to_user``), when the environment says done (MiniWoB),
or at WEBENV_OPENENV_MAX_STEPS; then the session is closed with its evidence and the judge's verdict is the reward
(1.0 passed, 0.0 not) and ``verdict`` field. An infrastructure failure (the farm, the catalog or the judge failing
mid-episode) is never a reward of 0.0: the step answers the typed error ``<STATUS> EPISODE_INTERRUPTED: ...``, the
episode ends ungraded, and ``webenv_openenv_interrupted_total`` counts it apart from the graded ones. Everything goes
through the farm's EnvironmentService, so its limits (sessions per node, step deadlines, leases) and network guard
hold as on the gRPC path.

openenv-core awaits ``reset_async``/``step_async`` on the server's event loop, where the shared gRPC channels live
(one channel per upstream for every session); it builds environments (the factory) and closes them in executor
threads, so ``close`` hands the session's end to that loop.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any, Literal

import grpc
from google.protobuf.json_format import MessageToDict
from grpc_health.v1 import health_pb2, health_pb2_grpc
from pydantic import BaseModel, Field
from webenv import errors
from webenv.actions import ActionParseError, parse_action
from webenv.client import EnvironmentClient, make_channel, observation_spec, open_tabs
from webenv.client.episode import INTERRUPTED, Episode, interrupted
from webenv.compat import browsergym as bgym
from webenv.openenv import metrics
from webenv.openenv.config import Settings
from webenv.v1 import common_pb2, judge_pb2_grpc, task_pb2, task_pb2_grpc

from openenv.core.env_server.interfaces import Environment
from openenv.core.env_server.types import Action, EnvironmentMetadata, Observation, State

__all__ = ["Backend", "WebAction", "WebEnvironment", "WebObservation", "WebState"]


class WebAction(Action):
    """One agent action as text."""

    action: str = Field(..., max_length=bgym.MAX_ACTION_CHARS,
                        description="webenv's grammar (click(12), fill(12, \"text\"), answer(\"42\")) or, with "
                                    "format=browsergym, BrowserGym's (click('12'), send_msg_to_user('42')).")
    format: Literal["webenv", "browsergym"] = Field("webenv", description="The grammar of `action`.")


class OpenTab(BaseModel):
    """One open tab of the session."""

    title: str = Field("", description="The tab's document title.")
    url: str = Field("", description="The tab's URL.")
    active: bool = Field(False, description="Whether it is the active tab (the one actions act on).")


class WebObservation(Observation):
    """What the agent sees after reset or a step (``done``, ``reward`` as OpenEnv's Observation)."""

    instruction: str = Field("", description="The task's instruction.")
    url: str = Field("", description="URL of the active tab.")
    title: str = Field("", description="Title of the active tab.")
    axtree: str = Field("", description="The page's accessibility tree, one [id] per actionable node.")
    tabs: list[OpenTab] = Field(default_factory=list, description="The open tabs, in order.")
    last_action_error: str = Field("", description="Why the last action did not work, empty when it did.")
    step_index: int = Field(-1, description="Index of the step taken (-1 after reset).")
    verdict: dict[str, Any] | None = Field(None, description="The judge's verdict, on the episode's last step.")


class WebState(State):
    """The session's state (OpenEnv's episode_id and step_count, plus the task and the farm session)."""

    task_id: str = ""
    farm_session_id: str = ""
    instruction: str = ""
    done: bool = False


#: The peers and the service each must answer SERVING for, and whether an episode can run without it (the judge only
#: grades the episode's end): what /health reports (`Backend.health`).
PEERS = (("browser", "webenv.v1.EnvironmentService", True), ("sites", "webenv.v1.TaskService", True),
         ("judge", "webenv.v1.JudgeService", False))
PEER_ROLES = {"browser": "the browser farm", "sites": "the task catalog", "judge": "the judge"}
HEALTH_TIMEOUT_SECONDS = 2.0


class Backend:
    """What every session of one server shares: the settings and one gRPC channel per upstream, made on the server's
    event loop the first time a session needs them."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.loop: asyncio.AbstractEventLoop | None = None
        self._env: EnvironmentClient | None = None
        self._channels: dict[str, grpc.aio.Channel] = {}
        self.tasks: task_pb2_grpc.TaskServiceStub | None = None
        self.judge: judge_pb2_grpc.JudgeServiceStub | None = None
        self.sessions = 0

    def _channel(self, service: str) -> grpc.aio.Channel:
        """The one channel to a peer (`PEERS`), made on first use."""
        if service not in self._channels:
            token = self.settings.auth_token.get_secret_value() or None
            self._channels[service] = make_channel(getattr(self.settings, f"{service}_addr"), token=token,
                                                   timeout=self.settings.upstream_timeout_seconds,
                                                   max_message_mb=self.settings.max_message_mb)
        return self._channels[service]

    def env(self) -> EnvironmentClient:
        if self._env is None:
            self.loop = asyncio.get_running_loop()
            self._env = EnvironmentClient(self._channel("browser"), timeout=self.settings.upstream_timeout_seconds)
            self.tasks = task_pb2_grpc.TaskServiceStub(self._channel("sites"))
            self.judge = judge_pb2_grpc.JudgeServiceStub(self._channel("judge"))
        return self._env

    async def health(self) -> tuple[str, dict[str, Any]]:
        """The server's health as its peers make it: ``healthy`` when each answers its grpc.health.v1 check
        SERVING, ``unhealthy`` when the farm or the catalog does not (no episode can run), ``degraded`` when only
        the judge does not (episodes run ungraded); with each peer's address and answer, and the reason."""
        async def check(service: str, name: str) -> str:
            try:
                resp = await health_pb2_grpc.HealthStub(self._channel(service)).Check(
                    health_pb2.HealthCheckRequest(service=name), timeout=HEALTH_TIMEOUT_SECONDS)
                return health_pb2.HealthCheckResponse.ServingStatus.Name(resp.status)
            except grpc.aio.AioRpcError as exc:
                return exc.code().name

        answers = await asyncio.gather(*(check(service, name) for service, name, _ in PEERS))
        peers = {service: {"address": getattr(self.settings, f"{service}_addr"), "status": answer}
                 for (service, _, _), answer in zip(PEERS, answers, strict=True)}
        down = [(service, needed) for (service, _, needed), answer in zip(PEERS, answers, strict=True)
                if answer != "SERVING"]
        status = "healthy" if not down else "unhealthy" if any(needed for _, needed in down) else "degraded"
        reason = "; ".join(f"{PEER_ROLES[service]} at {peers[service]['address']}: {peers[service]['status']}"
                           for service, _ in down)
        return status, {"status": status, **({"reason": reason} if reason else {}), "peers": peers}

    async def close(self) -> None:
        for ch in self._channels.values():
            await ch.close()


def _error(exc: errors.WebenvError) -> ValueError:
    """A webenv error as OpenEnv reports it (its WebSocket error's message): status, reason, message."""
    return ValueError(f"{exc.code.name} {exc.reason}: {exc.message}")


class WebEnvironment(Environment[WebAction, WebObservation, WebState]):
    """One OpenEnv session: at most one open episode (a farm session) at a time."""

    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self, backend: Backend) -> None:
        super().__init__()
        self.backend = backend
        self.episode: Episode | None = None
        self._state = WebState()
        backend.sessions += 1
        metrics.SESSIONS.set(backend.sessions)
        self._closed = False

    # OpenEnv's HTTP /reset and /step build a fresh environment per request; episodes live on the WebSocket.
    def reset(self, seed: int | None = None, episode_id: str | None = None, **kwargs: Any) -> WebObservation:
        raise ValueError("FAILED_PRECONDITION STATELESS: episodes run over the WebSocket /ws (reset, then step)")

    def step(self, action: WebAction, timeout_s: float | None = None, **kwargs: Any) -> WebObservation:
        raise ValueError("FAILED_PRECONDITION STATELESS: episodes run over the WebSocket /ws (reset, then step)")

    async def reset_async(self, seed: int | None = None, episode_id: str | None = None, task_id: str = "",
                          **kwargs: Any) -> WebObservation:
        if kwargs:  # a misspelt field (taskid, task-id) is named, never taken for a missing task_id
            names = ", ".join(sorted(kwargs))[:200]
            raise ValueError(f"INVALID_ARGUMENT BAD_FIELD: {names}: not a reset field (reset takes task_id, seed, "
                             "episode_id)")
        if not task_id:
            raise ValueError("INVALID_ARGUMENT BAD_TASK: task_id: give a catalog task id (webenv tasks lists them)")
        env = self.backend.env()
        await self._end()
        try:
            assert self.backend.tasks is not None
            task = (await self.backend.tasks.GetTask(task_pb2.GetTaskRequest(task_id=task_id))).task
            self.episode = await Episode.open(env, task, spec=observation_spec(("axtree", "html")), seed=seed or 0,
                                              labels={"adapter": "openenv"})
        except grpc.aio.AioRpcError as exc:
            raise _error(errors.from_rpc_error(exc)) from None
        except errors.WebenvError as exc:
            raise _error(exc) from None
        metrics.EPISODES.inc()
        self._state = WebState(episode_id=episode_id or self.episode.session_id, step_count=0, task_id=task_id,
                               farm_session_id=self.episode.session_id, instruction=self.episode.instruction)
        return self._observation(self.episode.observation, step_index=-1)

    async def step_async(self, action: WebAction, timeout_s: float | None = None, **kwargs: Any) -> WebObservation:
        ep = self.episode
        if ep is None or self._state.done:
            raise ValueError("FAILED_PRECONDITION NO_EPISODE: reset(task_id=...) first (the last episode ended)")
        start = time.perf_counter()
        error = ""
        if action.format == "browsergym":
            try:
                acts = bgym.to_actions(action.action, ep.observation)
            except bgym.BrowserGymActionError as exc:
                error, acts = bgym.action_error_text(exc), [common_pb2.Action(noop=common_pb2.NoopAction())]
        else:
            try:
                acts = [parse_action(action.action)]
            except ActionParseError as exc:
                error, acts = f"could not parse action: {exc}", [common_pb2.Action(noop=common_pb2.NoopAction())]
        resp = None
        try:
            for act in acts:
                resp = await ep.step(act, error)
                if resp.observation.last_action_error or resp.done:
                    break
        except errors.InvalidArgument as exc:  # the farm refused the action as malformed: the agent's error
            error = f"{exc.reason}: {exc.message}"
            if resp is None:
                resp = await ep.step(common_pb2.Action(noop=common_pb2.NoopAction()), error)
        except errors.WebenvError as exc:  # the farm failed: the episode is interrupted, never scored
            metrics.STEPS.labels("error").inc()
            raise await self._interrupted(exc) from None
        assert resp is not None
        self._state.step_count += 1
        answered = any(a.WhichOneof("kind") == "answer" for a in acts)
        done = bool(resp.done or answered or self._state.step_count >= self.backend.settings.openenv_max_steps)
        obs = self._observation(resp.observation, step_index=resp.step_index, error=error, reward=float(resp.reward))
        if done:
            self._state.done = True
            assert self.backend.judge is not None
            try:
                verdict = await ep.grade(self.backend.judge, deadline=self.backend.settings.upstream_timeout_seconds)
            except errors.WebenvError as exc:  # no evidence, or no judge: not graded, never a reward of 0.0
                raise await self._interrupted(exc) from None
            metrics.GRADED.labels(str(verdict.passed).lower()).inc()
            obs.done, obs.reward = True, 1.0 if verdict.passed else 0.0
            obs.verdict = MessageToDict(verdict, preserving_proto_field_name=True)
        metrics.STEPS.labels("action_error" if error or resp.observation.last_action_error else "ok").inc()
        metrics.STEP_SECONDS.observe(time.perf_counter() - start)
        return obs

    async def _interrupted(self, exc: errors.WebenvError) -> ValueError:
        """End the episode ungraded after an infrastructure failure: the typed EPISODE_INTERRUPTED error to raise."""
        assert self.episode is not None
        self._state.done = True
        await self.episode.close()
        err = exc if exc.reason == INTERRUPTED else interrupted(exc, self.episode.session_id)
        metrics.INTERRUPTED.labels(exc.code.name).inc()
        return _error(err)

    def _observation(self, o: common_pb2.Observation, *, step_index: int, error: str = "",
                     reward: float | None = None) -> WebObservation:
        assert self.episode is not None
        return WebObservation(instruction=self.episode.instruction, url=o.url, title=o.title, axtree=o.axtree,
                              tabs=[OpenTab(**t) for t in open_tabs(o)], last_action_error=error or o.last_action_error,
                              step_index=step_index, reward=reward, done=False)

    @property
    def state(self) -> WebState:
        return self._state

    def get_metadata(self) -> EnvironmentMetadata:
        return EnvironmentMetadata(name="webenv", description="Catalog tasks (synthetic web, MiniWoB++) on real "
                                   "Chromium, graded by webenv's judge.", version="0.1.0")

    async def _end(self) -> None:
        if self.episode is not None and not self.episode.closed:
            await self.episode.close()
        self.episode = None

    def close(self) -> None:
        """Called by openenv-core in an executor thread when the WebSocket ends: close the farm session there."""
        if self._closed:
            return
        self._closed = True
        self.backend.sessions -= 1
        metrics.SESSIONS.set(self.backend.sessions)
        if self.episode is not None and self.backend.loop is not None and not self.backend.loop.is_closed():
            future = asyncio.run_coroutine_threadsafe(self._end(), self.backend.loop)
            try:
                future.result(30)
            except Exception:  # the session may have expired already; closing is best effort
                pass

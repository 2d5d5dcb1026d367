"""One episode: open a session, loop act -> step until done or the horizon, close, judge, build its rows.

The phases are separate methods so the asynchronous driver (one loop per episode) and the lock-step baseline
(every episode of a batch steps together) run exactly the same episode code; only scheduling differs.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TypeVar

import grpc
from google.protobuf import json_format
from webenv import errors, screenshots, solutions
from webenv.collector import metrics, repetition
from webenv.collector.blobs import BlobStore
from webenv.collector.peers import Peers
from webenv.collector.replicas import Replicas, ReplicaSet
from webenv.collector.schema import (
    DIFFICULTY_NAMES,
    ENV_KIND_NAMES,
    EPISODES,
    LEVEL_NAMES,
    SPLIT_NAMES,
    STEPS,
    source_name,
)
from webenv.v1 import (
    collector_pb2,
    common_pb2,
    environment_pb2,
    judge_pb2,
    policy_pb2,
)

log = logging.getLogger(__name__)

T = TypeVar("T")
HISTORY_WINDOW = 10


class EnvFailure(Exception):
    """The environment failed (unreachable, crashed session, stream broken): the episode may be retried."""


class ReplayDiverged(Exception):
    """(RunSpec.starts) a replayed action failed: the stored episode's states and the new session's have parted."""


class PeerFailure(Exception):
    """The policy or judge failed: the episode ends with an error."""


@dataclass
class EpisodeJob:
    """What one episode runs; the same job (same episode id) may be delivered again after a collector died."""

    run_id: str
    episode_id: str
    index: int
    task: common_pb2.Task
    seed: int
    horizon: int
    # whether the policy declared needs_solution (the oracle): only then does it get the whole task
    reveal_solution: bool = False
    group_id: str = ""  # the group rollout or branch group it belongs to (StoredEpisode.group_id)
    parent_episode_id: str = ""  # a fork's anchor episode
    branch_step: int = 0  # a fork's first own step
    start_episode_id: str = ""  # the stored episode whose first steps it replays (RunSpec.starts)
    replay: tuple[tuple[common_pb2.Action, str], ...] = ()  # those steps' (action, action text)

    def to_json(self) -> str:
        """Serialised for the Redis stream."""
        return json.dumps(
            {
                "run_id": self.run_id,
                "episode_id": self.episode_id,
                "index": self.index,
                "task": self.task.SerializeToString().hex(),
                "seed": self.seed,
                "horizon": self.horizon,
                "reveal_solution": self.reveal_solution,
                "group_id": self.group_id,
                "start_episode_id": self.start_episode_id,
                "replay": [[a.SerializeToString().hex(), text] for a, text in self.replay],
            }
        )

    @classmethod
    def from_json(cls, text: str) -> EpisodeJob:
        """The job back from the Redis stream."""
        d = json.loads(text)
        task = common_pb2.Task()
        task.ParseFromString(bytes.fromhex(d["task"]))
        replay = tuple((common_pb2.Action.FromString(bytes.fromhex(a)), text) for a, text in d.get("replay", ()))
        return cls(d["run_id"], d["episode_id"], d["index"], task, d["seed"], d["horizon"],
                   reveal_solution=bool(d.get("reveal_solution", False)), group_id=d.get("group_id", ""),
                   start_episode_id=d.get("start_episode_id", ""), replay=replay)

    def policy_task(self) -> common_pb2.Task:
        """The task as the policy is shown it: whole for a policy that needs the solution, else stripped of
        everything that grades or solves it (`webenv.solutions`)."""
        return self.task if self.reveal_solution else solutions.policy_task(self.task)


@dataclass(frozen=True)
class Tally:
    """A stored episode as its run counts it: once per episode id, as errored, else passed or not."""

    episode_id: str
    steps: int
    errored: bool
    passed: bool
    summary: collector_pb2.EpisodeSummary


@dataclass
class Context:
    """What every episode of a collector shares."""

    peers: Peers
    blobs: BlobStore
    collector_id: str
    webenv_version: str
    step_timeout: float = 60.0
    replicas: Replicas | None = None  # the environment replicas of each env_address (app.py sets it)

    def replicas_of(self, spec: collector_pb2.RunSpec) -> ReplicaSet:
        """The replica set of the run's ``env_address`` (shared by the runs naming the same one)."""
        if self.replicas is None:
            self.replicas = Replicas(lambda a: self.peers.env(a).channel)
        return self.replicas.of(spec.env_address)


def elements_json(obs: common_pb2.Observation) -> str:
    """An observation's elements as a JSON array (protobuf JSON mapping), as the store keeps them."""
    if not obs.elements:
        return ""
    return json.dumps([json_format.MessageToDict(e) for e in obs.elements], separators=(",", ":"))


PEER_RETRY_SECONDS = 60.0  # a restarted pod is back within seconds; a loaded node can take tens of them


def _unavailable(exc: BaseException) -> bool:
    """A peer that is down or restarting: UNAVAILABLE from a unary call, or a shared stream that broke with it."""
    if isinstance(exc, grpc.aio.AioRpcError):
        return exc.code() == grpc.StatusCode.UNAVAILABLE
    return isinstance(exc, errors.WebenvError) and exc.code == grpc.StatusCode.UNAVAILABLE


async def peer_call(peer: str, call: Callable[[], Awaitable[T]]) -> T:
    """``call()``, again after 0.25-2 s while ``peer`` (policy, judge) is unavailable, for up to PEER_RETRY_SECONDS;
    each retry is counted (webenv_collector_peer_retries_total{peer}). Asking again is safe: an action request
    carries its whole context and a verdict has no side effect; without it, a policy or judge killed mid-run would
    error every episode waiting on it."""
    give_up = time.monotonic() + PEER_RETRY_SECONDS
    delay = 0.25
    while True:
        try:
            return await call()
        except Exception as exc:
            if not _unavailable(exc) or time.monotonic() + delay > give_up:
                raise
            metrics.PEER_RETRIES.labels(peer).inc()
            log.info("%s unavailable (%s): asking again in %.2fs", peer, exc, delay)
            await asyncio.sleep(delay)
            delay = min(delay * 2, 2.0)


def _env_error(what: str, exc: BaseException) -> EnvFailure:
    if isinstance(exc, grpc.aio.AioRpcError):
        return EnvFailure(f"{what}: {exc.code().name}: {exc.details()}")
    if isinstance(exc, errors.WebenvError):  # the sdk client's typed error: its status code named as a raw one is
        return EnvFailure(f"{what}: {exc.code.name}: {exc.message}")
    return EnvFailure(f"{what}: {exc}")


@dataclass
class Episode:
    """One attempt at one episode."""

    job: EpisodeJob
    spec: collector_pb2.RunSpec
    ctx: Context
    env_address: str
    attempt: int = 0
    session_id: str = ""
    instruction: str = ""
    observation: common_pb2.Observation | None = None
    steps: list[common_pb2.StepRecord] = field(default_factory=list)
    history: list[policy_pb2.HistoryEntry] = field(default_factory=list)
    finished: bool = False
    truncated: bool = False
    final_answer: str = ""
    site_state_json: str = ""
    network_events: list[common_pb2.NetworkEvent] = field(default_factory=list)  # the farm's trace, at close
    env_reward: float = 0.0
    env_kind: int = common_pb2.ENV_KIND_UNSPECIFIED
    node: str = ""
    verdict: common_pb2.Verdict | None = None
    policy_model: str = ""
    policy_version: str = ""
    error: str = ""
    started_at: datetime = field(default_factory=lambda: datetime.now(UTC))
    t0: float = field(default_factory=time.monotonic)
    finished_at: datetime | None = None
    _policy_task: common_pb2.Task | None = None

    # -- phases ------------------------------------------------------------------------------------------------------
    async def open(self) -> None:
        """Open the session at the task (or start URL) and take the first observation."""
        env = self.ctx.peers.env(self.env_address)
        url_start = self.job.task.source == common_pb2.TASK_SOURCE_URL
        t = time.monotonic()
        try:
            resp = await env.client.open(
                start_url=self.job.task.start_url if url_start else "", task=None if url_start else self.job.task,
                spec=self.spec.observation_spec, seed=self.job.seed, request_id=f"{self.job.episode_id}/{self.attempt}",
                labels={"run_id": self.job.run_id, "episode_id": self.job.episode_id})
        except (errors.WebenvError, ValueError) as exc:  # ValueError: a URL task without its start URL
            raise _env_error("OpenSession", exc) from exc
        metrics.STEP_PHASE.labels("environment").observe(time.monotonic() - t)
        self.session_id = resp.session.session_id
        self.env_kind = resp.session.env_kind
        self.node = resp.session.node
        self.instruction = resp.instruction or self.job.task.instruction
        self.observation = resp.observation
        if self.job.horizon <= 0:
            self.finished = True

    async def act(self) -> policy_pb2.ActResponse:
        """Ask the policy for the next action (showing it the task only as far as its kind of policy may see it)."""
        assert self.observation is not None
        if self._policy_task is None:
            self._policy_task = self.job.policy_task()
        req = policy_pb2.ActRequest(
            episode_id=self.job.episode_id,
            policy=self.spec.policy,
            task=self._policy_task,
            observation=self.observation,
            history=self.history[-HISTORY_WINDOW:],
            step_index=len(self.steps),
            seed=self.job.seed,
            instruction=self.instruction,
            options=self.spec.act_options,
        )
        t = time.monotonic()
        try:
            resp = await peer_call("policy", lambda: self.ctx.peers.policy().acts.request(req, deadline=self.ctx.step_timeout))
        except (errors.WebenvError, TimeoutError) as exc:  # a broken stream is webenv.streams.StreamBroken
            raise PeerFailure(f"policy: {exc}") from exc
        dt = time.monotonic() - t
        metrics.STEP_PHASE.labels("policy").observe(dt)
        if resp.timings.queue_seconds:
            metrics.STEP_PHASE.labels("queue").observe(resp.timings.queue_seconds)
        resp.timings.total_seconds = resp.timings.total_seconds or dt
        self.policy_model = resp.model or resp.policy
        self.policy_version = resp.policy_version or self.policy_version
        self._policy_seconds = dt
        return resp

    async def step(self, act: policy_pb2.ActResponse) -> None:
        """Apply the action in the environment and record the step."""
        assert self.observation is not None
        index = len(self.steps)
        env = self.ctx.peers.env(self.env_address)
        t = time.monotonic()
        last_error = ""
        resp: environment_pb2.StepResponse | None = None
        try:  # the sdk's client sends the session's step index and keeps it by the contract's rule
            resp = await env.steps.step(self.session_id, act.action, timeout_seconds=self.ctx.step_timeout,
                                        deadline=self.ctx.step_timeout + 5)
        except errors.InvalidArgument as exc:  # the policy's action was malformed: a failed step, not a failed env
            last_error = exc.message
        except (errors.WebenvError, TimeoutError) as exc:  # a broken stream is webenv.streams.StreamBroken
            raise _env_error("Step", exc) from exc
        dt = time.monotonic() - t
        metrics.STEP_PHASE.labels("environment").observe(dt)
        metrics.STEPS.inc()
        before = self.observation
        after = resp.observation if resp is not None else before
        rec = common_pb2.StepRecord(
            step_index=index,
            observation=before,
            action=act.action,
            action_text=act.action_text,
            raw_output=act.raw_output,
            parse_failed=act.parse_failed,
            policy_seconds=getattr(self, "_policy_seconds", 0.0),
            url_after=after.url,
            last_action_error=last_error or after.last_action_error,
            prompt_tokens=act.prompt_tokens,
            completion_token_ids=act.completion_token_ids,
            completion_logprobs=act.completion_logprobs,
            policy_version=act.policy_version,
        )
        if resp is not None:
            rec.reward = resp.reward
            rec.done = resp.done
            rec.target_element_id = resp.target_element_id
            rec.timings.CopyFrom(resp.timings)
            if resp.timings.queue_seconds:
                metrics.STEP_PHASE.labels("queue").observe(resp.timings.queue_seconds)
            self.env_reward = resp.raw_reward or resp.reward
        if not rec.timings.total_seconds:
            rec.timings.total_seconds = dt
        rec.repeated_state = repetition.is_repeated(before, after, act.action)
        self.steps.append(rec)
        self.history.append(
            policy_pb2.HistoryEntry(
                action_text=act.action_text, url=after.url, last_action_error=rec.last_action_error, memory=act.memory
            )
        )
        self.observation = after
        if act.action.WhichOneof("kind") == "answer":
            self.final_answer = act.action.answer.text
            self.finished = True
        if resp is not None and (resp.done or resp.truncated):
            self.finished = True
            self.truncated = resp.truncated
        if len(self.steps) >= self.job.horizon and not self.finished:
            self.finished = True
            self.truncated = True

    async def replay(self) -> None:
        """(RunSpec.starts) the stored episode's first steps, replayed before the policy acts; one that fails ends
        the episode with an error, since the states it was recorded in and the new ones have parted."""
        for i, (action, text) in enumerate(self.job.replay):
            if self.finished:
                break
            await self.step(policy_pb2.ActResponse(action=action, action_text=text,
                                                   raw_output=f"replayed from {self.job.start_episode_id}"))
            if self.steps[-1].last_action_error:
                raise ReplayDiverged(f"replay of {self.job.start_episode_id} step {i} ({text}) failed: "
                                 f"{self.steps[-1].last_action_error[:200]}")

    async def play_out(self) -> None:
        """Act and step until the episode ends, then close the session and judge it."""
        await self.replay()
        while not self.finished:
            await self.step(await self.act())
        await self.close()
        await self.judge()

    async def close(self) -> None:
        """Close the session, capturing the site state and final reward as evidence."""
        env = self.ctx.peers.env(self.env_address)
        t = time.monotonic()
        try:
            resp = await env.client.close(self.session_id, capture_evidence=True)
        except errors.WebenvError as exc:
            raise _env_error("CloseSession", exc) from exc
        metrics.STEP_PHASE.labels("environment").observe(time.monotonic() - t)
        self.session_id = ""
        self.site_state_json = resp.site_state_json
        self.network_events = list(resp.network_events)
        self.env_reward = resp.env_reward or self.env_reward

    def trajectory(self) -> common_pb2.Trajectory:
        """The episode as the judge sees it."""
        return common_pb2.Trajectory(
            episode_id=self.job.episode_id,
            task_id=self.job.task.task_id,
            steps=self.steps,
            final_observation=self.observation,
            final_answer=self.final_answer,
            site_state_json=self.site_state_json,
            env_reward=self.env_reward,
            env_kind=self.env_kind,
            category=self.job.task.category,
            network_events=self.network_events,
        )

    async def judge(self) -> None:
        """Get the verdict (goal-less crawl and exploration episodes have none)."""
        if self.job.task.source == common_pb2.TASK_SOURCE_URL:
            return
        t = time.monotonic()
        # LLM-judged facts (rubric JSON text facts, real-web tasks) are graded whenever the judge has an LLM backend;
        # without one they are undecidable and the verdict says so.
        req = judge_pb2.EvaluateRequest(task=self.job.task, trajectory=self.trajectory(),
                                        options=judge_pb2.JudgeOptions(allow_llm=True))
        try:
            resp = await peer_call("judge", lambda: self.ctx.peers.judge().Evaluate(req, timeout=self.ctx.step_timeout))
        except grpc.aio.AioRpcError as exc:
            raise PeerFailure(f"judge: {exc.code().name}: {exc.details()}") from exc
        metrics.STEP_PHASE.labels("judge").observe(time.monotonic() - t)
        self.verdict = resp.verdict

    async def abandon(self) -> None:
        """Close the session without evidence, best effort (after a failure or a cancellation)."""
        if not self.session_id:
            return
        sid, self.session_id = self.session_id, ""
        try:
            await asyncio.wait_for(self.ctx.peers.env(self.env_address).client.close(sid), 5)
        except Exception:
            pass

    # -- results -----------------------------------------------------------------------------------------------------
    @property
    def passed(self) -> bool:
        return bool(self.verdict and self.verdict.passed and not self.error)

    def summary(self) -> collector_pb2.EpisodeSummary:
        """The episode as progress reports show it."""
        return collector_pb2.EpisodeSummary(
            episode_id=self.job.episode_id,
            task_id=self.job.task.task_id,
            passed=self.passed,
            score=self.verdict.score if self.verdict else 0.0,
            steps=len(self.steps),
            error=self.error,
            duration_seconds=self.duration,
        )

    @property
    def duration(self) -> float:
        return time.monotonic() - self.t0 if self.finished_at is None else self._duration

    def mark_finished(self) -> None:
        """Freeze the wall time."""
        self._duration = time.monotonic() - self.t0
        self.finished_at = datetime.now(UTC)

    def tally(self) -> Tally:
        """What counting the stored episode needs (a run's counts here, or the shared counts in Redis)."""
        return Tally(self.job.episode_id, len(self.steps), bool(self.error), self.passed, self.summary())

    def rows(self, version: int) -> dict[str, list[dict]]:
        """The episode's rows for the store, by ``schema.STEPS`` and ``schema.EPISODES`` (observations only in the
        formats the run keeps)."""
        keep = set(self.spec.keep_formats)
        task = self.job.task
        step_rows = []
        for rec in self.steps:
            obs = rec.observation
            shot = ""
            if common_pb2.OBSERVATION_FORMAT_SCREENSHOT in keep and obs.screenshot.data:
                shot = self.ctx.blobs.put(obs.screenshot.data, screenshots.extension(obs.screenshot.codec))
            step_rows.append(
                {
                    "run_id": self.job.run_id,
                    "episode_id": self.job.episode_id,
                    "step_index": rec.step_index,
                    "url": obs.url,
                    "title": obs.title,
                    "axtree": obs.axtree if common_pb2.OBSERVATION_FORMAT_AXTREE in keep else "",
                    "html": obs.html if common_pb2.OBSERVATION_FORMAT_HTML in keep else "",
                    "markdown": obs.markdown if common_pb2.OBSERVATION_FORMAT_MARKDOWN in keep else "",
                    "screenshot_key": shot,
                    "action_text": rec.action_text,
                    "action_json": json_format.MessageToJson(rec.action, indent=None),
                    "raw_output": rec.raw_output,
                    "parse_failed": int(rec.parse_failed),
                    "reward": rec.reward,
                    "done": int(rec.done),
                    "last_action_error": rec.last_action_error,
                    "repeated_state": int(rec.repeated_state),
                    "url_after": rec.url_after,
                    "policy_seconds": rec.policy_seconds,
                    "env_seconds": rec.timings.total_seconds,
                    "env_queue_seconds": rec.timings.queue_seconds,
                    "action_seconds": rec.timings.action_seconds,
                    "observe_seconds": rec.timings.observe_seconds,
                    "version": version,
                    "target_element_id": rec.target_element_id,
                    "elements_json": elements_json(obs) if common_pb2.OBSERVATION_FORMAT_ELEMENTS in keep else "",
                    "prompt_tokens": rec.prompt_tokens,
                    "completion_token_ids": list(rec.completion_token_ids),
                    "completion_logprobs": list(rec.completion_logprobs),
                    "policy_version": rec.policy_version,
                }
            )
        final = self.observation or common_pb2.Observation()
        v = self.verdict
        episode = {
            "run_id": self.job.run_id,
            "episode_id": self.job.episode_id,
            "episode_index": self.job.index,
            "task_id": task.task_id,
            "source": source_name(task.source),
            "site": task.site,
            "family": task.family,
            "split": SPLIT_NAMES.get(task.split, ""),
            "difficulty": DIFFICULTY_NAMES.get(task.difficulty, ""),
            "level": LEVEL_NAMES.get(self.spec.level, ""),
            "policy": self.spec.policy,
            "env_kind": ENV_KIND_NAMES.get(self.env_kind, ""),
            "env_address": self.env_address,
            "instruction": self.instruction or task.instruction,
            "passed": int(self.passed),
            "score": v.score if v else 0.0,
            "answer_supported": int(bool(v and v.answer_supported)),
            "verdict_json": json_format.MessageToJson(v, indent=None) if v else "",
            "final_answer": self.final_answer,
            "final_url": final.url,
            "final_axtree": final.axtree if common_pb2.OBSERVATION_FORMAT_AXTREE in keep else "",
            "final_html": final.html if common_pb2.OBSERVATION_FORMAT_HTML in keep else "",
            "final_markdown": final.markdown if common_pb2.OBSERVATION_FORMAT_MARKDOWN in keep else "",
            "env_reward": self.env_reward,
            "site_state_json": self.site_state_json,
            "steps": len(self.steps),
            "repeated_steps": sum(1 for s in self.steps if s.repeated_state),
            "horizon": self.job.horizon,
            "truncated": int(self.truncated),
            "error": self.error,
            "attempts": self.attempt + 1,
            "started_at": self.started_at,
            "finished_at": self.finished_at or datetime.now(UTC),
            "duration_seconds": self.duration,
            "seed": self.job.seed,
            "task_seed": task.seed,
            "webenv_version": self.ctx.webenv_version,
            "collector_id": self.ctx.collector_id,
            "browser_node": self.node,
            "policy_model": self.policy_model,
            "judge_version": v.judge_version if v else "",
            "rubric_id": v.rubric_id if v else task.rubric.rubric_id,
            "rubric_version": v.rubric_version if v else task.rubric.version,
            "version": version,
            "task_pb": task.SerializeToString().hex(),
            "policy_version": self.policy_version,
            "group_id": self.job.group_id,
            "parent_episode_id": self.job.parent_episode_id,
            "branch_step": self.job.branch_step,
            "start_episode_id": self.job.start_episode_id,
            "start_steps": len(self.job.replay),
            # 008: the network trace, a Trajectory holding only its network_events (serialized, hex)
            "network_events_pb": common_pb2.Trajectory(network_events=self.network_events).SerializeToString().hex()
            if self.network_events else "",
        }
        return {STEPS.name: step_rows, EPISODES.name: [episode]}


async def run_episode(job: EpisodeJob, spec: collector_pb2.RunSpec, ctx: Context, replicas: ReplicaSet) -> Episode:
    """Run one episode asynchronously on the replica with the most free capacity, retrying on another replica
    when the environment fails.

    Never raises for episode-level problems: the returned Episode carries ``error`` and is stored either way.
    """
    timeout = job.task.timeout_seconds or spec.episode_timeout_seconds
    attempt = 0
    failed: set[str] = set()  # replicas an attempt of this episode failed on: the next attempt avoids them
    while True:
        try:
            address = await replicas.pick(failed)
        except LookupError as exc:  # a name that resolves to nothing (yet): an environment failure like any
            address, failure = "", EnvFailure(str(exc))
        else:
            failure = None
        ep = Episode(job, spec, ctx, address, attempt=attempt)
        try:
            if failure is not None:
                raise failure
            async with asyncio.timeout(timeout):
                await ep.open()
                await ep.play_out()
        except EnvFailure as exc:
            await ep.abandon()
            failed.add(address)
            if attempt < spec.max_retries:
                attempt += 1
                metrics.EPISODE_RETRIES.inc()
                log.info("episode %s: environment failed, retry %d: %s", job.episode_id, attempt, exc)
                if replicas.single or not address:  # same node again: give it a moment (full, restarting)
                    await asyncio.sleep(min(0.25 * 2**attempt, 5.0))
                continue
            ep.error = f"environment failed after {attempt + 1} attempt(s): {exc}"
        except (PeerFailure, ReplayDiverged) as exc:
            await ep.abandon()
            ep.error = str(exc)
        except TimeoutError:
            await ep.abandon()
            ep.error = f"episode deadline of {timeout:g}s exceeded after {len(ep.steps)} steps"
        except asyncio.CancelledError:
            asyncio.get_running_loop().create_task(ep.abandon())
            raise
        finally:
            replicas.release(address)
        ep.mark_finished()
        return ep


async def run_lock_step(
    jobs: list[EpisodeJob], spec: collector_pb2.RunSpec, ctx: Context, replicas: ReplicaSet
) -> list[Episode]:
    """The synchronous baseline: a batch opens together and every round waits for its slowest episode."""
    eps = [Episode(j, spec, ctx, await replicas.pick()) for j in jobs]
    try:
        return await _lock_step(eps)
    finally:
        for ep in eps:
            replicas.release(ep.env_address)


async def _lock_step(eps: list[Episode]) -> list[Episode]:

    async def guarded(ep: Episode, coro) -> None:
        try:
            await coro
        except (EnvFailure, PeerFailure) as exc:
            ep.error = str(exc)
            ep.finished = True
            await ep.abandon()

    await asyncio.gather(*(guarded(ep, ep.open()) for ep in eps))
    active = [ep for ep in eps if not ep.error and not ep.finished]
    while active:
        acts: dict[int, policy_pb2.ActResponse] = {}

        async def act(i: int, ep: Episode, acts: dict[int, policy_pb2.ActResponse] = acts) -> None:
            acts[i] = await ep.act()

        await asyncio.gather(*(guarded(ep, act(i, ep)) for i, ep in enumerate(active)))
        await asyncio.gather(*(guarded(ep, ep.step(acts[i])) for i, ep in enumerate(active) if i in acts))
        active = [ep for ep in active if not ep.finished and not ep.error]
    live = [ep for ep in eps if not ep.error]
    await asyncio.gather(*(guarded(ep, ep.close()) for ep in live))
    await asyncio.gather(*(guarded(ep, ep.judge()) for ep in live if not ep.error))
    for ep in eps:
        ep.mark_finished()
    return eps

"""`Episode`: one task episode on an EnvironmentService, recorded step by step and graded by the judge at its end,
the way the collector grades runs. Used by the adapters that reward episodes (the Gymnasium env with ``judge=``,
services/openenv).

    episode = await Episode.open(env_client, task, spec=spec, seed=0)
    resp = await episode.step(action)              # recorded as a StepRecord (observation before, action, result)
    verdict = await episode.grade(judge_stub)      # CloseSession(capture_evidence) + JudgeService.Evaluate

An infrastructure failure is never a failed verdict: once a step failed for any reason but a malformed action
(INVALID_ARGUMENT, the agent's error), or the session's evidence cannot be read at the end (the farm died, the session
expired, the sites service could not give the site state: the farm's CloseSession fails, and the session is then
closed without evidence), `grade` raises the typed error with reason ``EPISODE_INTERRUPTED`` (the cause's status code, its reason in
the metadata) instead of asking the judge about a trajectory that was cut short: the errored episode is told from a
failed one, as the collector stores it (``error``) and the trainer leaves it out.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping

import grpc
from webenv import errors
from webenv.actions import format_action
from webenv.client.environment import EnvironmentClient
from webenv.v1 import common_pb2, environment_pb2, judge_pb2, judge_pb2_grpc

__all__ = ["INTERRUPTED", "Episode", "interrupted"]

#: The reason of the error an interrupted episode's grading raises.
INTERRUPTED = "EPISODE_INTERRUPTED"


def interrupted(cause: errors.WebenvError, session_id: str) -> errors.WebenvError:
    """The typed error of an episode cut short by ``cause``: its status code, reason ``EPISODE_INTERRUPTED``."""
    err = errors.error_class(cause.code)(
        f"session_id: episode {session_id} was interrupted, not graded ({cause.code.name} {cause.reason}: "
        f"{cause.message})", reason=INTERRUPTED, metadata={"session_id": session_id, "cause": cause.reason})
    if type(err) is errors.WebenvError:
        err.code = cause.code  # type: ignore[misc]  # CANCELLED, UNKNOWN...: keep the cause's code
    return err


class Episode:
    """A session opened for a task (or a start URL), its steps, and its end."""

    def __init__(self, client: EnvironmentClient, opened: environment_pb2.OpenSessionResponse,
                 task: common_pb2.Task | None) -> None:
        self.client = client
        self.task = task
        self.opened = opened
        self.session_id = opened.session.session_id
        self.instruction = opened.instruction
        self.observation = opened.observation
        self.records: list[common_pb2.StepRecord] = []
        self.answer = ""
        self.closed = False
        self.error: errors.WebenvError | None = None  # the infrastructure failure that interrupted it, if one did
        self.evidence = ""  # the site state read when grading closed the session (CloseSession's site_state_json)
        self.network_events: list[common_pb2.NetworkEvent] = []  # the farm's network trace, read at that close
        self.env_reward = 0.0  # the environment's own reward (MiniWoB++), read at that close

    @classmethod
    async def open(cls, client: EnvironmentClient, task: common_pb2.Task | None = None, *, start_url: str = "",
                   spec: common_pb2.ObservationSpec | None = None, seed: int = 0,
                   labels: Mapping[str, str] | None = None) -> Episode:
        opened = await client.open(task=task, start_url=start_url, spec=spec, seed=seed, labels=labels)
        return cls(client, opened, task)

    async def step(self, action: common_pb2.Action, error: str = "", *,
                   spec: common_pb2.ObservationSpec | None = None) -> environment_pb2.StepResponse:
        """One step, recorded for the judge (``error``: why the agent's output became this action, if it did not
        parse). A failure other than INVALID_ARGUMENT (the agent's malformed action) interrupts the episode."""
        try:
            resp = await self.client.step(self.session_id, action, spec=spec)
        except errors.InvalidArgument:
            raise
        except errors.WebenvError as exc:
            self.error = self.error or exc
            raise
        if action.WhichOneof("kind") == "answer":
            self.answer = action.answer.text
        self.records.append(common_pb2.StepRecord(
            step_index=resp.step_index, observation=self.observation, action=action,
            action_text=format_action(action), reward=resp.reward, done=resp.done,
            last_action_error=error or resp.observation.last_action_error, url_after=resp.observation.url,
            timings=resp.timings))
        self.observation = resp.observation
        return resp

    async def close(self, capture_evidence: bool = False) -> environment_pb2.CloseSessionResponse | None:
        """Close the session once (best effort: it may have expired)."""
        if self.closed:
            return None
        self.closed = True
        try:
            return await self.client.close(self.session_id, capture_evidence=capture_evidence)
        except Exception:
            return None

    async def grade(self, judge: judge_pb2_grpc.JudgeServiceStub, *, deadline: float = 60.0) -> common_pb2.Verdict:
        """End the episode: close the session with its evidence (site state) and ask the judge for the verdict.
        Raises the typed ``EPISODE_INTERRUPTED`` error for an interrupted episode, the judge's own error when it
        fails: never a verdict of a trajectory cut short."""
        assert self.task is not None, "grading needs the task (its rubric is what the judge grades)"
        await self.end()
        return await self.evaluate(judge, self.trajectory(), deadline=deadline)

    async def end(self) -> None:
        """Close the session with its evidence (site state), network trace and environment reward, for the judge
        (`grade`; ``webenv validate`` grades one start-state session for many tasks of a site). Raises the typed
        ``EPISODE_INTERRUPTED`` error for an interrupted episode or evidence that cannot be read."""
        if self.error is not None:
            await self.close()
            raise interrupted(self.error, self.session_id)
        if self.closed:
            raise errors.FailedPrecondition(f"session_id: episode {self.session_id} was closed before it was graded",
                                            reason="EPISODE_CLOSED", metadata={"session_id": self.session_id})
        self.closed = True
        try:
            closed = await self.client.close(self.session_id, capture_evidence=True)
        except errors.WebenvError as exc:
            self.error = exc
            with contextlib.suppress(Exception):  # the evidence could not be read: close without it, best effort
                await self.client.close(self.session_id)
            raise interrupted(exc, self.session_id) from exc
        self.evidence = closed.site_state_json
        self.env_reward = closed.env_reward
        self.network_events = list(closed.network_events)

    def trajectory(self, task: common_pb2.Task | None = None) -> common_pb2.Trajectory:
        """The trajectory the judge grades: the steps so far, and the evidence and trace once ``grade`` closed the
        session (``webenv validate`` grades non-answers as one more answer step on a start state's trajectory, of
        ``task``: another task opened on the same start state)."""
        task = task or self.task
        assert task is not None
        return common_pb2.Trajectory(
            episode_id=self.session_id, task_id=task.task_id, steps=self.records,
            final_observation=self.observation, final_answer=self.answer, site_state_json=self.evidence,
            env_reward=self.env_reward, env_kind=self.opened.session.env_kind, category=task.category,
            network_events=self.network_events)

    async def evaluate(self, judge: judge_pb2_grpc.JudgeServiceStub, trajectory: common_pb2.Trajectory, *,
                       task: common_pb2.Task | None = None, deadline: float = 60.0) -> common_pb2.Verdict:
        """The judge's verdict of a trajectory of this episode's task, or of ``task`` (its own failure raised
        typed)."""
        task = task or self.task
        assert task is not None
        request = judge_pb2.EvaluateRequest(task=task, trajectory=trajectory,
                                            options=judge_pb2.JudgeOptions(allow_llm=True))
        try:
            return (await judge.Evaluate(request, timeout=deadline)).verdict
        except grpc.aio.AioRpcError as exc:
            raise errors.from_rpc_error(exc) from exc

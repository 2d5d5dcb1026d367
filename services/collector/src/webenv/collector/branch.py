"""Branching rollouts (RunSpec.branching): roll an anchor episode to step t, fork it k times, finish all k + 1.

The anchor opens and steps as any episode until it has taken ``at_step`` steps; then its session is copied with
EnvironmentService.ForkSession (the farm copies the page, the browser's state and, for synthetic tasks, the
site's server-side state), and the anchor and its k forks are rolled out to the end concurrently, each with its
own seed, closed and judged. The k + 1 continuations start from one state, so their rewards differ only by what
was done after it: the anchor state of GiGPO, whose step-level advantage is exact here instead of being found by
matching equal observations across independent rollouts.

A fork is stored as an episode of its own (``<anchor id>-b<j>``): its trajectory holds the anchor's first
``at_step`` steps (the judge grades the whole history, e.g. a URL visited at any step) and then its own, with
``group_id`` = the anchor's id, ``parent_episode_id`` and ``branch_step``. The anchor's group id is its own id.
An anchor that ends before ``at_step`` is stored alone (the run plans fewer episodes); when the fork is refused
(a MiniWoB page, a full node) the forks are stored as errored episodes, so the run's counts say so and no
trainer reads them as failures. An environment failure errors the episode without a retry (a branch group's
members must share one state, which a retried anchor would not). The group shares the episode's deadline (the
task's timeout, else the run's): a fork has the time its anchor had left, as it continues the same episode.
"""

from __future__ import annotations

import asyncio
import logging
import random

from webenv import errors
from webenv.collector import metrics
from webenv.collector.episode import Context, EnvFailure, Episode, EpisodeJob, PeerFailure
from webenv.collector.replicas import ReplicaSet
from webenv.v1 import collector_pb2

log = logging.getLogger(__name__)


def fork_job(anchor: EpisodeJob, j: int, branch_step: int) -> EpisodeJob:
    """The job of the anchor's fork number ``j`` (from 1): its own id and seed, the anchor's group."""
    seed = random.Random(f"{anchor.seed}/fork/{j}").randrange(2**31)
    return EpisodeJob(anchor.run_id, f"{anchor.episode_id}-b{j:02d}", anchor.index, anchor.task, seed, anchor.horizon,
                      reveal_solution=anchor.reveal_solution, group_id=anchor.episode_id, parent_episode_id=anchor.episode_id,
                      branch_step=branch_step)


async def _fork(anchor: Episode, count: int) -> list[Episode]:
    """ForkSession of the anchor's session into ``count`` episodes continuing from its state."""
    env = anchor.ctx.peers.env(anchor.env_address)
    t = len(anchor.steps)
    resp = await env.client.fork(anchor.session_id, count, request_id=f"{anchor.job.episode_id}/fork",
                                 labels={"parent_episode_id": anchor.job.episode_id})
    forks = []
    for j, opened in enumerate(resp.sessions, start=1):
        ep = Episode(fork_job(anchor.job, j, t), anchor.spec, anchor.ctx, anchor.env_address,
                     session_id=opened.session.session_id, instruction=opened.instruction or anchor.instruction,
                     observation=opened.observation, steps=list(anchor.steps), history=list(anchor.history),
                     env_kind=opened.session.env_kind or anchor.env_kind, node=opened.session.node,
                     policy_model=anchor.policy_model, policy_version=anchor.policy_version)
        forks.append(ep)
    return forks


def _failed_forks(anchor: Episode, count: int, why: str) -> list[Episode]:
    out = []
    for j in range(1, count + 1):
        ep = Episode(fork_job(anchor.job, j, len(anchor.steps)), anchor.spec, anchor.ctx, anchor.env_address)
        ep.error = why
        ep.mark_finished()
        out.append(ep)
    return out


async def _finish(ep: Episode) -> None:
    """Step to the end, close and judge; an episode-level failure is the episode's error."""
    try:
        await ep.play_out()
    except EnvFailure as exc:
        await ep.abandon()
        ep.error = f"environment failed (branching retries nothing): {exc}"
    except PeerFailure as exc:
        await ep.abandon()
        ep.error = str(exc)
    ep.mark_finished()


async def run_branched(job: EpisodeJob, spec: collector_pb2.RunSpec, ctx: Context,
                       replicas: ReplicaSet) -> list[Episode]:
    """The anchor and its forks, finished (never raises for episode-level problems); the anchor opens on the replica
    with the most free capacity, its forks are on the same one (a copy stays on the node of its session)."""
    try:
        address = await replicas.pick()
    except LookupError as exc:
        anchor = Episode(job, spec, ctx, "")
        anchor.error = f"environment failed: {exc}"
        anchor.mark_finished()
        return [anchor]
    try:
        return await _run_branched(job, spec, ctx, address)
    finally:
        replicas.release(address)


async def _run_branched(job: EpisodeJob, spec: collector_pb2.RunSpec, ctx: Context, address: str) -> list[Episode]:
    b = spec.branching
    timeout = job.task.timeout_seconds or spec.episode_timeout_seconds
    job.group_id = job.episode_id
    anchor = Episode(job, spec, ctx, address)
    members = [anchor]
    try:
        async with asyncio.timeout(timeout):
            try:
                await anchor.open()
                while not anchor.finished and len(anchor.steps) < b.at_step:
                    await anchor.step(await anchor.act())
            except (EnvFailure, PeerFailure) as exc:
                await anchor.abandon()
                anchor.error = str(exc)
                anchor.mark_finished()
                return members  # nothing to fork from
            if not anchor.finished:
                try:
                    forks = await _fork(anchor, b.count)
                except errors.WebenvError as exc:
                    why = f"ForkSession at step {len(anchor.steps)}: {exc.code.name}: {exc.message}"
                    log.warning("episode %s: %s", job.episode_id, why)
                    forks = _failed_forks(anchor, b.count, why)
                    members += forks
                    forks = []
                else:
                    members += forks
                metrics.EPISODES_STARTED.inc(len(forks))
            await asyncio.gather(*(_finish(ep) for ep in members if not ep.error))
    except TimeoutError:
        for ep in members:
            if ep.finished_at is None and not ep.error:
                await ep.abandon()
                ep.error = f"episode deadline of {timeout:g}s exceeded after {len(ep.steps)} steps"
    except asyncio.CancelledError:
        loop = asyncio.get_running_loop()
        for ep in members:
            loop.create_task(ep.abandon())
        raise
    for ep in members:
        if ep.finished_at is None:
            ep.mark_finished()
    return members


__all__ = ["fork_job", "run_branched"]

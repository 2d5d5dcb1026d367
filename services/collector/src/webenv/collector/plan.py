"""A StartRun's plan, in one pass: from the resolved spec to the run's episode jobs.

What a run will do is decided here and nowhere else, in this order: which tasks its policy can act on and whether it
is shown their solutions (the policy service's one ListPolicies answer), the tasks it draws from (start URLs, inline
tasks, the catalog's pages or the stored episodes it starts from), its size (RUN_TOO_LARGE, checked once, by
:meth:`Planner.check_size`), the frontier's pass rates, the draws (`webenv.collector.sampling`) and the jobs. The
engine admits the run, asks for its plan and launches it; the spec's own rules stay in `webenv.collector.spec`.

The catalog is read page by page and no further than the size limit needs: once a run's eligible tasks already make
more episodes than ``max_run_episodes`` allows, reading stops and the run is refused, so an empty spec never holds a
catalog of 21,000 tasks to say no. A spec whose size does not depend on the catalog (``episodes``, ``starts``) is
refused before the catalog is read.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass

import grpc
from google.protobuf import json_format
from webenv import errors
from webenv.collector import sampling
from webenv.collector import spec as specs
from webenv.collector.episode import EpisodeJob
from webenv.collector.peers import Peers
from webenv.collector.read import EpisodeReader
from webenv.collector.schema import EPISODES
from webenv.collector.store import AsyncStore
from webenv.v1 import collector_pb2, common_pb2, policy_pb2, task_pb2

Solvable = Callable[[common_pb2.Task], bool]


@dataclass
class Plan:
    """What a run will run: its jobs (a branching run's anchors), the episodes it plans (forks included) and the
    matching tasks left out as unsolvable by its policy."""

    jobs: list[EpisodeJob]
    planned: int
    skipped: int = 0


@dataclass
class _Tasks:
    """The tasks a run draws from, as far as they were read."""

    tasks: list[common_pb2.Task]
    skipped: int = 0
    episodes: int = 0  # the episodes they make (a lower bound when ``more``)
    more: bool = False  # reading stopped at the size limit: there are more


class Planner:
    """Plans runs against the collector's peers (policy, task catalog) and its store (starts, frontier history)."""

    def __init__(self, peers: Peers, store: AsyncStore, *, max_run_episodes: int, task_page_size: int = 500) -> None:
        self.peers = peers
        self.store = store
        self.max_run_episodes = max_run_episodes
        self.task_page_size = task_page_size

    async def plan(self, run_id: str, spec: collector_pb2.RunSpec) -> Plan:
        """The plan of run ``run_id`` from its resolved spec; INVALID_ARGUMENT naming the field for a run that cannot
        be planned (too large, unknown policy, bad starts), FAILED_PRECONDITION ``NO_TASKS`` for one with nothing
        to draw."""
        per_draw = specs.per_draw(spec)
        if spec.episodes:  # the spec alone decides the size: refused before anything is read
            self.check_size(spec.episodes, "spec.episodes")
        elif spec.starts:
            self.check_size(len(spec.starts), "spec.starts")
        solvable, reveal = await self._solvable(spec.policy)
        if spec.starts:
            jobs = await self._starts(run_id, spec, reveal)
            return Plan(jobs, planned=len(jobs))
        read = await self._tasks(spec, solvable, per_draw)
        if not spec.episodes:
            self.check_size(read.episodes, "spec.repeats" if spec.repeats > 1 else "spec.tasks", more=read.more)
        history = await self._history(spec) if spec.sampling in sampling.FRONTIERS else None
        branches = spec.branching.count
        planned = sampling.plan(  # a branching run plans its anchors: the forks are made while it runs
            read.tasks, strategy=spec.sampling, episodes=spec.episodes // (branches + 1) if branches else spec.episodes,
            repeats=spec.repeats, seed=spec.seed, group_size=1 if branches else spec.group_size, history=history)
        if not planned:
            matches = len(read.tasks)
            raise errors.FailedPrecondition(
                _no_tasks(spec, matches, read.skipped), reason="NO_TASKS",
                metadata={"field": "spec.tasks", "catalog_matches": str(matches + read.skipped),
                          "skipped": str(read.skipped)})
        jobs = [EpisodeJob(run_id, f"{run_id}-{p.index:06d}", p.index, p.task, p.seed, specs.horizon_for(spec, p.task),
                           reveal_solution=reveal, group_id=f"{run_id}-g{p.group:06d}" if p.group >= 0 else "")
                for p in planned]
        return Plan(jobs, planned=len(jobs) * (branches + 1), skipped=read.skipped)

    def check_size(self, episodes: int, field: str, *, more: bool = False) -> None:
        """RUN_TOO_LARGE (INVALID_ARGUMENT naming ``field``) past ``max_run_episodes``: the one size check."""
        limit = self.max_run_episodes
        if episodes > limit:
            at_least = "at least " if more else ""
            raise errors.InvalidArgument(
                f"{field}: the run would have {at_least}{episodes} episodes, more than the collector's limit of "
                f"{limit} (WEBENV_MAX_RUN_EPISODES); set spec.episodes, spec.task_limit or a narrower spec.tasks filter",
                reason="RUN_TOO_LARGE", metadata={"field": field, "limit": str(limit)})

    async def _solvable(self, policy: str) -> tuple[Solvable | None, bool]:
        """Which tasks ``policy`` can act on (None: any) and whether it is shown their solutions, from the policy
        service's ListPolicies (only a policy that declares ``needs_solution`` is: `webenv.solutions`). A policy the
        service does not offer is refused here, before a run whose every episode would error."""
        peer = self.peers.policy()
        try:
            resp = await peer.stub.ListPolicies(policy_pb2.ListPoliciesRequest(), timeout=10)
        except grpc.aio.AioRpcError as exc:
            if exc.code() == grpc.StatusCode.UNIMPLEMENTED:
                return None, False  # a policy service without ListPolicies: no planning help, no solutions
            raise errors.Unavailable(f"policy service at {peer.address} failed: {exc.code().name}: {exc.details()}",
                                     reason="POLICY_UNAVAILABLE") from exc
        info = specs.served_policy(policy, resp.policies, peer.address)
        if not info.needs_solution:
            return None, False
        solved = set(info.solved_task_ids)
        return (lambda t: bool(len(t.oracle)) or t.task_id in solved), True

    async def _tasks(self, spec: collector_pb2.RunSpec, solvable: Solvable | None, per_draw: int) -> _Tasks:
        """The tasks a run draws from (start URLs, inline tasks or the catalog's, those its policy can act on), read
        no further than the size limit needs when the run draws each task ``repeats`` times."""
        per_task = spec.repeats * per_draw
        cap = None if spec.episodes else self.max_run_episodes // max(per_task, 1)  # eligible tasks the limit allows
        out = _Tasks([])

        def take(tasks) -> None:  # type: ignore[no-untyped-def]
            kept = [t for t in tasks if solvable(t)] if solvable is not None else list(tasks)
            out.skipped += len(tasks) - len(kept)
            out.tasks.extend(kept)

        if spec.start_urls:  # a crawl: any policy acts on a page
            out.tasks.extend(specs.url_task(u, i) for i, u in enumerate(spec.start_urls))
        elif spec.inline_tasks:
            take(spec.inline_tasks)
        else:
            token, total = "", 0
            while True:
                resp = await self._page(spec, token)
                total = total or min(resp.total_size, spec.task_limit or resp.total_size)  # the first page's count
                take(resp.tasks)
                token = resp.next_page_token
                if not token or (spec.task_limit and len(out.tasks) >= spec.task_limit):
                    break
                if cap is not None and len(sampling.eligible(out.tasks, spec.sampling)) > cap:
                    out.more = True  # already too large: the rest would only be refused
                    break
        if spec.task_limit:
            del out.tasks[spec.task_limit:]
        eligible = len(sampling.eligible(out.tasks, spec.sampling))
        if out.more and solvable is None and spec.sampling != collector_pb2.SAMPLING_STRATEGY_EASY_ONLY:
            eligible, out.more = total, False  # every match is eligible: the catalog's count is exact
        out.episodes = eligible * per_task
        return out

    async def _page(self, spec: collector_pb2.RunSpec, token: str) -> task_pb2.ListTasksResponse:
        """One page of the catalog's tasks matching ``spec.tasks``."""
        try:
            return await self.peers.tasks().ListTasks(
                task_pb2.ListTasksRequest(filter=spec.tasks, page_size=self.task_page_size, page_token=token),
                timeout=30)
        except grpc.aio.AioRpcError as exc:
            err = errors.from_rpc_error(exc)
            if isinstance(err, errors.InvalidArgument):
                raise errors.InvalidArgument(f"spec.tasks: {err.message}", reason="BAD_RUN_SPEC",
                                             metadata={"field": "spec.tasks"}) from exc
            raise errors.Unavailable(f"task catalog at {self.peers.sites_address} failed: {exc.code().name}: "
                                     f"{exc.details()}", reason="TASK_CATALOG_UNAVAILABLE") from exc

    async def _starts(self, run_id: str, spec: collector_pb2.RunSpec, reveal: bool) -> list[EpisodeJob]:
        """(RunSpec.starts) one episode per start: the stored episode's task and seed, its first ``steps`` actions to
        replay, then the run's policy. A start naming no stored episode that finished without an error, or more
        steps than it took or its task's cap allows, is INVALID_ARGUMENT naming it."""
        ids = list(dict.fromkeys(st.episode_id for st in spec.starts))
        reader = EpisodeReader(collector_pb2.ReadEpisodesRequest(episode_ids=ids))
        stored: dict[str, collector_pb2.StoredEpisode] = {}
        for rows in await self.store.read(reader.rows):
            for ep in await self.store.read(reader.batch, rows):
                stored[ep.episode_id] = ep
        seeds = {r["episode_id"]: int(r["seed"]) for r in await self.store.query(  # the session's: same popups, same data
            f"SELECT episode_id, seed FROM {{db}}.{EPISODES} FINAL WHERE episode_id IN {{ids:Array(String)}}",
            {"ids": ids})}
        jobs = []
        for i, st in enumerate(spec.starts):
            f = f"spec.starts[{i}]"
            ep = stored.get(st.episode_id)
            if ep is None:
                raise specs.bad(f"{f}.episode_id", f"no stored episode {st.episode_id[:128]!r} that finished without "
                                                   "an error")
            taken = len(ep.trajectory.steps)
            horizon = specs.horizon_for(spec, ep.task)
            if st.steps >= min(taken, horizon):
                raise specs.bad(f"{f}.steps", f"must be below the {taken} steps episode {st.episode_id!r} took and "
                                              f"its task's step cap {horizon} (the policy takes at least one), "
                                              f"got {st.steps}")
            replay = tuple((rec.action, rec.action_text) for rec in ep.trajectory.steps[:st.steps])
            jobs.append(EpisodeJob(run_id, f"{run_id}-{i:06d}", i, ep.task, seeds.get(ep.episode_id, spec.seed + i),
                                   horizon, reveal_solution=reveal, start_episode_id=ep.episode_id, replay=replay))
        return jobs

    async def _history(self, spec: collector_pb2.RunSpec) -> dict[str, sampling.TaskHistory]:
        """Per task, how often the run's policy was tried and passed (the frontier's pass rates), from the store:
        the stored, non-errored episodes of ``history_run_ids``, or of the policy's family when none are named."""
        if spec.history_run_ids:
            where, params = "run_id IN {runs:Array(String)}", {"runs": list(spec.history_run_ids)}
        else:
            family = spec.policy.partition("@")[0]
            where, params = "(policy = {family:String} OR startsWith(policy, {prefix:String}))", {
                "family": family, "prefix": family + "@"}
        rows = await self.store.query(
            f"SELECT task_id, count() AS tried, sum(passed) AS passed FROM {{db}}.{EPISODES} FINAL "
            f"WHERE error = '' AND {where} GROUP BY task_id", params)
        return {r["task_id"]: sampling.TaskHistory(int(r["tried"]), int(r["passed"])) for r in rows}


def _no_tasks(spec: collector_pb2.RunSpec, matched: int, skipped: int) -> str:
    """Why a spec planned no episode, naming what it asked for."""
    if spec.inline_tasks:
        asked = f"the {len(spec.inline_tasks)} inline tasks"
    else:
        f = json_format.MessageToDict(spec.tasks)
        asked = "the task filter " + (json.dumps(f, separators=(",", ":")) if f else "(every task)")
    if not matched and skipped:
        return (f"spec.tasks: policy {spec.policy!r} has no solution for any of the {skipped} tasks matching {asked} "
                "(it follows Task.oracle: choose synthetic tasks)")
    if not matched:
        return f"spec.tasks: no task matches {asked}"
    return f"spec.tasks: the {matched} tasks matching {asked} leave nothing to draw with the sampling strategy"


__all__ = ["Plan", "Planner"]

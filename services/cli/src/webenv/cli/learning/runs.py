"""The loop's runs on the collector: one run to its end (started again when a collector restart cuts it off), stopping
the runs in flight, and a run's success read back from the store."""

from __future__ import annotations

import hashlib
import os
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Sequence
from typing import TypeVar

import grpc
from webenv.client.watch import to_end
from webenv.v1 import collector_pb2, common_pb2, policy_pb2

from ..signals import ARMS
from .records import DIFFS, KINDS, Evaluation, reason_key

# A collector restart: its runs' watchers wait this long for it (the restart, then its sweep failing the run it
# left, Engine.fail_orphans: ~30-40 s after its last write), and a run it cut off is started again this often
COLLECTOR_PATIENCE_SECONDS = 180.0
RUN_RESTARTS = 2
T = TypeVar("T")


def ask(call: Callable[[], T], *, patience: float, on_wait: Callable[[grpc.RpcError], None],
        pause: float = 2.0) -> T:
    """The answer of a one-answer call, asked again while its server is UNAVAILABLE (restarting) for up to
    ``patience`` seconds; any other status raises at once. The caller makes asking twice safe (a request id)."""
    down_since: float | None = None
    while True:
        try:
            return call()
        except grpc.RpcError as exc:
            if exc.code() != grpc.StatusCode.UNAVAILABLE:
                raise
            down_since = down_since or time.monotonic()
            if time.monotonic() - down_since > patience:
                raise
            on_wait(exc)
            time.sleep(pause)


class Runs:
    """The collector side of the loop (a part of :class:`webenv.cli.learning.Loop`)."""

    def run(self, label: str, *, policy: str, split: int, episodes: int, seed: int, temperature: float = 0.0,
            kinds: tuple[int, ...] = (), env_address: str = "", sites: tuple[str, ...] = (),
            families: tuple[str, ...] | None = None, builders: tuple[str, ...] = (), task_ids: tuple[str, ...] = (),
            source: int = common_pb2.TASK_SOURCE_MINIWOB, concurrency: int = 0, arm: bool = False,
            history: tuple[str, ...] = (), starts: Sequence[collector_pb2.EpisodeStart] = ()) -> collector_pb2.Run:
        """A run on synthetic tasks of ``split`` (of the trained families unless ``families`` names others), or on
        the ``task_ids`` of ``source`` (MiniWoB++, or the hand-made websites' rubric JSON tasks). Only an RL collection (``arm``) samples tasks by the loop's strategy (a frontier
        reads ``history``, the loop's own training runs); every other run samples uniformly from its seed, so an
        evaluation runs the same tasks for every version (a frontier evaluation would follow each version's
        history and compare versions on different tasks). With ``starts`` the run draws no tasks: one episode per
        start along a stored episode (RunSpec.starts). ``concurrency``: episodes in flight (0: the loop's)."""
        sampling = self.cfg.sampling if arm else "uniform"
        spec = collector_pb2.RunSpec(
            name=f"{self.cfg.name}/{label}", policy=policy, episodes=episodes, seed=seed, env_address=env_address,
            concurrency=concurrency or self.cfg.concurrency, level=collector_pb2.COLLECTION_LEVEL_TASK_ORIENTED,
            sampling=collector_pb2.SamplingStrategy.Value(f"SAMPLING_STRATEGY_{sampling.upper().replace('-', '_')}"),
            history_run_ids=list(history),
            act_options=policy_pb2.ActOptions(temperature=temperature),
            horizons=collector_pb2.Horizons(easy=self.cfg.horizons[0], medium=self.cfg.horizons[1],
                                            hard=self.cfg.horizons[2], oracle_slack=self.cfg.oracle_slack),
        )
        if starts:
            spec.starts.extend(starts)
        elif task_ids:
            spec.tasks.sources.append(source)
            spec.tasks.task_ids.extend(task_ids)
        else:
            spec.tasks.split = split
            spec.tasks.sources.append(common_pb2.TASK_SOURCE_SYNTHETIC)
            spec.tasks.families.extend(self.train_families if families is None else families)
            spec.tasks.builders.extend(builders)
        if not starts:
            spec.tasks.kinds.extend(kinds)
            spec.tasks.sites.extend(sites)
        # the judge reads HTML (page criteria); the policy and the trainer read the AXTREE, the one format kept
        spec.observation_spec.formats.extend([common_pb2.OBSERVATION_FORMAT_AXTREE, common_pb2.OBSERVATION_FORMAT_HTML])
        if source == common_pb2.TASK_SOURCE_MINIWOB and task_ids:  # MiniWoB's links are spans the oracle's
            # click-link script finds in the DOM format
            spec.observation_spec.formats.append(common_pb2.OBSERVATION_FORMAT_DOM)
        spec.keep_formats.append(common_pb2.OBSERVATION_FORMAT_AXTREE)
        if arm:  # an RL iteration's collection, shaped by the algorithm's arm (groups, branching)
            ARMS[self.cfg.algorithm].collect(spec, group_size=self.cfg.group_size, branch_step=self.cfg.branch_step)
        t0 = time.monotonic()
        for attempt in range(1 + RUN_RESTARTS):
            run = self.start_run(spec)
            cut: list[str] = []  # the watch broke: the collector restarted (or was unreachable) meanwhile

            def waiting(exc: grpc.RpcError, cut: list[str] = cut) -> None:
                cut.append(exc.code().name)
                self.say(f"  collector unavailable ({exc.code().name}); waiting for it to come back")

            self.live.add(run.run_id)
            try:
                end = to_end(lambda run_id=run.run_id: self.collector.WatchRun(
                    collector_pb2.WatchRunRequest(run_id=run_id)), patience=COLLECTOR_PATIENCE_SECONDS, on_wait=waiting)
            finally:
                self.live.discard(run.run_id)
            last = end.run if end is not None else run
            if cut and last.state != collector_pb2.RUN_STATE_SUCCEEDED and attempt < RUN_RESTARTS:
                # its collector went away mid-run: what it stored stays stored; the run starts again whole, so an
                # evaluation still scores every version on the same tasks
                self.restarted_runs.append({"label": label, "run_id": run.run_id, "finished": last.counts.finished,
                                            "error": last.error})
                self.say(f"  run {label} ({run.run_id}) was cut off by a collector restart after "
                         f"{last.counts.finished} episodes ({last.error or collector_pb2.RunState.Name(last.state)}); starting it again")
                continue
            break
        c = last.counts
        self.say(f"  run {label}: {c.passed}/{c.finished} passed, {c.errored} errored, {c.steps} steps "
                 f"in {time.monotonic() - t0:.0f}s ({run.run_id})")
        if last.state == collector_pb2.RUN_STATE_FAILED:
            raise RuntimeError(f"run {label} failed: {last.error}")
        self.runs[label] = run.run_id
        return last

    def start_run(self, spec: collector_pb2.RunSpec) -> collector_pb2.Run:
        """StartRun, asked again with the same request id (one run however often it is asked) while the collector
        is unavailable, for up to COLLECTOR_PATIENCE_SECONDS."""
        request = collector_pb2.StartRunRequest(request_id=os.urandom(8).hex(), spec=spec)
        return ask(lambda: self.collector.StartRun(request, timeout=60), patience=COLLECTOR_PATIENCE_SECONDS,
                   on_wait=lambda exc: self.say(f"  collector unavailable ({exc.code().name}); asking again")).run

    def loop_concurrency(self, shared: bool = False) -> int:
        """The loop's concurrency, halved for each of two runs ``shared`` in flight (--overlap; 0: the collector's
        default)."""
        c = self.cfg.concurrency
        return max(1, c // 2) if c and shared else c

    def stop_live(self) -> None:
        """Stop the runs still being watched (an overlapped collection whose evaluation was interrupted), so the
        thread watching them returns and the loop ends at once instead of after the collection."""
        for run_id in list(self.live):
            try:
                self.collector.StopRun(collector_pb2.StopRunRequest(run_id=run_id), timeout=30)
            except grpc.RpcError as exc:
                self.say(f"  could not stop run {run_id}: {exc.code().name}")

    def score(self, run_id: str, version: str, split: str, reasons: Counter | None = None) -> Evaluation:
        """Success of a run, from the stored episodes (errored episodes count as failures); ``reasons``, when given,
        counts each failed episode's first failing fact by its reason (values and numbers masked, see ``reason_key``)."""
        ev = Evaluation(version, split, run_id, 0, 0, defaultdict(lambda: [0, 0]), defaultdict(lambda: [0, 0]),
                        by_builder=defaultdict(lambda: [0, 0]))
        req = collector_pb2.ReadEpisodesRequest(run_ids=[run_id], filter=collector_pb2.ExportFilter(include_errored=True))
        ids = []
        for resp in self.collector.ReadEpisodes(req, timeout=600):
            ep = resp.episode
            ids.append(ep.task.task_id)
            ev.episodes += 1
            ev.passed += int(ep.passed)
            ev.truncated += int(ep.truncated)
            ev.errored += int(bool(ep.error))
            if reasons is not None and not ep.passed:
                reasons[reason_key(ep)] += 1
            seen = ev.outcomes.setdefault(ep.task.task_id, [0, 0])
            seen[0], seen[1] = seen[0] + int(ep.passed), seen[1] + 1
            kind = KINDS.get(ep.task.kind, "other")
            for table, key in ((ev.by_kind, kind), (ev.by_difficulty, DIFFS.get(ep.task.difficulty, "other")),
                               *(((ev.by_builder, f"{ep.task.builder}/{kind}"),) if ep.task.builder else ())):
                table[key][0] += int(ep.passed)
                table[key][1] += 1
        ev.by_kind, ev.by_difficulty, ev.by_builder = dict(ev.by_kind), dict(ev.by_difficulty), dict(ev.by_builder)
        ev.tasks = hashlib.sha256("\n".join(sorted(ids)).encode()).hexdigest()[:12]
        return ev

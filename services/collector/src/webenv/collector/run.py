"""A run this collector owns (``RunContext``: its spec, counts, episode jobs and watchers), and a run as a row.

Its own module so that both drivers of a run use it without importing each other: the engine (episodes run
here) and the Redis work queue (episodes run by every collector sharing it, counted in Redis and followed here).
"""

from __future__ import annotations

import asyncio
import math
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime

from google.protobuf import json_format, timestamp_pb2
from webenv.collector.episode import EpisodeJob, Tally
from webenv.collector.schema import STATE_NAMES, STATE_VALUES, version_now
from webenv.v1 import collector_pb2

#: Episode summaries a run keeps for WatchRun (older ones are dropped; counts stay exact).
MAX_SUMMARIES = 50_000


@dataclass
class RunContext:
    """A run this collector owns: its spec, counts, episodes and watchers."""

    run: collector_pb2.Run
    jobs: list[EpisodeJob]
    created: float = field(default_factory=time.monotonic)
    summaries: list[collector_pb2.EpisodeSummary] = field(default_factory=list)
    summary_offset: int = 0
    changed: asyncio.Event = field(default_factory=asyncio.Event)
    stop: asyncio.Event = field(default_factory=asyncio.Event)
    task: asyncio.Task | None = None
    stored_ids: set[str] = field(default_factory=set)
    storing: set[asyncio.Future] = field(default_factory=set)
    ended: asyncio.Event = field(default_factory=asyncio.Event)  # set once the final state is persisted

    def notify(self) -> None:
        """Wake watchers."""
        self.changed.set()

    def record(self, tally: Tally) -> None:
        """Count one stored episode (once per episode id)."""
        if tally.episode_id in self.stored_ids:
            return
        self.stored_ids.add(tally.episode_id)
        c = self.run.counts
        c.finished += 1
        c.steps += tally.steps
        if tally.errored:
            c.errored += 1
        elif tally.passed:
            c.passed += 1
        self.summaries.append(tally.summary)
        if len(self.summaries) > MAX_SUMMARIES:
            drop = len(self.summaries) - MAX_SUMMARIES
            del self.summaries[:drop]
            self.summary_offset += drop
        self.notify()

    @property
    def target(self) -> int:
        """Stored episodes after which the run is done (straggler cutoff)."""
        planned = self.run.counts.planned
        return min(planned, math.ceil(planned * (self.run.spec.finish_fraction or 1.0) - 1e-9))

    def progress(self, since: int) -> tuple[collector_pb2.WatchRunResponse, int]:
        """A progress report with the summaries after position ``since``; returns the new position."""
        elapsed = max(time.monotonic() - self.created, 1e-6)
        c = self.run.counts
        start = max(since - self.summary_offset, 0)
        resp = collector_pb2.WatchRunResponse(
            run=self.run,
            episodes_per_second=c.finished / elapsed,
            steps_per_second=c.steps / elapsed,
            pass_rate=c.passed / c.finished if c.finished else 0.0,
            finished=self.summaries[start:],
        )
        return resp, self.summary_offset + len(self.summaries)


def run_row(run: collector_pb2.Run, collector_id: str, webenv_version: str) -> dict:
    """The runs-table row of a run (``schema.RUNS``)."""
    c = run.counts
    return {
        "run_id": run.run_id,
        "name": run.spec.name,
        "spec_json": json_format.MessageToJson(run.spec, indent=None),
        "state": STATE_NAMES[run.state],
        "planned": c.planned,
        "started": c.started,
        "finished": c.finished,
        "passed": c.passed,
        "errored": c.errored,
        "steps": c.steps,
        "created_at": run.created_at.ToDatetime(tzinfo=UTC),
        "finished_at": run.finished_at.ToDatetime(tzinfo=UTC) if run.HasField("finished_at") else None,
        "error": run.error,
        "collector_id": collector_id,
        "webenv_version": webenv_version,
        "version": version_now(),
    }


def run_from_row(row: dict) -> collector_pb2.Run:
    """A Run message from a runs-table row."""
    run = collector_pb2.Run(run_id=row["run_id"], state=STATE_VALUES.get(row["state"], 0), error=row["error"])
    json_format.Parse(row["spec_json"], run.spec, ignore_unknown_fields=True)
    c = run.counts
    c.planned, c.started, c.finished = row["planned"], row["started"], row["finished"]
    c.passed, c.errored, c.steps = row["passed"], row["errored"], row["steps"]
    run.created_at.CopyFrom(_ts(_utc(row["created_at"])))
    fin = _utc(row["finished_at"])
    if fin is not None and fin.timestamp() > 0:
        run.finished_at.CopyFrom(_ts(fin))
    return run


def _ts(dt: datetime | None) -> timestamp_pb2.Timestamp:
    ts = timestamp_pb2.Timestamp()
    if dt is not None and dt.timestamp() > 0:
        ts.FromDatetime(dt)
    return ts


def _utc(dt: datetime | None) -> datetime | None:
    if dt is None:
        return None
    return dt if dt.tzinfo else dt.replace(tzinfo=UTC)

"""CollectorService over the engine: validation at the edge, runs in the engine, exports on the store thread.

ListRuns reads one page with one query; live runs are first written in one batch so the page shows their state
now (it used to persist every run ever owned, one batch wait each: 0.28 s per run). ExportRun checks
its filter and destination before touching the disk (INVALID_ARGUMENT naming the field), and remembers the
answers of the last ``EXPORTS_KEPT`` request ids for idempotent retries.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import time
from collections import OrderedDict
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
from webenv import errors
from webenv.collector import metrics
from webenv.collector import spec as specs
from webenv.collector.engine import TERMINAL, Engine
from webenv.collector.export import check_request, export
from webenv.collector.read import EpisodeReader, validate
from webenv.collector.run import run_from_row
from webenv.collector.schema import STATE_NAMES
from webenv.v1 import collector_pb2, collector_pb2_grpc, policy_pb2

MAX_PAGE = 500
EXPORTS_KEPT = 1000


class CollectorServicer(collector_pb2_grpc.CollectorServiceServicer):
    """The gRPC face of one collector."""

    def __init__(self, engine: Engine, watch_interval: float = 0.5, export_root: str = "") -> None:
        self.engine = engine
        self.watch_interval = watch_interval
        self.export_root = Path(export_root).resolve() if export_root else None
        self._exports: OrderedDict[str, collector_pb2.ExportRunResponse] = OrderedDict()

    async def StartRun(self, request, context):
        await self._check_checkpoint_policy(request.spec.policy)
        run = await self.engine.start_run(request.request_id, request.spec)
        return collector_pb2.StartRunResponse(run=run)

    async def _check_checkpoint_policy(self, name: str) -> None:
        """A run naming a trained checkpoint must name one the policy service serves now (INVALID_ARGUMENT
        at StartRun rather than every episode failing); built-in names are checked by the spec."""
        if not name or name in specs.KNOWN_POLICIES or not specs.CHECKPOINT_POLICY.match(name):
            return
        try:
            resp = await self.engine.ctx.peers.policy().stub.ListPolicies(policy_pb2.ListPoliciesRequest(), timeout=10)
        except grpc.aio.AioRpcError:
            return  # the policy service is unreachable: the run's episodes will say so
        served = {p.name for p in resp.policies} | {p.version for p in resp.policies if p.version}
        if name not in served:
            raise errors.InvalidArgument(
                f"spec.policy: {name!r} is not served by the policy service (served: {', '.join(sorted(served))[:300]}); "
                "load a checkpoint with PolicyService.LoadCheckpoint first",
                reason="UNKNOWN_POLICY", metadata={"field": "spec.policy"})

    async def WatchRun(self, request, context) -> AsyncIterator[collector_pb2.WatchRunResponse]:
        run = await self.engine.get_run(request.run_id)
        rc = self.engine.runs.get(request.run_id)
        if rc is None:
            # Not owned here: a run shared through Redis is followed by polling its shared counts; a stored
            # run gets one report of how it ended.
            while True:
                c = run.counts
                yield collector_pb2.WatchRunResponse(
                    run=run, pass_rate=c.passed / c.finished if c.finished else 0.0
                )
                if run.state in TERMINAL or self.engine.queue is None:
                    return
                await asyncio.sleep(self.watch_interval)
                run = await self.engine.get_run(request.run_id)
        pos = 0
        while True:
            rc.changed.clear()
            ended = rc.ended.is_set()  # read before the snapshot, so the last report shows the final state
            resp, pos = rc.progress(pos)
            yield resp
            if ended:
                return
            try:
                await asyncio.wait_for(rc.changed.wait(), timeout=max(self.watch_interval, 0.05) * 4)
            except TimeoutError:
                pass
            # Throttle progress reports to one per watch_interval, but report the run's end as soon as it ends.
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(rc.ended.wait(), timeout=self.watch_interval)

    async def StopRun(self, request, context):
        return collector_pb2.StopRunResponse(run=await self.engine.stop_run(request.run_id))

    async def GetRun(self, request, context):
        return collector_pb2.GetRunResponse(run=await self.engine.get_run(request.run_id))

    async def ListRuns(self, request, context):
        if request.page_size < 0:
            raise errors.InvalidArgument("page_size: must be >= 0", reason="BAD_PAGE", metadata={"field": "page_size"})
        size = min(request.page_size or 50, MAX_PAGE)
        offset = 0
        if request.page_token:
            try:
                offset = int(base64.urlsafe_b64decode(request.page_token.encode()).decode().removeprefix("o:"))
            except ValueError as exc:
                raise errors.InvalidArgument(
                    "page_token: not a token from a previous response", reason="BAD_PAGE_TOKEN",
                    metadata={"field": "page_token"},
                ) from exc
        if request.state and request.state not in collector_pb2.RunState.values():
            raise errors.InvalidArgument(f"state: unknown value {request.state}", metadata={"field": "state"})
        store = self.engine.store
        await self.engine.persist_live()
        if self.engine.queue is not None:
            await self.engine.queue.catch_up()  # runs other collectors share (embedded stores)
            await self.engine.writer.drain()
        rows = await store.list_runs(STATE_NAMES[request.state] if request.state else None, size + 1, offset)
        runs = []
        for row in rows[:size]:
            live = self.engine.runs.get(row["run_id"])
            if live is None and self.engine.queue is not None and row["state"] in ("pending", "running"):
                # A shared run's counts and end live in Redis (its owner may be gone).
                shared = await self.engine.queue.get_run(row["run_id"])
                runs.append(shared if shared is not None else run_from_row(row))
                continue
            runs.append(live.run if live is not None else run_from_row(row))
        token = base64.urlsafe_b64encode(f"o:{offset + size}".encode()).decode() if len(rows) > size else ""
        return collector_pb2.ListRunsResponse(runs=runs, next_page_token=token)

    def _destination(self, destination: str) -> str:
        """The export folder; with an export root it must lie inside it (clients cannot write elsewhere)."""
        if self.export_root is None:
            return destination
        path = (self.export_root / destination).resolve()
        if path != self.export_root and self.export_root not in path.parents:
            raise errors.PermissionDenied(
                f"destination: {destination!r} is outside the export root {self.export_root}",
                reason="EXPORT_OUTSIDE_ROOT", metadata={"field": "destination"},
            )
        return str(path)

    async def ExportRun(self, request, context):
        if request.request_id and request.request_id in self._exports:
            return self._exports[request.request_id]
        check_request(request.format, request.destination, request.filter, request.transition_format)
        destination = self._destination(request.destination)
        if request.run_id:
            await self.engine.get_run(request.run_id)  # NOT_FOUND for an unknown run
        if self.engine.queue is not None:
            await self.engine.queue.catch_up()  # episodes other collectors ran (embedded stores)
        await self.engine.writer.drain()
        store = self.engine.store
        t0 = time.monotonic()
        res = await store.read(
            export, request.run_id, request.format, destination, request.filter, request.transition_format,
            self.engine.ctx.blobs,
        )
        metrics.EXPORT_SECONDS.observe(time.monotonic() - t0)
        resp = collector_pb2.ExportRunResponse(
            paths=res.paths, episodes=res.episodes, steps=res.steps, duration_seconds=res.duration_seconds
        )
        if request.request_id:
            self._exports[request.request_id] = resp
            while len(self._exports) > EXPORTS_KEPT:
                self._exports.popitem(last=False)
        return resp

    async def ReadEpisodes(self, request, context) -> AsyncIterator[collector_pb2.ReadEpisodesResponse]:
        """Stored episodes of the named runs, a batch at a time (unknown runs are NOT_FOUND)."""
        validate(request)
        for run_id in dict.fromkeys(request.run_ids):
            await self.engine.get_run(run_id)  # NOT_FOUND for an unknown run
        if self.engine.queue is not None:
            await self.engine.queue.catch_up()  # episodes other collectors ran (embedded stores)
        await self.engine.writer.drain()
        store = self.engine.store
        reader = EpisodeReader(request)
        for rows in await store.read(reader.rows):
            for episode in await store.read(reader.batch, rows):
                metrics.EPISODES_READ.inc()
                yield collector_pb2.ReadEpisodesResponse(episode=episode)

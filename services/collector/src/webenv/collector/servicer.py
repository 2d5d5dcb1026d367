"""CollectorService over the engine: validation at the edge, runs in the engine, exports on the store thread.

ListRuns reads one page with one query; live runs are first written in one batch so the page shows their state
now (it used to persist every run ever owned, one batch wait each: 0.28 s per run). ExportRun checks
its filter and destination before touching the disk (INVALID_ARGUMENT naming the field), and remembers the
answers of the last ``EXPORTS_KEPT`` request ids for idempotent retries.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
from webenv import errors, paging, screenshots
from webenv.collector import metrics
from webenv.collector.engine import TERMINAL, Engine
from webenv.collector.export import check_request, export
from webenv.collector.read import EpisodeReader, validate
from webenv.collector.run import run_from_row
from webenv.collector.schema import STATE_NAMES
from webenv.idempotency import RequestCache
from webenv.streams import serve_watch, wait_at_most
from webenv.v1 import collector_pb2, collector_pb2_grpc

DEFAULT_PAGE, MAX_PAGE = 50, 500
EXPORTS_KEPT = 1000


class CollectorServicer(collector_pb2_grpc.CollectorServiceServicer):
    """The gRPC face of one collector."""

    def __init__(self, engine: Engine, watch_interval: float = 0.5, export_root: str = "") -> None:
        self.engine = engine
        self.watch_interval = watch_interval
        self.export_root = Path(export_root).resolve() if export_root else None
        self._exports: RequestCache[collector_pb2.ExportRunResponse] = RequestCache(EXPORTS_KEPT)

    async def StartRun(self, request: collector_pb2.StartRunRequest, context: grpc.aio.ServicerContext
                   ) -> collector_pb2.StartRunResponse:
        run = await self.engine.start_run(request.request_id, request.spec)
        return collector_pb2.StartRunResponse(run=run)

    async def WatchRun(self, request: collector_pb2.WatchRunRequest, context: grpc.aio.ServicerContext
                   ) -> AsyncIterator[collector_pb2.WatchRunResponse]:
        run = await self.engine.get_run(request.run_id)  # an unknown run: NOT_FOUND before any report
        rc = self.engine.runs.get(request.run_id)
        if rc is None:
            # Not owned here: followed by polling its shared counts (through Redis) or its stored row until it ends;
            # a stored run that ended gets one report of how. A run whose collector is gone ends too: it is failed
            # as interrupted once its row goes stale (Engine.fail_orphans).
            first = True

            async def shared_report() -> tuple[collector_pb2.WatchRunResponse, bool]:
                nonlocal run, first
                if not first:
                    run = await self.engine.get_run(request.run_id)
                first = False
                c = run.counts
                resp = collector_pb2.WatchRunResponse(run=run, pass_rate=c.passed / c.finished if c.finished else 0.0)
                return resp, run.state in TERMINAL

            async for resp in serve_watch(shared_report, lambda: asyncio.sleep(self.watch_interval)):
                yield resp
            return
        pos = 0

        async def report() -> tuple[collector_pb2.WatchRunResponse, bool]:
            nonlocal pos
            rc.changed.clear()
            ended = rc.ended.is_set()  # read before the snapshot, so the last report shows the final state
            resp, pos = rc.progress(pos)
            return resp, ended

        async def wait() -> None:
            await wait_at_most(rc.changed.wait(), max(self.watch_interval, 0.05) * 4)
            # Throttle progress reports to one per watch_interval, but report the run's end as soon as it ends.
            await wait_at_most(rc.ended.wait(), self.watch_interval)

        async for resp in serve_watch(report, wait):
            yield resp

    async def StopRun(self, request: collector_pb2.StopRunRequest, context: grpc.aio.ServicerContext
                   ) -> collector_pb2.StopRunResponse:
        return collector_pb2.StopRunResponse(run=await self.engine.stop_run(request.run_id))

    async def GetRun(self, request: collector_pb2.GetRunRequest, context: grpc.aio.ServicerContext
                   ) -> collector_pb2.GetRunResponse:
        return collector_pb2.GetRunResponse(run=await self.engine.get_run(request.run_id))

    async def ListRuns(self, request: collector_pb2.ListRunsRequest, context: grpc.aio.ServicerContext
                   ) -> collector_pb2.ListRunsResponse:
        page = paging.read(request, default=DEFAULT_PAGE, maximum=MAX_PAGE)
        if request.state and request.state not in collector_pb2.RunState.values():
            raise errors.InvalidArgument(f"state: unknown value {request.state}", metadata={"field": "state"})
        store = self.engine.store
        await self.engine.persist_live()
        if self.engine.queue is not None:
            await self.engine.queue.catch_up()  # runs other collectors share (embedded stores)
            await self.engine.writer.drain()
        rows = await store.list_runs(STATE_NAMES[request.state] if request.state else None, page.size + 1, page.offset)
        runs = []
        for row in rows[:page.size]:
            live = self.engine.runs.get(row["run_id"])
            if live is None and self.engine.queue is not None and row["state"] in ("pending", "running"):
                # A shared run's counts and end live in Redis (its owner may be gone).
                shared = await self.engine.queue.get_run(row["run_id"])
                runs.append(shared if shared is not None else run_from_row(row))
                continue
            runs.append(live.run if live is not None else run_from_row(row))
        return collector_pb2.ListRunsResponse(runs=runs, next_page_token=page.next_token(len(rows) > page.size))

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

    async def ExportRun(self, request: collector_pb2.ExportRunRequest, context: grpc.aio.ServicerContext
                   ) -> collector_pb2.ExportRunResponse:
        again = self._exports.get(request.request_id)
        if again is not None:
            return again
        check_request(request.format, request.destination, request.filter, request.transition_format)
        if request.inline_screenshots and request.format != collector_pb2.EXPORT_FORMAT_JSONL:
            raise errors.InvalidArgument("inline_screenshots: only JSONL exports inline screenshots (MESSAGES always "
                                         "does; the other formats carry screenshot_key)", reason="BAD_EXPORT",
                                         metadata={"field": "inline_screenshots"})
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
            self.engine.ctx.blobs, request.inline_screenshots,
        )
        metrics.EXPORT_SECONDS.observe(time.monotonic() - t0)
        resp = collector_pb2.ExportRunResponse(
            paths=res.paths, episodes=res.episodes, steps=res.steps, duration_seconds=res.duration_seconds
        )
        self._exports.put(request.request_id, resp)
        return resp

    async def GetScreenshot(self, request: collector_pb2.GetScreenshotRequest, context: grpc.aio.ServicerContext
                            ) -> collector_pb2.GetScreenshotResponse:
        """A stored screenshot by its content address (INVALID_ARGUMENT for a malformed key, NOT_FOUND for one the
        blob folder does not hold)."""
        key = request.screenshot_key
        screenshots.check_key(key)
        blobs = self.engine.ctx.blobs
        try:
            data = await asyncio.to_thread(blobs.get, key)
        except FileNotFoundError:
            raise errors.NotFound(f"screenshot_key: no stored screenshot {key}", reason="SCREENSHOT_NOT_FOUND",
                                  metadata={"field": "screenshot_key", "screenshot_key": key}) from None
        return collector_pb2.GetScreenshotResponse(screenshot_key=key, codec=screenshots.key_codec(key), data=data)

    async def ReadEpisodes(self, request: collector_pb2.ReadEpisodesRequest, context: grpc.aio.ServicerContext) -> AsyncIterator[collector_pb2.ReadEpisodesResponse]:
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

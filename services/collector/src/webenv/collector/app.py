"""Assembling a collector from its settings: store, spool, writer, peers, engine, optional queue, server; started
and stopped in the order every service has (`webenv.runtime.serving`).

Health follows the dependencies the collector cannot work without: a monitor checks them every
``health_interval_seconds`` and reports NOT_SERVING (and refuses StartRun with UNAVAILABLE) while Redis is
configured and does not answer, or while the store is down and the spool has reached its cap; SERVING again
as soon as they are back. A store outage with room left in the spool keeps SERVING: nothing is lost meanwhile.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from webenv.collector import __version__
from webenv.collector import spec as specs
from webenv.collector.blobs import BlobStore
from webenv.collector.config import Settings
from webenv.collector.engine import Engine, EngineConfig
from webenv.collector.episode import Context
from webenv.collector.peers import Peers
from webenv.collector.replicas import Replicas
from webenv.collector.servicer import CollectorServicer
from webenv.collector.spool import Spool
from webenv.collector.store import AsyncStore, Store
from webenv.collector.writer import Writer
from webenv.runtime import Server, serving
from webenv.v1 import collector_pb2_grpc

if TYPE_CHECKING:
    from webenv.collector.queue import WorkQueue

log = logging.getLogger(__name__)


@dataclass
class Collector:
    """A running collector (its parts are exposed for tests and the CLI)."""

    settings: Settings
    store: AsyncStore
    writer: Writer
    peers: Peers
    engine: Engine
    queue: WorkQueue | None = None
    server: Server = field(init=False, repr=False)
    _closed: bool = False
    _monitor: asyncio.Task | None = field(default=None, repr=False)
    _parts: contextlib.AsyncExitStack = field(default_factory=contextlib.AsyncExitStack, repr=False)
    _serving: contextlib.AbstractAsyncContextManager[Server] | None = field(default=None, repr=False)

    @classmethod
    def assemble(cls, settings: Settings) -> Collector:
        """The collector's parts, made but not started (nothing is opened or connected yet)."""
        collector_id = settings.resolved_collector_id()
        store = AsyncStore(Store(settings.resolved_store_url(), settings.store_database))
        spool = Spool(settings.resolved_spool_dir(), max_bytes=settings.spool_max_mb * 1024 * 1024)
        writer = Writer(
            store,
            spool,
            batch_rows=settings.batch_rows,
            flush_interval=settings.flush_interval_seconds,
            spool_retry_seconds=settings.spool_retry_seconds,
        )
        peers = Peers(settings.policy_addr, settings.judge_addr, settings.sites_addr, timeout=settings.step_timeout_seconds)
        ctx = Context(
            peers=peers,
            blobs=BlobStore(settings.resolved_blob_dir()),
            collector_id=collector_id,
            webenv_version=__version__,
            step_timeout=settings.step_timeout_seconds,
            replicas=Replicas(lambda address: peers.env(address).channel, settings.env_refresh_seconds),
        )
        defaults = specs.Defaults(
            env_address=settings.browser_addr,
            concurrency=settings.default_concurrency,
            episode_timeout_seconds=settings.episode_timeout_seconds,
            policy=settings.default_policy,
        )
        queue = None
        if settings.redis_url:
            from webenv.collector.queue import WorkQueue

            queue = WorkQueue(
                settings.redis_url,
                consumer=collector_id,
                prefix=settings.queue_prefix,
                claim_idle_seconds=settings.queue_claim_idle_seconds,
                max_deliveries=settings.queue_max_deliveries,
                workers=settings.queue_workers,
                # An embedded store is this process's alone: share its rows so every collector sees every run.
                share_rows=settings.resolved_store_url().startswith("chdb://"),
                peer_timeout_seconds=max(60.0, settings.queue_claim_idle_seconds * 4),
            )
        config = EngineConfig(
            defaults, collector_id, __version__,
            max_active_runs=settings.max_active_runs,
            max_pending_runs=settings.max_pending_runs,
            max_run_episodes=settings.max_run_episodes,
            max_spec_bytes=settings.max_spec_bytes,
            admission_retry_seconds=settings.admission_retry_seconds,
        )
        engine = Engine(config, store, writer, ctx, queue=queue)
        return cls(settings, store, writer, peers, engine, queue)

    @classmethod
    async def start(cls, settings: Settings) -> Collector:
        """Start through the sdk's serve skeleton (`webenv.runtime.serving`): bind with health NOT_SERVING, open
        the store, start the writer and the queue, SERVING. A part that fails to start leaves nothing running:
        the parts started before it are closed (in reverse order) and the server stops."""
        collector = cls.assemble(settings)
        collector._serving = serving("collector", settings, [(
            collector_pb2_grpc.add_CollectorServiceServicer_to_server,
            CollectorServicer(collector.engine, export_root=settings.export_root),
            "webenv.v1.CollectorService",
        )], start=collector._start_parts, close=collector._parts.aclose)
        collector.server = await collector._serving.__aenter__()
        collector._monitor = asyncio.create_task(collector._watch_health())
        return collector

    async def _start_parts(self) -> None:
        """Each part in turn, its close registered once it is up (closed in reverse: engine, queue, writer,
        farm replicas, peers, store)."""
        parts = self._parts
        parts.push_async_callback(self.store.close)
        parts.push_async_callback(self.peers.close)
        if self.engine.ctx.replicas is not None:  # its resolver rides the peers' channels: closed before them
            parts.push_async_callback(self.engine.ctx.replicas.close)
        await self.store.migrate()
        await self.writer.start()
        parts.push_async_callback(self.writer.close)
        if self.queue is not None:
            await self.queue.start(self.engine.run_queued, self.writer)  # the engine's job: run, store, count
            parts.push_async_callback(self._close_queue)
        parts.push_async_callback(self.engine.close)

    async def _close_queue(self) -> None:
        assert self.queue is not None
        with contextlib.suppress(Exception):
            await self.queue.close()

    async def problem(self) -> str:
        """Why the collector cannot work now ("" when it can): a dependency it needs is down."""
        if self.writer.stalled:
            return f"store down and spool full ({self.writer.spool.bytes} bytes, WEBENV_SPOOL_MAX_MB={self.settings.spool_max_mb})"
        if self.queue is not None:
            try:
                await asyncio.wait_for(self.queue.redis.ping(), timeout=max(self.settings.health_interval_seconds, 1.0))
            except Exception as exc:  # any failure to answer means Redis is down
                return f"Redis at {self.settings.redis_url} does not answer: {type(exc).__name__}: {exc}"
        return ""

    async def _watch_health(self) -> None:
        """Keep health and StartRun admission in step with the dependencies, and fail the runs whose collector is
        gone (Engine.fail_orphans), every ``orphan_after_seconds / 3``."""
        next_sweep = 0.0
        while True:
            if time.monotonic() >= next_sweep and not self.engine.unavailable:
                next_sweep = time.monotonic() + self.settings.orphan_after_seconds / 3
                try:
                    await self.engine.fail_orphans(self.settings.orphan_after_seconds)
                except Exception as exc:  # the store may be down: the next sweep tries again
                    log.warning("could not look for interrupted runs: %s", exc)
            try:
                why = await self.problem()
            except Exception as exc:  # the monitor must outlive odd errors
                why = f"health check failed: {exc}"
            if why != self.engine.unavailable:
                if why:
                    log.warning("collector NOT_SERVING: %s", why)
                else:
                    log.info("collector SERVING again: dependencies are back")
                self.engine.unavailable = why
                await self.server.set_serving(not why)
            await asyncio.sleep(self.settings.health_interval_seconds)

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.server.port}"

    async def close(self) -> None:
        """Stop runs, flush rows, close everything (the server first, so no new work arrives). Idempotent."""
        if self._closed:
            return
        self._closed = True
        if self._monitor is not None:
            self._monitor.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._monitor
        if self._serving is not None:
            await self._serving.__aexit__(None, None, None)  # the server stops, then the parts close


async def main(settings: Settings) -> None:
    """The service: start, serve until SIGTERM/SIGINT, shut down cleanly."""
    collector = await Collector.start(settings)
    try:
        await collector.server.wait_for_termination()
    finally:
        await collector.close()

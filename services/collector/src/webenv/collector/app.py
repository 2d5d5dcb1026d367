"""Assembling a collector from its settings: store, spool, writer, peers, engine, optional queue, server."""

from __future__ import annotations

import contextlib
import logging
from dataclasses import dataclass

from webenv.collector import __version__
from webenv.collector import spec as specs
from webenv.collector.blobs import BlobStore
from webenv.collector.config import Settings
from webenv.collector.engine import Engine, EngineConfig
from webenv.collector.episode import Context
from webenv.collector.peers import Peers
from webenv.collector.servicer import CollectorServicer
from webenv.collector.spool import Spool
from webenv.collector.store import AsyncStore, Store
from webenv.collector.writer import Writer
from webenv.runtime import Server
from webenv.v1 import collector_pb2_grpc

log = logging.getLogger(__name__)


@dataclass
class Collector:
    """A running collector (its parts are exposed for tests and the CLI)."""

    settings: Settings
    server: Server
    store: AsyncStore
    writer: Writer
    peers: Peers
    engine: Engine
    queue: object | None = None
    _closed: bool = False

    @classmethod
    async def start(cls, settings: Settings) -> Collector:
        """Open the store, start the writer and the gRPC server, report SERVING."""
        collector_id = settings.resolved_collector_id()
        store = AsyncStore(Store(settings.resolved_store_url(), settings.store_database))
        await store.call(store.store.migrate)
        spool = Spool(settings.resolved_spool_dir())
        writer = Writer(
            store,
            spool,
            batch_rows=settings.batch_rows,
            flush_interval=settings.flush_interval_seconds,
            spool_retry_seconds=settings.spool_retry_seconds,
        )
        await writer.start()
        peers = Peers(settings.policy_addr, settings.judge_addr, settings.sites_addr, timeout=settings.step_timeout_seconds)
        ctx = Context(
            peers=peers,
            blobs=BlobStore(settings.resolved_blob_dir()),
            collector_id=collector_id,
            webenv_version=__version__,
            step_timeout=settings.step_timeout_seconds,
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
        engine = Engine(EngineConfig(defaults, collector_id, __version__), store, writer, ctx, queue=queue)
        if queue is not None:
            await queue.start(engine)
        server = Server("collector", settings)
        server.add_service(
            collector_pb2_grpc.add_CollectorServiceServicer_to_server,
            CollectorServicer(engine, export_root=settings.export_root),
            "webenv.v1.CollectorService",
        )
        await server.start()
        await server.set_serving()
        return cls(settings, server, store, writer, peers, engine, queue)

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.server.port}"

    async def close(self) -> None:
        """Stop runs, flush rows, close everything (the server first, so no new work arrives). Idempotent."""
        if self._closed:
            return
        self._closed = True
        await self.server.stop()
        await self.engine.close()
        if self.queue is not None:
            with contextlib.suppress(Exception):
                await self.queue.close()
        await self.writer.close()
        await self.peers.close()
        await self.store.close()


async def main(settings: Settings) -> None:
    """The service: start, serve until SIGTERM/SIGINT, shut down cleanly."""
    collector = await Collector.start(settings)
    try:
        await collector.server.wait_for_termination()
    finally:
        await collector.close()

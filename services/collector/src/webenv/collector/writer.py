"""Batched, durable writes: episodes are acknowledged once their rows are in the store or in the spool.

Episodes finish one by one; the writer groups their rows into batches (by size or age) so the store sees few
large inserts. A batch that fails to insert goes to the disk spool instead, and a background task flushes the
spool when the store answers again. ``put`` returns only when the rows are durable either way, which is when
the Redis queue may acknowledge the episode. When the spool is full (its cap) and the store still down, the
batch waits for the store instead: back-pressure on the episodes, never a dropped row.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from dataclasses import dataclass, field

from webenv.collector import metrics
from webenv.collector.spool import Batch, Spool
from webenv.collector.store import AsyncStore, StoreError

log = logging.getLogger(__name__)


@dataclass
class _Item:
    batch: Batch
    done: asyncio.Future
    queued_at: float = field(default_factory=time.monotonic)
    urgent: bool = False  # write the batch collected so far now instead of waiting for flush_interval


class Writer:
    """Groups row batches, inserts them, spools them on failure and flushes the spool later."""

    def __init__(
        self,
        store: AsyncStore,
        spool: Spool,
        *,
        batch_rows: int = 2000,
        flush_interval: float = 0.25,
        spool_retry_seconds: float = 1.0,
    ) -> None:
        self.store = store
        self.spool = spool
        self.batch_rows = batch_rows
        self.flush_interval = flush_interval
        self.spool_retry_seconds = spool_retry_seconds
        self._queue: asyncio.Queue[_Item] = asyncio.Queue()
        self._tasks: list[asyncio.Task] = []
        self.store_up = True
        self._flush_lock = asyncio.Lock()
        self.spooled_batches = 0
        self.flushed_batches = 0

    async def start(self) -> None:
        """Start the batching loop and the spool flusher."""
        self._tasks = [asyncio.create_task(self._loop()), asyncio.create_task(self._flusher())]
        metrics.SPOOL_ROWS.set(await self.store.call(self.spool.pending_rows))

    async def put(self, batch: Batch, urgent: bool = False) -> None:
        """Queue rows and wait until they are durable (stored or spooled).

        ``urgent`` writes them (with whatever is batched so far) without waiting out ``flush_interval``: for rows
        nothing else will join soon, e.g. a run's last episode.
        """
        fut = asyncio.get_running_loop().create_future()
        await self._queue.put(_Item(batch, fut, urgent=urgent))
        await fut

    async def drain(self) -> None:
        """Wait for everything queued so far to be durable, then try to flush the spool once."""
        await self.put({})
        await self.flush_spool()

    async def close(self) -> None:
        """Write what is queued and stop."""
        await self.drain()
        for t in self._tasks:
            t.cancel()
        for t in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await t

    async def _loop(self) -> None:
        while True:
            first = await self._queue.get()
            items = [first]
            rows = _size(first.batch)
            deadline = time.monotonic() + self.flush_interval
            # A drain marker arriving first has nothing to wait for: write (i.e. acknowledge) it at once.
            while first.batch and not first.urgent and rows < self.batch_rows:
                timeout = deadline - time.monotonic()
                if timeout <= 0:
                    break
                try:
                    item = await asyncio.wait_for(self._queue.get(), timeout)
                except TimeoutError:
                    break
                items.append(item)
                rows += _size(item.batch)
                if not item.batch or item.urgent:  # a drain marker or urgent rows: write now
                    break
            await self._write(items, rows)

    async def _write(self, items: list[_Item], rows: int) -> None:
        merged: Batch = {}
        for it in items:
            for table, r in it.batch.items():
                merged.setdefault(table, []).extend(r)
        t0 = time.monotonic()
        if rows:
            try:
                if not self.store_up:
                    # During an outage batches go straight to the spool: only the flusher probes the store, so
                    # a store that hangs on connect does not stall every batch.
                    raise StoreError("store marked down")
                await self.store.insert(merged)
            except StoreError as exc:
                if self.store_up:
                    log.warning("store unavailable, spooling to %s: %s", self.spool.folder, exc)
                self.store_up = False
                if await self._wait_while_spool_full(merged):
                    await self.store.call(self.spool.append, merged)
                    self.spooled_batches += 1
                    metrics.SPOOL_ROWS.inc(rows)
            metrics.STORE_BATCH_ROWS.observe(rows)
            metrics.STEP_PHASE.labels("store").observe(time.monotonic() - t0)
        now = time.monotonic()
        for it in items:
            metrics.STORE_LAG.observe(now - it.queued_at)
            if not it.done.done():
                it.done.set_result(None)

    @property
    def stalled(self) -> bool:
        """The store is down and the spool is full: nothing more can be made durable until the store returns."""
        return not self.store_up and self.spool.full()

    async def _wait_while_spool_full(self, batch: Batch) -> bool:
        """Hold ``batch`` while the spool is full; False if it reached the store meanwhile (nothing to spool)."""
        warned = False
        while True:
            if self.store_up:  # the flusher reached the store again
                try:
                    await self.store.insert(batch)
                    return False
                except StoreError:
                    self.store_up = False
            if not self.spool.full():
                return True
            if not warned:
                log.warning("spool full (%d bytes) and store down: writes wait for the store", self.spool.bytes)
                warned = True
            await asyncio.sleep(self.spool_retry_seconds)

    async def flush_spool(self) -> int:
        """Insert spooled segments oldest first; stops at the first failure. Returns segments flushed."""
        async with self._flush_lock:  # the flusher and drain() must not replay the same segment at once
            flushed = 0
            for seg in await self.store.call(self.spool.segments):
                batch = await self.store.call(self.spool.read, seg)
                try:
                    await self.store.insert(batch)
                except StoreError:
                    self.store_up = False
                    break
                self.store_up = True
                await self.store.call(self.spool.remove, seg)
                flushed += 1
                self.flushed_batches += 1
                metrics.SPOOL_ROWS.dec(_size(batch))
            return flushed

    async def _flusher(self) -> None:
        while True:
            await asyncio.sleep(self.spool_retry_seconds)
            try:
                await self.flush_spool()
            except Exception:  # the flusher must outlive odd errors
                log.exception("spool flush failed")


def _size(batch: Batch) -> int:
    return sum(len(r) for r in batch.values())

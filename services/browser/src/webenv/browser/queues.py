"""Operation-specific queues: opens/navigations, actions and observations each get their own
concurrency limit, so a burst of slow page loads never holds up quick clicks (WebGym's design).
Wait time is measured per queue."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

from webenv.browser import metrics


@dataclass
class OpQueue:
    """A named semaphore that counts running and waiting operations."""

    name: str
    limit: int
    running: int = 0
    waiting: int = 0
    _sem: asyncio.Semaphore = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self._sem = asyncio.Semaphore(self.limit)

    @asynccontextmanager
    async def slot(self) -> AsyncIterator[float]:
        """Hold one slot; yields the seconds spent waiting for it."""
        t0 = time.perf_counter()
        self.waiting += 1
        try:
            await self._sem.acquire()
        finally:
            self.waiting -= 1
        waited = time.perf_counter() - t0
        metrics.QUEUE_WAIT_SECONDS.labels(self.name).observe(waited)
        self.running += 1
        try:
            yield waited
        finally:
            self.running -= 1
            self._sem.release()


@dataclass
class Queues:
    """The farm's three queues."""

    open: OpQueue
    act: OpQueue
    observe: OpQueue

    @classmethod
    def create(cls, open_limit: int, act_limit: int, observe_limit: int) -> Queues:
        return cls(OpQueue("open", open_limit), OpQueue("act", act_limit), OpQueue("observe", observe_limit))

    def all(self) -> list[OpQueue]:
        return [self.open, self.act, self.observe]

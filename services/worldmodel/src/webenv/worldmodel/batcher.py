"""Micro-batching of predictions: concurrent requests (StepStream, many sessions) share backend calls.

The worker takes whatever is queued (up to max_batch) as soon as the backend is free, so a lone request
is never delayed waiting for company, while a burst rides one vLLM `generate` call.
"""

from __future__ import annotations

import asyncio
import contextlib

from webenv.worldmodel.predict import Prediction, Predictor, Query


class Batcher:
    """Serialises backend access and batches what piles up meanwhile."""

    def __init__(self, predictor: Predictor, max_batch: int = 16) -> None:
        self.predictor = predictor
        self.max_batch = max_batch
        self._queue: asyncio.Queue[tuple[Query, asyncio.Future[Prediction]]] = asyncio.Queue()
        self._task: asyncio.Task[None] | None = None

    async def predict(self, query: Query) -> Prediction:
        if self._task is None:
            self._task = asyncio.create_task(self._run())
        fut: asyncio.Future[Prediction] = asyncio.get_running_loop().create_future()
        await self._queue.put((query, fut))
        return await fut

    async def _run(self) -> None:
        while True:
            items = [await self._queue.get()]
            while len(items) < self.max_batch and not self._queue.empty():
                items.append(self._queue.get_nowait())
            try:
                preds = await asyncio.to_thread(self.predictor.predict_many, [q for q, _ in items])
            except Exception as exc:
                for _, fut in items:
                    if not fut.done():
                        fut.set_exception(exc)
                continue
            for (_, fut), p in zip(items, preds, strict=True):
                if not fut.done():
                    fut.set_result(p)

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

"""Cross-request dynamic batching in front of any backend; itself a backend (same ``generate``).

Every request of a service (the policy's acts of every episode and stream, the world model's simulated steps)
goes through one Batcher, so requests that arrive together share model batches. Two modes, chosen by the backend:

- windowed (transformers): a worker takes the first queued request, keeps collecting for up to ``window_seconds``
  or until ``max_batch`` (whatever is already queued is taken at once; a window of 0 takes only that), groups
  the batch by SamplingParams.batch_key, runs each group, and answers every request of it; requests arriving
  meanwhile form the next batch.
- continuous (vLLM, OpenAI-compatible servers): each request goes to the backend on arrival, at most
  ``max_batch`` at once; the engine's scheduler joins it to the running batch. The batch size reported is the
  number of requests in flight when it started.

Answers go back to each caller as soon as its batch finishes (a stream answers in completion order, and a
batch's results keep their requests' order). A request the backend cannot serve is refused alone before it
queues; one failed batch fails its own requests, never the worker. Queue wait, inference time and batch size are
set on each result and, with an ``observer``, reported (the services export them as metrics).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

from webenv import errors

from .types import GenerationRequest, GenerationResult, LLMBackend, check_supported

log = logging.getLogger("webenv.llm.batcher")


class BatchObserver(Protocol):
    """Receives serving measurements (a service's Prometheus histograms)."""

    def batch(self, size: int, inference_seconds: float) -> None: ...

    def queued(self, seconds: float) -> None: ...


@dataclass(slots=True)
class _Item:
    request: GenerationRequest
    future: asyncio.Future
    enqueued: float = field(default_factory=time.perf_counter)


class Batcher:
    """Queues requests from many callers and serves them in backend batches."""

    def __init__(self, backend: LLMBackend, *, max_batch: int = 16, window_seconds: float = 0.01,
                 max_queue: int = 4096, label: str = "llm", max_queue_setting: str = "",
                 observer: BatchObserver | None = None) -> None:
        self.backend = backend
        self.max_batch = max_batch
        self.window = window_seconds
        self.max_queue = max_queue
        #: Names the service in errors (reason <LABEL>_QUEUE_FULL, "the <label> server is shutting down").
        self.label = label
        #: The setting that raises max_queue, named in the RESOURCE_EXHAUSTED message.
        self.max_queue_setting = max_queue_setting
        self.observer = observer
        self._queue: asyncio.Queue[_Item] = asyncio.Queue()
        self._arrived = asyncio.Event()
        self._worker: asyncio.Task | None = None
        self._inflight = 0
        self._running = 0
        self._slots = asyncio.Semaphore(max_batch)  # continuous mode: requests in the engine at once
        self.ready = False
        #: Recent batch sizes (tests and benchmarks report them).
        self.recent_batches: deque[int] = deque(maxlen=1000)

    # The backend's identity, so a Batcher stands wherever a backend does.
    @property
    def name(self) -> str:
        return self.backend.name

    @property
    def model(self) -> str:
        return self.backend.model

    @property
    def continuous(self) -> bool:
        return True  # it interleaves concurrent requests itself

    @property
    def capabilities(self):
        return self.backend.capabilities

    @property
    def max_context_tokens(self) -> int:
        return self.backend.max_context_tokens

    @property
    def parameters(self) -> int:
        return self.backend.parameters

    @property
    def pending(self) -> int:
        """Requests submitted and not yet answered (queued, being batched, or in the backend)."""
        return self._inflight

    async def start(self) -> None:
        """Load the backend's model and start batching."""
        await self.backend.start()
        if not self.backend.continuous and self._worker is None:
            self._worker = asyncio.create_task(self._run(), name=f"{self.label}-batcher")
        self.ready = True

    async def close(self) -> None:
        self.ready = False
        if self._worker is not None:
            self._worker.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._worker
            self._worker = None
        while not self._queue.empty():
            item = self._queue.get_nowait()
            if not item.future.done():
                item.future.set_exception(errors.Unavailable(f"the {self.label} server is shutting down",
                                                             reason="SHUTTING_DOWN"))
        await self.backend.close()

    async def generate(self, requests: Sequence[GenerationRequest]) -> list[GenerationResult]:
        """Every request submitted at once (they may share batches); results in order."""
        return list(await asyncio.gather(*(self.submit(r) for r in requests)))

    async def submit(self, request: GenerationRequest) -> GenerationResult:
        if not self.ready:
            raise errors.Unavailable("the model is still loading; retry shortly", reason="MODEL_LOADING",
                                     retry_after_seconds=2.0)
        if self.pending >= self.max_queue:
            setting = f" (limit {self.max_queue_setting}={self.max_queue})" if self.max_queue_setting else ""
            raise errors.ResourceExhausted(f"{self.pending} LLM requests are queued{setting}",
                                           reason=f"{self.label.upper()}_QUEUE_FULL", retry_after_seconds=1.0)
        check_supported(self.backend, [request])
        if self.backend.continuous:
            return await self._direct(request)
        item = _Item(request, asyncio.get_running_loop().create_future())
        self._inflight += 1
        try:
            self._queue.put_nowait(item)
            self._arrived.set()
            return await item.future
        finally:
            self._inflight -= 1

    async def _direct(self, request: GenerationRequest) -> GenerationResult:
        enqueued = time.perf_counter()
        self._inflight += 1
        try:
            async with self._slots:
                started = time.perf_counter()
                self._running += 1
                size = self._running
                self.recent_batches.append(size)
                try:
                    [result] = await self.backend.generate([_remaining(request, started - enqueued)])
                finally:
                    self._running -= 1
                done = time.perf_counter()
        finally:
            self._inflight -= 1
        result.queue_seconds, result.inference_seconds, result.batch_size = started - enqueued, done - started, size
        if self.observer is not None:
            self.observer.batch(size, result.inference_seconds)
            self.observer.queued(result.queue_seconds)
        return result

    async def _collect(self) -> list[_Item]:
        batch = [await self._queue.get()]
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.window
        while len(batch) < self.max_batch:
            if not self._queue.empty():
                batch.append(self._queue.get_nowait())
                continue
            remaining = deadline - loop.time()
            if remaining <= 0:
                break
            # Wait on an event rather than on queue.get() with a timeout: a get cancelled by the timeout
            # just as an item arrives could otherwise drop that item (and hang its caller).
            self._arrived.clear()
            try:
                await asyncio.wait_for(self._arrived.wait(), remaining)
            except TimeoutError:
                break
        return [item for item in batch if not item.future.done()]  # callers that went away are skipped

    async def _run(self) -> None:
        while True:
            batch = await self._collect()
            groups: dict[tuple, list[_Item]] = {}
            for item in batch:
                groups.setdefault(item.request.params.batch_key, []).append(item)
            for items in groups.values():
                await self._serve(items)

    async def _serve(self, items: list[_Item]) -> None:
        started = time.perf_counter()
        size = len(items)
        self.recent_batches.append(size)
        try:
            results = await self.backend.generate([_remaining(i.request, started - i.enqueued) for i in items])
        except Exception as exc:  # one failed batch fails its requests, never the worker
            log.exception("backend generate failed for a batch of %d", size)
            for item in items:
                if not item.future.done():
                    item.future.set_exception(exc)
            return
        done = time.perf_counter()
        if self.observer is not None:
            self.observer.batch(size, done - started)
        for item, result in zip(items, results, strict=True):
            result.queue_seconds, result.inference_seconds, result.batch_size = (
                started - item.enqueued, done - started, size)
            if self.observer is not None:
                self.observer.queued(result.queue_seconds)
            if not item.future.done():
                item.future.set_result(result)


def _remaining(request: GenerationRequest, waited: float) -> GenerationRequest:
    """The request with its time limit less the time it queued (a limit counts from submission)."""
    if request.timeout_seconds <= 0 or waited <= 0:
        return request
    return dataclasses.replace(request, timeout_seconds=max(request.timeout_seconds - waited, 1e-6))

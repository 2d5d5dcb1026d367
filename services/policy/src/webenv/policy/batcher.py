"""Cross-episode dynamic batching in front of an LLM backend.

Every llm-policy request, from any Act call or ActStream of any client, goes through one Batcher, so
requests of many episodes share model batches. Two modes, chosen by the backend:

- windowed (transformers): a worker takes the first queued request, keeps collecting for up to
  `window` seconds or until `max_batch` (whatever is already queued is taken at once), runs the batch,
  and answers every request of it; requests arriving meanwhile form the next batch.
- continuous (vLLM, OpenAI-compatible servers): each request goes to the backend on arrival; the
  engine's scheduler joins it to the running batch. The reported batch size is the number of requests
  in flight when it started.

Answers go back to each caller as soon as its batch finishes, so an ActStream answers in completion
order. Queue wait, inference time and batch size are measured per request and exported.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from dataclasses import dataclass, field

from webenv import errors
from webenv.agent.prompt import Prompt

from . import metrics
from .backends import Generation, GenerationParams, LLMBackend

log = logging.getLogger("webenv.policy.batcher")


@dataclass(slots=True)
class Served:
    """A generation with how it was served."""

    generation: Generation
    queue_seconds: float
    inference_seconds: float
    batch_size: int


@dataclass(slots=True)
class _Item:
    prompt: Prompt
    params: GenerationParams
    future: asyncio.Future
    enqueued: float = field(default_factory=time.perf_counter)

    @property
    def key(self) -> tuple:
        # The seed is left out on purpose: a batch shares one sampler, and keying on it would give batches of one.
        p = self.params
        return (p.max_new_tokens, p.temperature, p.ignore_eos, p.stop, p.regex)


class Batcher:
    """Queues prompts from many episodes and serves them in backend batches."""

    def __init__(self, backend: LLMBackend, *, max_batch: int = 16, window_seconds: float = 0.01,
                 max_queue: int = 4096) -> None:
        self.backend = backend
        self.max_batch = max_batch
        self.window = window_seconds
        self.max_queue = max_queue
        self._queue: asyncio.Queue[_Item] = asyncio.Queue()
        self._arrived = asyncio.Event()
        self._worker: asyncio.Task | None = None
        self._inflight = 0
        self._running = 0
        self._slots = asyncio.Semaphore(max_batch)  # continuous mode: requests in the engine at once
        self.ready = False
        #: Recent batch sizes (for tests and the benchmark's report).
        self.recent_batches: deque[int] = deque(maxlen=1000)

    @property
    def pending(self) -> int:
        """Requests submitted and not yet answered (queued, being batched, or in the backend)."""
        return self._inflight

    async def start(self) -> None:
        """Load the backend's model and start batching."""
        await self.backend.start()
        if not self.backend.continuous and self._worker is None:
            self._worker = asyncio.create_task(self._run(), name="policy-batcher")
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
                item.future.set_exception(errors.Unavailable("the policy server is shutting down",
                                                             reason="SHUTTING_DOWN"))
        await self.backend.close()

    async def submit(self, prompt: Prompt, params: GenerationParams) -> Served:
        if not self.ready:
            raise errors.Unavailable("the model is still loading; retry shortly", reason="MODEL_LOADING",
                                     retry_after_seconds=2.0)
        if self.pending >= self.max_queue:
            raise errors.ResourceExhausted(
                f"{self.pending} LLM requests are queued (limit WEBENV_POLICY_MAX_QUEUE={self.max_queue})",
                reason="POLICY_QUEUE_FULL", retry_after_seconds=1.0)
        if self.backend.continuous:
            return await self._direct(prompt, params)
        item = _Item(prompt, params, asyncio.get_running_loop().create_future())
        self._inflight += 1
        try:
            self._queue.put_nowait(item)
            self._arrived.set()
            return await item.future
        finally:
            self._inflight -= 1

    async def _direct(self, prompt: Prompt, params: GenerationParams) -> Served:
        enqueued = time.perf_counter()
        self._inflight += 1
        try:
            async with self._slots:
                started = time.perf_counter()
                self._running += 1
                size = self._running
                metrics.BATCH_SIZE.observe(size)
                self.recent_batches.append(size)
                try:
                    [gen] = await self.backend.generate([prompt], params)
                finally:
                    self._running -= 1
                done = time.perf_counter()
        finally:
            self._inflight -= 1
        served = Served(gen, started - enqueued, done - started, size)
        metrics.QUEUE_SECONDS.observe(served.queue_seconds)
        metrics.INFERENCE_SECONDS.observe(served.inference_seconds)
        return served

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
                groups.setdefault(item.key, []).append(item)
            for items in groups.values():
                await self._serve(items)

    async def _serve(self, items: list[_Item]) -> None:
        started = time.perf_counter()
        size = len(items)
        metrics.BATCH_SIZE.observe(size)
        self.recent_batches.append(size)
        try:
            gens = await self.backend.generate([i.prompt for i in items], items[0].params)
        except Exception as exc:  # one failed batch fails its requests, never the worker
            log.exception("backend generate failed for a batch of %d", size)
            for item in items:
                if not item.future.done():
                    item.future.set_exception(exc)
            return
        done = time.perf_counter()
        metrics.INFERENCE_SECONDS.observe(done - started)
        for item, gen in zip(items, gens, strict=True):
            metrics.QUEUE_SECONDS.observe(started - item.enqueued)
            if not item.future.done():
                item.future.set_result(Served(gen, started - item.enqueued, done - started, size))

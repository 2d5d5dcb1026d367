"""The one streaming layer of webenv: tagged bidi streams answered in completion order, and watch streams.

StepStream and ActStream carry many episodes on one call: each request has a `tag`, each answer names the tag
of its request and leaves as soon as it is ready, so one slow item never holds up the rest (a collector with
thousands of episodes keeps one stream per peer instead of one call per step). Both sides of that protocol live
here, once:

* :func:`serve_in_completion_order` (servers): every item runs as its own task, at most `max_inflight` of them
  unanswered at a time (further items wait unread, so HTTP/2 flow control slows the client instead of the
  server's memory growing); a failed item becomes a `StreamError` for its tag and the stream goes on; the stream
  ends — an end marker that is always sent, whatever failed — once the client has half-closed and every item
  read is answered.
* :class:`Multiplexer` (clients): sends tagged requests over one long-lived call and resolves each caller's
  future by tag. When the stream ends — normally, with a gRPC status, or with any other error — every request
  still waiting on it is failed with :class:`StreamBroken` (never left waiting); the next request opens a
  fresh stream.

The other server streams, ``CollectorService.WatchRun`` and ``TrainerService.WatchJob``, follow one resource
until it ends. They held three copies of one loop (the collector's own runs, its shared or stored runs, the
trainer's jobs: report the state now, end if that was the end, wait for a change or at most an interval, report
again), each with its own try/except around the timed wait. :func:`serve_watch` is that loop, once; what differs
(how a report is made, when it is the last, what a change is) stays with each service. :func:`wait_at_most` is
the "a change, or this long at most" wait all three use.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

import grpc
from webenv import errors

__all__ = ["Multiplexer", "StreamBroken", "serve_in_completion_order", "serve_watch", "wait_at_most"]

log = logging.getLogger("webenv.streams")

Req = TypeVar("Req")
Resp = TypeVar("Resp")

_END = object()  # the end marker of both sides' internal queues


async def serve_in_completion_order(
    requests: AsyncIterator[Req],
    answer: Callable[[Req], Awaitable[Any]],
    response_type: Callable[..., Resp],
    *,
    max_inflight: int,
    what: str = "item",
    on_error: Callable[[errors.WebenvError], None] | None = None,
) -> AsyncIterator[Resp]:
    """Serve a tagged bidi stream: ``response_type(tag=item.tag, response=await answer(item))`` for each item, in
    completion order.

    A :class:`~webenv.errors.WebenvError` from `answer` becomes ``response_type(tag, error=StreamError)``; any
    other exception is logged and answered as INTERNAL (reason ``<WHAT>_FAILED``), so a bug in one item never
    ends the other items' stream. `on_error` sees every error answered (for a service's counters).
    """
    if max_inflight < 1:
        raise ValueError(f"max_inflight must be >= 1, got {max_inflight}")
    out: asyncio.Queue[Any] = asyncio.Queue()
    slots = asyncio.Semaphore(max_inflight)  # released when the answer has been handed to gRPC
    tasks: set[asyncio.Task[None]] = set()

    async def one(item: Any) -> None:
        try:
            msg = response_type(tag=item.tag, response=await answer(item))
        except errors.WebenvError as err:
            msg = _failed(item, err)
        except Exception as exc:
            log.exception("%s %s of a stream failed", what, item.tag)
            msg = _failed(item, errors.Internal(f"{what} failed: {type(exc).__name__}: {exc}",
                                                reason=f"{what.upper()}_FAILED"))
        out.put_nowait(msg)

    def _failed(item: Any, err: errors.WebenvError) -> Resp:
        if on_error is not None:
            on_error(err)
        return response_type(tag=item.tag, error=err.to_stream_error())

    async def reader() -> None:
        try:
            async for item in requests:
                await slots.acquire()
                t = asyncio.create_task(one(item))
                tasks.add(t)
                t.add_done_callback(tasks.discard)
            if tasks:
                await asyncio.gather(*list(tasks), return_exceptions=True)
        finally:
            out.put_nowait(_END)

    read_task = asyncio.create_task(reader())
    try:
        while (msg := await out.get()) is not _END:
            yield msg
            slots.release()
    finally:
        read_task.cancel()
        for t in list(tasks):
            t.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await read_task


async def serve_watch(
    report: Callable[[], Awaitable[tuple[Resp, bool]]],
    wait: Callable[[], Awaitable[object]],
) -> AsyncIterator[Resp]:
    """Serve "watch a resource until it ends": ``report()``'s message, then after each ``wait()`` the next one,
    until a report says it is the last.

    ``report()`` returns ``(message, last)``. The first message is the state at the call (clients such as
    ``webenv.client.watch.follow`` rely on it: a reopened watch starts from the current state, nothing counted
    twice), and the stream's last message is the end state. `last` is decided by the service, not read from the
    message, because the end is not always in it: a collector's run shows a terminal state before its final
    counts are stored, and its watchers must end only after that. Whatever ``report()`` raises ends the stream
    with that error; raised by the first report (an unknown id: NOT_FOUND), no message is sent at all.

    ``wait()`` returns when the next report is due: a change of the resource, or an interval passed without one
    (a keepalive, and the only signal a resource that is polled has); see :func:`wait_at_most`. A client that goes
    away cancels the handler's task, which raises CancelledError at the await in progress; nothing is held
    between reports, so nothing else needs undoing.
    """
    while True:
        message, last = await report()
        yield message
        if last:
            return
        await wait()


async def wait_at_most(change: Awaitable[object], seconds: float) -> bool:
    """Await `change` for at most `seconds`; True when it happened, False when the time ran out (it is then
    cancelled). A watch wakes on either: the change is reported at once, the timeout is a report anyway."""
    try:
        await asyncio.wait_for(change, seconds)
    except TimeoutError:
        return False
    return True


class StreamBroken(errors.WebenvError):
    """The shared stream ended or failed while a request was waiting on it (the request may or may not have been
    acted on). `code` is the call's gRPC status, UNAVAILABLE when it ended without one."""

    code = grpc.StatusCode.UNAVAILABLE
    default_reason = "STREAM_BROKEN"

    def __init__(self, message: str, code: grpc.StatusCode = grpc.StatusCode.UNAVAILABLE, **kw: Any) -> None:
        super().__init__(message, **kw)
        self.code = code  # type: ignore[misc]  # per instance: the status the call ended with


@dataclass
class _Stream:
    """One call of a multiplexer and the requests waiting on it."""

    outbox: asyncio.Queue[Any]
    pending: dict[str, asyncio.Future[Any]] = field(default_factory=dict)
    call: Any = None
    reader: asyncio.Task[None] | None = None
    broken: StreamBroken | None = None


class Multiplexer:
    """Sends tagged requests over one long-lived bidi call and resolves each caller's future by tag.

    ``open_call(request_iterator)`` starts the call (e.g. ``stub.StepStream``); ``wrap(tag, payload)`` builds a
    stream request; responses have ``tag`` and a ``result`` oneof of ``response`` or ``error``.
    """

    def __init__(self, name: str, open_call: Callable[[AsyncIterator[Any]], Any],
                 wrap: Callable[[str, Any], Any]) -> None:
        self.name = name
        self._open_call = open_call
        self._wrap = wrap
        self._tags = itertools.count()
        self._stream: _Stream | None = None
        self._lock = asyncio.Lock()

    async def _ensure(self) -> _Stream:
        async with self._lock:
            s = self._stream
            if s is None or s.broken is not None:
                s = self._stream = _Stream(asyncio.Queue())

                async def requests(outbox: asyncio.Queue[Any] = s.outbox) -> AsyncIterator[Any]:
                    while (item := await outbox.get()) is not _END:
                        yield item

                s.call = self._open_call(requests())
                s.reader = asyncio.create_task(self._read(s))
            return s

    async def _read(self, s: _Stream) -> None:
        try:
            async for resp in s.call:
                fut = s.pending.pop(resp.tag, None)
                if fut is not None and not fut.done():
                    fut.set_result(resp)
            broken = StreamBroken(f"{self.name} stream ended with {len(s.pending)} request(s) unanswered")
        except grpc.aio.AioRpcError as e:
            broken = StreamBroken(f"{self.name} stream failed: {e.code().name}: {e.details()}", e.code())
        except asyncio.CancelledError:
            broken = StreamBroken(f"{self.name} stream closed")
        except Exception as e:
            broken = StreamBroken(f"{self.name} stream failed: {type(e).__name__}: {e}")
        # Fail only what was waiting on this stream; later requests open a new one.
        s.broken = broken
        for fut in s.pending.values():
            if not fut.done():
                fut.set_exception(broken)
        s.pending.clear()

    async def request(self, payload: Any, deadline: float | None = None) -> Any:
        """Send one request and return its ``response``; a ``StreamError`` answer raises its WebenvError, a stream
        that ends first raises :class:`StreamBroken`, `deadline` (seconds) raises TimeoutError."""
        s = await self._ensure()
        tag = str(next(self._tags))
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        s.pending[tag] = fut
        s.outbox.put_nowait(self._wrap(tag, payload))
        try:
            resp = await asyncio.wait_for(fut, deadline) if deadline else await fut
        finally:
            s.pending.pop(tag, None)
        if resp.WhichOneof("result") == "error":
            raise errors.from_stream_error(resp.error)
        return resp.response

    async def close(self, grace: float = 0.0) -> None:
        """Half-close the stream; wait up to `grace` seconds for the answers still due, then cancel the call."""
        s = self._stream
        if s is None:
            return
        s.outbox.put_nowait(_END)
        if s.reader is not None and grace > 0:
            with contextlib.suppress(TimeoutError, asyncio.CancelledError, Exception):
                await asyncio.wait_for(asyncio.shield(s.reader), grace)
        if s.call is not None:
            s.call.cancel()
        if s.reader is not None:
            s.reader.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await s.reader

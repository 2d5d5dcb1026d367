"""One bidi stream shared by many episodes, with responses matched to requests by tag.

StepStream and ActStream answer in completion order, so thousands of episodes can share one stream per peer
instead of one call each. A broken stream fails only the requests in flight on it (each episode then decides
whether to retry); the next request opens a fresh stream.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
from collections.abc import AsyncIterator, Callable
from typing import Any

import grpc
from webenv import errors

log = logging.getLogger(__name__)

_CLOSE = object()


class StreamBroken(Exception):
    """The shared stream ended or failed while a request was waiting on it."""

    def __init__(self, message: str, code: grpc.StatusCode = grpc.StatusCode.UNAVAILABLE) -> None:
        super().__init__(message)
        self.code = code


class Multiplexer:
    """Sends tagged requests over one long-lived bidi call and resolves each caller's future by tag.

    ``open_call(request_iterator)`` starts the call (e.g. ``stub.StepStream``); ``wrap(tag, payload)`` builds a
    stream request; responses must have ``tag`` and a ``result`` oneof of ``response`` or ``error``.
    """

    def __init__(self, name: str, open_call: Callable[[AsyncIterator], Any], wrap: Callable[[str, Any], Any]) -> None:
        self.name = name
        self._open_call = open_call
        self._wrap = wrap
        self._tags = itertools.count()
        self._pending: dict[str, asyncio.Future] = {}
        self._outbox: asyncio.Queue | None = None
        self._reader: asyncio.Task | None = None
        self._call = None
        self._lock = asyncio.Lock()

    async def _ensure(self) -> asyncio.Queue:
        async with self._lock:
            if self._reader is None or self._reader.done():
                outbox: asyncio.Queue = asyncio.Queue()

                async def requests() -> AsyncIterator:
                    while True:
                        item = await outbox.get()
                        if item is _CLOSE:
                            return
                        yield item

                self._outbox = outbox
                self._call = self._open_call(requests())
                self._reader = asyncio.create_task(self._read(self._call, outbox))
            assert self._outbox is not None
            return self._outbox

    async def _read(self, call, outbox: asyncio.Queue) -> None:
        try:
            async for resp in call:
                fut = self._pending.pop(resp.tag, None)
                if fut is not None and not fut.done():
                    fut.set_result(resp)
            exc = StreamBroken(f"{self.name} stream ended")
        except grpc.aio.AioRpcError as e:
            exc = StreamBroken(f"{self.name} stream failed: {e.code().name}: {e.details()}", e.code())
        except asyncio.CancelledError:
            exc = StreamBroken(f"{self.name} stream closed")
        except Exception as e:  # noqa: BLE001
            exc = StreamBroken(f"{self.name} stream failed: {e!r}")
        # Fail only what was waiting on this stream; later requests open a new one.
        for tag, fut in list(self._pending.items()):
            if not fut.done():
                fut.set_exception(exc)
            self._pending.pop(tag, None)

    async def request(self, payload: Any, deadline: float | None = None) -> Any:
        """Send one request and return its ``response``; a ``StreamError`` answer raises the WebenvError."""
        outbox = await self._ensure()
        tag = str(next(self._tags))
        fut = asyncio.get_running_loop().create_future()
        self._pending[tag] = fut
        await outbox.put(self._wrap(tag, payload))
        try:
            resp = await asyncio.wait_for(fut, deadline) if deadline else await fut
        finally:
            self._pending.pop(tag, None)
        if resp.WhichOneof("result") == "error":
            raise errors.from_stream_error(resp.error)
        return resp.response

    async def close(self) -> None:
        """End the stream (half-close) and stop reading."""
        if self._outbox is not None:
            await self._outbox.put(_CLOSE)
        if self._call is not None:
            self._call.cancel()
        if self._reader is not None:
            self._reader.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._reader

"""Giving freed heap back to the operating system once a service goes quiet.

After a burst of large requests (the abuse fuzz: 100 KB strings in repeated fields, tens of MB per message) a
service's RSS stayed high although Python held almost nothing: tracemalloc of the judge counted +1-2 MB of live
objects while RSS had grown by hundreds of MB. Three things kept it: requests that failed live on in reference
cycles (exception -> traceback -> frame -> request) until the cyclic collector's rare full pass; glibc's malloc
keeps freed memory in its arenas instead of returning it; and it spreads it over up to 8 arenas per core (gRPC
and ``asyncio.to_thread`` allocate from many threads), where it fragments. So :class:`HeapTrimmer`, once after
each busy period (no RPC started and no stream message received for ``heap_trim_idle_seconds``), runs
``gc.collect()`` on the loop's thread and then ``malloc_trim(0)`` off it, and :func:`limit_arenas` caps the arenas
at 2 when the service starts (``mallopt(M_ARENA_MAX)``, before its threads exist; an asyncio service has one busy
thread, so two arenas cost no measurable contention).

Measured on the service processes, three rounds of 90 fuzzed calls each, RSS 16 s after each round:
judge 65 MB at start -> 157, 245, 317 MB without this, -> 91, 99, 100 MB with it; policy 56 MB -> 175, 83, 271
MB with trimming alone (no collection first), -> 60, 68, 74 MB with it. Where the C library has no
``malloc_trim`` or ``mallopt`` (musl, macOS) only the collection runs.
"""

from __future__ import annotations

import asyncio
import ctypes
import ctypes.util
import gc
import logging
import os
from collections.abc import Callable

log = logging.getLogger("webenv.runtime")


M_ARENA_MAX = -8  # mallopt parameter number in glibc's malloc.h


def _libc_function(name: str, argtypes: list) -> Callable[..., int] | None:
    try:
        fn = getattr(ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6"), name)
    except (OSError, AttributeError):
        return None
    fn.argtypes = argtypes
    fn.restype = ctypes.c_int
    return fn


_MALLOC_TRIM = _libc_function("malloc_trim", [ctypes.c_size_t])
_MALLOPT = _libc_function("mallopt", [ctypes.c_int, ctypes.c_int])


def limit_arenas(arenas: int) -> bool:
    """Cap glibc's malloc arenas (call before threads start; 0 keeps the default). True when applied."""
    if arenas <= 0 or _MALLOPT is None:
        return False
    return bool(_MALLOPT(M_ARENA_MAX, arenas))


def rss_bytes() -> int:
    """Resident set size of this process (0 where /proc is missing)."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


def trim() -> int:
    """Return free heap to the OS now; the bytes of RSS given back (0 when unsupported)."""
    if _MALLOC_TRIM is None:
        return 0
    before = rss_bytes()
    _MALLOC_TRIM(0)
    return max(before - rss_bytes(), 0)


class Activity:
    """A counter the interceptor bumps for every RPC started and every stream message received."""

    __slots__ = ("count",)

    def __init__(self) -> None:
        self.count = 0

    def touch(self) -> None:
        self.count += 1


class HeapTrimmer:
    """Trims the heap once per busy period, after ``idle_seconds`` without activity (0 disables it)."""

    def __init__(self, activity: Activity, idle_seconds: float) -> None:
        self.activity = activity
        self.idle_seconds = idle_seconds
        self.trims = 0
        self.freed_bytes = 0
        self._task: asyncio.Task | None = None

    def start(self) -> None:
        if self.idle_seconds > 0 and self._task is None:
            self._task = asyncio.create_task(self._run())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
            self._task = None

    async def _run(self) -> None:
        seen = self.activity.count
        dirty = False
        while True:
            await asyncio.sleep(self.idle_seconds)
            now = self.activity.count
            if now != seen:  # still busy: wait for a whole quiet interval
                seen, dirty = now, True
                continue
            if dirty:
                dirty = False
                # Requests that failed live on in reference cycles (exception -> traceback -> frame -> request)
                # until the cyclic collector's rare full pass: collect them first, on the loop's own thread.
                gc.collect()
                freed = await asyncio.to_thread(trim)
                self.trims += 1
                self.freed_bytes += freed
                log.debug("heap trimmed after a busy period", extra={"freed_bytes": freed})

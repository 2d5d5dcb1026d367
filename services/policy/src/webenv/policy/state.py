"""Per-episode policy state keyed by episode id, with LRU + idle-time eviction.

A collector runs thousands of episodes through one server and may never say that an episode ended,
so state is bounded by count and forgotten after an idle period.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Generic, TypeVar

T = TypeVar("T")


class EpisodeStore(Generic[T]):
    """Bounded map episode_id -> state; `get` creates missing state with `factory`."""

    def __init__(self, factory: Callable[[], T], max_episodes: int = 10000, ttl_seconds: float = 3600.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._factory = factory
        self._max = max_episodes
        self._ttl = ttl_seconds
        self._clock = clock
        self._items: OrderedDict[str, tuple[float, T]] = OrderedDict()

    def get(self, episode_id: str) -> T:
        now = self._clock()
        self._expire(now)
        item = self._items.pop(episode_id, None)
        state = item[1] if item is not None else self._factory()
        self._items[episode_id] = (now, state)
        while len(self._items) > self._max:
            self._items.popitem(last=False)
        return state

    def forget(self, episode_id: str) -> None:
        self._items.pop(episode_id, None)

    def __len__(self) -> int:
        return len(self._items)

    def __contains__(self, episode_id: object) -> bool:
        return episode_id in self._items

    def _expire(self, now: float) -> None:
        # Items are in least-recently-used order, so the idle ones are at the front.
        while self._items:
            key, (seen, _) = next(iter(self._items.items()))
            if now - seen <= self._ttl:
                break
            del self._items[key]

"""Verdict cache for LLM-judged facts.

Key: (rubric id, rubric version, fact id, model id, hash of the prompt). The prompt holds the
evidence the model saw (keypoint excerpts, final answer, fact and group text), so the hash is
the evidence hash: the same evidence judged by the same model for the same rubric version gives
the same verdict without another model call. Bounded LRU, thread-safe.
"""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from dataclasses import dataclass

from webenv.judge import metrics


@dataclass(frozen=True)
class CacheKey:
    """What a cached LLM verdict depends on."""

    rubric_id: str
    rubric_version: int
    fact_id: str
    model: str
    evidence_hash: str

    @staticmethod
    def of(rubric_id: str, rubric_version: int, fact_id: str, model: str, prompt: str) -> CacheKey:
        return CacheKey(rubric_id, rubric_version, fact_id, model, hashlib.sha256(prompt.encode()).hexdigest())


class VerdictCache:
    """Bounded LRU mapping CacheKey -> (outcome, reason). Size 0 disables it."""

    def __init__(self, size: int = 4096) -> None:
        self.size = size
        self._items: OrderedDict[CacheKey, tuple[int, str]] = OrderedDict()
        self._lock = threading.Lock()
        self._hit = metrics.CACHE_LOOKUPS.labels("hit")
        self._miss = metrics.CACHE_LOOKUPS.labels("miss")

    def __len__(self) -> int:
        return len(self._items)

    def get(self, key: CacheKey) -> tuple[int, str] | None:
        if self.size <= 0:
            return None
        with self._lock:
            value = self._items.get(key)
            if value is not None:
                self._items.move_to_end(key)
        (self._hit if value is not None else self._miss).inc()
        return value

    def put(self, key: CacheKey, value: tuple[int, str]) -> None:
        if self.size <= 0:
            return
        with self._lock:
            self._items[key] = value
            self._items.move_to_end(key)
            while len(self._items) > self.size:
                self._items.popitem(last=False)

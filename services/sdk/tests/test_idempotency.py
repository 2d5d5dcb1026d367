"""webenv.idempotency: the one bounded request_id cache of every RPC that carries a request_id."""

from __future__ import annotations

import pytest
from webenv import errors
from webenv.idempotency import MAX_REQUEST_ID, RequestCache, check_request_id


def test_a_retry_gets_the_first_answer_and_the_oldest_is_forgotten():
    cache: RequestCache[str] = RequestCache(keep=2)
    cache.put("a", "run-a")
    cache.put("b", "run-b")
    assert cache.get("a") == "run-a" and "b" in cache
    cache.put("c", "run-c")  # beyond the bound: the oldest id goes
    assert cache.get("a") is None and "a" not in cache and len(cache) == 2
    assert cache.get("b") == "run-b" and cache.get("c") == "run-c"


def test_an_empty_id_is_never_kept():
    cache: RequestCache[int] = RequestCache(keep=4)
    cache.put("", 1)
    assert len(cache) == 0 and cache.get("") is None and "" not in cache


def test_bounds_are_checked():
    with pytest.raises(ValueError):
        RequestCache(keep=0)
    check_request_id("x" * MAX_REQUEST_ID)
    with pytest.raises(errors.InvalidArgument) as info:
        check_request_id("x" * (MAX_REQUEST_ID + 1))
    assert info.value.reason == "BAD_REQUEST_ID" and info.value.metadata == {"field": "request_id"}

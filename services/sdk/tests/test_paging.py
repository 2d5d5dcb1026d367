"""webenv.paging: the one page-size rule and page-token format of every List RPC."""

from __future__ import annotations

import grpc
import pytest
from webenv import errors, paging
from webenv.v1 import browser_pb2, collector_pb2, environment_pb2, task_pb2


def _bad(fn) -> errors.WebenvError:
    with pytest.raises(errors.InvalidArgument) as info:
        fn()
    assert info.value.code == grpc.StatusCode.INVALID_ARGUMENT
    return info.value


def test_pages_walk_a_list_to_its_end():
    items = list(range(7))
    req = collector_pb2.ListRunsRequest(page_size=3, state=collector_pb2.RUN_STATE_RUNNING)
    seen = []
    while True:
        page, token = paging.page_of(req, items, default=50, maximum=500)
        seen.extend(page)
        if not token:
            break
        req.page_token = token
    assert seen == items


def test_size_default_and_cap():
    assert paging.read(collector_pb2.ListRunsRequest(), default=50, maximum=500).size == 50
    assert paging.read(collector_pb2.ListRunsRequest(page_size=10**6), default=50, maximum=500).size == 500
    e = _bad(lambda: paging.read(collector_pb2.ListRunsRequest(page_size=-1), default=50, maximum=500))
    assert e.reason == "BAD_PAGE_SIZE" and e.metadata == {"field": "page_size"} and e.message.startswith("page_size")


@pytest.mark.parametrize("token", ["garbage!!", "o:5", "e30", "x" * 10_000])
def test_bad_tokens_name_the_field(token):
    e = _bad(lambda: paging.read(task_pb2.ListTasksRequest(page_token=token), default=100, maximum=1000))
    assert e.reason == "BAD_PAGE_TOKEN" and e.metadata == {"field": "page_token"} and len(e.message) < 200


def test_a_token_is_bound_to_its_filter_not_to_its_size():
    first = browser_pb2.ListSessionsRequest(page_size=1, labels={"a": "1", "b": "2"})
    _, token = paging.page_of(first, [1, 2, 3], default=100, maximum=1000)
    same = browser_pb2.ListSessionsRequest(page_size=2, page_token=token, labels={"b": "2", "a": "1"})
    assert paging.page_of(same, [1, 2, 3], default=100, maximum=1000) == ([2, 3], "")
    other = browser_pb2.ListSessionsRequest(page_token=token, labels={"a": "1"})
    assert _bad(lambda: paging.read(other, default=100, maximum=1000)).reason == "BAD_PAGE_TOKEN"


def test_a_token_past_the_end_is_refused():
    _, token = paging.page_of(task_pb2.ListTasksRequest(page_size=2), [1, 2, 3, 4, 5], default=100, maximum=1000)
    e = _bad(lambda: paging.page_of(task_pb2.ListTasksRequest(page_token=token), [1], default=100, maximum=1000))
    assert e.metadata == {"field": "page_token"}


def test_iterate_calls_page_by_page():
    calls = []

    def call(req):
        calls.append(req.page_token)
        page, token = paging.page_of(req, list(range(5)), default=100, maximum=1000)
        return browser_pb2.ListSessionsResponse(next_page_token=token,
                                                sessions=[environment_pb2.Session(session_id=str(i))
                                                          for i in page])

    got = [s.session_id for s in paging.iterate(call, browser_pb2.ListSessionsRequest(page_size=2), "sessions")]
    assert got == ["0", "1", "2", "3", "4"] and len(calls) == 3 and calls[0] == ""

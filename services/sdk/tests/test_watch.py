"""webenv.client.watch: following a server stream that ends when its run or job ends."""

from __future__ import annotations

import grpc
import pytest
from webenv.client.watch import follow, to_end


class _Broken(grpc.RpcError):
    def __init__(self, code: grpc.StatusCode) -> None:
        self._code = code

    def code(self) -> grpc.StatusCode:
        return self._code


def _streams(*plans):
    """open_stream() returning, call after call, streams that yield the plan's items and raise its errors."""
    plans = list(plans)

    def open_stream():
        plan = plans.pop(0)
        for item in plan:
            if isinstance(item, BaseException):
                raise item
            yield item
    return open_stream


def test_to_end_is_the_last_message():
    assert to_end(_streams([1, 2, 3])) == 3
    assert to_end(_streams([])) is None


def test_a_restarting_server_is_ridden_out_within_patience():
    waits = []
    got = list(follow(_streams([1, _Broken(grpc.StatusCode.UNAVAILABLE)], [2, 3]), patience=5, pause=0,
                      on_wait=waits.append))
    assert got == [1, 2, 3] and [w.code() for w in waits] == [grpc.StatusCode.UNAVAILABLE]


def test_without_patience_or_for_other_codes_the_error_is_raised():
    with pytest.raises(grpc.RpcError):
        list(follow(_streams([1, _Broken(grpc.StatusCode.UNAVAILABLE)])))
    with pytest.raises(grpc.RpcError):
        list(follow(_streams([_Broken(grpc.StatusCode.NOT_FOUND)]), patience=5, pause=0))

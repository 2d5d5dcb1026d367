"""AIP-155 request ids: one bounded cache from a request's ``request_id`` to what the first call answered.

Every RPC that carries a ``request_id`` (OpenSession, ForkSession, StartRun, ExportRun, StartJob,
SnapshotSiteState, ForkSiteState; docs/api.md lists them) answers a retry with the same id from a
:class:`RequestCache`: ``get`` before acting, ``put`` once the call has succeeded (a failed call is not kept, so
its retry acts again). An empty id is never kept. The cache holds the last ``keep`` ids in insertion order and
forgets the oldest beyond that, so a server's memory is bounded however many clients send ids; a retry comes
seconds after its first try, far inside any of the bounds the services choose (thousands of ids).

What is kept is the service's choice: a whole response (ExportRun), or the ids of what the call made (a session,
copies, a run, a job), for the service to answer from their current state.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Generic, TypeVar

from webenv import errors

V = TypeVar("V")

#: Longest request_id a service keeps (UTF-8 characters); a longer one is INVALID_ARGUMENT ``BAD_REQUEST_ID``.
MAX_REQUEST_ID = 128


def check_request_id(request_id: str, field: str = "request_id") -> None:
    """INVALID_ARGUMENT naming ``field`` when the id is longer than :data:`MAX_REQUEST_ID`."""
    if len(request_id) > MAX_REQUEST_ID:
        raise errors.InvalidArgument(f"{field}: at most {MAX_REQUEST_ID} characters", reason="BAD_REQUEST_ID",
                                     metadata={"field": field})


class RequestCache(Generic[V]):
    """The answers of the last ``keep`` request ids (oldest forgotten first)."""

    def __init__(self, keep: int) -> None:
        if keep < 1:
            raise ValueError(f"keep must be >= 1, got {keep}")
        self.keep = keep
        self._items: OrderedDict[str, V] = OrderedDict()

    def get(self, request_id: str) -> V | None:
        """What the first call with this id answered (None for an unknown or empty id)."""
        return self._items.get(request_id) if request_id else None

    def __contains__(self, request_id: object) -> bool:
        return bool(request_id) and request_id in self._items

    def put(self, request_id: str, value: V) -> None:
        """Remember the answer of a call that succeeded (an empty id is not kept)."""
        if not request_id:
            return
        self._items[request_id] = value
        self._items.move_to_end(request_id)
        while len(self._items) > self.keep:
            self._items.popitem(last=False)

    def __len__(self) -> int:
        return len(self._items)

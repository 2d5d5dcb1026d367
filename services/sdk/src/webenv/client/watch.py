"""Following a job or a run to its end: one helper for the server streams that end when what they watch ends
(``CollectorService.WatchRun``, ``TrainerService.WatchJob``).

    for resp in follow(lambda: stub.WatchRun(WatchRunRequest(run_id=rid))):
        show(resp)
    last = to_end(lambda: trainer.WatchJob(WatchJobRequest(job_id=jid)), patience=300)

The stream's last message is the end state (both servers send the terminal snapshot, then end the stream).
``patience`` > 0 rides out a restarting server: a stream broken by UNAVAILABLE or CANCELLED is opened again (after
``pause`` seconds) while the server has been down for less than ``patience`` seconds; a reopened WatchJob starts
with the job's current state (the trainer resumes a job after a restart), so nothing is counted twice. Any other
status, or a server down longer than that, raises the ``grpc.RpcError``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator
from typing import TypeVar

import grpc

T = TypeVar("T")

__all__ = ["follow", "to_end"]

_TRANSIENT = (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.CANCELLED)


def follow(open_stream: Callable[[], Iterable[T]], *, patience: float = 0.0, pause: float = 2.0,
           on_wait: Callable[[grpc.RpcError], None] | None = None) -> Iterator[T]:
    """Every message of the stream ``open_stream()`` returns, until it ends (reopened as the docstring says)."""
    down_since: float | None = None
    while True:
        try:
            for resp in open_stream():
                down_since = None
                yield resp
            return
        except grpc.RpcError as exc:
            if patience <= 0 or exc.code() not in _TRANSIENT:
                raise
            down_since = down_since or time.monotonic()
            if time.monotonic() - down_since > patience:
                raise
            if on_wait is not None:
                on_wait(exc)
            time.sleep(pause)


def to_end(open_stream: Callable[[], Iterable[T]], *, patience: float = 0.0, pause: float = 2.0,
           on_wait: Callable[[grpc.RpcError], None] | None = None) -> T | None:
    """The stream's last message (the end state), or None when it ended without any."""
    last = None
    for last in follow(open_stream, patience=patience, pause=pause, on_wait=on_wait):  # noqa: B007
        pass
    return last

"""Start pages the world model has no recorded state for, taken once from the real page through the browser farm.

With WEBENV_WORLDMODEL_FARM_ADDR set, an OpenSession whose start is neither given (`task.metadata["start_state"]`)
nor recorded (the model directory's start states, WEBENV_WORLDMODEL_START_STATES) opens a session on the farm with
the same start (the task as given, or the start URL, and the seed: a MiniWoB++ episode's page depends on it), takes
its first observation (AXTREE, and MARKDOWN for the links' targets), closes it, and the simulation goes on from
that page. What the farm answered is kept per start — the URL, and for a task its id and the seed — the last
WEBENV_WORLDMODEL_FARM_START_PAGES of them, so a start costs one real open however many simulated sessions open
there; concurrent opens of one start share the one farm call. A start the farm refuses gets the farm's own answer
(status, reason, metadata), its message prefixed with where it came from.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections import OrderedDict

import grpc
from webenv import errors
from webenv.v1 import common_pb2, environment_pb2, environment_pb2_grpc
from webenv.worldmodel import metrics
from webenv.worldmodel.compose import PageView
from webenv.worldmodel.page import links_from_markdown

log = logging.getLogger("webenv.worldmodel")

FARM_LEASE_SECONDS = 60.0  # of the farm session (closed at once; a close that fails leaves it to this lease)
StartKey = tuple[str, str, int]  # (start URL, task id, seed)


def start_key(request: environment_pb2.OpenSessionRequest) -> StartKey:
    """What makes two opens' first pages the same: the start URL, and for a task its id and the seed."""
    if request.WhichOneof("start") == "task":
        t = request.task
        return (t.start_url or t.metadata.get("miniwob_task", ""), t.task_id, request.seed)
    return (request.start_url, "", 0)


class FarmStarts:
    """First observations from the browser farm at `address`, the last `keep` starts kept."""

    def __init__(self, address: str, keep: int = 256, timeout_seconds: float = 60.0) -> None:
        self.address = address
        self.keep = keep
        self.timeout_seconds = timeout_seconds
        self.pages: OrderedDict[StartKey, tuple[PageView, str]] = OrderedDict()
        self._inflight: dict[StartKey, asyncio.Task[tuple[PageView, str]]] = {}
        self._channel: grpc.aio.Channel | None = None

    def _stub(self) -> environment_pb2_grpc.EnvironmentServiceStub:
        if self._channel is None:
            from webenv.client import make_channel

            self._channel = make_channel(self.address, timeout=self.timeout_seconds)
        return environment_pb2_grpc.EnvironmentServiceStub(self._channel)

    async def close(self) -> None:
        for task in list(self._inflight.values()):
            task.cancel()
        if self._channel is not None:
            await self._channel.close()
            self._channel = None

    async def start_page(self, request: environment_pb2.OpenSessionRequest) -> tuple[PageView, str]:
        """(the start page, the instruction the farm gave) for this open's start: kept, or taken from the farm."""
        key = start_key(request)
        kept = self.pages.get(key)
        if kept is not None:
            self.pages.move_to_end(key)
            metrics.FARM_STARTS.labels(result="kept").inc()
            return kept
        task = self._inflight.get(key)
        if task is None:
            task = asyncio.create_task(self._take(request), name=f"farm-start {key[0][:80]}")
            self._inflight[key] = task
            task.add_done_callback(lambda t, k=key: self._taken(k, t))  # type: ignore[misc]
        return await asyncio.shield(task)  # a caller that goes away leaves the open to the others

    def _taken(self, key: StartKey, task: asyncio.Task[tuple[PageView, str]]) -> None:
        self._inflight.pop(key, None)
        if task.cancelled() or task.exception() is not None:
            metrics.FARM_STARTS.labels(result="failed").inc()
            return
        metrics.FARM_STARTS.labels(result="taken").inc()
        self.pages[key] = task.result()
        while len(self.pages) > self.keep:
            self.pages.popitem(last=False)

    async def _take(self, request: environment_pb2.OpenSessionRequest) -> tuple[PageView, str]:
        """One OpenSession on the farm (the same start and seed), its first observation, CloseSession."""
        stub = self._stub()
        spec = common_pb2.ObservationSpec(formats=[common_pb2.OBSERVATION_FORMAT_AXTREE,
                                                   common_pb2.OBSERVATION_FORMAT_MARKDOWN])
        req = environment_pb2.OpenSessionRequest(request_id=f"worldmodel-start-{uuid.uuid4().hex}", seed=request.seed,
                                                 lease_seconds=FARM_LEASE_SECONDS, observation_spec=spec,
                                                 labels={"purpose": "worldmodel-start"})
        if request.WhichOneof("start") == "task":
            req.task.CopyFrom(request.task)
        else:
            req.start_url = request.start_url
        try:
            opened = await stub.OpenSession(req, timeout=self.timeout_seconds)
        except grpc.aio.AioRpcError as exc:
            err = errors.from_rpc_error(exc)
            err.message = errors.bounded(f"start page from the browser farm at {self.address}: {err.message}")
            err.args = (err.message,)
            raise err from None
        try:
            obs = opened.observation
            page = PageView(obs.url, obs.axtree, links_from_markdown(obs.markdown))
            log.info("start page taken from the farm", extra={"url": obs.url, "farm": self.address,
                                                                "chars": len(obs.axtree)})
            return page, opened.instruction
        finally:
            with contextlib.suppress(grpc.aio.AioRpcError):  # a close that fails leaves the farm's lease to end it
                await stub.CloseSession(environment_pb2.CloseSessionRequest(session_id=opened.session.session_id),
                                        timeout=self.timeout_seconds)

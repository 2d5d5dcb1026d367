"""TaskService: the task catalog and control of the synthetic web's per-session state."""

from __future__ import annotations

import grpc
from prometheus_client import Counter
from webenv import errors
from webenv.sites.catalog import SiteCatalog
from webenv.sites.state import SessionNotFound, StateStore, default_state, valid_session_id
from webenv.sites.taskcatalog import BadRequest, TaskCatalog
from webenv.v1 import task_pb2, task_pb2_grpc

STATE_OPS = Counter("webenv_sites_state_ops_total", "Site-state control operations", ["op"])


class TaskServicer(task_pb2_grpc.TaskServiceServicer):
    def __init__(self, tasks: TaskCatalog, sites: SiteCatalog, store: StateStore) -> None:
        self.tasks, self.sites, self.store = tasks, sites, store

    def _site(self, host: str) -> str:
        """Validates a site host argument; empty means every site."""
        if host and self.sites.get(host) is None:
            raise errors.NotFound(f"site {host!r} is not served here", reason="SITE_NOT_FOUND", metadata={"site": host})
        return host.lower()

    @staticmethod
    def _session(value: str, field: str = "site_session") -> str:
        if not value:
            raise errors.InvalidArgument(f"{field} is required", reason="MISSING_FIELD", metadata={"field": field})
        if not valid_session_id(value):
            raise errors.InvalidArgument(f"{field} must be 1-128 characters of [A-Za-z0-9._-]",
                                         reason="BAD_SITE_SESSION", metadata={"field": field})
        return value

    async def ListTasks(self, request: task_pb2.ListTasksRequest, context: grpc.aio.ServicerContext) -> task_pb2.ListTasksResponse:
        try:
            return self.tasks.page(request)
        except BadRequest as exc:
            raise errors.InvalidArgument(str(exc), reason="BAD_FILTER", metadata={"field": exc.field}) from None

    async def GetTask(self, request: task_pb2.GetTaskRequest, context: grpc.aio.ServicerContext) -> task_pb2.GetTaskResponse:
        if not request.task_id:
            raise errors.InvalidArgument("task_id is required", reason="MISSING_FIELD", metadata={"field": "task_id"})
        task = self.tasks.get(request.task_id)
        if task is None:
            raise errors.NotFound(f"task {request.task_id!r} not found", reason="TASK_NOT_FOUND",
                                  metadata={"task_id": request.task_id})
        return task_pb2.GetTaskResponse(task=task)

    async def ResetSiteState(self, request: task_pb2.ResetSiteStateRequest, context: grpc.aio.ServicerContext) -> task_pb2.ResetSiteStateResponse:
        session = self._session(request.site_session)
        self.store.reset(session, self._site(request.site) or None)
        STATE_OPS.labels("reset").inc()
        return task_pb2.ResetSiteStateResponse(site_session=session)

    async def SnapshotSiteState(self, request: task_pb2.SnapshotSiteStateRequest, context: grpc.aio.ServicerContext) -> task_pb2.SnapshotSiteStateResponse:
        session = self._session(request.site_session)
        try:
            snap = self.store.snapshot(session, request.request_id)
        except SessionNotFound:
            raise errors.NotFound(f"site session {session!r} not found", reason="SITE_SESSION_NOT_FOUND",
                                  metadata={"site_session": session}) from None
        STATE_OPS.labels("snapshot").inc()
        return task_pb2.SnapshotSiteStateResponse(snapshot_id=snap)

    async def ForkSiteState(self, request: task_pb2.ForkSiteStateRequest, context: grpc.aio.ServicerContext) -> task_pb2.ForkSiteStateResponse:
        which = request.WhichOneof("source")
        if which is None:
            raise errors.InvalidArgument("one of site_session or snapshot_id is required", reason="MISSING_FIELD",
                                         metadata={"field": "source"})
        new = self._session(request.new_site_session, "new_site_session") if request.new_site_session else ""
        if new and self.store.exists(new) and not (request.request_id and self.store.fork_done(request.request_id)):
            raise errors.AlreadyExists(f"site session {new!r} already exists", reason="SITE_SESSION_EXISTS",
                                       metadata={"site_session": new})
        try:
            if which == "snapshot_id":
                out = self.store.fork(snapshot_id=request.snapshot_id, new_session=new, request_id=request.request_id)
            else:
                source = self._session(request.site_session)
                out = self.store.fork(session=source, new_session=new, request_id=request.request_id)
        except SessionNotFound as exc:
            what = "snapshot" if which == "snapshot_id" else "site session"
            raise errors.NotFound(f"{what} {exc.args[0]!r} not found",
                                  reason="SNAPSHOT_NOT_FOUND" if which == "snapshot_id" else "SITE_SESSION_NOT_FOUND",
                                  metadata={which: str(exc.args[0])}) from None
        STATE_OPS.labels("fork").inc()
        return task_pb2.ForkSiteStateResponse(site_session=out)

    async def GetSiteState(self, request: task_pb2.GetSiteStateRequest, context: grpc.aio.ServicerContext) -> task_pb2.GetSiteStateResponse:
        session = self._session(request.site_session)
        host = self._site(request.site)
        factory = None
        if host:
            site = self.sites.get(host)
            assert site is not None
            key = site.family.action.key if site.family.action else None
            factory = lambda: default_state(site.host, site.family.name, key)  # noqa: E731
        try:
            text = self.store.dump(session, host or None, factory)
        except SessionNotFound:
            raise errors.NotFound(f"site session {session!r} not found", reason="SITE_SESSION_NOT_FOUND",
                                  metadata={"site_session": session}) from None
        STATE_OPS.labels("get").inc()
        return task_pb2.GetSiteStateResponse(state_json=text)

"""TrainerService over the job manager."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import grpc
from webenv import errors, paging
from webenv.agent import checkpoints
from webenv.streams import serve_watch, wait_at_most
from webenv.v1 import trainer_pb2, trainer_pb2_grpc

from .jobs import TERMINAL, JobManager, job_sort_key

DEFAULT_PAGE, MAX_PAGE = 50, 500


def _page(request, items: list) -> tuple[list, str]:
    return paging.page_of(request, items, default=DEFAULT_PAGE, maximum=MAX_PAGE)


class TrainerServicer(trainer_pb2_grpc.TrainerServiceServicer):
    def __init__(self, jobs: JobManager, watch_interval: float = 1.0) -> None:
        self.jobs = jobs
        self.watch_interval = watch_interval

    async def StartJob(self, request: trainer_pb2.StartJobRequest, context: grpc.aio.ServicerContext
                   ) -> trainer_pb2.StartJobResponse:
        return trainer_pb2.StartJobResponse(job=self.jobs.submit(request))

    async def WatchJob(self, request: trainer_pb2.WatchJobRequest, context: grpc.aio.ServicerContext
                   ) -> AsyncIterator[trainer_pb2.WatchJobResponse]:
        job = self.jobs.get(request.job_id)  # an unknown job: NOT_FOUND before any report
        cond = self.jobs.condition(job.job_id)

        async def report() -> tuple[trainer_pb2.WatchJobResponse, bool]:
            snapshot = trainer_pb2.Job()
            snapshot.CopyFrom(job)
            # the snapshot sent, not the live job, decides the end: the stream's last message is the end state
            return trainer_pb2.WatchJobResponse(job=snapshot), snapshot.state in TERMINAL

        async def wait() -> None:
            async with cond:
                await wait_at_most(cond.wait(), self.watch_interval)

        async for resp in serve_watch(report, wait):
            yield resp

    async def StopJob(self, request: trainer_pb2.StopJobRequest, context: grpc.aio.ServicerContext
                   ) -> trainer_pb2.StopJobResponse:
        return trainer_pb2.StopJobResponse(job=await self.jobs.stop(request.job_id))

    async def GetJob(self, request: trainer_pb2.GetJobRequest, context: grpc.aio.ServicerContext
                   ) -> trainer_pb2.GetJobResponse:
        return trainer_pb2.GetJobResponse(job=self.jobs.get(request.job_id))

    async def ListJobs(self, request: trainer_pb2.ListJobsRequest, context: grpc.aio.ServicerContext
                   ) -> trainer_pb2.ListJobsResponse:
        jobs = sorted(self.jobs.jobs.values(), key=job_sort_key, reverse=True)
        page, nxt = _page(request, jobs)
        return trainer_pb2.ListJobsResponse(jobs=page, next_page_token=nxt)

    async def ListCheckpoints(self, request: trainer_pb2.ListCheckpointsRequest, context: grpc.aio.ServicerContext
                   ) -> trainer_pb2.ListCheckpointsResponse:
        if request.name and not checkpoints.NAME.match(request.name):
            raise errors.InvalidArgument("name: lower-case letters, digits, '-', '_'", reason="BAD_CHECKPOINT_REF",
                                         metadata={"field": "name"})
        items = checkpoints.list_all(Path(self.jobs.root), request.name)
        page, nxt = _page(request, items)
        return trainer_pb2.ListCheckpointsResponse(checkpoints=page, next_page_token=nxt)

    async def GetCheckpoint(self, request: trainer_pb2.GetCheckpointRequest, context: grpc.aio.ServicerContext
                   ) -> trainer_pb2.GetCheckpointResponse:
        folder = checkpoints.resolve(Path(self.jobs.root), request.ref)
        return trainer_pb2.GetCheckpointResponse(checkpoint=checkpoints.read_meta(folder))

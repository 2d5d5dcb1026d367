"""A small TrainerService for the gateway's tests, served by the sdk runtime (health, auth, metrics), as a process.

The real trainer (issue 11) is written in parallel; until it is on main, the gateway's trainer routes and the
console's training page are tested against this one. Jobs "train" for a few progress reports (loss going down)
and write checkpoint ``<name>@<n>``; specs are validated the way the contract says (INVALID_ARGUMENT naming the
field). Run: ``python trainer_peer.py`` with WEBENV_GRPC_PORT / WEBENV_METRICS_PORT / WEBENV_AUTH_TOKEN.
"""

from __future__ import annotations

import asyncio
import itertools
import re

from google.protobuf import timestamp_pb2
from webenv import errors
from webenv.runtime import Server, ServiceSettings, run
from webenv.v1 import trainer_pb2, trainer_pb2_grpc

TERMINAL = {trainer_pb2.JOB_STATE_SUCCEEDED, trainer_pb2.JOB_STATE_STOPPED, trainer_pb2.JOB_STATE_FAILED}
STEPS = 4


def _now() -> timestamp_pb2.Timestamp:
    ts = timestamp_pb2.Timestamp()
    ts.GetCurrentTime()
    return ts


def _bad(field: str, why: str) -> errors.InvalidArgument:
    return errors.InvalidArgument(f"{field}: {why}", reason="BAD_JOB_SPEC", metadata={"field": field})


class Trainer(trainer_pb2_grpc.TrainerServiceServicer):
    def __init__(self) -> None:
        self.jobs: dict[str, trainer_pb2.Job] = {}
        self.checkpoints: list[trainer_pb2.Checkpoint] = []
        self.requests: dict[str, str] = {}
        self.changed = asyncio.Condition()
        self.ids = itertools.count(1)

    async def _train(self, job: trainer_pb2.Job) -> None:
        job.state = trainer_pb2.JOB_STATE_TRAINING
        for step in range(1, STEPS + 1):
            await asyncio.sleep(0.1)
            if job.state == trainer_pb2.JOB_STATE_STOPPED:
                return
            p = job.progress
            p.step, p.total_steps, p.epoch = step, STEPS, 1
            p.loss = 2.0 / (step + len(self.checkpoints))
            p.validation_loss = p.loss * 1.2
            p.validation_accuracy = min(1.0, 0.2 * step)
            p.examples, p.examples_per_second = 40, 400.0
            await self._notify()
        version = 1 + sum(1 for c in self.checkpoints if c.name == job.spec.name)
        cp = trainer_pb2.Checkpoint(
            name=job.spec.name, version=version, ref=f"{job.spec.name}@{version}", path=f"/checkpoints/{job.spec.name}/{version}",
            parent=job.spec.parent, algorithm=job.spec.algorithm, model=job.spec.model,
            data_run_ids=job.spec.data.run_ids, episodes=10, examples=40, steps=STEPS, total_steps=STEPS,
            loss=job.progress.loss, validation_loss=job.progress.validation_loss, job_id=job.job_id, created_at=_now())
        self.checkpoints.append(cp)
        job.checkpoint.CopyFrom(cp)
        job.state = trainer_pb2.JOB_STATE_SUCCEEDED
        job.finished_at.CopyFrom(_now())
        await self._notify()

    async def _notify(self) -> None:
        async with self.changed:
            self.changed.notify_all()

    def _job(self, job_id: str) -> trainer_pb2.Job:
        if not job_id:
            raise _bad("job_id", "required")
        if job_id not in self.jobs:
            raise errors.NotFound(f"job {job_id!r} not found", reason="JOB_NOT_FOUND", metadata={"job_id": job_id})
        return self.jobs[job_id]

    async def StartJob(self, request, context):  # noqa: N802
        if request.request_id in self.requests:
            return trainer_pb2.StartJobResponse(job=self.jobs[self.requests[request.request_id]])
        spec = request.spec
        if not re.fullmatch(r"[a-z0-9][a-z0-9_-]{0,62}", spec.name):
            raise _bad("spec.name", "lower-case letters, digits, '-' and '_'")
        if not spec.algorithm:
            raise _bad("spec.algorithm", "required")
        if not spec.model:
            raise _bad("spec.model", "required")
        if not spec.data.run_ids:
            raise _bad("spec.data.run_ids", "at least one run")
        job = trainer_pb2.Job(job_id=f"job-{next(self.ids):04d}", spec=spec, state=trainer_pb2.JOB_STATE_PENDING,
                              created_at=_now())
        self.jobs[job.job_id] = job
        if request.request_id:
            self.requests[request.request_id] = job.job_id
        asyncio.get_running_loop().create_task(self._train(job))
        return trainer_pb2.StartJobResponse(job=job)

    async def WatchJob(self, request, context):  # noqa: N802
        job = self._job(request.job_id)
        while True:
            yield trainer_pb2.WatchJobResponse(job=job)
            if job.state in TERMINAL:
                return
            async with self.changed:
                await self.changed.wait()

    async def StopJob(self, request, context):  # noqa: N802
        job = self._job(request.job_id)
        if job.state not in TERMINAL:
            job.state = trainer_pb2.JOB_STATE_STOPPED
            job.finished_at.CopyFrom(_now())
            await self._notify()
        return trainer_pb2.StopJobResponse(job=job)

    async def GetJob(self, request, context):  # noqa: N802
        return trainer_pb2.GetJobResponse(job=self._job(request.job_id))

    async def ListJobs(self, request, context):  # noqa: N802
        if request.page_size < 0:
            raise _bad("page_size", "must be >= 0")
        jobs = sorted(self.jobs.values(), key=lambda j: j.job_id, reverse=True)
        return trainer_pb2.ListJobsResponse(jobs=jobs[: request.page_size or 50])

    async def ListCheckpoints(self, request, context):  # noqa: N802
        cps = [c for c in reversed(self.checkpoints) if not request.name or c.name == request.name]
        return trainer_pb2.ListCheckpointsResponse(checkpoints=cps[: request.page_size or 50])

    async def GetCheckpoint(self, request, context):  # noqa: N802
        name, _, version = request.ref.partition("@")
        for c in reversed(self.checkpoints):
            if c.name == name and (not version or str(c.version) == version):
                return trainer_pb2.GetCheckpointResponse(checkpoint=c)
        raise errors.NotFound(f"checkpoint {request.ref!r} not found", reason="CHECKPOINT_NOT_FOUND",
                              metadata={"ref": request.ref})


async def main(settings: ServiceSettings) -> None:
    server = Server("trainer-peer", settings)
    server.add_service(trainer_pb2_grpc.add_TrainerServiceServicer_to_server, Trainer(), "webenv.v1.TrainerService")
    async with server:
        await server.set_serving()
        await server.wait_for_termination()


if __name__ == "__main__":
    run(main, ServiceSettings, name="trainer-peer")

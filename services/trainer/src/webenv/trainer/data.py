"""Training data: stored episodes read through CollectorService.ReadEpisodes, held-out websites refused.

Only train-split websites are trained on: validation sites make every choice of the loop (epochs, temperature,
the checkpoint reported) and test sites are reported, so training on either would make every "unseen" number a
lie. The split is enforced twice: a job whose filter asks for the validation or test split is INVALID_ARGUMENT
before it starts, and an episode of a held-out website that arrives anyway (a run over mixed sites read without
a split filter is narrowed to train by the request; this guards against a collector that ignores it) fails the
job. A leave-one-family-out transfer suite names its family in ``TrainingData.exclude_families``; the collector's
read cannot narrow by family, so an episode of an excluded family fails the job the same way.
"""

from __future__ import annotations

import time

import grpc
from webenv import errors
from webenv.client.channel import make_channel
from webenv.splits import HELD_OUT, SPLIT_NAMES
from webenv.v1 import collector_pb2, collector_pb2_grpc, common_pb2, trainer_pb2

from . import metrics


class HeldOutLeak(Exception):
    """An episode of a validation- or test-split website, or of an excluded site family, reached the trainer."""


def validate(data: trainer_pb2.TrainingData, field: str = "spec.data") -> None:
    if not data.run_ids:
        raise errors.InvalidArgument(f"{field}.run_ids: at least one collector run is required", reason="BAD_JOB_SPEC",
                                     metadata={"field": f"{field}.run_ids"})
    for i, rid in enumerate(data.run_ids):
        if not rid or len(rid) > 128:
            raise errors.InvalidArgument(f"{field}.run_ids[{i}]: must be 1-128 characters", reason="BAD_JOB_SPEC",
                                         metadata={"field": f"{field}.run_ids[{i}]"})
    if data.filter.split in HELD_OUT:
        name = SPLIT_NAMES[data.filter.split]
        use = "model selection" if data.filter.split == common_pb2.SPLIT_VALIDATION else "evaluation"
        raise errors.InvalidArgument(
            f"{field}.filter.split: the {name} split of websites is for {use} only and is never trained on",
            reason="HELD_OUT_SPLIT_REFUSED", metadata={"field": f"{field}.filter.split"})
    if data.filter.split not in (common_pb2.SPLIT_UNSPECIFIED, common_pb2.SPLIT_TRAIN):
        raise errors.InvalidArgument(f"{field}.filter.split: unknown split {data.filter.split}", reason="BAD_JOB_SPEC",
                                     metadata={"field": f"{field}.filter.split"})
    for i, family in enumerate(data.exclude_families):
        if not family or len(family) > 64 or not family.replace("-", "").replace("_", "").isalnum():
            raise errors.InvalidArgument(
                f"{field}.exclude_families[{i}]: a site family name (1-64 letters, digits, '-' or '_'), got {family[:80]!r}",
                reason="BAD_JOB_SPEC", metadata={"field": f"{field}.exclude_families[{i}]"})
    if data.max_examples < 0 or data.filter.max_steps < 0:
        f = f"{field}.max_examples" if data.max_examples < 0 else f"{field}.filter.max_steps"
        raise errors.InvalidArgument(f"{f}: must be >= 0", reason="BAD_JOB_SPEC", metadata={"field": f})


async def read_episodes(collector_addr: str, data: trainer_pb2.TrainingData, *, passed_only: bool,
                        deadline: float) -> tuple[list[collector_pb2.StoredEpisode], float]:
    """The episodes a job trains on (train split only, no excluded family) and the seconds the read took."""
    flt = collector_pb2.ExportFilter()
    flt.CopyFrom(data.filter)
    flt.split = common_pb2.SPLIT_TRAIN
    if passed_only:
        flt.passed = True
    request = collector_pb2.ReadEpisodesRequest(run_ids=list(data.run_ids), filter=flt)
    excluded = set(data.exclude_families)
    t0 = time.monotonic()
    out: list[collector_pb2.StoredEpisode] = []
    async with make_channel(collector_addr, timeout=deadline) as channel:
        stub = collector_pb2_grpc.CollectorServiceStub(channel)
        try:
            async for resp in stub.ReadEpisodes(request, timeout=deadline):
                ep = resp.episode
                held = ep.split if ep.split in HELD_OUT else ep.task.split
                if held in HELD_OUT:
                    name = SPLIT_NAMES[held]
                    raise HeldOutLeak(f"episode {ep.episode_id} of run {ep.run_id} is on a {name}-split website "
                                      f"({ep.task.site}); the trainer never trains on {name} sites")
                if ep.task.family in excluded:
                    raise HeldOutLeak(f"spec.data.exclude_families: episode {ep.episode_id} of run {ep.run_id} is on "
                                      f"{ep.task.site} of the held-out family {ep.task.family!r}")
                out.append(ep)
        except grpc.aio.AioRpcError as exc:
            if exc.code() in (grpc.StatusCode.NOT_FOUND, grpc.StatusCode.INVALID_ARGUMENT):
                raise errors.InvalidArgument(f"spec.data: the collector refused the read: {exc.details()}",
                                             reason="BAD_TRAINING_DATA", metadata={"field": "spec.data.run_ids"}) from exc
            raise
    seconds = time.monotonic() - t0
    metrics.EPISODES_READ.inc(len(out))
    # In the order the job names its runs, each run's episodes in the order of its plan (an episode id is its run id,
    # then its place: `run-<hex>-000042`), not in the order the store returns them, which varies from read to read:
    # the examples, their shuffles and the held-out split are then the same whenever the same data is trained on.
    runs = {run_id: i for i, run_id in enumerate(data.run_ids)}
    out.sort(key=lambda ep: (runs.get(ep.run_id, len(runs)), ep.run_id, ep.episode_id.removeprefix(ep.run_id)))
    return out, seconds

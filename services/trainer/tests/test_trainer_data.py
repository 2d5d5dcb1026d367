"""The trainer reads its data in one order whatever order the store returns it in, so the same data trains the same
model (a learning run reproducible from its seed): runs in the order the job names them, each in its plan's order."""

from __future__ import annotations

import random

import grpc
from webenv.trainer.data import read_episodes
from webenv.v1 import collector_pb2, collector_pb2_grpc, common_pb2, trainer_pb2

IDS = [f"{run}-{i:06d}" for run in ("run-ffff", "run-0000") for i in (0, 1, 2, 10)] + ["run-ffff-000001-b01"]


class Store(collector_pb2_grpc.CollectorServiceServicer):
    """ReadEpisodes answering in a new order each time, as a store's parts may."""

    def __init__(self) -> None:
        self.rng = random.Random(7)

    async def ReadEpisodes(self, request, context):
        ids = IDS[:]
        self.rng.shuffle(ids)
        for eid in ids:
            yield collector_pb2.ReadEpisodesResponse(episode=collector_pb2.StoredEpisode(
                run_id=eid[:8], episode_id=eid, split=common_pb2.SPLIT_TRAIN))


async def test_episodes_are_read_in_the_jobs_run_order_then_the_plans():
    server = grpc.aio.server()
    collector_pb2_grpc.add_CollectorServiceServicer_to_server(Store(), server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        data = trainer_pb2.TrainingData(run_ids=["run-ffff", "run-0000"])  # the demonstrations, then a collection
        reads = [[ep.episode_id for ep in (await read_episodes(f"127.0.0.1:{port}", data, passed_only=False,
                                                               deadline=30))[0]] for _ in range(3)]
    finally:
        await server.stop(None)
    assert reads[0] == reads[1] == reads[2] == [
        "run-ffff-000000", "run-ffff-000001", "run-ffff-000001-b01", "run-ffff-000002", "run-ffff-000010",
        "run-0000-000000", "run-0000-000001", "run-0000-000002", "run-0000-000010"]

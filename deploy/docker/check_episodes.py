"""The episode part of `make test-containers`: a run through the containerized collector, from the host.

    python deploy/docker/check_episodes.py [--collector 127.0.0.1:50056] [--episodes 6] [--policy oracle]

Starts a run over the collector's published gRPC port (loopback only), watches it to the end, reads the stored
episodes back (ReadEpisodes: the store inside the collector's volume), exports them (ExportRun, parquet, into the
collector's export root /data/exports/<dest>) and prints one JSON line: run id, counts, episodes read back, the
exported files (paths inside the collector container) and timings. Exits 1, saying why, when any of that fails.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import grpc
from webenv.v1 import collector_pb2, collector_pb2_grpc, common_pb2


def fail(message: str) -> None:
    print(f"check_episodes: {message}", file=sys.stderr)
    raise SystemExit(1)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--collector", default="127.0.0.1:50056")
    ap.add_argument("--episodes", type=int, default=6)
    ap.add_argument("--policy", default="oracle")
    ap.add_argument("--concurrency", type=int, default=3)
    ap.add_argument("--dest", default="test-containers", help="export folder, relative to the collector's export root")
    ap.add_argument("--timeout", type=float, default=600.0, help="seconds for the whole run")
    args = ap.parse_args()

    stub = collector_pb2_grpc.CollectorServiceStub(grpc.insecure_channel(args.collector))
    spec = collector_pb2.RunSpec(name="test-containers", policy=args.policy, episodes=args.episodes,
                                 concurrency=args.concurrency, seed=7)
    spec.tasks.sources.append(common_pb2.TASK_SOURCE_SYNTHETIC)  # tasks the oracle has a solution for
    t0 = time.monotonic()
    try:
        run = stub.StartRun(collector_pb2.StartRunRequest(request_id=os.urandom(8).hex(), spec=spec), timeout=60).run
        last = run
        for update in stub.WatchRun(collector_pb2.WatchRunRequest(run_id=run.run_id), timeout=args.timeout):
            last = update.run
        run_seconds = time.monotonic() - t0
        if last.state != collector_pb2.RUN_STATE_SUCCEEDED:
            fail(f"run {run.run_id} ended {collector_pb2.RunState.Name(last.state)}: {last.error or last.counts}")
        counts = last.counts
        if counts.finished != args.episodes or counts.errored:
            fail(f"run {run.run_id}: {counts.finished}/{args.episodes} episodes stored, {counts.errored} errored")

        stored = list(stub.ReadEpisodes(collector_pb2.ReadEpisodesRequest(run_ids=[run.run_id]), timeout=120))
        episodes = [r.episode for r in stored]
        steps = sum(e.step_count for e in episodes)
        if len(episodes) != args.episodes or steps != counts.steps:
            fail(f"read back {len(episodes)} episodes / {steps} steps, the run stored {args.episodes} / {counts.steps}")

        exported = stub.ExportRun(collector_pb2.ExportRunRequest(
            request_id=os.urandom(8).hex(), run_id=run.run_id, format=collector_pb2.EXPORT_FORMAT_PARQUET,
            destination=f"{args.dest}/{run.run_id}"), timeout=300)
        if exported.episodes != args.episodes or not exported.paths:
            fail(f"export wrote {exported.episodes} episodes to {list(exported.paths)}")
    except grpc.RpcError as exc:
        fail(f"{exc.code().name}: {exc.details()}")  # type: ignore[attr-defined]
    print(json.dumps({
        "run_id": run.run_id, "episodes": counts.finished, "passed": counts.passed, "steps": counts.steps,
        "read_back": len(episodes), "exported_episodes": exported.episodes, "exported_steps": exported.steps,
        "paths": list(exported.paths), "run_seconds": round(run_seconds, 1),
        "total_seconds": round(time.monotonic() - t0, 1),
    }))


if __name__ == "__main__":
    main()

"""Stored episodes as protobuf messages: the trainer's data path (CollectorService.ReadEpisodes).

The collector owns the store (an embedded chDB folder can be opened by one process), so the trainer
reads through this RPC rather than opening ClickHouse itself; against a ClickHouse server the query is
the same. Episodes are read a run at a time (columnar, FINAL so retried writes count once) and turned
into StoredEpisode messages with their steps' observations in the formats the run kept.
"""

from __future__ import annotations

import pyarrow as pa
from google.protobuf import json_format
from webenv import errors
from webenv.collector.episode import LEVEL_NAMES, SPLIT_NAMES
from webenv.collector.export import read_tables
from webenv.collector.store import Store
from webenv.v1 import collector_pb2, common_pb2

_SPLITS = {v: k for k, v in SPLIT_NAMES.items()}
_LEVELS = {v: k for k, v in LEVEL_NAMES.items()}
#: Runs one request may name.
MAX_RUNS = 1000


def validate(request: collector_pb2.ReadEpisodesRequest) -> None:
    if not request.run_ids:
        raise errors.InvalidArgument("run_ids: at least one run id is required", reason="BAD_READ",
                                     metadata={"field": "run_ids"})
    if len(request.run_ids) > MAX_RUNS:
        raise errors.InvalidArgument(f"run_ids: at most {MAX_RUNS} runs per request", reason="BAD_READ",
                                     metadata={"field": "run_ids"})
    for i, rid in enumerate(request.run_ids):
        if not rid or len(rid) > 128:
            raise errors.InvalidArgument(f"run_ids[{i}]: must be 1-128 characters", reason="BAD_READ",
                                         metadata={"field": f"run_ids[{i}]"})
    if request.filter.split and request.filter.split not in SPLIT_NAMES:
        raise errors.InvalidArgument(f"filter.split: unknown split {request.filter.split}", reason="BAD_READ",
                                     metadata={"field": "filter.split"})
    if request.filter.level and request.filter.level not in LEVEL_NAMES:
        raise errors.InvalidArgument(f"filter.level: unknown level {request.filter.level}", reason="BAD_READ",
                                     metadata={"field": "filter.level"})
    if request.filter.max_steps < 0 or request.limit < 0:
        field = "filter.max_steps" if request.filter.max_steps < 0 else "limit"
        raise errors.InvalidArgument(f"{field}: must be >= 0", reason="BAD_READ", metadata={"field": field})


def _observation(row: dict, prefix: str = "") -> common_pb2.Observation:
    return common_pb2.Observation(url=row[f"{prefix}url"], axtree=row[f"{prefix}axtree"], html=row[f"{prefix}html"],
                                  markdown=row[f"{prefix}markdown"], title=row.get(f"{prefix}title", ""))


def _episode(ep: dict, steps: list[dict]) -> collector_pb2.StoredEpisode:
    task = common_pb2.Task()
    if ep.get("task_pb"):
        task.ParseFromString(bytes.fromhex(ep["task_pb"]))
    traj = common_pb2.Trajectory(
        episode_id=ep["episode_id"], task_id=ep["task_id"], final_answer=ep["final_answer"],
        site_state_json=ep["site_state_json"], env_reward=ep["env_reward"],
        final_observation=_observation(ep, "final_"), category=task.category,
    )
    for st in steps:
        rec = traj.steps.add(
            step_index=st["step_index"], observation=_observation(st), action_text=st["action_text"],
            reward=st["reward"], done=bool(st["done"]), last_action_error=st["last_action_error"],
            repeated_state=bool(st["repeated_state"]), raw_output=st["raw_output"],
            parse_failed=bool(st["parse_failed"]), policy_seconds=st["policy_seconds"], url_after=st["url_after"],
            target_element_id=st.get("target_element_id", ""),
            timings=common_pb2.StepTimings(total_seconds=st["env_seconds"], queue_seconds=st["env_queue_seconds"],
                                           action_seconds=st["action_seconds"], observe_seconds=st["observe_seconds"]),
        )
        if st["action_json"]:
            json_format.Parse(st["action_json"], rec.action)
    return collector_pb2.StoredEpisode(
        run_id=ep["run_id"], episode_id=ep["episode_id"], task=task, trajectory=traj, passed=bool(ep["passed"]),
        score=ep["score"], policy=ep["policy"], policy_version=ep.get("policy_version", ""),
        split=_SPLITS.get(ep["split"], common_pb2.SPLIT_UNSPECIFIED),
        level=_LEVELS.get(ep["level"], collector_pb2.COLLECTION_LEVEL_UNSPECIFIED), horizon=ep["horizon"],
        truncated=bool(ep["truncated"]), error=ep["error"],
    )


def _grouped(steps: pa.Table) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {}
    for row in steps.to_pylist():
        out.setdefault(row["episode_id"], []).append(row)
    return out


def read_run(store: Store, run_id: str, flt: collector_pb2.ExportFilter) -> list[collector_pb2.StoredEpisode]:
    """One run's matching episodes (synchronous: call it on the store thread)."""
    episodes, steps = read_tables(store, run_id, flt)
    by_episode = _grouped(steps)
    out = []
    for ep in episodes.to_pylist():
        if ep["error"] and not flt.include_errored:
            continue
        if flt.max_steps and ep["steps"] > flt.max_steps:
            continue
        out.append(_episode(ep, by_episode.get(ep["episode_id"], [])))
    return out

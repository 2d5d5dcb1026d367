"""Stored episodes back as messages (``CollectorService.ReadEpisodes``): rows -> ``StoredEpisode`` with steps.

The collector owns the store (an embedded chDB folder can be opened by one process), so the trainer and the
gateway read through this RPC rather than opening ClickHouse themselves. Episode rows are read first (one query, without the heavy observation columns unless the read mask wants the
trajectory); steps are read only for episodes whose trajectory is asked for, a bounded batch of episodes per
query, so a caller that lists a 10,000-episode run for a table never moves its observations and one that reads
everything holds at most one batch of steps in memory. Screenshots stay in the blob store: a step carries its
``screenshot_key`` (what a viewer fetches), not the image bytes.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime

from google.protobuf import field_mask_pb2, json_format
from webenv import errors
from webenv.collector import repetition
from webenv.collector.schema import ENV_KIND_NAMES, EPISODES, LEVEL_NAMES, SPLIT_NAMES, STEPS
from webenv.collector.store import Store
from webenv.v1 import collector_pb2, common_pb2

#: Episodes whose steps are read in one query.
STEP_BATCH = 64
#: Runs and episode ids accepted in one request.
MAX_RUNS = 1000
MAX_EPISODE_IDS = 1000

_SPLITS = {v: k for k, v in SPLIT_NAMES.items()}
_LEVELS = {v: k for k, v in LEVEL_NAMES.items()}
_ENV_KINDS = {v: k for k, v in ENV_KIND_NAMES.items()}
_EPISODE_LIGHT = (
    "run_id, episode_id, task_id, passed, score, policy, policy_version, split, level, horizon, truncated, error, "
    "verdict_json, steps, duration_seconds, finished_at, task_pb, final_answer, site_state_json, env_reward, "
    "env_kind, instruction, group_id, parent_episode_id, branch_step, start_episode_id, start_steps"
)
_EPISODE_FINAL = "final_url, final_axtree, final_html, final_markdown, network_events_pb"


def episode_where(run_ids: list[str], flt: collector_pb2.ExportFilter, episode_ids: list[str] = ()) -> tuple[str, dict]:
    """The WHERE clause (and its parameters) selecting episodes by run, id and ExportFilter."""
    clauses, params = [], {}
    if run_ids:
        clauses.append("run_id IN {run_ids:Array(String)}")
        params["run_ids"] = list(run_ids)
    if episode_ids:
        clauses.append("episode_id IN {episode_ids:Array(String)}")
        params["episode_ids"] = list(episode_ids)
    if flt.split:
        clauses.append("split = {split:String}")
        params["split"] = SPLIT_NAMES[flt.split]
    if flt.HasField("passed"):
        clauses.append(f"passed = {int(flt.passed)}")
    if flt.level:
        clauses.append("level = {level:String}")
        params["level"] = LEVEL_NAMES[flt.level]
    if flt.max_steps:
        clauses.append(f"steps <= {int(flt.max_steps)}")
    if not flt.include_errored:
        clauses.append("error = ''")
    return (" WHERE " + " AND ".join(clauses)) if clauses else "", params


def check_filter(flt: collector_pb2.ExportFilter, reason: str) -> None:
    """INVALID_ARGUMENT naming the field for filter values no stored episode can have (ExportRun, ReadEpisodes)."""
    for field, value, known in (("filter.split", flt.split, SPLIT_NAMES), ("filter.level", flt.level, LEVEL_NAMES)):
        if value and value not in known:
            raise errors.InvalidArgument(f"{field}: unknown value {value}", reason=reason, metadata={"field": field})
    if flt.max_steps < 0:
        raise errors.InvalidArgument("filter.max_steps: must be >= 0", reason=reason,
                                     metadata={"field": "filter.max_steps"})


def validate(request: collector_pb2.ReadEpisodesRequest) -> None:
    """INVALID_ARGUMENT naming the field for requests ReadEpisodes cannot serve."""

    def bad(field: str, why: str) -> errors.InvalidArgument:
        return errors.InvalidArgument(f"{field}: {why}", reason="BAD_READ", metadata={"field": field})

    if not request.run_ids:
        raise bad("run_ids", "at least one run id is required")
    if len(request.run_ids) > MAX_RUNS:
        raise bad("run_ids", f"at most {MAX_RUNS} runs per request")
    for i, rid in enumerate(request.run_ids):
        if not rid or len(rid) > 128:
            raise bad(f"run_ids[{i}]", "must be 1-128 characters")
    if request.limit < 0:
        raise bad("limit", "must be >= 0")
    if len(request.episode_ids) > MAX_EPISODE_IDS:
        raise bad("episode_ids", f"at most {MAX_EPISODE_IDS} per request")
    check_filter(request.filter, "BAD_READ")
    if request.HasField("read_mask") and not request.read_mask.IsValidForDescriptor(collector_pb2.StoredEpisode.DESCRIPTOR):
        raise bad("read_mask", f"names fields StoredEpisode does not have: {','.join(request.read_mask.paths)[:200]}")


def _wants(mask: field_mask_pb2.FieldMask | None, prefix: str) -> bool:
    """Does the mask ask for ``prefix`` or anything under it (an absent mask asks for everything)?"""
    if mask is None:
        return True
    return any(p == prefix or p.startswith(prefix + ".") or prefix.startswith(p + ".") for p in mask.paths)


def _utc(dt: datetime | None) -> datetime | None:
    if dt is None:
        return None
    dt = dt if dt.tzinfo else dt.replace(tzinfo=UTC)
    return dt if dt.timestamp() > 0 else None


def _observation(row: dict, prefix: str = "") -> common_pb2.Observation:
    obs = common_pb2.Observation(url=row[f"{prefix}url"])
    if not prefix:
        obs.title = row["title"]
    for name, fmt in (("axtree", common_pb2.OBSERVATION_FORMAT_AXTREE), ("html", common_pb2.OBSERVATION_FORMAT_HTML),
                      ("markdown", common_pb2.OBSERVATION_FORMAT_MARKDOWN)):
        text = row[f"{prefix}{name}"]
        if text:
            setattr(obs, name, text)
            obs.formats.append(fmt)
    elements = row.get("elements_json") if not prefix else ""
    if elements:
        for e in json.loads(elements):
            json_format.ParseDict(e, obs.elements.add(), ignore_unknown_fields=True)
        obs.formats.append(common_pb2.OBSERVATION_FORMAT_ELEMENTS)
    return obs


def step_record(row: dict) -> common_pb2.StepRecord:
    """One stored step as a StepRecord (observation in the kept formats, screenshot by key)."""
    rec = common_pb2.StepRecord(
        step_index=row["step_index"], observation=_observation(row), action_text=row["action_text"],
        reward=row["reward"], done=bool(row["done"]), last_action_error=row["last_action_error"],
        repeated_state=bool(row["repeated_state"]), raw_output=row["raw_output"], parse_failed=bool(row["parse_failed"]),
        policy_seconds=row["policy_seconds"], url_after=row["url_after"], target_element_id=row["target_element_id"],
        screenshot_key=row["screenshot_key"], prompt_tokens=row["prompt_tokens"],
        completion_token_ids=row["completion_token_ids"], completion_logprobs=row["completion_logprobs"],
        policy_version=row["policy_version"],
        timings=common_pb2.StepTimings(queue_seconds=row["env_queue_seconds"], action_seconds=row["action_seconds"],
                                       observe_seconds=row["observe_seconds"], total_seconds=row["env_seconds"]),
    )
    if row["screenshot_key"]:
        rec.observation.formats.append(common_pb2.OBSERVATION_FORMAT_SCREENSHOT)
    if row["action_json"]:
        json_format.Parse(row["action_json"], rec.action, ignore_unknown_fields=True)
    return rec


def stored_episode(row: dict, steps: list[dict] | None) -> collector_pb2.StoredEpisode:
    """One episode row (and its step rows, when read) as a StoredEpisode."""
    ep = collector_pb2.StoredEpisode(
        run_id=row["run_id"], episode_id=row["episode_id"], passed=bool(row["passed"]), score=row["score"],
        policy=row["policy"], policy_version=row["policy_version"], split=_SPLITS.get(row["split"], 0),
        level=_LEVELS.get(row["level"], 0), horizon=row["horizon"], truncated=bool(row["truncated"]),
        error=row["error"], step_count=row["steps"], duration_seconds=row["duration_seconds"],
        group_id=row["group_id"], parent_episode_id=row["parent_episode_id"], branch_step=row["branch_step"],
        start_episode_id=row["start_episode_id"], start_steps=row["start_steps"],
    )
    if row["task_pb"]:
        ep.task.ParseFromString(bytes.fromhex(row["task_pb"]))
    else:
        ep.task.task_id = row["task_id"]
    if row["verdict_json"]:
        json_format.Parse(row["verdict_json"], ep.verdict, ignore_unknown_fields=True)
    finished = _utc(row["finished_at"])
    if finished is not None:
        ep.finished_at.FromDatetime(finished)
    t = ep.trajectory
    t.episode_id, t.task_id, t.final_answer = row["episode_id"], row["task_id"], row["final_answer"]
    t.site_state_json, t.env_reward = row["site_state_json"], row["env_reward"]
    t.env_kind, t.category = _ENV_KINDS.get(row["env_kind"], 0), ep.task.category
    if steps is not None:
        t.steps.extend(step_record(s) for s in steps)
        t.final_observation.CopyFrom(_observation(row, "final_"))
        if row.get("network_events_pb"):
            t.network_events.extend(common_pb2.Trajectory.FromString(bytes.fromhex(row["network_events_pb"])).network_events)
    return ep


class EpisodeReader:
    """One ReadEpisodes request: :meth:`rows` selects the episodes, :meth:`batch` builds a batch of messages.

    Both run on the store thread (``AsyncStore.read``); the servicer sends each batch before building the next.
    """

    def __init__(self, request: collector_pb2.ReadEpisodesRequest) -> None:
        self.request = request
        self.mask = request.read_mask if request.HasField("read_mask") and request.read_mask.paths else None
        self.with_steps = _wants(self.mask, "trajectory.steps") or _wants(self.mask, "trajectory.final_observation")

    def rows(self, store: Store) -> list[list[dict]]:
        """The selected episode rows, ordered by run and episode id, in batches of STEP_BATCH."""
        where, params = episode_where(list(self.request.run_ids), self.request.filter, list(self.request.episode_ids))
        cols = _EPISODE_LIGHT + (", " + _EPISODE_FINAL if self.with_steps else "")
        limit = f" LIMIT {int(self.request.limit)}" if self.request.limit else ""
        rows = store.query(
            f"SELECT {cols} FROM {{db}}.{EPISODES} FINAL{where} ORDER BY run_id, episode_id{limit}", params)
        return [rows[i:i + STEP_BATCH] for i in range(0, len(rows), STEP_BATCH)]

    def batch(self, store: Store, rows: list[dict]) -> list[collector_pb2.StoredEpisode]:
        """StoredEpisodes for one batch of episode rows (their steps read in one query), trimmed to the mask."""
        steps: dict[tuple[str, str], list[dict]] = {}
        if self.with_steps:
            keep = f" AND {repetition.KEPT_SQL}" if self.request.filter.drop_repeated else ""
            for s in store.query(
                f"SELECT * EXCEPT (version) FROM {{db}}.{STEPS} FINAL WHERE (run_id, episode_id) IN "
                "(SELECT tupleElement(k, 1), tupleElement(k, 2) FROM "
                "(SELECT arrayJoin({keys:Array(Tuple(String, String))}) AS k))" + keep
                + " ORDER BY run_id, episode_id, step_index",
                {"keys": [(r["run_id"], r["episode_id"]) for r in rows]},
            ):
                steps.setdefault((s["run_id"], s["episode_id"]), []).append(s)
        out = []
        for row in rows:
            ep = stored_episode(row, steps.get((row["run_id"], row["episode_id"]), []) if self.with_steps else None)
            if self.mask is not None:
                trimmed = collector_pb2.StoredEpisode()
                self.mask.MergeMessage(ep, trimmed)
                ep = trimmed
            out.append(ep)
        return out


"""The trajectory schema, written once: the tables, their columns with ClickHouse types, and the words stored in them.

The store inserts by these column lists (filling what a row leaves out with its type's zero), episodes and runs
build their rows by them, readers turn stored words back into enums with the same maps, and the Redis work queue
writes run states with the same names. The tables themselves are created by the versioned migrations
(``migrations/NNN_*.sql``: history, applied once each); ``tests/test_collector_schema.py`` creates them in chDB
from the migrations and checks that ``DESCRIBE TABLE`` and the sorting keys agree with this module, so a new
column is a migration plus a line here. (Before, the column lists lived in store.py, the row builders in
episode.py and engine.py, and the types only in the SQL: four places that could drift apart unseen.)
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from webenv import splits
from webenv.v1 import collector_pb2, common_pb2

#: What a DateTime column left empty holds (never NULL: the columns are not Nullable).
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


@dataclass(frozen=True)
class Table:
    """One ReplacingMergeTree(version) table: its columns (name, ClickHouse type) in order and its key."""

    name: str
    columns: tuple[tuple[str, str], ...]
    key: tuple[str, ...]

    @property
    def names(self) -> list[str]:
        """The column names, in table order (the order inserts use)."""
        return [c for c, _ in self.columns]

    def zeros(self) -> dict[str, Any]:
        """What each column holds when a row leaves it out: "", 0, [] or the epoch, by its type."""
        return {c: _zero(t) for c, t in self.columns}

    def __str__(self) -> str:
        return self.name


def _zero(ch_type: str) -> Any:
    if ch_type.startswith("DateTime"):
        return EPOCH
    if ch_type.startswith(("Int", "UInt", "Float")):
        return 0
    if ch_type.startswith("Array"):
        return []
    return ""


_DT = "DateTime64(3, 'UTC')"

RUNS = Table("runs", (
    ("run_id", "String"), ("name", "String"), ("spec_json", "String"), ("state", "String"),
    ("planned", "Int32"), ("started", "Int32"), ("finished", "Int32"), ("passed", "Int32"), ("errored", "Int32"),
    ("steps", "Int64"), ("created_at", _DT), ("finished_at", _DT), ("error", "String"), ("collector_id", "String"),
    ("webenv_version", "String"), ("version", "UInt64"),
), key=("run_id",))  # fmt: skip

EPISODES = Table("episodes", (
    ("run_id", "String"), ("episode_id", "String"), ("episode_index", "Int32"), ("task_id", "String"),
    ("source", "String"), ("site", "String"), ("family", "String"), ("split", "String"), ("difficulty", "String"),
    ("level", "String"), ("policy", "String"), ("env_kind", "String"), ("env_address", "String"),
    ("instruction", "String"), ("passed", "UInt8"), ("score", "Float64"), ("answer_supported", "UInt8"),
    ("verdict_json", "String"), ("final_answer", "String"), ("final_url", "String"), ("final_axtree", "String"),
    ("final_html", "String"), ("final_markdown", "String"), ("env_reward", "Float64"), ("site_state_json", "String"),
    ("steps", "Int32"), ("repeated_steps", "Int32"), ("horizon", "Int32"), ("truncated", "UInt8"), ("error", "String"),
    ("attempts", "Int32"), ("started_at", _DT), ("finished_at", _DT), ("duration_seconds", "Float64"),
    ("seed", "Int64"), ("task_seed", "Int64"), ("webenv_version", "String"), ("collector_id", "String"),
    ("browser_node", "String"), ("policy_model", "String"), ("judge_version", "String"), ("rubric_id", "String"),
    ("rubric_version", "Int32"), ("version", "UInt64"),
    ("task_pb", "String"),  # 002: the whole task (serialized webenv.v1.Task, hex), so a trace re-opens it
    ("policy_version", "String"),  # 003: the policy version that chose the actions
    ("group_id", "String"),  # 005: the group rollout or branch group it was collected in
    ("parent_episode_id", "String"),  # 005: a fork's anchor episode
    ("branch_step", "Int32"),  # 005: a fork's first own step
    ("start_episode_id", "String"),  # 007: the stored episode replayed to begin it (RunSpec.starts)
    ("start_steps", "Int32"),  # 007: how many of its steps were replayed
    ("network_events_pb", "String"),  # 008: the farm's network trace (a Trajectory of network_events, hex)
), key=("run_id", "episode_id"))  # fmt: skip

STEPS = Table("steps", (
    ("run_id", "String"), ("episode_id", "String"), ("step_index", "Int32"), ("url", "String"), ("title", "String"),
    ("axtree", "String"), ("html", "String"), ("markdown", "String"), ("screenshot_key", "String"),
    ("action_text", "String"), ("action_json", "String"), ("raw_output", "String"), ("parse_failed", "UInt8"),
    ("reward", "Float64"), ("done", "UInt8"), ("last_action_error", "String"), ("repeated_state", "UInt8"),
    ("url_after", "String"), ("policy_seconds", "Float64"), ("env_seconds", "Float64"),
    ("env_queue_seconds", "Float64"), ("action_seconds", "Float64"), ("observe_seconds", "Float64"),
    ("version", "UInt64"),
    ("target_element_id", "String"),  # 003: the element the action's target resolved to
    ("elements_json", "String"),  # 004: the observation's elements with their boxes (JSON), when ELEMENTS is kept
    ("prompt_tokens", "Int32"),  # 006: what the policy's model read and generated, and the version that chose it
    ("completion_token_ids", "Array(Int32)"), ("completion_logprobs", "Array(Float32)"), ("policy_version", "String"),
), key=("run_id", "episode_id", "step_index"))  # fmt: skip

def version_now() -> int:
    """A row's ``version`` (the ReplacingMergeTree's): microseconds since the epoch, so a later write of a key wins."""
    return time.time_ns() // 1000


TABLES = {t.name: t for t in (RUNS, EPISODES, STEPS)}
#: Insert order: steps before their episode row, so an episode row implies its steps are stored.
INSERT_ORDER = (STEPS.name, EPISODES.name, RUNS.name)

# -- the words stored in the String columns (and, for run states, in the Redis work queue) --------------------------
#: runs.state: "pending", "running", "succeeded", "stopped", "failed".
STATE_NAMES = {v: collector_pb2.RunState.Name(v).removeprefix("RUN_STATE_").lower() for v in collector_pb2.RunState.values()}
STATE_VALUES = {v: k for k, v in STATE_NAMES.items()}
#: episodes.split, episodes.difficulty, episodes.level, episodes.env_kind.
SPLIT_NAMES = splits.SPLIT_NAMES
DIFFICULTY_NAMES = {common_pb2.DIFFICULTY_EASY: "easy", common_pb2.DIFFICULTY_MEDIUM: "medium", common_pb2.DIFFICULTY_HARD: "hard"}
LEVEL_NAMES = {
    collector_pb2.COLLECTION_LEVEL_RANDOM_CRAWL: "random_crawl",
    collector_pb2.COLLECTION_LEVEL_EXPLORATION: "exploration",
    collector_pb2.COLLECTION_LEVEL_TASK_ORIENTED: "task_oriented",
}
ENV_KIND_NAMES = {common_pb2.ENV_KIND_BROWSER: "browser", common_pb2.ENV_KIND_WORLD_MODEL: "world_model"}


def source_name(source: int) -> str:
    """episodes.source: the task source's enum name without its prefix, lower case ("synthetic", "url", ...)."""
    return common_pb2.TaskSource.Name(source).removeprefix("TASK_SOURCE_").lower()

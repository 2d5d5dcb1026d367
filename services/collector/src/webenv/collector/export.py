"""Exports of stored episodes and steps: JSONL, Parquet, HF datasets, and world-model transitions.

Reads are columnar end to end (ClickHouse -> Arrow -> file) so exporting is bounded by the disk, not Python:
Parquet and datasets never build per-row Python objects. FINAL makes retried writes count once.

A request is checked before anything is read or written (:func:`check_request`): an unknown filter value, a NUL
byte or an over-long name in the destination are INVALID_ARGUMENT naming the field, and an OS refusal while
creating the folder becomes the matching status; a run with no episodes exports empty files, not an error.
"""

from __future__ import annotations

import errno
import json
import os
import time
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from webenv import errors
from webenv.collector.read import check_filter, episode_where
from webenv.collector.schema import EPISODES, STEPS
from webenv.collector.store import Store
from webenv.v1 import collector_pb2, common_pb2

PATH_MAX = os.pathconf("/", "PC_PATH_MAX") if hasattr(os, "pathconf") else 4096
NAME_MAX = os.pathconf("/", "PC_NAME_MAX") if hasattr(os, "pathconf") else 255
TRANSITION_FORMATS = {
    common_pb2.OBSERVATION_FORMAT_AXTREE: "axtree",
    common_pb2.OBSERVATION_FORMAT_HTML: "html",
    common_pb2.OBSERVATION_FORMAT_MARKDOWN: "markdown",
}


@dataclass
class ExportResult:
    """What an export wrote."""

    paths: list[str]
    episodes: int
    steps: int
    duration_seconds: float


def _bad(field: str, message: str) -> errors.InvalidArgument:
    return errors.InvalidArgument(f"{field}: {message}", reason="BAD_EXPORT", metadata={"field": field})


def check_request(fmt: int, destination: str, flt: collector_pb2.ExportFilter, transition_format: int) -> None:
    """Refuse a malformed export request with INVALID_ARGUMENT naming its field (nothing touched yet)."""
    if fmt == collector_pb2.EXPORT_FORMAT_UNSPECIFIED or fmt not in collector_pb2.ExportFormat.values():
        raise _bad("format", "required (JSONL, PARQUET, HF_DATASET, TRANSITIONS or TRACES)")
    if not destination:
        raise _bad("destination", "required")
    if "\x00" in destination:
        raise _bad("destination", "contains a NUL byte")
    encoded = os.fsencode(destination)
    if len(encoded) > PATH_MAX:
        raise _bad("destination", f"path is {len(encoded)} bytes, longer than {PATH_MAX}")
    longest = max((len(part) for part in encoded.split(b"/")), default=0)
    if longest > NAME_MAX:
        raise _bad("destination", f"a path component is {longest} bytes, longer than {NAME_MAX}")
    check_filter(flt, "BAD_EXPORT")
    if fmt == collector_pb2.EXPORT_FORMAT_TRANSITIONS and transition_format and transition_format not in TRANSITION_FORMATS:
        raise _bad("transition_format", "must be AXTREE, HTML or MARKDOWN")
    if fmt == collector_pb2.EXPORT_FORMAT_TRACES and flt.drop_repeated:
        raise _bad("filter.drop_repeated", "a trace must keep every step to replay")


def make_destination(destination: str) -> Path:
    """Create the export folder; an OS refusal is a status naming ``destination``, not INTERNAL."""
    dest = Path(destination)
    try:
        dest.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        meta = {"field": "destination"}
        why = f"destination: cannot create {destination!r}: {exc.strerror or exc}"
        if exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
            raise errors.PermissionDenied(why, reason="EXPORT_NOT_WRITABLE", metadata=meta) from exc
        if exc.errno in (errno.ENOSPC, errno.EDQUOT):
            raise errors.ResourceExhausted(why, reason="EXPORT_DISK_FULL", metadata=meta) from exc
        raise errors.InvalidArgument(why, reason="BAD_EXPORT", metadata=meta) from exc
    return dest


def read_tables(store: Store, run_id: str, flt: collector_pb2.ExportFilter) -> tuple[pa.Table, pa.Table]:
    """(episodes, steps) matching the filter, as Arrow tables ordered by run, episode, step."""
    where, params = episode_where([run_id] if run_id else [], flt)
    episodes = store.query_arrow(
        f"SELECT * EXCEPT (version) FROM {{db}}.{EPISODES} FINAL{where} ORDER BY run_id, episode_id", params
    )
    step_where = f" WHERE (run_id, episode_id) IN (SELECT run_id, episode_id FROM {{db}}.{EPISODES} FINAL{where})"
    if flt.drop_repeated:
        step_where += " AND repeated_state = 0"
    steps = store.query_arrow(
        f"SELECT * EXCEPT (version) FROM {{db}}.{STEPS} FINAL{step_where} ORDER BY run_id, episode_id, step_index",
        params,
    )
    return episodes, steps


def _json_default(v):
    if isinstance(v, datetime):
        return v.isoformat()
    if isinstance(v, bytes):
        return v.decode("utf-8", "replace")
    raise TypeError(type(v))


def write_jsonl(episodes: pa.Table, steps: pa.Table, dest: Path) -> list[Path]:
    """One line per episode with its steps nested, in step order."""
    by_episode: dict[str, list[dict]] = {}
    for row in steps.to_pylist():
        by_episode.setdefault(row["episode_id"], []).append(row)
    path = dest / "episodes.jsonl"
    with path.open("w", encoding="utf-8") as f:
        for ep in episodes.to_pylist():
            ep["steps_detail"] = by_episode.get(ep["episode_id"], [])
            f.write(json.dumps(ep, default=_json_default, ensure_ascii=False))
            f.write("\n")
    return [path]


def write_parquet(episodes: pa.Table, steps: pa.Table, dest: Path) -> list[Path]:
    """episodes.parquet and steps.parquet (zstd)."""
    paths = [dest / "episodes.parquet", dest / "steps.parquet"]
    pq.write_table(episodes, paths[0], compression="zstd")
    pq.write_table(steps, paths[1], compression="zstd")
    return paths


def write_hf(episodes: pa.Table, steps: pa.Table, dest: Path) -> list[Path]:
    """A datasets.DatasetDict with 'episodes' and 'steps' splits, saved with save_to_disk."""
    import datasets  # imported lazily: it is slow to import and only exports need it

    # A table with no rows may have no chunks, which datasets cannot take: give it one empty chunk per column.
    episodes, steps = (t if t.num_rows else t.schema.empty_table() for t in (episodes, steps))
    dd = datasets.DatasetDict({"episodes": datasets.Dataset(episodes), "steps": datasets.Dataset(steps)})
    out = dest / "hf"
    dd.save_to_disk(str(out))
    return [out]


def transitions_table(episodes: pa.Table, steps: pa.Table, fmt: int) -> pa.Table:
    """World-model transitions (state, action, next state) in the agreed JSONL schema, as a table."""
    col = TRANSITION_FORMATS[fmt]
    ep_rows = {r["episode_id"]: r for r in episodes.select(
        ["episode_id", "site", "split", "instruction", "env_kind", f"final_{col}", "final_url"]).to_pylist()}
    s = steps.select(["episode_id", "step_index", "url", col, "action_text", "url_after", "repeated_state"]).to_pylist()
    out: dict[str, list] = {k: [] for k in (
        "episode_id", "step_index", "site", "split", "format", "instruction", "url", "state", "action_text",
        "next_url", "next_state", "env_kind")}  # fmt: skip
    for i, row in enumerate(s):
        ep = ep_rows[row["episode_id"]]
        nxt = s[i + 1] if i + 1 < len(s) and s[i + 1]["episode_id"] == row["episode_id"] else None
        # The next state is the next stored step's observation, else the episode's final observation.
        if nxt is not None and nxt["step_index"] == row["step_index"] + 1:
            next_state = nxt[col]
        elif nxt is None:
            next_state = ep[f"final_{col}"]
        else:  # the next step was filtered out (repeated): its observation is still the next state
            next_state = nxt[col]
        for k, v in (
            ("episode_id", row["episode_id"]), ("step_index", row["step_index"]), ("site", ep["site"]),
            ("split", ep["split"] or "train"), ("format", col), ("instruction", ep["instruction"]),
            ("url", row["url"]), ("state", row[col]), ("action_text", row["action_text"]),
            ("next_url", row["url_after"]), ("next_state", next_state), ("env_kind", ep["env_kind"]),
        ):  # fmt: skip
            out[k].append(v)
    return pa.table(out)


def write_transitions(table: pa.Table, dest: Path) -> list[Path]:
    """transitions.jsonl, one transition per line."""
    path = dest / "transitions.jsonl"
    with path.open("w", encoding="utf-8") as f:
        for row in table.to_pylist():
            f.write(json.dumps(row, ensure_ascii=False))
            f.write("\n")
    return [path]


def write_traces(episodes: pa.Table, steps: pa.Table, dest: Path) -> list[Path]:
    """One replay trace per episode: a header line (task, start URL, final URL) then one line per step."""
    folder = dest / "traces"
    folder.mkdir(parents=True, exist_ok=True)
    by_episode: dict[str, list[dict]] = {}
    cols = ["episode_id", "step_index", "url", "axtree", "action_text", "action_json", "url_after",
            "policy_seconds", "env_seconds"]
    for row in steps.select(cols).to_pylist():
        by_episode.setdefault(row["episode_id"], []).append(row)
    paths = []
    for ep in episodes.select(["run_id", "episode_id", "task_id", "task_pb", "final_url", "final_axtree",
                               "seed", "env_address"]).to_pylist():
        path = folder / f"{ep['episode_id']}.jsonl"
        with path.open("w", encoding="utf-8") as f:
            f.write(json.dumps({"kind": "header", **ep}) + "\n")
            for st in by_episode.get(ep["episode_id"], []):
                st.pop("episode_id")
                f.write(json.dumps({"kind": "step", **st}) + "\n")
        paths.append(path)
    return paths


def export(
    store: Store,
    run_id: str,
    fmt: int,
    destination: str,
    flt: collector_pb2.ExportFilter,
    transition_format: int = common_pb2.OBSERVATION_FORMAT_UNSPECIFIED,
) -> ExportResult:
    """Export (synchronously, on the store thread) and say what was written."""
    check_request(fmt, destination, flt, transition_format)
    if fmt == collector_pb2.EXPORT_FORMAT_TRANSITIONS:
        transition_format = transition_format or common_pb2.OBSERVATION_FORMAT_AXTREE
    t0 = time.perf_counter()
    dest = make_destination(destination)
    episodes, steps = read_tables(store, run_id, flt)
    if fmt == collector_pb2.EXPORT_FORMAT_JSONL:
        paths = write_jsonl(episodes, steps, dest)
        n_steps = steps.num_rows
    elif fmt == collector_pb2.EXPORT_FORMAT_PARQUET:
        paths = write_parquet(episodes, steps, dest)
        n_steps = steps.num_rows
    elif fmt == collector_pb2.EXPORT_FORMAT_HF_DATASET:
        paths = write_hf(episodes, steps, dest)
        n_steps = steps.num_rows
    elif fmt == collector_pb2.EXPORT_FORMAT_TRACES:
        paths = write_traces(episodes, steps, dest)
        n_steps = steps.num_rows
    else:
        table = transitions_table(episodes, steps, transition_format)
        if flt.drop_repeated and table.num_rows:
            table = table.filter(pc.invert(pc.equal(table["state"], table["next_state"])))
        paths = write_transitions(table, dest)
        n_steps = table.num_rows
    return ExportResult([str(p) for p in paths], episodes.num_rows, n_steps, time.perf_counter() - t0)

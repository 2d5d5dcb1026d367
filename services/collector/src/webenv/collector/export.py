"""Exports of stored episodes and steps: JSONL, Parquet, HF datasets, world-model transitions, replay traces, and
conversations in TRL's ``messages`` format.

Reads are columnar end to end (ClickHouse -> Arrow -> file) so exporting is bounded by the disk, not Python:
Parquet and datasets never build per-row Python objects. FINAL makes retried writes count once.

A request is checked before anything is read or written (:func:`check_request`): an unknown filter value, a NUL
byte or an over-long name in the destination are INVALID_ARGUMENT naming the field, and an OS refusal while
creating the folder becomes the matching status; a run with no episodes exports empty files, not an error.

MESSAGES is what SFT/GRPO trainers read: a ``datasets.DatasetDict`` keyed by the episodes' split, one row per
episode, ``messages`` a conversation (the user turn gives the task and the first observation, each step's action is
an assistant turn, the observation after it the next user turn), ``images`` the stored screenshots (a list of
images, one per observation that has one, ``image_turns`` the index of the message each belongs to; both columns
only when some exported observation has a screenshot, so that a text model trains on the rest as exported: TRL
takes any dataset with an ``images`` key for a vision one), ``rewards`` per step, ``verdicts`` the judge's per-fact
results, and the task id and environment revision (webenv, judge and rubric versions). Observations are the AXTREE
text (the format the policy reads), cut to ``MESSAGE_TEXT_CHARS``.

MESSAGES and TRANSITIONS write each action as the agent would write it from the observation before it
(:func:`grounded_actions`): a selector-addressed action (the synthetic web's oracle, ``click("#next")``) by the
element id the farm resolved it to (the stored ``target_element_id``, the ``[id]`` the observation shows:
``click(2)``). The raw formats (JSONL, PARQUET, HF_DATASET, TRACES) keep the stored action as it was sent, so a
trace replays it.
"""

from __future__ import annotations

import base64
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
from google.protobuf import json_format
from webenv import errors
from webenv.agent.steps import grounded_text
from webenv.collector import repetition
from webenv.collector.blobs import BlobStore
from webenv.collector.read import check_filter, episode_where
from webenv.collector.schema import EPISODES, STEPS
from webenv.collector.store import Store
from webenv.v1 import collector_pb2, common_pb2

PATH_MAX = os.pathconf("/", "PC_PATH_MAX") if hasattr(os, "pathconf") else 4096
NAME_MAX = os.pathconf("/", "PC_NAME_MAX") if hasattr(os, "pathconf") else 255
#: An observation's text in a MESSAGES conversation is cut to this many characters (a long page would crowd out the
#: rest of the conversation in a trainer's context).
MESSAGE_TEXT_CHARS = 20_000
#: The MESSAGES columns written only when some exported observation has a screenshot.
IMAGE_COLUMNS = ("images", "image_turns")
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
        raise _bad("format", "required (JSONL, PARQUET, HF_DATASET, TRANSITIONS, TRACES or MESSAGES)")
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
    if fmt in (collector_pb2.EXPORT_FORMAT_TRACES, collector_pb2.EXPORT_FORMAT_MESSAGES) and flt.drop_repeated:
        what = "a trace must keep every step to replay" if fmt == collector_pb2.EXPORT_FORMAT_TRACES else \
            "a conversation must keep every turn"
        raise _bad("filter.drop_repeated", what)


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
        step_where += f" AND {repetition.KEPT_SQL}"
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


def write_jsonl(episodes: pa.Table, steps: pa.Table, dest: Path, blobs: BlobStore | None = None) -> list[Path]:
    """One line per episode with its steps nested, in step order; each step's screenshot by its key, and with
    ``blobs`` its bytes inline too (``screenshot_base64``, empty when the blob folder does not hold it)."""
    by_episode: dict[str, list[dict]] = {}
    for row in steps.to_pylist():
        if blobs is not None:
            key = row["screenshot_key"]
            row["screenshot_base64"] = (base64.b64encode(blobs.get(key)).decode("ascii")
                                        if key and blobs.path(key).exists() else "")
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


def _grounded(row: dict, next_axtree: str) -> str:
    """A stored step's action as the agent writes it from its observation (webenv.agent.steps.grounded_text): a
    selector-addressed action (the synthetic web's oracle) by the element id the farm resolved it to."""
    if not row["target_element_id"] or '"selector"' not in row["action_json"]:  # nothing to rewrite: not parsed
        return row["action_text"]
    action = json_format.Parse(row["action_json"], common_pb2.Action(), ignore_unknown_fields=True)
    return grounded_text(action, row["action_text"], row["target_element_id"], next_axtree)


def grounded_actions(episodes: pa.Table, steps: pa.Table) -> list[str]:
    """Every step's action text (in the steps' order) as the agent would write it from the observation before it,
    never a CSS selector the observation did not show; the next observation (the next stored step's, else the
    episode's final one) gives a select's chosen option."""
    finals = dict(zip(episodes["episode_id"].to_pylist(), episodes["final_axtree"].to_pylist(), strict=True))
    rows = steps.select(["episode_id", "axtree", "action_text", "action_json", "target_element_id"]).to_pylist()
    out = []
    for i, row in enumerate(rows):
        nxt = rows[i + 1] if i + 1 < len(rows) and rows[i + 1]["episode_id"] == row["episode_id"] else None
        out.append(_grounded(row, nxt["axtree"] if nxt else finals.get(row["episode_id"], "")))
    return out


def transitions_table(episodes: pa.Table, steps: pa.Table, fmt: int) -> pa.Table:
    """World-model transitions (state, action, next state) in the agreed JSONL schema, as a table."""
    col = TRANSITION_FORMATS[fmt]
    ep_rows = {r["episode_id"]: r for r in episodes.select(
        ["episode_id", "site", "split", "instruction", "env_kind", f"final_{col}", "final_url"]).to_pylist()}
    s = steps.select(["episode_id", "step_index", "url", col, "url_after", "repeated_state"]).to_pylist()
    actions = grounded_actions(episodes, steps)
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
            ("url", row["url"]), ("state", row[col]), ("action_text", actions[i]),
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


def _observation_text(url: str, axtree: str) -> str:
    text = f"URL: {url}\n{axtree}"
    return text if len(text) <= MESSAGE_TEXT_CHARS else text[:MESSAGE_TEXT_CHARS] + "\n[... cut]"


def _verdicts(verdict_json: str) -> list[dict]:
    if not verdict_json:
        return []
    results = json.loads(verdict_json).get("results", [])
    return [{"fact_id": r.get("factId", ""), "outcome": r.get("outcome", "").removeprefix("FACT_OUTCOME_").lower(),
             "reason": r.get("reason", ""), "criterion_kind": r.get("criterionKind", "")} for r in results]


def messages_rows(episodes: pa.Table, steps: pa.Table, blobs: BlobStore | None) -> list[dict]:
    """One conversation row per episode (the MESSAGES format's rows, screenshots as image bytes)."""
    by_episode: dict[str, list[dict]] = {}
    cols = ["episode_id", "step_index", "url", "axtree", "reward", "screenshot_key"]
    for row, action in zip(steps.select(cols).to_pylist(), grounded_actions(episodes, steps), strict=True):
        by_episode.setdefault(row["episode_id"], []).append({**row, "action_text": action})
    rows = []
    for ep in episodes.to_pylist():
        steps_ = by_episode.get(ep["episode_id"], [])
        first = steps_[0] if steps_ else {"url": ep["final_url"], "axtree": ep["final_axtree"], "screenshot_key": ""}
        messages = [{"role": "user", "content": f"Task: {ep['instruction']}\n\n"
                                                 f"{_observation_text(first['url'], first['axtree'])}"}]
        shots = [(first["screenshot_key"], 0)]
        for i, st in enumerate(steps_):
            messages.append({"role": "assistant", "content": st["action_text"]})
            if i + 1 < len(steps_):
                nxt = steps_[i + 1]
                messages.append({"role": "user", "content": _observation_text(nxt["url"], nxt["axtree"])})
                shots.append((nxt["screenshot_key"], len(messages) - 1))
        shots = [(key, turn) for key, turn in shots if key and blobs is not None and blobs.path(key).exists()]
        images = [{"bytes": blobs.get(key), "path": None} for key, _ in shots] if blobs is not None else []
        image_turns = [turn for _, turn in shots]
        rows.append({
            "messages": messages, "images": images, "image_turns": image_turns,
            "rewards": [float(s["reward"]) for s in steps_], "verdicts": _verdicts(ep["verdict_json"]),
            "passed": bool(ep["passed"]), "score": float(ep["score"]), "final_answer": ep["final_answer"],
            "run_id": ep["run_id"], "episode_id": ep["episode_id"], "task_id": ep["task_id"], "site": ep["site"],
            "split": ep["split"] or "train", "policy": ep["policy"], "policy_version": ep["policy_version"],
            "webenv_version": ep["webenv_version"], "judge_version": ep["judge_version"],
            "rubric_id": ep["rubric_id"], "rubric_version": int(ep["rubric_version"]),
        })
    return rows


def write_messages(episodes: pa.Table, steps: pa.Table, dest: Path, blobs: BlobStore | None) -> list[Path]:
    """The MESSAGES format: a DatasetDict keyed by split, saved with save_to_disk under ``dest/messages``."""
    import datasets  # imported lazily, as in write_hf

    text = datasets.Value("string")
    features = datasets.Features({
        "messages": [{"role": text, "content": text}], "images": datasets.Sequence(datasets.Image()),
        "image_turns": datasets.Sequence(datasets.Value("int32")), "rewards": datasets.Sequence(datasets.Value("float64")),
        "verdicts": [{"fact_id": text, "outcome": text, "reason": text, "criterion_kind": text}],
        "passed": datasets.Value("bool"), "score": datasets.Value("float64"), "final_answer": text,
        **{k: text for k in ("run_id", "episode_id", "task_id", "site", "split", "policy", "policy_version",
                             "webenv_version", "judge_version", "rubric_id")},
        "rubric_version": datasets.Value("int32"),
    })
    rows = messages_rows(episodes, steps, blobs)
    if not any(row["images"] for row in rows):
        # no screenshots: no image columns, since TRL takes any dataset with an `images` key for a vision one and
        # refuses a text model on it
        features = datasets.Features({k: v for k, v in features.items() if k not in IMAGE_COLUMNS})
        rows = [{k: v for k, v in row.items() if k not in IMAGE_COLUMNS} for row in rows]
    by_split: dict[str, list[dict]] = {}
    for row in rows:
        by_split.setdefault(row["split"], []).append(row)
    dd = datasets.DatasetDict({split: datasets.Dataset.from_list(rows, features=features)
                               for split, rows in sorted(by_split.items())})
    if not dd:
        dd["train"] = datasets.Dataset.from_dict({k: [] for k in features}, features=features)
    out = dest / "messages"
    dd.save_to_disk(str(out))
    return [out]


def export(
    store: Store,
    run_id: str,
    fmt: int,
    destination: str,
    flt: collector_pb2.ExportFilter,
    transition_format: int = common_pb2.OBSERVATION_FORMAT_UNSPECIFIED,
    blobs: BlobStore | None = None,
    inline_screenshots: bool = False,
) -> ExportResult:
    """Export (synchronously, on the store thread) and say what was written."""
    check_request(fmt, destination, flt, transition_format)
    if fmt == collector_pb2.EXPORT_FORMAT_TRANSITIONS:
        transition_format = transition_format or common_pb2.OBSERVATION_FORMAT_AXTREE
    t0 = time.perf_counter()
    dest = make_destination(destination)
    episodes, steps = read_tables(store, run_id, flt)
    if fmt == collector_pb2.EXPORT_FORMAT_JSONL:
        paths = write_jsonl(episodes, steps, dest, blobs if inline_screenshots else None)
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
    elif fmt == collector_pb2.EXPORT_FORMAT_MESSAGES:
        paths = write_messages(episodes, steps, dest, blobs)
        n_steps = steps.num_rows
    else:
        table = transitions_table(episodes, steps, transition_format)
        if flt.drop_repeated and table.num_rows:
            table = table.filter(pc.invert(pc.equal(table["state"], table["next_state"])))
        paths = write_transitions(table, dest)
        n_steps = table.num_rows
    return ExportResult([str(p) for p in paths], episodes.num_rows, n_steps, time.perf_counter() - t0)

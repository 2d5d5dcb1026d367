"""What every task-file format shares: the error that lists every problem, folder walking, difficulty."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from webenv.v1 import common_pb2 as pb


def difficulty_of(n_facts: int) -> int:
    """A rubric task's difficulty by its number of facts (the synthetic catalog's rule too)."""
    if n_facts <= 3:
        return pb.DIFFICULTY_EASY
    if n_facts <= 6:
        return pb.DIFFICULTY_MEDIUM
    return pb.DIFFICULTY_HARD


class TaskFileError(ValueError):
    """Every problem found in one or more task files, one line each (``errors``)."""

    def __init__(self, errors: list[ValueError]) -> None:
        super().__init__("\n".join(str(e) for e in errors))
        self.errors = errors


def load_folders(dirs: list[str | Path], pattern: str, load_file: Callable[[Path], list[pb.Task]]) -> list[pb.Task]:
    """Every task of the files matching ``pattern`` under ``dirs``; one TaskFileError with every problem."""
    out: list[pb.Task] = []
    problems: list[ValueError] = []
    for d in dirs:
        if not Path(d).is_dir():
            problems.append(ValueError(f"{d}: no such folder"))
            continue
        for p in sorted(Path(d).rglob(pattern)):
            try:
                out.extend(load_file(p))
            except TaskFileError as exc:
                problems.extend(exc.errors)
    if problems:
        raise TaskFileError(problems)
    return out


def json_objects(path: Path, error: type[ValueError] = ValueError) -> tuple[list[tuple[str, str, Any]], list[ValueError]]:
    """(where, index, object) of every task object in a JSON or JSON Lines file (index: in the list, or the line of
    JSON Lines; a file may be one object, a list, or ``{"tasks": [...]}``), and the problems (``error``) of lines
    that are not JSON."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        return [], [error(f"{path}: cannot be read: {exc}")]
    try:
        data = json.loads(text)
    except json.JSONDecodeError:
        out, problems = [], []
        for i, line in enumerate(text.splitlines(), 1):
            if line.strip():
                try:
                    out.append((f"{path}:{i}", str(i), json.loads(line)))
                except json.JSONDecodeError as exc:
                    problems.append(error(f"{path}:{i}: not JSON: {exc.msg}"))
        return out, problems
    if isinstance(data, dict) and "tasks" in data:
        data = data["tasks"]
    items = data if isinstance(data, list) else [data]
    return [(f"{path}[{i}]", str(i), obj) for i, obj in enumerate(items)], []


def convert_each(objects: list[tuple[str, str, Any]], problems: list[ValueError],
                 convert_one: Callable[[str, str, Any], pb.Task]) -> list[pb.Task]:
    """The task of every (where, index, object) by ``convert_one``, which raises a ValueError for one problem or a
    TaskFileError for several; raises one TaskFileError with ``problems`` (the file's) and every object's."""
    out: list[pb.Task] = []
    for where, index, obj in objects:
        try:
            out.append(convert_one(where, index, obj))
        except TaskFileError as exc:
            problems.extend(exc.errors)
        except ValueError as exc:
            problems.append(exc)
    if problems:
        raise TaskFileError(problems)
    return out

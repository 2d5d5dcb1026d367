"""What every task-file format shares: the error that lists every problem, folder walking, difficulty."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

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

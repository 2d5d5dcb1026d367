"""One's own task files, whatever their format: YAML (the seed's format) or rubric JSON / JSON Lines.

Loaders report every problem they find, one line each (``file:line: field: problem``), in one
:class:`TaskFileError`, so a folder with three bad tasks is fixed in one round instead of three. Used by the
service at start-up (``WEBENV_SITES_YAML_DIRS`` / ``WEBENV_SITES_RUBRIC_DIRS``: exit code 2 with the lines) and
by ``webenv run --task-file`` (tasks sent inline with the run, no service restarted).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from webenv.v1 import common_pb2 as pb

YAML_SUFFIXES = (".yaml", ".yml")
JSON_SUFFIXES = (".json", ".jsonl")


class TaskFileError(ValueError):
    """Every problem found in one or more task files, one line each (``errors``)."""

    def __init__(self, errors: list[ValueError]) -> None:
        super().__init__("\n".join(str(e) for e in errors))
        self.errors = errors


def load(path: str | Path) -> list[pb.Task]:
    """The tasks of one file, by its suffix (.yaml/.yml or .json/.jsonl); raises TaskFileError."""
    from webenv.sites import rubricjson, yamltasks

    path = Path(path)
    if path.suffix in YAML_SUFFIXES:
        return yamltasks.load_file(path)
    if path.suffix in JSON_SUFFIXES:
        return rubricjson.load_file(path)
    raise TaskFileError([ValueError(f"{path}: not a task file (expected {', '.join(YAML_SUFFIXES + JSON_SUFFIXES)})")])


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

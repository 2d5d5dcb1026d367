"""One's own task files, whatever their format: YAML (the seed's format) or rubric JSON / JSON Lines.

Loaders report every problem they find, one line each (``file:line: field: problem``), in one
:class:`TaskFileError`, so a folder with three bad tasks is fixed in one round instead of three. Used by the
service at start-up (``WEBENV_SITES_YAML_DIRS`` / ``WEBENV_SITES_RUBRIC_DIRS``: exit code 2 with the lines) and
by ``webenv run --task-file`` (tasks sent inline with the run, no service restarted): in the sdk, so a client
reads task files without the sites service's package.
"""

from __future__ import annotations

from pathlib import Path

from webenv.taskfiles import rubricjson, seedyaml
from webenv.taskfiles.common import TaskFileError, difficulty_of, load_folders
from webenv.v1 import common_pb2 as pb

__all__ = ["TaskFileError", "difficulty_of", "load", "load_folders", "rubricjson", "seedyaml"]

YAML_SUFFIXES = (".yaml", ".yml")
JSON_SUFFIXES = (".json", ".jsonl")


def load(path: str | Path) -> list[pb.Task]:
    """The tasks of one file, by its suffix (.yaml/.yml or .json/.jsonl); raises TaskFileError."""
    path = Path(path)
    if path.suffix in YAML_SUFFIXES:
        return seedyaml.load_file(path)
    if path.suffix in JSON_SUFFIXES:
        return rubricjson.load_file(path)
    raise TaskFileError([ValueError(f"{path}: not a task file (expected {', '.join(YAML_SUFFIXES + JSON_SUFFIXES)})")])

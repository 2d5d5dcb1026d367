"""One's own task files, whatever their format: YAML (the seed's format), rubric JSON / JSON Lines, or a
published benchmark's own file (WebArena, VisualWebArena, WebArena-Verified: :mod:`webarena`; WebVoyager,
Online-Mind2Web, AssistantBench: :mod:`openweb`), told apart by the fields of the file's first task.

Loaders report every problem they find, one line each (``file:line: field: problem``), in one
:class:`TaskFileError`, so a folder with three bad tasks is fixed in one round instead of three. Used by the
service at start-up (``WEBENV_SITES_YAML_DIRS`` / ``WEBENV_SITES_RUBRIC_DIRS``: exit code 2 with the lines) and
by ``webenv run --task-file`` (tasks sent inline with the run, no service restarted): in the sdk, so a client
reads task files without the sites service's package.
"""

from __future__ import annotations

from pathlib import Path

from webenv.taskfiles import openweb, rubricjson, seedyaml, webarena
from webenv.taskfiles.common import TaskFileError, difficulty_of, json_objects, load_folders
from webenv.v1 import common_pb2 as pb

__all__ = ["TaskFileError", "difficulty_of", "format_of", "load", "load_folders", "openweb", "rubricjson", "seedyaml",
           "webarena"]

YAML_SUFFIXES = (".yaml", ".yml")
JSON_SUFFIXES = (".json", ".jsonl")


def load(path: str | Path) -> list[pb.Task]:
    """The tasks of one file, by its suffix (.yaml/.yml or .json/.jsonl) and, for JSON, its fields; raises
    TaskFileError."""
    path = Path(path)
    if path.suffix in YAML_SUFFIXES:
        return seedyaml.load_file(path)
    if path.suffix in JSON_SUFFIXES:
        fmt = format_of(path)
        if fmt == "webarena":
            return webarena.load_file(path)
        if fmt == "openweb":
            return openweb.load_file(path)
        return rubricjson.load_file(path)
    raise TaskFileError([ValueError(f"{path}: not a task file (expected {', '.join(YAML_SUFFIXES + JSON_SUFFIXES)})")])


def format_of(path: Path) -> str:
    """"webarena" (WebArena, VWA, WebArena-Verified), "openweb" (WebVoyager, Online-Mind2Web, AssistantBench) or
    "rubric" for a JSON / JSON Lines file, by the fields of its first task."""
    objects, _ = json_objects(path)
    first = objects[0][2] if objects else None
    if webarena.is_webarena(first) or webarena.is_verified(first):
        return "webarena"
    if openweb.format_of(first):
        return "openweb"
    return "rubric"

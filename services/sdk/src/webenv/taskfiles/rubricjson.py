"""WebGym-style rubric JSON tasks: an instruction, a website and fact groups.

A file holds one task object, a list of them, `{"tasks": [...]}`, or JSON Lines. A fact is either a
string (judged by an LLM from keypoint evidence, as WebGym does for the real web) or an object with a
`criterion` in the contract's JSON form (`{"answer": {"mode": "MATCH_MODE_CONTAINS", "expected": "42"}}`).
A task may carry its reference solution, `"oracle": ["click(\"a[href='hours.html']\")", "answer(\"9 a.m.\")"]`, in
the action grammar (`webenv.actions`): it becomes Task.oracle, which only the oracle policy is shown, so the oracle
can prove the task solvable and give the ceiling of a suite of one's own tasks.
Every task is TASK_SOURCE_RUBRIC_JSON whatever its host (the synthetic web, one's own local or intranet sites, the
public web), selectable by the file it came from (``metadata["rubric_file"]``, TaskFilter.task_files).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from google.protobuf import json_format
from pydantic import BaseModel, ConfigDict, Field, ValidationError, ValidationInfo, field_validator
from webenv.actions import ActionParseError, parse_action
from webenv.envcontract import web_url_problem
from webenv.splits import SYNTHETIC_DOMAIN as DOMAIN
from webenv.splits import split_of
from webenv.taskfiles.common import TaskFileError, convert_each, difficulty_of, json_objects, load_folders
from webenv.v1 import common_pb2 as pb

KINDS = {"information": pb.TASK_KIND_INFORMATION, "navigation": pb.TASK_KIND_NAVIGATION,
         "transaction": pb.TASK_KIND_TRANSACTION, "open_ended": pb.TASK_KIND_OPEN_ENDED}


class RubricError(ValueError):
    """A malformed rubric JSON task; the message names the file, the task and the field."""


class FactIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    description: str = Field(min_length=1)
    criterion: dict[str, Any] | None = None


class GroupIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    group_id: str = ""
    description: str = ""
    facts: list[FactIn | str] = Field(min_length=1)
    optional: bool = False


class TaskIn(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)
    task_id: str = Field(min_length=1, pattern=r"^[A-Za-z0-9._/-]+$")
    website: str = Field(alias="start_url")
    task: str = Field(alias="instruction", min_length=1)
    fact_groups: list[GroupIn] = Field(min_length=1)
    kind: str = "information"
    category: str = ""
    max_steps: int = Field(0, ge=0)
    timeout_seconds: float = Field(0.0, ge=0)
    oracle: list[str] = Field(default_factory=list, max_length=200)

    @field_validator("website")
    @classmethod
    def _url(cls, v: str, info: ValidationInfo) -> str:
        problem = web_url_problem(v)  # the farm's rule for start URLs, so a bad one fails here, not per episode
        if problem:
            raise ValueError(f"task {info.data.get('task_id', '?')!r}: start URL {v[:200]!r} {problem}")
        return v.strip()

    @field_validator("kind")
    @classmethod
    def _kind(cls, v: str) -> str:
        if v not in KINDS:
            raise ValueError(f"must be one of {', '.join(KINDS)}")
        return v


def convert(t: TaskIn, where: str, path: Path | None = None, index: str = "") -> pb.Task:
    """The contract's Task of one rubric JSON task (``where``: its place in the file, for errors). Every such task is
    TASK_SOURCE_RUBRIC_JSON, ``rubric/<task_id>``, whatever its host: a team's own local or intranet sites are not
    the real web; ``metadata["rubric_file"]`` (the file) and ``["rubric_index"]`` keep where it came from, and
    TaskFilter.task_files selects by the file."""
    host = urlsplit(t.website).hostname or ""
    synthetic = host.endswith("." + DOMAIN)
    task_id = "rubric/" + t.task_id
    rubric = pb.Rubric(rubric_id=task_id, version=1)
    n = 0
    for gi, g in enumerate(t.fact_groups):
        gid = g.group_id or f"g{gi}"
        fg = rubric.groups.add(group_id=gid, description=g.description, optional=g.optional)
        for fi, f in enumerate(g.facts):
            fact = FactIn(description=f) if isinstance(f, str) else f
            crit = pb.Criterion(llm=pb.LlmCriterion())
            if fact.criterion is not None:
                try:
                    crit = json_format.ParseDict(fact.criterion, pb.Criterion())
                except json_format.ParseError as exc:
                    raise RubricError(f"{where}: fact_groups[{gi}].facts[{fi}].criterion: {exc}") from None
            fg.facts.add(fact_id=f"{gid}.{fi}", description=fact.description, criterion=crit)
            n += 1
    oracle = []
    for i, text in enumerate(t.oracle):
        try:
            oracle.append(parse_action(text))
        except ActionParseError as exc:
            raise RubricError(f"{where}: oracle[{i}]: {str(exc)[:200]}") from None
    family = host.split("-", 1)[0] if synthetic and "-" in host else ""
    subtasks = [pb.Subtask(subtask_id=f"{task_id}/sub-{i}", instruction=g.description, group_ids=[g.group_id or f"g{i}"])
                for i, g in enumerate(t.fact_groups) if g.description and len(t.fact_groups) > 1]
    return pb.Task(
        task_id=task_id, source=pb.TASK_SOURCE_RUBRIC_JSON, kind=KINDS[t.kind], instruction=t.task, start_url=t.website, site=host,
        family=family, split=split_of(host), difficulty=difficulty_of(n), rubric=rubric, subtasks=subtasks,
        oracle=oracle, max_steps=t.max_steps, timeout_seconds=t.timeout_seconds, category=t.category, metadata={"rubric_file": str(path) if path else where, "rubric_index": index},
    )


def load_file(path: str | Path) -> list[pb.Task]:
    """Every task of a file; raises TaskFileError with every problem of every task, one line each."""
    path = Path(path)
    objects, problems = json_objects(path, RubricError)

    def one(where: str, index: str, obj: Any) -> pb.Task:
        try:
            t = TaskIn.model_validate(obj)
        except ValidationError as exc:
            raise TaskFileError([RubricError(f"{where}: {'.'.join(str(x) for x in e['loc']) or 'task'}: {e['msg']}")
                                 for e in exc.errors()]) from None
        return convert(t, where, path, index)

    return convert_each(objects, problems, one)


def load_dirs(dirs: list[str | Path]) -> list[pb.Task]:
    """Every task of every JSON / JSONL file under ``dirs``; TaskFileError lists the problems of all files at once."""
    return load_folders(dirs, "*.json*", load_file)

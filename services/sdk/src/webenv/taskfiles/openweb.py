"""Open-web benchmarks in their authors' formats: WebVoyager, Online-Mind2Web and AssistantBench.

- WebVoyager (``data/WebVoyager_data.jsonl``): ``web_name``, ``id``, ``ques``, ``web``.
- Online-Mind2Web (the Hugging Face dataset's JSON): ``task_id``, ``website``, ``confirmed_task`` (or
  ``task_description``), ``reference_length``, ``level`` (or ``difficulty``).
- AssistantBench (``assistant_bench_v1.0_dev.jsonl``): ``id``, ``set``, ``task``, ``answer``, ``gold_url``,
  ``explanation``, ``metadata``, ``difficulty``. It names no start page: the session opens ``start_url`` when the
  object has one (our addition, for one's own sites), else https://www.google.com/.

WebVoyager and Online-Mind2Web are graded by a judge model (GPT-4V auto-evaluation, WebJudge); here one LLM-judged
fact carries the task, graded by the judge's LLM backend (undecidable without one, and the verdict says so).
AssistantBench's gold answer is graded deterministically by the judge's ``assistantbench.answer`` evaluator.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from webenv.envcontract import web_url_problem
from webenv.taskfiles.common import convert_each, json_objects
from webenv.v1 import common_pb2 as pb

ASSISTANTBENCH_START = "https://www.google.com/"
_LEVELS = {"easy": pb.DIFFICULTY_EASY, "medium": pb.DIFFICULTY_MEDIUM, "hard": pb.DIFFICULTY_HARD}


class OpenWebError(ValueError):
    """A malformed open-web benchmark task; the message names the file, the task and the field."""


class _Loose(BaseModel):
    model_config = ConfigDict(extra="allow")


class WebVoyagerTask(_Loose):
    web_name: str = ""
    id: str = Field(min_length=1)
    ques: str = Field(min_length=1)
    web: str


class Mind2WebTask(_Loose):
    task_id: str = Field(min_length=1)
    website: str
    confirmed_task: str = ""
    task_description: str = ""
    reference_length: int | None = None
    level: str = ""
    difficulty: str = ""  # some copies name the level so


class AssistantBenchTask(_Loose):
    id: str = Field(min_length=1)
    task: str = Field(min_length=1)
    answer: Any = None
    gold_url: str = ""
    set: str = ""
    difficulty: str = ""
    start_url: str = ""


def format_of(obj: Any) -> str:
    """"webvoyager", "online-mind2web", "assistantbench", or "" when ``obj`` is none of them."""
    if not isinstance(obj, dict):
        return ""
    if {"ques", "web"} <= obj.keys():
        return "webvoyager"
    if "website" in obj and ("confirmed_task" in obj or "task_description" in obj):
        return "online-mind2web"
    if {"id", "task"} <= obj.keys() and ("gold_url" in obj or "answer" in obj) and "fact_groups" not in obj:
        return "assistantbench"
    return ""


def _judged(rubric: pb.Rubric, bench: str, task: str, guidance: str) -> None:
    g = rubric.groups.add(group_id="eval", description=task)
    g.facts.add(fact_id=f"{bench}.judge", description=f"The agent accomplished the task: {task[:300]}",
                criterion=pb.Criterion(llm=pb.LlmCriterion(guidance=guidance)))


def convert(obj: Any, fmt: str, where: str, path: Path) -> pb.Task:
    models = {"webvoyager": WebVoyagerTask, "online-mind2web": Mind2WebTask, "assistantbench": AssistantBenchTask}
    try:
        t = models[fmt].model_validate(obj)
    except ValidationError as exc:
        e = exc.errors()[0]
        raise OpenWebError(f"{where}: {'.'.join(str(x) for x in e['loc']) or 'task'}: {e['msg']}") from None
    difficulty = pb.DIFFICULTY_UNSPECIFIED
    if isinstance(t, WebVoyagerTask):
        tid, instruction, start, url_field = t.id, t.ques, t.web, "web"
        rubric = pb.Rubric(rubric_id=f"webvoyager/{tid}", version=1)
        _judged(rubric, "webvoyager", instruction, (
            "WebVoyager auto-evaluation: the task is accomplished only if every part of it is done on the website and "
            "the final answer (if one is asked for) is correct and supported by the pages the agent saw."))
        kind = pb.TASK_KIND_INFORMATION
    elif isinstance(t, Mind2WebTask):
        instruction = t.confirmed_task or t.task_description
        if not instruction:
            raise OpenWebError(f"{where}: confirmed_task: required (or task_description)")
        tid, start, url_field = t.task_id, t.website, "website"
        rubric = pb.Rubric(rubric_id=f"online-mind2web/{tid}", version=1)
        _judged(rubric, "online-mind2web", instruction, (
            "Online-Mind2Web WebJudge: identify the task's key points (every explicit requirement and filter), then "
            "decide from the pages the agent saw whether each was met; the task holds only if all were. Cite the "
            "evidence."))
        kind = pb.TASK_KIND_TRANSACTION
        difficulty = _LEVELS.get((t.level or t.difficulty).lower(), pb.DIFFICULTY_UNSPECIFIED)
    else:
        assert isinstance(t, AssistantBenchTask)
        tid, instruction, url_field = t.id, t.task, "start_url"
        start = t.start_url or ASSISTANTBENCH_START
        rubric = pb.Rubric(rubric_id=f"assistantbench/{tid}", version=1)
        g = rubric.groups.add(group_id="eval", description=instruction)
        if t.answer is None or t.answer == "":
            raise OpenWebError(f"{where}: answer: required (the gold answer AssistantBench grades against)")
        g.facts.add(fact_id="assistantbench.answer", description=f"The answer matches the gold answer {str(t.answer)[:200]}",
                    criterion=pb.Criterion(benchmark=pb.BenchmarkCriterion(
                        evaluator="assistantbench.answer", config_json=json.dumps({"answer": t.answer}, ensure_ascii=False))))
        kind = pb.TASK_KIND_INFORMATION
        difficulty = _LEVELS.get(t.difficulty.lower(), pb.DIFFICULTY_UNSPECIFIED)
    problem = web_url_problem(start)
    if problem:
        raise OpenWebError(f"{where}: {url_field}: start URL {start[:200]!r} {problem}")
    meta = {"benchmark": fmt, "benchmark_file": str(path), "benchmark_task_id": tid}
    if isinstance(t, WebVoyagerTask) and t.web_name:
        meta["web_name"] = t.web_name
    if isinstance(t, Mind2WebTask) and t.reference_length is not None:
        meta["reference_length"] = str(t.reference_length)
    if isinstance(t, AssistantBenchTask) and t.gold_url:
        meta["gold_url"] = t.gold_url
    return pb.Task(task_id=f"{fmt}/{tid}", source=pb.TASK_SOURCE_BENCHMARK, kind=kind, instruction=instruction,
                   start_url=start.strip(), site=urlsplit(start.strip()).hostname or "", difficulty=difficulty,
                   rubric=rubric, metadata=meta)


def load_file(path: str | Path) -> list[pb.Task]:
    """Every task of a WebVoyager, Online-Mind2Web or AssistantBench file (JSON or JSON Lines)."""
    path = Path(path)
    objects, problems = json_objects(path, OpenWebError)

    def one(where: str, index: str, obj: Any) -> pb.Task:
        fmt = format_of(obj)
        if not fmt:
            raise OpenWebError(f"{where}: not a WebVoyager, Online-Mind2Web or AssistantBench task")
        return convert(obj, fmt, where, path)

    return convert_each(objects, problems, one)

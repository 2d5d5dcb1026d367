"""The task catalog as a Hugging Face dataset (``datasets.Dataset``), one row per catalog task.

    from webenv.compat.hf import catalog_dataset
    ds = catalog_dataset("localhost:50055", task_pb2.TaskFilter(sources=[common_pb2.TASK_SOURCE_MINIWOB]))

Each row is a ready ``train_dataset`` row for TRL's ``GRPOTrainer(environment_factory=WebTaskEnv)``: ``prompt`` is
TRL's conversational format (one user turn; `webenv.compat.trl.WebTaskEnv.reset` appends the task's instruction
and first page to it), ``task_id`` and ``seed`` are what ``reset`` reads; beside them the catalog's fields as plain
columns (``source``, ``kind``, ``difficulty``, ``split`` as lower-case words, ``rubric`` and ``oracle`` as JSON), and
the whole ``webenv.v1.Task`` serialized (``task_pb``) so nothing is lost. ``webenv tasks --export DIR`` saves it.

Every task format exports the same way: catalog tasks (synthetic, MiniWoB, seed YAML, rubric JSON) and a task file's
own (``catalog_dataset(load(path))``, ``webenv tasks --task-file FILE --export DIR``: WebArena, VisualWebArena,
WebArena-Verified, WebVoyager, Online-Mind2Web, AssistantBench), with ``template_id``, ``metadata`` (JSON: a
benchmark task's ``benchmark``, ``benchmark_task_id``, ``start_urls``, ``require_login``...) and ``environment``: the
task's source, or its benchmark (:func:`environment_of`), the name TRL's dict ``environment_factory`` routes the row
by (`webenv.compat.trl.environment_factories`). ``WebTaskEnv.reset`` opens the row's ``task_pb``, so a task file's
tasks need not be in the catalog.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterable

import grpc
from google.protobuf import json_format
from webenv import errors
from webenv.client import make_channel
from webenv.v1 import common_pb2 as pb
from webenv.v1 import task_pb2, task_pb2_grpc

__all__ = ["PROMPT", "catalog_dataset", "environment_of", "list_tasks", "task_row"]

#: The user turn each row's prompt starts with (the environment's reset appends the task and the page).
PROMPT = "Do the web task below with the tools; call `answer` when done (with the answer, if the task asks one).\n\n"


def _word(enum, value: int, prefix: str) -> str:
    return enum.Name(value).removeprefix(prefix).lower() if value else ""


def environment_of(task: pb.Task) -> str:
    """The name of the environment a task's rollouts run in: its benchmark (``webarena``, ``webarena-verified``,
    ``webvoyager``, ...) for a benchmark's task, else its source (``synthetic``, ``miniwob``, ``yaml``,
    ``rubric_json``)."""
    return task.metadata.get("benchmark") or _word(pb.TaskSource, task.source, "TASK_SOURCE_")


def task_row(task: pb.Task, prompt: str = PROMPT) -> dict:
    """One catalog task as a dataset row (plain Python values)."""
    return {
        "prompt": [{"role": "user", "content": prompt}],
        "task_id": task.task_id,
        "environment": environment_of(task),
        "seed": int(task.seed),
        "instruction": task.instruction,
        "start_url": task.start_url,
        "site": task.site,
        "family": task.family,
        "category": task.category,
        "source": _word(pb.TaskSource, task.source, "TASK_SOURCE_"),
        "kind": _word(pb.TaskKind, task.kind, "TASK_KIND_"),
        "difficulty": _word(pb.Difficulty, task.difficulty, "DIFFICULTY_"),
        "split": _word(pb.Split, task.split, "SPLIT_"),
        "max_steps": int(task.max_steps),
        "rubric": json.dumps(json_format.MessageToDict(task.rubric), sort_keys=True),
        "oracle": json.dumps([json_format.MessageToDict(a) for a in task.oracle]),
        "template_id": task.template_id,
        "metadata": json.dumps(dict(task.metadata), sort_keys=True),
        "task_pb": task.SerializeToString(),
    }


def list_tasks(sites: str, flt: task_pb2.TaskFilter | None = None, *, limit: int = 0,
               timeout: float = 60.0) -> list[pb.Task]:
    """Every catalog task matching ``flt`` (all pages; at most ``limit`` when > 0), from the sites' TaskService, over
    the sdk's channel (the deployment's bearer token and TLS, as every service's calls)."""

    async def pages() -> list[pb.Task]:
        out: list[pb.Task] = []
        token = ""
        async with make_channel(sites, timeout=timeout) as ch:
            stub = task_pb2_grpc.TaskServiceStub(ch)
            while True:
                try:
                    resp = await stub.ListTasks(task_pb2.ListTasksRequest(filter=flt, page_size=1000,
                                                                          page_token=token))
                except grpc.RpcError as exc:
                    raise errors.from_rpc_error(exc) from None
                out.extend(resp.tasks)
                token = resp.next_page_token
                if not token or (limit and len(out) >= limit):
                    return out[:limit] if limit else out

    return asyncio.run(pages())


def catalog_dataset(sites: str | Iterable[pb.Task], flt: task_pb2.TaskFilter | None = None, *, limit: int = 0,
                    prompt: str = PROMPT):
    """The catalog (the sites service at ``sites``, or the given tasks) as a ``datasets.Dataset``."""
    import datasets  # imported lazily: slow to import, and only dataset users need it

    tasks = list_tasks(sites, flt, limit=limit) if isinstance(sites, str) else sites
    rows = [task_row(t, prompt) for t in tasks]
    features = datasets.Features({
        "prompt": [{"role": datasets.Value("string"), "content": datasets.Value("string")}],
        **{k: datasets.Value("string") for k in ("task_id", "environment", "instruction", "start_url", "site", "family",
                                                 "category", "source", "kind", "difficulty", "split", "rubric", "oracle",
                                                 "template_id", "metadata")},
        "seed": datasets.Value("int64"), "max_steps": datasets.Value("int32"), "task_pb": datasets.Value("binary"),
    })
    return datasets.Dataset.from_list(rows, features=features)

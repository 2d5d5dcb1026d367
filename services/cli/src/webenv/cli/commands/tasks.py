"""`webenv tasks`: browse the task catalog (or one's own task file), or save it as a Hugging Face dataset."""

from __future__ import annotations

from pathlib import Path

import grpc
import typer
from rich import box
from rich.table import Table
from webenv import errors
from webenv.cli.commands.common import (
    DIFFICULTIES,
    KINDS,
    SITES,
    SOURCES,
    SPLITS,
    address,
    choice,
    choices,
    console,
    fail,
    print_json,
    task_files,
)
from webenv.client import make_sync_channel
from webenv.v1 import common_pb2, task_pb2, task_pb2_grpc


def task_filter(split, family, site, task, from_file, difficulty, source, kind) -> task_pb2.TaskFilter:
    """The TaskFilter `webenv tasks` flags select (listing and --export alike)."""
    flt = task_pb2.TaskFilter(families=family or [], split=choice(split, SPLITS, "--split"), sites=site or [],
                              task_ids=task or [], task_files=from_file or [])
    flt.difficulties.extend(choices(difficulty, DIFFICULTIES, "--difficulty"))
    flt.sources.extend(choices(source, SOURCES, "--source"))
    flt.kinds.extend(choices(kind, KINDS, "--kind"))
    return flt


def _export_tasks(dest: Path, found, sites, split, family, site, task, from_file, difficulty, source, kind) -> None:
    from webenv.compat.hf import catalog_dataset

    flt = task_filter(split, family, site, task, from_file, difficulty, source, kind)
    try:
        ds = catalog_dataset(found if found is not None else address("sites", sites), flt)
    except errors.WebenvError as exc:
        console.print(f"[red]error[/red] {exc.code.name}: {exc.message}")
        raise typer.Exit(1) from None
    ds.save_to_disk(str(dest))
    console.print(f"{ds.num_rows} tasks saved as a Hugging Face dataset in {dest}")


def tasks(
    difficulty: list[str] = typer.Option(None, help="easy, medium, hard (repeatable)."),
    split: str = typer.Option(None, help="train, validation or test."),
    family: list[str] = typer.Option(None, help="Site family (repeatable)."),
    source: list[str] = typer.Option(None, help="synthetic, miniwob, yaml, rubric-json or benchmark (repeatable)."),
    from_file: list[str] = typer.Option(None, help="Catalog tasks read from this task file, by name (real_web.json) "
                                                   "or path (repeatable)."),
    kind: list[str] = typer.Option(None, help="information, navigation, transaction or open-ended (repeatable)."),
    site: list[str] = typer.Option(None, help="Site host (repeatable)."),
    task: list[str] = typer.Option(None, "--task", help="Task id (repeatable)."),
    task_file: Path = typer.Option(None, help="Check one's own task file (YAML, rubric JSON, or a benchmark's own: WebArena, VisualWebArena, WebArena-Verified, WebVoyager, Online-Mind2Web, AssistantBench) and list its tasks."),
    limit: int = typer.Option(20),
    sites: str = typer.Option(SITES, help="TaskService (sites) address."),
    json_out: bool = typer.Option(False, "--json", help="Print the tasks as JSON (whole Task messages)."),
    export_to: Path = typer.Option(None, "--export", help="Save every matching task (not only --limit) as a Hugging "
                                                         "Face dataset in this folder (save_to_disk): one row per "
                                                         "task, a ready GRPOTrainer train_dataset."),
) -> None:
    """List tasks of the catalog (or of a task file)."""
    if export_to is not None:
        _export_tasks(export_to, task_files([task_file]) if task_file is not None else None, sites, split, family,
                      site, task, from_file, difficulty, source, kind)
        return
    if task_file is not None:
        found = task_files([task_file])
        total = len(found)
    else:
        flt = task_filter(split, family, site, task, from_file, difficulty, source, kind)
        try:
            resp = task_pb2_grpc.TaskServiceStub(make_sync_channel(address("sites", sites))).ListTasks(
                task_pb2.ListTasksRequest(filter=flt, page_size=limit), timeout=30)
        except grpc.RpcError as exc:
            raise fail(exc) from None
        found, total = list(resp.tasks), resp.total_size
    if json_out:
        print_json({"total_size": total, "tasks": found[:limit]})
        return
    names = {v: k for k, v in SOURCES.items()}
    kinds = {v: k for k, v in KINDS.items()}
    t = Table(title=f"{total} tasks match", box=box.SIMPLE_HEAD, pad_edge=False)
    t.add_column("task", no_wrap=True)
    for col in ("source", "kind", "difficulty", "split"):
        t.add_column(col, overflow="fold")
    t.add_column("instruction", overflow="fold", min_width=20)
    for x in found[:limit]:
        t.add_row(x.task_id, names.get(x.source, ""), kinds.get(x.kind, ""),
                  common_pb2.Difficulty.Name(x.difficulty).removeprefix("DIFFICULTY_").lower(),
                  common_pb2.Split.Name(x.split).removeprefix("SPLIT_").lower(), x.instruction[:80])
    console.print(t)

"""`webenv validate`: is every selected task's reward one researchers can trust? On the real farm and judge, each
task's oracle passes, non-answers fail (the floor), no observation leaks the answer, the oracle twice agrees,
pages stay on the task's hosts and sessions see nothing of each other (`webenv.cli.validation` says how each is
decided). A table by source, kind and builder, the failing tasks with why, a JSON report (``--report``); exit 1
when a task fails or errored, 2 for a bad task file."""

from __future__ import annotations

import asyncio
import json
import random
import time
from collections import defaultdict
from pathlib import Path

import typer
from rich import box
from rich.table import Table
from webenv import errors
from webenv.cli.commands.common import address, console, task_files
from webenv.cli.commands.tasks import task_filter
from webenv.cli.validation import CHECKS, TaskReport, Validator
from webenv.client import EnvironmentClient, make_channel
from webenv.compat.hf import list_tasks
from webenv.v1 import common_pb2 as pb
from webenv.v1 import judge_pb2_grpc

FAILING_SHOWN = 30


def stratified(tasks: list[pb.Task], per_group: int, seed: int) -> list[pb.Task]:
    """At most ``per_group`` tasks of each (source, kind, builder), drawn with ``seed``, in catalog order."""
    groups: dict[tuple, list[int]] = defaultdict(list)
    for i, t in enumerate(tasks):
        groups[(t.source, t.kind, t.builder)].append(i)
    rng = random.Random(seed)
    keep = sorted(i for idx in groups.values() for i in (idx if len(idx) <= per_group else rng.sample(idx, per_group)))
    return [tasks[i] for i in keep]


async def _validate_all(tasks: list[pb.Task], browser: str, judge: str, concurrency: int, seed: int,
                        random_steps: int) -> list[TaskReport]:
    gate = asyncio.Semaphore(concurrency)
    async with EnvironmentClient(browser, timeout=120) as env, make_channel(judge, timeout=120) as ch:
        validator = Validator(env, judge_pb2_grpc.JudgeServiceStub(ch), seed=seed, random_steps=random_steps)

        async def one(task: pb.Task) -> TaskReport:
            async with gate:
                report = await validator.validate(task)
            mark = {"passed": "[green]ok[/green]", "failed": "[red]FAIL[/red]", "errored": "[yellow]ERR[/yellow]"}
            console.print(f"{mark[report.status]} {task.task_id} ({report.seconds:.1f} s)", highlight=False)
            return report

        return list(await asyncio.gather(*(one(t) for t in tasks)))


def _table(reports: list[TaskReport]) -> Table:
    builders = any(r.builder for r in reports)
    t = Table(title="webenv validate", box=box.SIMPLE_HEAD, pad_edge=False,
              caption=f"{', '.join(CHECKS)}: tasks failing that check; oracle: passed / with a solution; floor: the "
                      "best score of a non-answer; random: passed / ran")
    for col in ("source", "kind", *(("builder",) if builders else ())):
        t.add_column(col, no_wrap=True)
    for col in ("tasks", "passed", "failed", "errored", *CHECKS, "oracle", "floor", "random"):
        t.add_column(col, justify="right", no_wrap=True)
    groups: dict[tuple, list[TaskReport]] = defaultdict(list)
    for r in reports:
        groups[(r.source, r.kind, *((r.builder or "-",) if builders else ()))].append(r)
    for key in sorted(groups):
        rs = groups[key]
        fails = [sum(r.checks.get(c) is not None and r.checks[c].ok is False for r in rs) for c in CHECKS]
        oracle = [r for r in rs if r.oracle_score is not None]
        ran = [r for r in rs if not r.error]
        t.add_row(*key, str(len(rs)), *(str(sum(r.status == s for r in rs)) for s in ("passed", "failed", "errored")),
                  *map(str, fails),
                  f"{sum(r.checks['oracle'].ok is True for r in oracle)}/{len(oracle)}" if oracle else "-",
                  f"{max(r.floor for r in ran):g}" if ran else "-",
                  f"{sum(bool(r.random_passed) for r in ran)}/{len(ran)}" if ran else "-")
    return t


def validate(
    source: list[str] = typer.Option(None, help="synthetic, miniwob, yaml, rubric-json or benchmark (repeatable)."),
    kind: list[str] = typer.Option(None, help="information, navigation, transaction or open-ended (repeatable)."),
    difficulty: list[str] = typer.Option(None, help="easy, medium, hard (repeatable)."),
    split: str = typer.Option(None, help="train, validation or test."),
    family: list[str] = typer.Option(None, help="Site family (repeatable)."),
    site: list[str] = typer.Option(None, help="Site host (repeatable)."),
    task: list[str] = typer.Option(None, "--task", help="Task id (repeatable)."),
    from_file: list[str] = typer.Option(None, help="Catalog tasks read from this task file, by name or path "
                                                   "(repeatable)."),
    task_file: list[Path] = typer.Option(None, help="Validate one's own task file (YAML, rubric JSON or a "
                                                     "benchmark's; repeatable) instead of the catalog."),
    sample: int = typer.Option(0, help="At most this many tasks of each source, kind and builder, drawn with "
                                       "--seed (0 = every selected task)."),
    limit: int = typer.Option(0, help="At most this many tasks in all (0 = no limit)."),
    concurrency: int = typer.Option(4, min=1, max=64, help="Tasks validated at once (each opens up to 4 sessions "
                                                           "at a time)."),
    seed: int = typer.Option(0, help="The sessions' seed and the sample's."),
    random_steps: int = typer.Option(5, min=0, max=50, help="Steps of the random policy before its empty answer."),
    report: Path = typer.Option(None, help="Write the JSON report (every task, every check) to this file."),
    browser: str = typer.Option(None, help="The browser farm (EnvironmentService) address."),
    sites: str = typer.Option(None, help="TaskService (sites) address."),
    judge: str = typer.Option(None, help="JudgeService address."),
) -> None:
    """Validate tasks on the real farm and judge: oracle, floor, leaks, determinism, egress, isolation."""
    if task_file:
        tasks = task_files(list(task_file))
    else:
        flt = task_filter(split, family, site, task, from_file, difficulty, source, kind)
        try:
            tasks = list_tasks(address("sites", sites), flt)
        except errors.WebenvError as exc:
            console.print(f"[red]error[/red] {exc.code.name}: {exc.message}", highlight=False)
            raise typer.Exit(1) from None
    selected = stratified(tasks, sample, seed) if sample else tasks
    selected = selected[:limit] if limit else selected
    if not selected:
        console.print("[red]error[/red] no task matches", highlight=False)
        raise typer.Exit(1)
    console.print(f"validating {len(selected)} of {len(tasks)} selected tasks, {concurrency} at a time", highlight=False)
    t0 = time.monotonic()
    try:
        reports = asyncio.run(_validate_all(selected, address("browser", browser), address("judge", judge),
                                            concurrency, seed, random_steps))
    except errors.WebenvError as exc:
        console.print(f"[red]error[/red] {exc.code.name}: {exc.message}", highlight=False)
        raise typer.Exit(1) from None
    wall = time.monotonic() - t0
    console.print(_table(reports))
    bad = [r for r in reports if r.status != "passed"]
    for r in bad[:FAILING_SHOWN]:
        why = r.error or "; ".join(r.failures())
        console.print(f"  {r.status} {r.task_id}: {why}", markup=False, highlight=False, soft_wrap=True)
    if len(bad) > FAILING_SHOWN:
        console.print(f"  ... and {len(bad) - FAILING_SHOWN} more (--report FILE lists every one)")
    rate = len(reports) / wall
    counts = {s: sum(r.status == s for r in reports) for s in ("passed", "failed", "errored")}
    console.print(f"{len(reports)} tasks in {wall:.0f} s ({rate * 60:.1f} tasks/min at --concurrency "
                  f"{concurrency}): {counts['passed']} passed, {counts['failed']} failed, {counts['errored']} errored",
                  highlight=False)
    if report is not None:
        report.write_text(json.dumps({
            "tasks_selected": len(tasks), "tasks_validated": len(reports), "wall_seconds": round(wall, 1),
            "tasks_per_minute": round(rate * 60, 2), "concurrency": concurrency, "seed": seed, **counts,
            "tasks": [r.as_dict() for r in reports]}, indent=1), encoding="utf-8")
        console.print(f"report: {report}", highlight=False)
    if bad:
        raise typer.Exit(1)


"""`webenv validate`: is every selected task's reward one researchers can trust? On the real farm and judge, each
task's oracle passes, non-answers fail (the floor), no observation leaks the answer, the oracle twice agrees,
pages stay on the task's hosts and sessions see nothing of each other (`webenv.cli.validation` says how each is
decided). A table by source, kind and builder, the failing tasks with why, a JSON report (``--report``), the table
in markdown (``--markdown``); exit 1 when a task fails or errored, 2 for a bad flag or task file.

``--catalog`` is the cheap mode for the whole catalog (what runs on every task and what on a sample: the module
docstring of `webenv.cli.validation`); ``--jsonl`` appends each task's report as it finishes, ``--resume`` skips
the tasks the file holds, ``--shard i/n`` validates one part, ``--from-jsonl`` merges files into the reports."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections import defaultdict
from pathlib import Path

import grpc
import typer
from rich import box
from rich.table import Table
from webenv import errors
from webenv.cli.commands.common import address, console, task_files
from webenv.cli.commands.tasks import task_filter
from webenv.cli.validation import (
    CHECKS,
    ORACLE_POLICY,
    TaskReport,
    Validator,
    append_jsonl,
    coverage,
    draw_sample,
    in_shard,
    read_jsonl,
    start_key,
    stratified,
)
from webenv.client import EnvironmentClient, make_channel
from webenv.compat.hf import list_tasks
from webenv.v1 import common_pb2 as pb
from webenv.v1 import judge_pb2_grpc, policy_pb2, policy_pb2_grpc

FAILING_SHOWN = 30
_MARK = {"passed": "[green]ok[/green]", "failed": "[red]FAIL[/red]", "errored": "[yellow]ERR[/yellow]"}
CAPTION = (f"{', '.join(CHECKS)}: tasks failing that check; oracle: passed / with a solution; floor: the best score "
           "of a non-answer; random: passed / ran")


def _shard(value: str | None) -> tuple[int, int] | None:
    if value is None:
        return None
    try:
        i, n = (int(x) for x in value.split("/"))
    except ValueError:
        i, n = -1, 0
    if not 0 <= i < n:
        raise typer.BadParameter(f"{value!r}: expected i/n with 0 <= i < n (e.g. 0/4)", param_hint="--shard")
    return i, n


async def _scripted(policy: policy_pb2_grpc.PolicyServiceStub) -> list[str]:
    """The tasks the policy service's ``oracle`` policy solves without a ``Task.oracle`` (its MiniWoB++ scripts)."""
    try:
        listed = await policy.ListPolicies(policy_pb2.ListPoliciesRequest(), timeout=30)
    except grpc.aio.AioRpcError as exc:
        raise errors.from_rpc_error(exc) from exc
    return [t for p in listed.policies if p.name == ORACLE_POLICY for t in p.solved_task_ids]


async def _validate_all(tasks: list[pb.Task], browser: str, judge: str, policy: str | None, concurrency: int,
                        seed: int, random_steps: int, catalog: bool, sample: set[str],
                        jsonl: Path | None) -> list[TaskReport]:
    gate = asyncio.Semaphore(concurrency)
    async with (EnvironmentClient(browser, timeout=120) as env, make_channel(judge, timeout=120) as ch,
                contextlib.AsyncExitStack() as more):
        stub = policy_pb2_grpc.PolicyServiceStub(await more.enter_async_context(make_channel(policy, timeout=120))) \
            if policy else None
        validator = Validator(env, judge_pb2_grpc.JudgeServiceStub(ch), seed=seed, random_steps=random_steps,
                              policy=stub, scripted=await _scripted(stub) if stub else ())
        if stub:
            console.print(f"the policy service's oracle solves {len(validator.scripted)} tasks "
                          f"({sum(validator.has_oracle(t) and not len(t.oracle) for t in tasks)} of these)",
                          highlight=False)

        async def one(task: pb.Task) -> TaskReport:
            async with gate:
                report = await validator.validate(task, catalog=catalog, sampled=task.task_id in sample)
            if jsonl is not None:
                append_jsonl(jsonl, report)
            console.print(f"{_MARK[report.status]} {task.task_id} ({report.seconds:.1f} s)", highlight=False)
            return report

        return list(await asyncio.gather(*(one(t) for t in tasks)))


def _rows(reports: list[TaskReport]) -> tuple[list[str], list[list[str]]]:
    """The table by source, kind (and builder): its header and rows (the terminal's table and ``--markdown``)."""
    builders = any(r.builder for r in reports)
    groups: dict[tuple, list[TaskReport]] = defaultdict(list)
    for r in reports:
        groups[(r.source, r.kind, *((r.builder or "-",) if builders else ()))].append(r)
    rows = []
    for key in sorted(groups):
        rs = groups[key]
        fails = [sum(r.checks.get(c) is not None and r.checks[c].ok is False for r in rs) for c in CHECKS]
        oracle = [r for r in rs if r.oracle_score is not None]
        ran = [r for r in rs if not r.error]
        rand = [r for r in ran if r.random_passed is not None]
        rows.append([*key, str(len(rs)), *(str(sum(r.status == s for r in rs)) for s in ("passed", "failed", "errored")),
                     *map(str, fails),
                     f"{sum(r.checks['oracle'].ok is True for r in oracle)}/{len(oracle)}" if oracle else "-",
                     f"{max(r.floor for r in ran):g}" if ran else "-",
                     f"{sum(bool(r.random_passed) for r in rand)}/{len(rand)}" if rand else "-"])
    header = ["source", "kind", *(("builder",) if builders else ()), "tasks", "passed", "failed", "errored", *CHECKS,
              "oracle", "floor", "random"]
    return header, rows


def _table(reports: list[TaskReport]) -> Table:
    header, rows = _rows(reports)
    t = Table(title="webenv validate", box=box.SIMPLE_HEAD, pad_edge=False, caption=CAPTION)
    for col in header:
        t.add_column(col, no_wrap=True, justify="left" if col in ("source", "kind", "builder") else "right")
    for row in rows:
        t.add_row(*row)
    return t


def markdown(reports: list[TaskReport]) -> str:
    """The same table in markdown, the checks' coverage beneath (bench/results/validate.md)."""
    header, rows = _rows(reports)
    lines = [f"| {' | '.join(header)} |", f"| {' | '.join('---' for _ in header)} |",
             *(f"| {' | '.join(row)} |" for row in rows), "", CAPTION + ".", "", _coverage_line(reports)]
    return "\n".join(lines) + "\n"


def _coverage_line(reports: list[TaskReport]) -> str:
    done = sum(not r.error for r in reports)
    parts = [f"{name} {c['ran']}" + (f" ({c['ran'] - c['applicable']} n/a)" if c["ran"] != c["applicable"] else "")
             for name, c in coverage(reports).items()]
    return f"checks run, of {done} tasks not errored: " + ", ".join(parts)


def _summary(reports: list[TaskReport]) -> dict[str, int]:
    return {s: sum(r.status == s for r in reports) for s in ("passed", "failed", "errored")}


def _exit_with(reports: list[TaskReport], report: Path | None, md: Path | None, extra: dict) -> None:
    """The table, the checks' coverage, the failing tasks, the reports asked for; exit 1 when a task failed or
    errored."""
    console.print(_table(reports))
    console.print(_coverage_line(reports), highlight=False, soft_wrap=True)
    bad = [r for r in reports if r.status != "passed"]
    for r in bad[:FAILING_SHOWN]:
        why = r.error or "; ".join(r.failures())
        console.print(f"  {r.status} {r.task_id}: {why}", markup=False, highlight=False, soft_wrap=True)
    if len(bad) > FAILING_SHOWN:
        console.print(f"  ... and {len(bad) - FAILING_SHOWN} more (--report FILE lists every one)")
    if report is not None:
        report.write_text(json.dumps({**extra, "tasks_validated": len(reports), **_summary(reports),
                                      "coverage": coverage(reports), "tasks": [r.as_dict() for r in reports]},
                                     indent=1), encoding="utf-8")
        console.print(f"report: {report}", highlight=False)
    if md is not None:
        md.write_text(markdown(reports), encoding="utf-8")
        console.print(f"markdown: {md}", highlight=False)
    if bad:
        raise typer.Exit(1)


def _merge(files: list[Path], report: Path | None, md: Path | None) -> None:
    missing = [str(p) for p in files if not p.is_file()]
    if missing:
        raise typer.BadParameter(f"no such file: {', '.join(missing)}", param_hint="--from-jsonl")
    reports, torn = read_jsonl(files)
    if not reports:
        raise typer.BadParameter(f"no task report in {', '.join(map(str, files))}", param_hint="--from-jsonl")
    span = max(r.finished_at for r in reports) - min(r.finished_at - r.seconds for r in reports)
    console.print(f"{len(reports)} tasks from {len(files)} file(s) ({torn} torn line(s) left out), finished over "
                  f"{span / 3600:.2f} h: " + ", ".join(f"{n} {s}" for s, n in _summary(reports).items()),
                  highlight=False)
    _exit_with(reports, report, md, {"files": [str(p) for p in files], "lines_left_out": torn,
                                     "span_seconds": round(span, 1),
                                     "task_seconds": round(sum(r.seconds for r in reports), 1)})


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
    sample: int = typer.Option(0, min=0, help="At most this many tasks of each source, kind and builder, drawn with "
                                              "--seed (0 = every selected task)."),
    limit: int = typer.Option(0, min=0, help="At most this many tasks in all (0 = no limit)."),
    catalog: bool = typer.Option(False, "--catalog", help="The cheap mode for the whole catalog: oracle, floor, leak "
                                 "and egress on every task (one oracle session; the non-answers graded on one "
                                 "start-state session per site and start URL), determinism, isolation and random on "
                                 "a sample (--check-sample, --check-rate)."),
    check_sample: int = typer.Option(10, min=0, help="--catalog: tasks of each source, kind and builder in the "
                                                     "sample (drawn with --seed)."),
    check_rate: float = typer.Option(0.01, min=0.0, max=1.0, help="--catalog: and this share of all the selected "
                                                                  "tasks besides."),
    shard: str = typer.Option(None, help="Only shard i of n of the selected tasks (i/n, 0 <= i < n; by task id)."),
    jsonl: Path = typer.Option(None, help="Append each task's report to this JSONL file as it finishes."),
    resume: bool = typer.Option(False, "--resume", help="Skip the tasks --jsonl already holds (errored ones run "
                                                        "again)."),
    from_jsonl: list[Path] = typer.Option(None, help="Run nothing: the table and reports of these JSONL files, "
                                                     "merged (repeatable; a task's last line wins)."),
    concurrency: int = typer.Option(4, min=1, max=64, help="Tasks validated at once (each opens up to 4 sessions "
                                                           "at a time)."),
    seed: int = typer.Option(0, help="The sessions' seed and the samples'."),
    random_steps: int = typer.Option(5, min=0, max=50, help="Steps of the random policy before its empty answer."),
    report: Path = typer.Option(None, help="Write the JSON report (every task, every check) to this file."),
    markdown_file: Path = typer.Option(None, "--markdown", help="Write the table (markdown) to this file."),
    browser: str = typer.Option(None, help="The browser farm (EnvironmentService) address."),
    sites: str = typer.Option(None, help="TaskService (sites) address."),
    judge: str = typer.Option(None, help="JudgeService address."),
    policy: str = typer.Option(None, help="A PolicyService address: its `oracle` policy's scripts are the reference "
                                          "solution of the MiniWoB++ tasks they solve (without it those have none)."),
) -> None:
    """Validate tasks on the real farm and judge: oracle, floor, leaks, determinism, egress, isolation."""
    if from_jsonl:
        _merge(list(from_jsonl), report, markdown_file)
        return
    parts = _shard(shard)
    if resume and jsonl is None:
        raise typer.BadParameter("needs --jsonl FILE (the tasks it holds are skipped)", param_hint="--resume")
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
    # the sample is drawn over the whole selection before the shard: every shard draws the same one
    checked = draw_sample(selected, check_sample, check_rate, seed) if catalog else {t.task_id for t in selected}
    if parts:
        selected = [t for t in selected if in_shard(t.task_id, parts)]
    done: set[str] = set()
    if resume and jsonl.is_file():
        done = {r.task_id for r in read_jsonl([jsonl])[0] if not r.error}
        selected = [t for t in selected if t.task_id not in done]
    if not selected and not done:
        console.print("[red]error[/red] no task matches", highlight=False)
        raise typer.Exit(1)
    if catalog:  # the tasks of one start state one after another: its session is opened once for them all
        groups: dict[tuple[str, ...], int] = {}
        selected.sort(key=lambda t: groups.setdefault(start_key(t), len(groups)))
    mode = (f"catalog mode, {sum(t.task_id in checked for t in selected)} of them in the sample" if catalog
            else "every check")
    console.print(f"validating {len(selected)} of {len(tasks)} selected tasks ({mode}; "
                  + (f"shard {parts[0]}/{parts[1]}; " if parts else "")
                  + (f"{len(done)} done before; " if resume else "") + f"{concurrency} at a time)", highlight=False)
    t0 = time.monotonic()
    try:
        reports = asyncio.run(_validate_all(selected, address("browser", browser), address("judge", judge),
                                            policy, concurrency, seed, random_steps, catalog, checked, jsonl))
    except errors.WebenvError as exc:
        console.print(f"[red]error[/red] {exc.code.name}: {exc.message}", highlight=False)
        raise typer.Exit(1) from None
    wall = time.monotonic() - t0
    rate = len(reports) / wall if wall else 0.0
    counts = _summary(reports)
    console.print(f"{len(reports)} tasks in {wall:.0f} s ({rate * 60:.1f} tasks/min at --concurrency "
                  f"{concurrency}): {counts['passed']} passed, {counts['failed']} failed, {counts['errored']} errored",
                  highlight=False)
    if resume:  # the table of the whole file: the tasks of this run and of those before
        reports = read_jsonl([jsonl])[0]
    _exit_with(reports, report, markdown_file, {
        "tasks_selected": len(tasks), "wall_seconds": round(wall, 1), "tasks_per_minute": round(rate * 60, 2),
        "concurrency": concurrency, "seed": seed, "mode": "catalog" if catalog else "full",
        **({"check_sample": check_sample, "check_rate": check_rate} if catalog else {}),
        **({"shard": shard} if parts else {})})

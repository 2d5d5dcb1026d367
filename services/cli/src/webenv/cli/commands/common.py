"""What the commands of `webenv` share: the console, where each service is (``address``), the option tables, the
run tables, following a run to its end, and the one way a command fails (an RPC error -> exit 1, a bad task file ->
exit 2)."""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path

import grpc
import typer
from google.protobuf import json_format
from google.protobuf.message import Message
from rich import box
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table
from webenv import errors, splits
from webenv.client import make_sync_channel
from webenv.client.stack import address
from webenv.client.watch import follow
from webenv.v1 import collector_pb2, collector_pb2_grpc, common_pb2

console = Console()
if not console.is_terminal and "COLUMNS" not in os.environ:
    console.width = 160  # a log or a pipe: lines are not cut at a terminal's 80 columns

# Address options default to None: ``address()`` (webenv.client.stack) resolves them (flag, WEBENV_*_ADDR, `webenv
# up`'s state, port).
COLLECTOR = SITES = BROWSER = TRAINER = POLICY = JUDGE = None
DIFFICULTIES = {"easy": common_pb2.DIFFICULTY_EASY, "medium": common_pb2.DIFFICULTY_MEDIUM, "hard": common_pb2.DIFFICULTY_HARD}
SPLITS = {name: value for value, name in splits.SPLIT_NAMES.items()}
SAMPLING = {
    "uniform": collector_pb2.SAMPLING_STRATEGY_UNIFORM,
    "easy-only": collector_pb2.SAMPLING_STRATEGY_EASY_ONLY,
    "hard-biased": collector_pb2.SAMPLING_STRATEGY_HARD_BIASED,
    "frontier": collector_pb2.SAMPLING_STRATEGY_FRONTIER,
    "template-frontier": collector_pb2.SAMPLING_STRATEGY_TEMPLATE_FRONTIER,
}
MODES = {"async": collector_pb2.ROLLOUT_MODE_ASYNC, "lock-step": collector_pb2.ROLLOUT_MODE_LOCK_STEP}
FORMATS = {
    "jsonl": collector_pb2.EXPORT_FORMAT_JSONL,
    "parquet": collector_pb2.EXPORT_FORMAT_PARQUET,
    "hf": collector_pb2.EXPORT_FORMAT_HF_DATASET,
    "transitions": collector_pb2.EXPORT_FORMAT_TRANSITIONS,
    "messages": collector_pb2.EXPORT_FORMAT_MESSAGES,
    "traces": collector_pb2.EXPORT_FORMAT_TRACES,
}
OBS = {"axtree": common_pb2.OBSERVATION_FORMAT_AXTREE, "html": common_pb2.OBSERVATION_FORMAT_HTML,
       "markdown": common_pb2.OBSERVATION_FORMAT_MARKDOWN}  # fmt: skip
OBS_ALL = {**OBS, "elements": common_pb2.OBSERVATION_FORMAT_ELEMENTS, "dom": common_pb2.OBSERVATION_FORMAT_DOM,
           "screenshot": common_pb2.OBSERVATION_FORMAT_SCREENSHOT}  # fmt: skip
SOURCES = {"synthetic": common_pb2.TASK_SOURCE_SYNTHETIC, "miniwob": common_pb2.TASK_SOURCE_MINIWOB,
           "yaml": common_pb2.TASK_SOURCE_YAML, "rubric-json": common_pb2.TASK_SOURCE_RUBRIC_JSON,
           "benchmark": common_pb2.TASK_SOURCE_BENCHMARK}  # fmt: skip
KINDS = {"information": common_pb2.TASK_KIND_INFORMATION, "navigation": common_pb2.TASK_KIND_NAVIGATION,
         "transaction": common_pb2.TASK_KIND_TRANSACTION, "open-ended": common_pb2.TASK_KIND_OPEN_ENDED}  # fmt: skip
LEVELS = {"random-crawl": collector_pb2.COLLECTION_LEVEL_RANDOM_CRAWL,
          "exploration": collector_pb2.COLLECTION_LEVEL_EXPLORATION,
          "task-oriented": collector_pb2.COLLECTION_LEVEL_TASK_ORIENTED}  # fmt: skip
FIRST_ERRORS = 5  # errored episodes a finished run prints


def choice(value: str | None, table: dict, option: str):
    if value is None:
        return 0
    if value not in table:
        raise typer.BadParameter(f"{value!r}: expected one of {', '.join(table)}", param_hint=option)
    return table[value]


def collector_stub(addr: str | None) -> collector_pb2_grpc.CollectorServiceStub:
    return collector_pb2_grpc.CollectorServiceStub(make_sync_channel(address("collector", addr)))


def choices(values: list[str] | None, table: dict, option: str) -> list:
    return [choice(v, table, option) for v in values or []]


def task_files(paths: list[Path]) -> list[common_pb2.Task]:
    """The tasks of one's own task files (YAML, rubric JSON or a benchmark's own format: webenv.taskfiles), or exit 2
    with every problem, one line each."""
    from webenv.taskfiles import TaskFileError, load  # the sdk's (PyYAML is imported only for --task-file)

    tasks: list[common_pb2.Task] = []
    problems: list[str] = []
    for p in paths:
        try:
            tasks.extend(load(p))
        except TaskFileError as exc:
            problems.extend(str(e) for e in exc.errors)
    if problems:
        console.print(f"[red]error[/red] {len(problems)} problem(s) in task files:", highlight=False)
        for line in problems:
            console.print(line, markup=False, highlight=False, soft_wrap=True)
        raise typer.Exit(2)
    return tasks


def sigterm_interrupts() -> None:
    """SIGTERM ends a long command as Ctrl-C does (KeyboardInterrupt), so the stack it started is stopped in its
    ``finally`` instead of being left running when a supervisor or `kill` ends the command."""
    def interrupt(signum, frame):
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, interrupt)


def fail(exc: grpc.RpcError) -> typer.Exit:
    err = errors.from_rpc_error(exc)
    console.print(f"[red]error[/red] {exc.code().name}: {err.message}")
    if exc.code() == grpc.StatusCode.UNAUTHENTICATED:
        said = "the one in WEBENV_AUTH_TOKEN is not" if os.environ.get("WEBENV_AUTH_TOKEN") else "WEBENV_AUTH_TOKEN is unset"
        console.print(f"the stack asks for a bearer token and {said}: set WEBENV_AUTH_TOKEN to the stack's token",
                      markup=False, highlight=False)
    return typer.Exit(1)


def _state(run: collector_pb2.Run) -> str:
    return collector_pb2.RunState.Name(run.state).removeprefix("RUN_STATE_").lower()


def watch_run(stub, run_id: str, label: str = "", errored: list | None = None,
              quiet: bool = False) -> collector_pb2.WatchRunResponse:
    """Show a run's live progress until it ends (``quiet``: show nothing); returns the last report (``errored``
    collects errored episodes)."""
    last = None
    if quiet:
        for resp in follow(lambda: stub.WatchRun(collector_pb2.WatchRunRequest(run_id=run_id))):
            last = resp
            if errored is not None:
                errored.extend(e for e in resp.finished if e.error)
        return last
    with Progress(
        TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(), TextColumn("{task.fields[info]}"),
        TimeElapsedColumn(), console=console, transient=False,
    ) as progress:
        task = progress.add_task(label or run_id, total=None, info="")
        for resp in follow(lambda: stub.WatchRun(collector_pb2.WatchRunRequest(run_id=run_id))):
            last = resp
            if errored is not None:
                errored.extend(e for e in resp.finished if e.error)
            c = resp.run.counts
            progress.update(
                task, total=c.planned, completed=c.finished,
                info=f"{resp.episodes_per_second:.1f} ep/s  {resp.steps_per_second:.1f} steps/s  "
                     f"pass {resp.pass_rate:.0%}  errors {c.errored}",
            )
    return last


def run_table(runs: list[collector_pb2.Run]) -> Table:
    """Runs as a table that fits the console: one run as field/value lines (any width), several as columns, the
    creation time only where the console is wide enough; ids are never cut, long names and policies fold."""
    if len(runs) == 1:
        r, t = runs[0], Table(show_header=False, box=box.SIMPLE, pad_edge=False)
        t.add_column("field", style="bold", no_wrap=True)
        t.add_column("value", overflow="fold")
        for field, value in _run_fields(r).items():
            t.add_row(field, value)
        return t
    t = Table(box=box.SIMPLE_HEAD, pad_edge=False)
    if console.width >= 110:
        t.add_column("run", no_wrap=True)
        for col in ("name", "state", "policy", "episodes", "pass rate", "errored", "steps", "created"):
            t.add_column(col, overflow="fold", justify="right" if col in ("episodes", "pass rate", "errored", "steps")
                         else "left")
        for r in runs:
            f = _run_fields(r)
            t.add_row(*(f[k] for k in ("run", "name", "state", "policy", "episodes", "pass rate", "errored", "steps",
                                       "created")))
        return t
    # a terminal of 80 columns: the name under the run id, the policy under the state, short headers
    t.add_column("run / name", overflow="fold", min_width=16)
    t.add_column("state / policy", overflow="fold", min_width=9)
    for col in ("done", "pass", "err", "steps"):
        t.add_column(col, justify="right", no_wrap=True)
    for r in runs:
        f = _run_fields(r)
        t.add_row(f"{f['run']}\n{f['name']}", f"{f['state']}\n{f['policy']}", f["episodes"], f["pass rate"],
                  f["errored"], f["steps"])
    return t


def _run_fields(r: collector_pb2.Run) -> dict[str, str]:
    c = r.counts
    return {"run": r.run_id, "name": r.spec.name, "state": _state(r), "policy": r.spec.policy,
            "episodes": f"{c.finished}/{c.planned}", "passed": str(c.passed),
            "pass rate": f"{c.passed / c.finished:.0%}" if c.finished else "-", "errored": str(c.errored),
            "steps": str(c.steps), "created": r.created_at.ToDatetime().strftime("%Y-%m-%d %H:%M:%S")}


def print_json(payload) -> None:
    """``--json``: one JSON document on stdout (protobuf messages in the contract's JSON mapping)."""
    def plain(x):
        if isinstance(x, Message):
            return json_format.MessageToDict(x, preserving_proto_field_name=True)
        if isinstance(x, dict):
            return {k: plain(v) for k, v in x.items()}
        if isinstance(x, list | tuple):
            return [plain(v) for v in x]
        return x
    sys.stdout.write(json.dumps(plain(payload), indent=2) + "\n")


def report_end(run: collector_pb2.Run, errored: list[collector_pb2.EpisodeSummary]) -> None:
    """Print why episodes errored (the first few, distinct) and exit 1 when the run failed or was stopped."""
    if errored:
        console.print(f"[yellow]{run.counts.errored} episode(s) errored[/yellow]; first errors:")
        seen: set[str] = set()
        for e in errored:
            if e.error in seen:
                continue
            seen.add(e.error)
            console.print(f"  {e.episode_id} ({e.task_id}): {e.error[:400]}", markup=False, highlight=False,
                          soft_wrap=True)
            if len(seen) == FIRST_ERRORS:
                break
        console.print("  (every episode's error is stored with it: webenv export --format jsonl)")
    if run.state == collector_pb2.RUN_STATE_FAILED:
        console.print(f"[red]run {run.run_id} failed:[/red] {run.error}", highlight=False, soft_wrap=True)
        raise typer.Exit(1)
    if run.state == collector_pb2.RUN_STATE_STOPPED:
        console.print(f"[yellow]run {run.run_id} was stopped[/yellow]")
        raise typer.Exit(1)

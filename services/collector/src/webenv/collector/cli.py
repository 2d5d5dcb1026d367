"""The ``webenv`` command: start the local stack, run and watch collections, list, export, replay, browse tasks.

Talks to a collector over gRPC, so the same commands drive a local stack or a cluster. Addresses come from the
flag (``--collector``), else WEBENV_COLLECTOR_ADDR, else the stack ``webenv up`` runs from this folder (its
``.webenv/stack.json``), else the default port (localhost:50056). ``webenv demo`` is the first command of the README: it starts
everything on free ports with embedded storage, runs the oracle and random policies on the synthetic web and
prints what happened and where the data is.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
import time
from datetime import datetime
from pathlib import Path
from urllib.parse import urlsplit

import grpc
import typer
from google.protobuf import json_format
from google.protobuf.message import Message
from rich import box
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table
from webenv import errors, splits
from webenv.client.watch import follow
from webenv.runtime.stack import DEFAULT_WORLDMODEL, Stack, running_stack
from webenv.v1 import collector_pb2, collector_pb2_grpc, common_pb2, task_pb2, task_pb2_grpc

app = typer.Typer(help="webenv: train and evaluate web agents.", no_args_is_help=True, add_completion=False)
worldmodel_app = typer.Typer(help="The world model: build one from the platform's own data.", no_args_is_help=True)
app.add_typer(worldmodel_app, name="worldmodel")
console = Console()
if not console.is_terminal and "COLUMNS" not in os.environ:
    console.width = 160  # a log or a pipe: lines are not cut at a terminal's 80 columns

# Address options default to None: ``address()`` resolves them (flag, WEBENV_*_ADDR, `webenv up`'s state, port).
COLLECTOR = SITES = BROWSER = None
DEFAULT_ADDRS = {"collector": "localhost:50056", "sites": "localhost:50055", "browser": "localhost:50051",
                 "trainer": "localhost:50057", "policy": "localhost:50052"}
DIFFICULTIES = {"easy": common_pb2.DIFFICULTY_EASY, "medium": common_pb2.DIFFICULTY_MEDIUM, "hard": common_pb2.DIFFICULTY_HARD}
SPLITS = {name: value for value, name in splits.SPLIT_NAMES.items()}
SAMPLING = {
    "uniform": collector_pb2.SAMPLING_STRATEGY_UNIFORM,
    "easy-only": collector_pb2.SAMPLING_STRATEGY_EASY_ONLY,
    "hard-biased": collector_pb2.SAMPLING_STRATEGY_HARD_BIASED,
    "frontier": collector_pb2.SAMPLING_STRATEGY_FRONTIER,
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
           "yaml": common_pb2.TASK_SOURCE_YAML, "rubric-json": common_pb2.TASK_SOURCE_RUBRIC_JSON}  # fmt: skip
KINDS = {"information": common_pb2.TASK_KIND_INFORMATION, "navigation": common_pb2.TASK_KIND_NAVIGATION,
         "transaction": common_pb2.TASK_KIND_TRANSACTION, "open-ended": common_pb2.TASK_KIND_OPEN_ENDED}  # fmt: skip
LEVELS = {"random-crawl": collector_pb2.COLLECTION_LEVEL_RANDOM_CRAWL,
          "exploration": collector_pb2.COLLECTION_LEVEL_EXPLORATION,
          "task-oriented": collector_pb2.COLLECTION_LEVEL_TASK_ORIENTED}  # fmt: skip
FIRST_ERRORS = 5  # errored episodes a finished run prints


def _choice(value: str | None, table: dict, option: str):
    if value is None:
        return 0
    if value not in table:
        raise typer.BadParameter(f"{value!r}: expected one of {', '.join(table)}", param_hint=option)
    return table[value]


def address(service: str, given: str | None = None) -> str:
    """The address of ``service``: ``given``, else WEBENV_<SERVICE>_ADDR, else the running `webenv up`, else default."""
    if given:
        return given
    if os.environ.get(f"WEBENV_{service.upper()}_ADDR"):
        return os.environ[f"WEBENV_{service.upper()}_ADDR"]
    state = running_stack()
    if state is not None and service in state.get("addresses", {}):
        return state["addresses"][service]
    return DEFAULT_ADDRS[service]


def _collector(addr: str | None) -> collector_pb2_grpc.CollectorServiceStub:
    return collector_pb2_grpc.CollectorServiceStub(grpc.insecure_channel(address("collector", addr)))


def _choices(values: list[str] | None, table: dict, option: str) -> list:
    return [_choice(v, table, option) for v in values or []]


def _task_files(paths: list[Path]) -> list[common_pb2.Task]:
    """The tasks of one's own task files (YAML or rubric JSON), or exit 2 with every problem, one line each."""
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


def _sigterm_interrupts() -> None:
    """SIGTERM ends a long command as Ctrl-C does (KeyboardInterrupt), so the stack it started is stopped in its
    ``finally`` instead of being left running when a supervisor or `kill` ends the command."""
    def interrupt(signum, frame):
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, interrupt)


def _fail(exc: grpc.RpcError) -> typer.Exit:
    err = errors.from_rpc_error(exc)
    console.print(f"[red]error[/red] {exc.code().name}: {err.message}")
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


def _print_json(payload) -> None:
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


@app.command()
def up(
    data_dir: Path = typer.Option(Path(".webenv"), help="Data folder (store, spool, blobs, logs)."),
    sites_count: int = typer.Option(1000, help="Synthetic sites to generate (21 tasks each)."),
    free_ports: bool = typer.Option(False, help="Pick free ports instead of the defaults."),
    worldmodel: Path = typer.Option(None, help="World model directory to serve too (default: the one `webenv "
                                               "worldmodel build` left in .webenv/worldmodel/model, if any)."),
    checkpoints: Path = typer.Option(None, envvar="WEBENV_POLICY_CHECKPOINT_DIR",
                                     help="Folder of trained checkpoints to serve, e.g. DATA_DIR/checkpoints of a "
                                          "`webenv train --stack` run: each family's latest version is a policy "
                                          "(`webenv run --policy NAME` or NAME@N) from the start, and the trainer "
                                          "publishes there (default: DATA_DIR/checkpoints, loaded on demand)."),
) -> None:
    """Start sites, browser farm, policy, judge, collector, trainer and gateway (and the world model when there is
    one); stop them all on Ctrl-C or SIGTERM.

    While it runs, DATA_DIR/stack.json records the addresses: the other commands run from the same folder
    (or with WEBENV_STACK_FILE pointing at it) find the stack without address flags.
    """
    if worldmodel is None and (DEFAULT_WORLDMODEL / "config.json").exists():
        worldmodel = DEFAULT_WORLDMODEL
    if worldmodel is not None and not (worldmodel / "config.json").exists():
        raise typer.BadParameter(f"{worldmodel} is not a model directory (no config.json)", param_hint="--worldmodel")
    if checkpoints is not None and not checkpoints.is_dir():
        raise typer.BadParameter(f"{checkpoints}: no such folder", param_hint="--checkpoints")
    stack = Stack(data_dir, free_ports=free_ports, sites_count=sites_count, worldmodel=str(worldmodel or ""),
                  checkpoints=str(checkpoints or ""))
    stopping = False

    def on_signal(signum, frame):
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    table = Table("service", "gRPC", "metrics", title="webenv stack")
    try:
        with console.status("starting the stack...") as status:
            def ready(name: str, addr: str) -> None:
                status.update(f"{name} SERVING at {addr}")
                table.add_row(name, addr, f"http://127.0.0.1:{stack.ports[name][1]}/metrics")

            stack.start(on_ready=ready)
        state = stack.write_state()
        console.print(table)
        console.print(f"websites: http://127.0.0.1:{stack.http_port}  data: {data_dir.resolve()}  "
                      f"logs: {(data_dir / 'logs').resolve()}")
        console.print(f"addresses in {state} (webenv run/runs/tasks/export/replay read it)")
        console.print(f"console and REST API: http://127.0.0.1:{stack.gateway_http_port}/")
        if checkpoints is not None:
            served = stack.served_checkpoints()
            console.print(f"checkpoints from {stack.checkpoint_dir}: "
                          + (", ".join(served) + " (webenv run --policy NAME)" if served else "none yet"))
        console.print("Ctrl-C stops everything.")
        while not stopping:
            dead = stack.dead()
            if dead:
                console.print(f"[red]exited:[/red] {', '.join(dead)} (see logs); stopping")
                break
            time.sleep(0.5)
    except RuntimeError as exc:
        console.print(f"[red]{exc}[/red]")
        raise typer.Exit(1) from None
    finally:
        stack.remove_state()
        with console.status("stopping..."):
            stack.stop()
    console.print("stopped.")


@app.command()
def run(
    policy: str = typer.Option("oracle", help="oracle, random, explore, llm, or a trained checkpoint the policy "
                                              "service serves: NAME (its latest version) or NAME@N (`webenv up "
                                              "--checkpoints DIR` serves a folder of them, e.g. a `webenv train` "
                                              "result)."),
    episodes: int = typer.Option(0, help="Episodes (0 = tasks x repeats)."),
    repeats: int = typer.Option(1, help="Episodes per task when --episodes is 0."),
    task: list[str] = typer.Option(None, "--task", help="Task id (repeatable); unknown ids are named."),
    task_file: list[Path] = typer.Option(None, help="One's own tasks: a YAML or rubric JSON file (repeatable), "
                                                     "sent with the run (no service restart)."),
    source: list[str] = typer.Option(None, help="synthetic, miniwob, yaml or rubric-json (repeatable)."),
    from_file: list[str] = typer.Option(None, help="Catalog tasks read from this task file, by name (real_web.json) "
                                                   "or path (repeatable)."),
    kind: list[str] = typer.Option(None, help="information, navigation, transaction or open-ended (repeatable)."),
    difficulty: list[str] = typer.Option(None, help="easy, medium, hard (repeatable)."),
    split: str = typer.Option(None, help="train, validation or test."),
    family: list[str] = typer.Option(None, help="Site family (repeatable)."),
    site: list[str] = typer.Option(None, help="Site host, e.g. shop-0001.web.test (repeatable)."),
    start_url: list[str] = typer.Option(None, help="Crawl from these URLs instead of tasks (repeatable)."),
    obs_format: list[str] = typer.Option(None, help="Observation format: axtree, html, markdown, elements, dom or "
                                                     "screenshot (repeatable; default axtree + html)."),
    horizon: int = typer.Option(0, help="Step cap of every episode (0 = 10/20/30 by difficulty)."),
    finish_fraction: float = typer.Option(0.0, help="End the run once this fraction of episodes is stored "
                                                    "(straggler cutoff; 0 = all)."),
    sampling: str = typer.Option("uniform", help="uniform, easy-only, hard-biased or frontier."),
    mode: str = typer.Option("async", help="async or lock-step (baseline)."),
    concurrency: int = typer.Option(0, help="Episodes in flight (0 = the collector's default)."),
    task_limit: int = typer.Option(0, help="Tasks drawn from the catalog (0 = all)."),
    seed: int = typer.Option(0),
    name: str = typer.Option("", help="Run name."),
    env: str = typer.Option("", help="Environment address(es), comma separated (default: the collector's)."),
    collector: str = typer.Option(COLLECTOR, help="Collector address."),
    detach: bool = typer.Option(False, help="Start and return without watching."),
    json_out: bool = typer.Option(False, "--json", help="Print the result as JSON (the contract's JSON mapping)."),
) -> None:
    """Start a run and show its live progress; exits 1 when the run fails (every episode errored) or is stopped."""
    spec = collector_pb2.RunSpec(
        name=name, policy=policy, episodes=episodes, repeats=repeats, seed=seed, concurrency=concurrency,
        task_limit=task_limit, start_urls=start_url or [], env_address=env, finish_fraction=finish_fraction,
        sampling=_choice(sampling, SAMPLING, "--sampling"), mode=_choice(mode, MODES, "--mode"),
        horizons=collector_pb2.Horizons(easy=horizon, medium=horizon, hard=horizon),
    )
    spec.observation_spec.formats.extend(_choices(obs_format, OBS_ALL, "--obs-format"))
    spec.tasks.difficulties.extend(_choices(difficulty, DIFFICULTIES, "--difficulty"))
    spec.tasks.sources.extend(_choices(source, SOURCES, "--source"))
    spec.tasks.kinds.extend(_choices(kind, KINDS, "--kind"))
    spec.tasks.families.extend(family or [])
    spec.tasks.sites.extend(site or [])
    spec.tasks.task_ids.extend(task or [])
    spec.tasks.task_files.extend(from_file or [])
    spec.tasks.split = _choice(split, SPLITS, "--split")
    if task_file:
        if spec.tasks.ListFields():
            raise typer.BadParameter("--task-file runs the file's tasks: leave out the task filter options",
                                     param_hint="--task-file")
        spec.inline_tasks.extend(_task_files(task_file))
    stub = _collector(collector)
    errored: list[collector_pb2.EpisodeSummary] = []
    r = None
    try:
        r = stub.StartRun(collector_pb2.StartRunRequest(request_id=os.urandom(8).hex(), spec=spec), timeout=60).run
        if json_out and detach:
            _print_json({"run": r})
            return
        if not json_out:
            console.print(f"started [bold]{r.run_id}[/bold]: {r.counts.planned} episodes")
            if r.counts.skipped_tasks:
                console.print(f"left out {r.counts.skipped_tasks} matching tasks: policy {r.spec.policy!r} has no "
                              "solution for them (--source synthetic asks for tasks with one)")
        if detach:
            return
        last = watch_run(stub, r.run_id, errored=errored, quiet=json_out)
    except grpc.RpcError as exc:
        raise _fail(exc) from None
    except KeyboardInterrupt:
        if r is not None:
            console.print(f"\nstopped watching; {r.run_id} goes on (webenv stop {r.run_id} ends it)")
        raise typer.Exit(130) from None
    if json_out:
        _print_json({"run": last.run, "errored": errored})
        if last.run.state in (collector_pb2.RUN_STATE_FAILED, collector_pb2.RUN_STATE_STOPPED):
            raise typer.Exit(1)
        return
    console.print(run_table([last.run]))
    report_end(last.run, errored)


@app.command()
def runs(
    state: str = typer.Option(None, help="Only runs in this state (running, succeeded, stopped, failed)."),
    limit: int = typer.Option(50),
    collector: str = typer.Option(COLLECTOR),
    json_out: bool = typer.Option(False, "--json", help="Print the result as JSON (the contract's JSON mapping)."),
) -> None:
    """List runs, newest first."""
    st = 0
    if state:
        st = collector_pb2.RunState.Value(f"RUN_STATE_{state.upper()}") if f"RUN_STATE_{state.upper()}" in collector_pb2.RunState.keys() else -1
        if st < 0:
            raise typer.BadParameter(f"unknown state {state!r}", param_hint="--state")
    try:
        resp = _collector(collector).ListRuns(collector_pb2.ListRunsRequest(page_size=limit, state=st), timeout=30)
    except grpc.RpcError as exc:
        raise _fail(exc) from None
    if json_out:
        _print_json({"runs": list(resp.runs)})
    else:
        console.print(run_table(list(resp.runs)))


@app.command()
def stop(run_id: str, collector: str = typer.Option(COLLECTOR),
         json_out: bool = typer.Option(False, "--json", help="Print the run as JSON.")) -> None:
    """Stop a run (finished episodes stay stored)."""
    try:
        r = _collector(collector).StopRun(collector_pb2.StopRunRequest(run_id=run_id), timeout=120).run
    except grpc.RpcError as exc:
        raise _fail(exc) from None
    if json_out:
        _print_json({"run": r})
    else:
        console.print(run_table([r]))


@app.command()
def export(
    run_id: str = typer.Argument("", help="Run id (empty exports every run)."),
    format: str = typer.Option("parquet", "--format", help="jsonl, parquet, hf, transitions, traces or messages (TRL's conversational format)."),
    dest: Path = typer.Option(Path("export"), help="Destination folder on the collector's machine; a relative one "
                                                   "lands in its export root (images: /data/exports) or working folder."),
    split: str = typer.Option(None, help="train, validation or test."),
    passed: bool = typer.Option(None, "--passed/--failed", help="Only passed or only failed episodes."),
    drop_repeated: bool = typer.Option(False, help="Drop steps flagged as repeated states."),
    level: str = typer.Option(None, help="Only this collection level: random-crawl, exploration or task-oriented."),
    transition_format: str = typer.Option("axtree", help="axtree, html or markdown (transitions)."),
    collector: str = typer.Option(COLLECTOR),
) -> None:
    """Export episodes and steps to files."""
    flt = collector_pb2.ExportFilter(split=_choice(split, SPLITS, "--split"), drop_repeated=drop_repeated,
                                     level=_choice(level, LEVELS, "--level"))
    if passed is not None:
        flt.passed = passed
    req = collector_pb2.ExportRunRequest(
        run_id=run_id, format=_choice(format, FORMATS, "--format"), destination=str(dest), filter=flt,
        transition_format=_choice(transition_format, OBS, "--transition-format"),
    )
    try:
        with console.status("exporting..."):
            r = _collector(collector).ExportRun(req, timeout=3600)
    except grpc.RpcError as exc:
        raise _fail(exc) from None
    console.print(f"{r.episodes} episodes, {r.steps} steps in {r.duration_seconds:.2f}s")
    for p in r.paths[:20]:
        console.print(f"  {p}")
    if len(r.paths) > 20:
        console.print(f"  ... and {len(r.paths) - 20} more")


@app.command()
def replay(
    trace: Path = typer.Argument(..., help="A trace file (webenv export --format traces)."),
    env: str = typer.Option(BROWSER, help="Environment address to replay against (default: the browser farm)."),
    speed: float = typer.Option(0.0, help="Pacing: 1 = recorded speed, 2 = twice as fast, 0 = no waits."),
    as_json: bool = typer.Option(False, "--json", help="Print the report as JSON."),
) -> None:
    """Re-execute a recorded episode and report per-step divergence (URL, a11y-tree diff)."""
    from webenv.collector.replay import replay as do_replay

    try:
        report = asyncio.run(do_replay(trace, address("browser", env), speed))
    except grpc.RpcError as exc:
        raise _fail(exc) from None
    except (OSError, ValueError) as exc:  # an unreadable trace, or an edited action that does not parse
        console.print(f"[red]error[/red] {exc}", highlight=False, soft_wrap=True)
        raise typer.Exit(2) from None
    if as_json:
        console.print_json(json.dumps(report.to_dict()))
        return
    t = Table("step", "action", "expected url", "replayed url", "url", "a11y diff lines", "error")
    for s in report.steps:
        t.add_row(str(s.step_index), s.action_text, s.expected_url, s.actual_url,
                  "[green]same[/green]" if s.url_matches else "[red]differs[/red]", str(s.axtree_changed_lines), s.error)
    console.print(t)
    console.print(f"{report.url_matches}/{len(report.steps)} steps reached the recorded URL")
    if not report.reproduced:
        raise typer.Exit(1)


def _task_filter(split, family, site, task, from_file, difficulty, source, kind) -> task_pb2.TaskFilter:
    """The TaskFilter `webenv tasks` flags select (listing and --export alike)."""
    flt = task_pb2.TaskFilter(families=family or [], split=_choice(split, SPLITS, "--split"), sites=site or [],
                              task_ids=task or [], task_files=from_file or [])
    flt.difficulties.extend(_choices(difficulty, DIFFICULTIES, "--difficulty"))
    flt.sources.extend(_choices(source, SOURCES, "--source"))
    flt.kinds.extend(_choices(kind, KINDS, "--kind"))
    return flt


def _export_tasks(dest: Path, found, sites, split, family, site, task, from_file, difficulty, source, kind) -> None:
    from webenv.compat.hf import catalog_dataset

    flt = _task_filter(split, family, site, task, from_file, difficulty, source, kind)
    try:
        ds = catalog_dataset(found if found is not None else address("sites", sites), flt)
    except errors.WebenvError as exc:
        console.print(f"[red]error[/red] {exc.code.name}: {exc.message}")
        raise typer.Exit(1) from None
    ds.save_to_disk(str(dest))
    console.print(f"{ds.num_rows} tasks saved as a Hugging Face dataset in {dest}")


@app.command()
def tasks(
    difficulty: list[str] = typer.Option(None, help="easy, medium, hard (repeatable)."),
    split: str = typer.Option(None, help="train, validation or test."),
    family: list[str] = typer.Option(None, help="Site family (repeatable)."),
    source: list[str] = typer.Option(None, help="synthetic, miniwob, yaml or rubric-json (repeatable)."),
    from_file: list[str] = typer.Option(None, help="Catalog tasks read from this task file, by name (real_web.json) "
                                                   "or path (repeatable)."),
    kind: list[str] = typer.Option(None, help="information, navigation, transaction or open-ended (repeatable)."),
    site: list[str] = typer.Option(None, help="Site host (repeatable)."),
    task: list[str] = typer.Option(None, "--task", help="Task id (repeatable)."),
    task_file: Path = typer.Option(None, help="Check one's own task file (YAML or rubric JSON) and list its tasks."),
    limit: int = typer.Option(20),
    sites: str = typer.Option(SITES, help="TaskService (sites) address."),
    json_out: bool = typer.Option(False, "--json", help="Print the tasks as JSON (whole Task messages)."),
    export_to: Path = typer.Option(None, "--export", help="Save every matching task (not only --limit) as a Hugging "
                                                         "Face dataset in this folder (save_to_disk): one row per "
                                                         "task, a ready GRPOTrainer train_dataset."),
) -> None:
    """List tasks of the catalog (or of a task file)."""
    if export_to is not None:
        _export_tasks(export_to, _task_files([task_file]) if task_file is not None else None, sites, split, family,
                      site, task, from_file, difficulty, source, kind)
        return
    if task_file is not None:
        found = _task_files([task_file])
        total = len(found)
    else:
        flt = _task_filter(split, family, site, task, from_file, difficulty, source, kind)
        try:
            resp = task_pb2_grpc.TaskServiceStub(grpc.insecure_channel(address("sites", sites))).ListTasks(
                task_pb2.ListTasksRequest(filter=flt, page_size=limit), timeout=30)
        except grpc.RpcError as exc:
            raise _fail(exc) from None
        found, total = list(resp.tasks), resp.total_size
    if json_out:
        _print_json({"total_size": total, "tasks": found[:limit]})
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


@app.command()
def demo(
    episodes: int = typer.Option(200, help="Episodes in all, half oracle, half random."),
    data_dir: Path = typer.Option(None, help="Data folder (default .webenv/demo-<time>)."),
    sites_count: int = typer.Option(64, help="Synthetic sites to generate."),
    concurrency: int = typer.Option(8),
) -> None:
    """Start the stack on embedded defaults, run the oracle and random policies, print a summary."""
    data_dir = data_dir or Path(".webenv") / f"demo-{datetime.now().strftime('%Y%m%d-%H%M%S')}"
    _sigterm_interrupts()
    stack = Stack(data_dir, free_ports=True, sites_count=sites_count)
    try:
        with console.status("starting sites, browser, policy, judge, collector...") as status:
            stack.start(on_ready=lambda n, a: status.update(f"{n} SERVING at {a}"))
        console.print(f"stack up ({', '.join(stack.services)}); data in {data_dir.resolve()}")
        stub = _collector(stack.address("collector"))
        half = max(episodes // 2, 1)
        specs = {
            "oracle": collector_pb2.RunSpec(name="demo-oracle", policy="oracle", episodes=half, seed=1,
                                            concurrency=concurrency),
            "random": collector_pb2.RunSpec(name="demo-random", policy="random", episodes=episodes - half, seed=2,
                                            concurrency=concurrency,
                                            horizons=collector_pb2.Horizons(easy=5, medium=5, hard=5)),
        }
        for spec in specs.values():  # the synthetic web: every task there has an oracle and ground truth
            spec.tasks.sources.append(common_pb2.TASK_SOURCE_SYNTHETIC)
        results = {}
        t0 = time.monotonic()
        for pol, spec in specs.items():
            r = stub.StartRun(collector_pb2.StartRunRequest(spec=spec), timeout=120).run
            results[pol] = watch_run(stub, r.run_id, f"{pol:<7}")
        wall = time.monotonic() - t0
        export_dir = data_dir / "export"
        stub.ExportRun(collector_pb2.ExportRunRequest(format=collector_pb2.EXPORT_FORMAT_PARQUET,
                                                      destination=str(export_dir.resolve())), timeout=600)
    except grpc.RpcError as exc:
        stack.stop()
        raise _fail(exc) from None
    except RuntimeError as exc:
        console.print(f"[red]{exc}[/red]")
        stack.stop()
        raise typer.Exit(1) from None
    except KeyboardInterrupt:
        stack.stop()
        raise typer.Exit(130) from None
    with console.status("stopping the stack..."):
        stack.stop()
    t = Table("policy", "episodes", "passed", "pass rate", "errored", "steps", "steps/s", title="webenv demo")
    for pol, last in results.items():
        c = last.run.counts
        t.add_row(pol, str(c.finished), str(c.passed), f"{c.passed / max(c.finished, 1):.0%}", str(c.errored),
                  str(c.steps), f"{last.steps_per_second:.1f}")
    console.print(t)
    console.print(f"wall time {wall:.0f}s")
    console.print(f"store (chDB): {(data_dir / 'store').resolve()}")
    console.print(f"parquet export: {export_dir.resolve()}  logs: {(data_dir / 'logs').resolve()}")


TRAINER = POLICY = None  # resolved by address(), as the others


@app.command()
def train(
    name: str = typer.Option("agent", help="Checkpoint family the loop trains (versions name@1, name@2, ...)."),
    demos: int = typer.Option(60, help="Oracle demonstrations on train-split tasks for the BC warm start."),
    reference_demos: int = typer.Option(0, help="Also train BC on this many demonstrations, as a reference."),
    iterations: int = typer.Option(4, help="RL iterations after the warm start."),
    collect: int = typer.Option(300, help="Episodes collected per iteration (train split)."),
    eval_episodes: int = typer.Option(200, "--eval", help="Test-split episodes per evaluation (same tasks each time)."),
    train_eval: int = typer.Option(100, help="Train-split episodes per evaluation."),
    validation_eval: int = typer.Option(100, help="Validation-split episodes per evaluation: the checkpoint reported "
                                                  "is the best on these, never on test."),
    holdout_family: str = typer.Option("", help="A site family never trained on (e.g. shop), evaluated as its own "
                                                "suite: its sites are left out of training and the trainer refuses them."),
    family_eval: int = typer.Option(100, help="Episodes on the held-out family's websites per evaluation."),
    miniwob_tasks: int = typer.Option(20, help="MiniWoB++ tasks the oracle solves, run zero-shot by every checkpoint "
                                               "and by random (0 = skip)."),
    oracle_slack: int = typer.Option(4, help="No task's step cap below its oracle's length plus this."),
    oracle_ceiling: bool = typer.Option(True, help="Run the oracle on every suite's tasks under the same caps."),
    overlap: bool = typer.Option(False, help="Evaluate each version while the next iteration collects with it "
                                             "(same data, less wall time; the report gives wall time per iteration)."),
    temperature: float = typer.Option(1.0, help="Sampling temperature while collecting."),
    algorithm: str = typer.Option("filtered_bc", help="filtered_bc (WebGym), policy_gradient, group (GRPO), partial "
                                  "(fact-group credit + subtask relabeling) or branching (forked rollouts)."),
    group_size: int = typer.Option(4, help="(group, branching) episodes per group: k rollouts of a task, or an "
                                   "anchor and its k - 1 forks."),
    branch_step: int = typer.Option(2, help="(branching) steps an anchor takes before it is forked."),
    step_normalize: bool = typer.Option(False, help="Divide each episode's step weights by its steps (1/k)."),
    kl_coef: float = typer.Option(0.0, help="Beta of the RL jobs' KL penalty towards the BC warm start's ranking "
                                            "(0 = none, at most 10)."),
    model: str = typer.Option("scorer", help="The ranker trained: scorer (hashed features, trains in minutes) or encoder "
                                             "(fine-tuned all-MiniLM-L6-v2; slower per example, its first epoch most)."),
    bc_epochs: int = typer.Option(40),
    rl_epochs: int = typer.Option(4),
    sampling: str = typer.Option("uniform", help="uniform, easy-only, hard-biased or frontier task sampling."),
    concurrency: int = typer.Option(4, help="Episodes in flight per run, halved for each of --overlap's two runs "
                                               "(0 = the collector's default of 16: on 2 cores episodes ran past their "
                                               "deadlines)."),
    baselines: str = typer.Option("random,explore", help="Policies evaluated on the test split beside (comma list)."),
    baseline_eval: int = typer.Option(100, help="Test-split episodes per baseline policy."),
    seed: int = typer.Option(1),
    out: Path = typer.Option(Path("bench/results"), help="Folder for learning.md, learning.json, learning.png."),
    stack: bool = typer.Option(False, help="Start a local stack on free ports for the loop (embedded store)."),
    sites_count: int = typer.Option(200, help="Synthetic sites of the local stack (--stack)."),
    data_dir: Path = typer.Option(None, help="Data folder of the local stack (--stack)."),
    collector: str = typer.Option(COLLECTOR),
    trainer: str = typer.Option(TRAINER),
    policy: str = typer.Option(POLICY),
    dyna: bool = typer.Option(False, help="Instead of the iterations: --collect rollouts in the world model vs in real "
                                           "browsers from the BC checkpoint, each trained on; report bench/results/dyna.md."),
    worldmodel: Path = typer.Option(DEFAULT_WORLDMODEL, help="(--dyna --stack) the world model the stack serves."),
    sim_env: str = typer.Option("", help="(--dyna without --stack) the world model's address."),
) -> None:
    """The learning loop: oracle demos -> BC warm start -> N x (collect -> judge -> train -> load -> evaluate)."""
    from webenv.collector.learn import Loop, LoopConfig, write_report
    from webenv.collector.signals import ARMS

    if algorithm not in ARMS:
        raise typer.BadParameter(f"{algorithm!r}: expected one of {', '.join(ARMS)}", param_hint="--algorithm")
    if not 2 <= group_size <= 33:
        raise typer.BadParameter("must be within 2..33", param_hint="--group-size")
    _choice(sampling, SAMPLING, "--sampling")
    if model not in ("scorer", "encoder"):
        raise typer.BadParameter(f"{model!r}: expected scorer or encoder", param_hint="--model")
    cfg = LoopConfig(name=name, model=model, demo_episodes=demos, reference_demo_episodes=reference_demos, iterations=iterations,
                     collect_episodes=collect, eval_episodes=eval_episodes, train_eval_episodes=train_eval,
                     temperature=temperature, algorithm=algorithm, bc_epochs=bc_epochs, rl_epochs=rl_epochs,
                     sampling=sampling, concurrency=concurrency, group_size=group_size, branch_step=branch_step,
                     step_normalize=step_normalize, kl_coef=kl_coef,
                     baselines=tuple(b for b in baselines.split(",") if b), baseline_episodes=baseline_eval, seed=seed,
                     out_dir=str(out), dyna=dyna, validation_episodes=validation_eval, holdout_family=holdout_family,
                     family_episodes=family_eval, miniwob_tasks=miniwob_tasks, oracle_slack=oracle_slack,
                     oracle_ceiling=oracle_ceiling, overlap=overlap)
    for option, value, low, high in (("--validation-eval", validation_eval, 0, 10_000),
                                     ("--family-eval", family_eval, 1, 10_000), ("--miniwob-tasks", miniwob_tasks, 0, 1000),
                                     ("--oracle-slack", oracle_slack, 0, 100), ("--kl-coef", kl_coef, 0, 10)):
        if not low <= value <= high:
            raise typer.BadParameter(f"must be in [{low}, {high}], got {value}", param_hint=option)
    if dyna:
        if not (worldmodel / "config.json").exists():
            raise typer.BadParameter(f"{worldmodel} is not a model directory (no config.json): `make worldmodel` "
                                     "builds one", param_hint="--worldmodel")
        starts = worldmodel / "start_states.jsonl"  # the model directory's recorded start pages (JSONL, "url")
        hosts = {urlsplit(json.loads(line).get("url", "")).hostname
                 for line in starts.read_text(encoding="utf-8").splitlines() if line.strip()} if starts.exists() else set()
        cfg.sim_sites = tuple(sorted(h for h in hosts if h))
        if not cfg.sim_sites:
            raise typer.BadParameter(f"{worldmodel} records no start pages", param_hint="--worldmodel")
    local = None
    _sigterm_interrupts()
    if stack:
        data_dir = data_dir or Path(".webenv") / f"train-{datetime.now().strftime('%Y%m%d-%H%M%S')}"
        local = Stack(data_dir, free_ports=True, sites_count=sites_count, worldmodel=str(worldmodel) if dyna else "")
        try:
            with console.status("starting the stack...") as status:
                local.start(on_ready=lambda n, a: status.update(f"{n} SERVING at {a}"))
        except KeyboardInterrupt:
            local.stop()
            raise typer.Exit(130) from None
        collector, trainer, policy, sites = (local.address(n) for n in ("collector", "trainer", "policy", "sites"))
        if dyna:
            cfg.sim_env = local.address("worldmodel")
        console.print(f"stack up ({', '.join(local.services)}); data in {data_dir.resolve()}")
    else:
        collector, trainer, policy, sites = (address(n, v) for n, v in (("collector", collector), ("trainer", trainer),
                                                                         ("policy", policy), ("sites", None)))
        if dyna:
            if not sim_env:
                raise typer.BadParameter("the world model's address (or --stack)", param_hint="--sim-env")
            cfg.sim_env = sim_env
    try:
        loop = Loop(cfg, collector=collector, trainer=trainer, policy=policy, sites=sites, say=console.print)
        result = loop.run_loop()
    except grpc.RpcError as exc:
        raise _fail(exc) from None
    except ValueError as exc:  # a loop option the catalog or the oracle cannot serve, named by the field
        raise typer.BadParameter(str(exc), param_hint="--" + str(exc).partition(":")[0].replace("_", "-")) from None
    except RuntimeError as exc:
        console.print(f"[red]error[/red] {exc}")
        raise typer.Exit(1) from None
    except KeyboardInterrupt:
        console.print("interrupted; stopping")
        raise typer.Exit(130) from None
    finally:
        if local is not None:
            with console.status("stopping the stack..."):
                local.stop()
    import shlex
    import sys

    paths = write_report(result, out, "webenv train " + " ".join(shlex.quote(a) for a in sys.argv[2:]))
    console.print("learning curve: " + ", ".join(str(p) for p in paths))


@worldmodel_app.command("build")
def worldmodel_build(
    out: Path = typer.Option(DEFAULT_WORLDMODEL.parent, help="Folder for the data, the training run and the model "
                                                             "(the model lands in OUT/model, where `webenv up` finds it)."),
    preset: str = typer.Option("standard", help="quick, standard or large (sizes and times: services/worldmodel/README.md); "
                                                "smoke checks the pipeline in about a minute."),
    train_minutes: float = typer.Option(None, help="Cap on training time (default: the preset's)."),
    reasoning_fraction: float = typer.Option(0.0, help="Share of training examples with a reasoning paragraph (WebWorld's "
                                                        "reasoning injection; the model can then reason or not)."),
    reuse_data: bool = typer.Option(False, help="Reuse OUT/data from an earlier build instead of collecting again."),
    seed: int = typer.Option(0),
) -> None:
    """collect -> dataset -> train -> evaluate: a world model from the platform's own data, with its model card.

    Starts the local stack (sites, browser farm, policy, judge, collector), runs the three WebWorld collection levels
    on the sites service's websites (random crawl, exploration, task-oriented oracle episodes), exports TRANSITIONS,
    trains on the training websites and evaluates on held-out ones (the task catalog's split)."""
    from webenv.collector.wmbuild import BuildPlan, build

    try:
        plan = BuildPlan.preset(preset)
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="--preset") from None
    plan.seed = seed
    if train_minutes is not None:
        if train_minutes <= 0:
            raise typer.BadParameter("must be > 0", param_hint="--train-minutes")
        plan.train_minutes = train_minutes
    if not 0 <= reasoning_fraction <= 1:
        raise typer.BadParameter("must be within 0..1", param_hint="--reasoning-fraction")
    t0 = time.monotonic()
    _sigterm_interrupts()
    try:
        model = build(out, plan, lambda line: console.print(line, highlight=False), watch=watch_run,
                      reuse_data=reuse_data, reasoning_fraction=reasoning_fraction)
    except (RuntimeError, grpc.RpcError) as exc:
        console.print(f"[red]build failed[/red]: {exc}")
        raise typer.Exit(1) from None
    except KeyboardInterrupt:
        raise typer.Exit(130) from None
    console.print(f"model ready in {(time.monotonic() - t0) / 60:.1f} min: {model}")
    console.print(f"card: {model / 'MODEL_CARD.md'}")
    console.print("serve it: webenv up (starts it with the stack), or "
                  f"WEBENV_WORLDMODEL_MODEL_PATH={model} python -m webenv.worldmodel")


if __name__ == "__main__":
    app()

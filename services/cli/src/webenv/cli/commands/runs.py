"""`webenv run`, `webenv runs`, `webenv stop`: start a run and follow it, list runs, stop one."""

from __future__ import annotations

import os
from pathlib import Path

import grpc
import typer
from webenv.cli.commands.common import (
    COLLECTOR,
    DIFFICULTIES,
    KINDS,
    MODES,
    OBS_ALL,
    SAMPLING,
    SOURCES,
    SPLITS,
    choice,
    choices,
    collector_stub,
    console,
    fail,
    print_json,
    report_end,
    run_table,
    task_files,
    watch_run,
)
from webenv.v1 import collector_pb2


def run(
    policy: str = typer.Option("oracle", help="oracle, random, explore, llm, or a trained checkpoint the policy "
                                              "service serves: NAME (its latest version) or NAME@N (`webenv up "
                                              "--checkpoints DIR` serves a folder of them, e.g. a `webenv train` "
                                              "result)."),
    episodes: int = typer.Option(0, help="Episodes (0 = tasks x repeats)."),
    repeats: int = typer.Option(1, help="Episodes per task when --episodes is 0."),
    task: list[str] = typer.Option(None, "--task", help="Task id (repeatable); unknown ids are named."),
    task_file: list[Path] = typer.Option(None, help="One's own tasks: a YAML, rubric JSON or benchmark "
                                                     "file (WebArena, WebArena-Verified, WebVoyager, ...; repeatable), "
                                                     "sent with the run (no service restart)."),
    source: list[str] = typer.Option(None, help="synthetic, miniwob, yaml, rubric-json or benchmark (repeatable)."),
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
    sampling: str = typer.Option("uniform", help="uniform, easy-only, hard-biased, frontier or template-frontier."),
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
        sampling=choice(sampling, SAMPLING, "--sampling"), mode=choice(mode, MODES, "--mode"),
        horizons=collector_pb2.Horizons(easy=horizon, medium=horizon, hard=horizon),
    )
    spec.observation_spec.formats.extend(choices(obs_format, OBS_ALL, "--obs-format"))
    spec.tasks.difficulties.extend(choices(difficulty, DIFFICULTIES, "--difficulty"))
    spec.tasks.sources.extend(choices(source, SOURCES, "--source"))
    spec.tasks.kinds.extend(choices(kind, KINDS, "--kind"))
    spec.tasks.families.extend(family or [])
    spec.tasks.sites.extend(site or [])
    spec.tasks.task_ids.extend(task or [])
    spec.tasks.task_files.extend(from_file or [])
    spec.tasks.split = choice(split, SPLITS, "--split")
    if task_file:
        if spec.tasks.ListFields():
            raise typer.BadParameter("--task-file runs the file's tasks: leave out the task filter options",
                                     param_hint="--task-file")
        spec.inline_tasks.extend(task_files(task_file))
    stub = collector_stub(collector)
    errored: list[collector_pb2.EpisodeSummary] = []
    r = None
    try:
        r = stub.StartRun(collector_pb2.StartRunRequest(request_id=os.urandom(8).hex(), spec=spec), timeout=60).run
        if json_out and detach:
            print_json({"run": r})
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
        raise fail(exc) from None
    except KeyboardInterrupt:
        if r is not None:
            console.print(f"\nstopped watching; {r.run_id} goes on (webenv stop {r.run_id} ends it)")
        raise typer.Exit(130) from None
    if json_out:
        print_json({"run": last.run, "errored": errored})
        if last.run.state in (collector_pb2.RUN_STATE_FAILED, collector_pb2.RUN_STATE_STOPPED):
            raise typer.Exit(1)
        return
    console.print(run_table([last.run]))
    report_end(last.run, errored)


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
        resp = collector_stub(collector).ListRuns(collector_pb2.ListRunsRequest(page_size=limit, state=st), timeout=30)
    except grpc.RpcError as exc:
        raise fail(exc) from None
    if json_out:
        print_json({"runs": list(resp.runs)})
    else:
        console.print(run_table(list(resp.runs)))


def stop(run_id: str, collector: str = typer.Option(COLLECTOR),
         json_out: bool = typer.Option(False, "--json", help="Print the run as JSON.")) -> None:
    """Stop a run (finished episodes stay stored)."""
    try:
        r = collector_stub(collector).StopRun(collector_pb2.StopRunRequest(run_id=run_id), timeout=120).run
    except grpc.RpcError as exc:
        raise fail(exc) from None
    if json_out:
        print_json({"run": r})
    else:
        console.print(run_table([r]))

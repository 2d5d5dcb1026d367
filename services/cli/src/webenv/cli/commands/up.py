"""`webenv up`: the whole local stack as processes until Ctrl-C or SIGTERM, its addresses in DATA_DIR/stack.json."""

from __future__ import annotations

import signal
import time
from pathlib import Path

import typer
from rich.table import Table
from webenv.cli.commands.common import console
from webenv.cli.stack import DEFAULT_WORLDMODEL, Stack


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
    (or with WEBENV_STACK_FILE pointing at it) find the stack without address flags. One stack per data folder:
    while one runs (or starts) there, a second `webenv up` on it says so and exits 1.
    """
    if worldmodel is None and (DEFAULT_WORLDMODEL / "config.json").exists():
        worldmodel = DEFAULT_WORLDMODEL
    if worldmodel is not None and not (worldmodel / "config.json").exists():
        raise typer.BadParameter(f"{worldmodel} is not a model directory (no config.json)", param_hint="--worldmodel")
    if checkpoints is not None and not checkpoints.is_dir():
        raise typer.BadParameter(f"{checkpoints}: no such folder", param_hint="--checkpoints")
    stack = Stack(data_dir, free_ports=free_ports, sites_count=sites_count, worldmodel=str(worldmodel or ""),
                  checkpoints=str(checkpoints or ""))
    try:  # one stack per data folder: a second `webenv up` here is refused before anything starts
        stack.claim()
    except RuntimeError as exc:
        console.print(str(exc), style="red", markup=False, highlight=False)
        raise typer.Exit(1) from None
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
    except RuntimeError as exc:  # as written: a log tail's [brackets] are not markup
        console.print(str(exc), style="red", markup=False, highlight=False)
        raise typer.Exit(1) from None
    finally:
        stack.remove_state()
        with console.status("stopping..."):
            stack.stop()
    console.print("stopped.")

"""`webenv demo`: the README's first command: a stack on embedded defaults, oracle and random runs, a summary."""

from __future__ import annotations

import time
from datetime import datetime
from pathlib import Path

import grpc
import typer
from rich.table import Table
from webenv.cli.commands.common import collector_stub, console, fail, sigterm_interrupts, watch_run
from webenv.cli.stack import Stack
from webenv.v1 import collector_pb2, common_pb2


def demo(
    episodes: int = typer.Option(200, help="Episodes in all, half oracle, half random."),
    data_dir: Path = typer.Option(None, help="Data folder (default .webenv/demo-<time>)."),
    sites_count: int = typer.Option(64, help="Synthetic sites to generate."),
    concurrency: int = typer.Option(8),
) -> None:
    """Start the stack on embedded defaults, run the oracle and random policies, print a summary."""
    data_dir = data_dir or Path(".webenv") / f"demo-{datetime.now().strftime('%Y%m%d-%H%M%S')}"
    sigterm_interrupts()
    stack = Stack(data_dir, free_ports=True, sites_count=sites_count)
    try:
        with console.status("starting sites, browser, policy, judge, collector...") as status:
            stack.start(on_ready=lambda n, a: status.update(f"{n} SERVING at {a}"))
        console.print(f"stack up ({', '.join(stack.services)}); data in {data_dir.resolve()}")
        stub = collector_stub(stack.address("collector"))
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
        raise fail(exc) from None
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

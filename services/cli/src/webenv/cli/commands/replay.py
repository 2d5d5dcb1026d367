"""`webenv replay`: re-execute a trace (webenv export --format traces) and report where it diverges."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import grpc
import typer
from rich.table import Table
from webenv.cli.commands.common import BROWSER, address, console, fail


def replay(
    trace: Path = typer.Argument(..., help="A trace file (webenv export --format traces)."),
    env: str = typer.Option(BROWSER, help="Environment address to replay against (default: the browser farm)."),
    speed: float = typer.Option(0.0, help="Pacing: 1 = recorded speed, 2 = twice as fast, 0 = no waits."),
    as_json: bool = typer.Option(False, "--json", help="Print the report as JSON."),
) -> None:
    """Re-execute a recorded episode and report per-step divergence (URL, a11y-tree diff)."""
    from webenv.cli.replay import replay as do_replay

    try:
        report = asyncio.run(do_replay(trace, address("browser", env), speed))
    except grpc.RpcError as exc:
        raise fail(exc) from None
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

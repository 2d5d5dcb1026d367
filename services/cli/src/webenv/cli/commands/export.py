"""`webenv export`: a run's (or every run's) episodes and steps to files, written by the collector."""

from __future__ import annotations

from pathlib import Path

import grpc
import typer
from webenv.cli.commands.common import (
    COLLECTOR,
    FORMATS,
    LEVELS,
    OBS,
    SPLITS,
    choice,
    collector_stub,
    console,
    fail,
)
from webenv.v1 import collector_pb2


def export(
    run_id: str = typer.Argument("", help="Run id (empty exports every run)."),
    format: str = typer.Option("parquet", "--format", help="jsonl, parquet, hf, transitions, traces or messages (TRL's conversational format)."),
    dest: Path = typer.Option(Path("export"), help="Destination folder on the collector's machine; a relative one "
                                                   "lands in its export root (images: /data/exports) or working folder."),
    split: str = typer.Option(None, help="train, validation or test."),
    passed: bool = typer.Option(None, "--passed/--failed", help="Only passed or only failed episodes."),
    drop_repeated: bool = typer.Option(False, help="Drop steps flagged as repeated states (no progress; an answer is "
                                       "never one)."),
    level: str = typer.Option(None, help="Only this collection level: random-crawl, exploration or task-oriented."),
    transition_format: str = typer.Option("axtree", help="axtree, html or markdown (transitions)."),
    inline_screenshots: bool = typer.Option(False, help="jsonl: each step's screenshot bytes inline (base64) beside its "
                                            "key; by default the key only (GET /v1/screenshots/{key} fetches it)."),
    collector: str = typer.Option(COLLECTOR),
) -> None:
    """Export episodes and steps to files."""
    flt = collector_pb2.ExportFilter(split=choice(split, SPLITS, "--split"), drop_repeated=drop_repeated,
                                     level=choice(level, LEVELS, "--level"))
    if passed is not None:
        flt.passed = passed
    req = collector_pb2.ExportRunRequest(
        run_id=run_id, format=choice(format, FORMATS, "--format"), destination=str(dest), filter=flt,
        transition_format=choice(transition_format, OBS, "--transition-format"), inline_screenshots=inline_screenshots,
    )
    try:
        with console.status("exporting..."):
            r = collector_stub(collector).ExportRun(req, timeout=3600)
    except grpc.RpcError as exc:
        raise fail(exc) from None
    console.print(f"{r.episodes} episodes, {r.steps} steps in {r.duration_seconds:.2f}s")
    for p in r.paths[:20]:
        console.print(f"  {p}")
    if len(r.paths) > 20:
        console.print(f"  ... and {len(r.paths) - 20} more")

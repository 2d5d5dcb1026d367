"""`python -m webenv.sites` / `webenv-sites`: serve; `webenv-sites export-tasks|stats`: work with the catalog."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Literal

import typer
import yaml
from google.protobuf import json_format
from webenv.runtime import load_settings, run
from webenv.runtime.cli import service_app
from webenv.sites.config import Settings
from webenv.sites.service import main, world_from
from webenv.sites.world import World
from webenv.taskfiles import TaskFileError


def _serve() -> None:
    settings = load_settings(Settings, "webenv-sites")
    if settings.sites_uvloop:
        try:
            import uvloop
        except ImportError:
            pass
        else:
            # Measured here: the same pages at ~10x the rate of the default loop with grpc.aio beside uvicorn.
            asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
    run(main, Settings, name="webenv-sites")


app = service_app("webenv-sites", "webenv synthetic web and task catalog: TaskService (gRPC) and the websites (HTTP).",
                  _serve)
cli = app  # the console script (pyproject.toml)


@app.command("export-tasks")
def export_tasks(out: Path = typer.Option(..., "--out", help="Output file."),
                 fmt: Literal["jsonl", "yaml"] = typer.Option("jsonl", "--format", help="jsonl or yaml."),
                 source: str = typer.Option("", help="Only this source, e.g. SYNTHETIC, MINIWOB, YAML.")) -> None:
    """Write the catalog (the tasks the service would serve with the same settings) to a file."""
    world = _world()
    tasks = world.tasks.tasks
    if source:
        tasks = [t for t in tasks if _src(t) == source.upper()]
    rows = [json_format.MessageToDict(t, preserving_proto_field_name=True) for t in tasks]
    out.parent.mkdir(parents=True, exist_ok=True)
    with out.open("w", encoding="utf-8") as fh:
        if fmt == "jsonl":
            for r in rows:
                fh.write(json.dumps(r, sort_keys=True) + "\n")
        else:
            yaml.safe_dump_all(rows, fh, sort_keys=True, allow_unicode=True)
    typer.echo(f"wrote {len(rows)} tasks to {out}")


def _world() -> World:
    """The catalog the service would build; bad task files exit with code 2 and one line per problem."""
    try:
        return world_from(load_settings(Settings, "webenv-sites"))
    except TaskFileError as exc:
        typer.echo(f"webenv-sites: {len(exc.errors)} problem(s) in task files:\n{exc}", err=True)
        raise typer.Exit(2) from None


def _src(t: object) -> str:
    from webenv.v1 import common_pb2

    return common_pb2.TaskSource.Name(t.source).removeprefix("TASK_SOURCE_")  # type: ignore[attr-defined]


@app.command()
def stats() -> None:
    """Print the catalog's size, build time and task distribution as JSON."""
    world = _world()
    typer.echo(json.dumps({"sites": len(world.sites.sites), "tasks": len(world.tasks),
                           "build_seconds": round(world.build_seconds, 2), **world.tasks.stats()}, indent=2))


if __name__ == "__main__":
    cli()

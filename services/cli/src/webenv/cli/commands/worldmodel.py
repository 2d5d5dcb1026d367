"""`webenv worldmodel build`: a world model from the platform's own data (webenv.cli.wmbuild)."""

from __future__ import annotations

import time
from pathlib import Path

import grpc
import typer
from webenv.cli.commands.common import console, sigterm_interrupts, watch_run
from webenv.cli.stack import DEFAULT_WORLDMODEL

app = typer.Typer(help="The world model: build one from the platform's own data.", no_args_is_help=True)


@app.command("build")
def worldmodel_build(
    out: Path = typer.Option(DEFAULT_WORLDMODEL.parent, help="Folder for the data, the training run and the model "
                                                             "(the model lands in OUT/model, where `webenv up` finds it)."),
    preset: str = typer.Option("standard", help="quick, standard, builders or large (sizes and times: services/worldmodel/README.md); "
                                                "smoke checks the pipeline in about a minute; builders trains on the train "
                                                "builders' websites and holds out hashapp and govform."),
    train_minutes: float = typer.Option(None, help="Cap on training time (default: the preset's)."),
    reasoning_fraction: float = typer.Option(0.0, help="Share of training examples with a reasoning paragraph (WebWorld's "
                                                        "reasoning injection; the model can then reason or not)."),
    reuse_data: bool = typer.Option(False, help="Reuse OUT/data from an earlier build instead of collecting again."),
    seed: int = typer.Option(0),
    train_builders: str = typer.Option("", help="Split by site builder: train only on these builders' websites "
                                                "(comma-separated, e.g. platform,ledger; the `builders` preset: the 9 "
                                                "train builders). Empty: the preset's (by default the catalog's split by website)."),
    validation_builders: str = typer.Option("", help="Builders whose websites are scored as validation (never trained on)."),
    eval_builders: str = typer.Option("", help="Held-out builders: their websites are the evaluation, never trained on."),
    outside: str = typer.Option("", help="Outside suites recorded and scored as held out: handmade, miniwob "
                                         "(comma-separated; `none` for none; empty: the preset's)."),
) -> None:
    """collect -> dataset -> train -> evaluate: a world model from the platform's own data, with its model card.

    Starts the local stack (sites, browser farm, policy, judge, collector), runs the three WebWorld collection levels
    on the sites service's websites (random crawl, exploration, task-oriented oracle episodes), exports TRANSITIONS,
    trains on the training websites and evaluates on held-out ones (the task catalog's split)."""
    from webenv.cli.wmbuild import BuildPlan, build

    try:
        plan = BuildPlan.preset(preset)
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="--preset") from None
    plan.seed = seed

    def names(v: str) -> list[str]:
        return [x.strip() for x in v.split(",") if x.strip() and x.strip() != "none"]

    for opt, value in (("train_builders", train_builders), ("validation_builders", validation_builders),
                       ("eval_builders", eval_builders), ("outside", outside)):
        if value:
            setattr(plan, opt, names(value))
    try:
        plan.check_builders()
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="--train-builders/--validation-builders/--eval-builders/--outside") from None
    if train_minutes is not None:
        if train_minutes <= 0:
            raise typer.BadParameter("must be > 0", param_hint="--train-minutes")
        plan.train_minutes = train_minutes
    if not 0 <= reasoning_fraction <= 1:
        raise typer.BadParameter("must be within 0..1", param_hint="--reasoning-fraction")
    t0 = time.monotonic()
    sigterm_interrupts()
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

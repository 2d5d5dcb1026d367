"""The ``webenv`` command: start the local stack, run and watch collections, list, export, replay, re-grade a stored
run (rescore), browse tasks, validate tasks, train, build a world model.

Talks to the services over gRPC, so the same commands drive a local stack or a cluster. Addresses come from the
flag (``--collector``), else WEBENV_COLLECTOR_ADDR, else the stack ``webenv up`` runs from this folder (its
``.webenv/stack.json``), else the default port (localhost:50056). ``webenv demo`` is the first command of the README: it starts
everything on free ports with embedded storage, runs the oracle and random policies on the synthetic web and
prints what happened and where the data is. Each command (or group) is a module of ``webenv.cli.commands``; this
one only puts them together, in the order ``webenv --help`` lists them.
"""

from __future__ import annotations

import typer
from webenv.cli.commands import demo, export, replay, rescore, runs, tasks, train, up, validate, worldmodel

app = typer.Typer(help="webenv: train and evaluate web agents.", no_args_is_help=True, add_completion=False)
app.add_typer(worldmodel.app, name="worldmodel")
for command in (up.up, runs.run, runs.runs, runs.stop, export.export, replay.replay, rescore.rescore, tasks.tasks,
                validate.validate, demo.demo, train.train):
    app.command()(command)

if __name__ == "__main__":
    app()

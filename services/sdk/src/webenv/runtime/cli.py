"""The command line of every service: `webenv-<name>` (or `python -m webenv.<name>`) serves, `... <command>` runs one.

Each service used to read `sys.argv` its own way (argparse in some commands, `sys.argv[1] == "..."` in others, no
look at all in others), so `webenv-browser --help` started a browser farm and a mistyped command either served or
printed a docstring. Every console script is now a typer app, like the `webenv` command: `--help` answers on
every command, an unknown command or option exits 2 with a usage line, and no command at all serves, which is
what a Dockerfile's `ENTRYPOINT ["python", "-m", "webenv.<name>"]` runs. A service's settings stay in WEBENV_*
variables, never flags, so a shell, a container and a manifest start it the same way.

Kept apart from `webenv.runtime`'s own exports: typer takes ~0.4 s to import, and library users of the runtime
(tests, clients) never need it.
"""

from __future__ import annotations

from collections.abc import Callable

import typer


def service_app(name: str, help: str, serve: Callable[[], None]) -> typer.Typer:
    """A typer app for console script `name` whose `serve` command, also what runs with no command, calls `serve()`.

    Add a service's offline commands to it with ``@app.command()``; `serve` is usually
    ``lambda: webenv.runtime.run(main, Settings, name)``. Tracebacks stay plain (no rich frames with locals):
    a service's stderr goes to its container's log.
    """
    app = typer.Typer(name=name, help=f"{help} Without a command it serves.", add_completion=False,
                      pretty_exceptions_enable=False)

    @app.callback(invoke_without_command=True)
    def default(ctx: typer.Context) -> None:
        if ctx.invoked_subcommand is None:
            serve()

    @app.command("serve")
    def serve_command() -> None:
        """Serve, configured by WEBENV_* variables (the service's README lists them); stop on SIGTERM."""
        serve()

    return app

"""`python -m webenv.openenv` / `webenv-openenv`: serve the OpenEnv protocol over the farm (WEBENV_* settings)."""

from __future__ import annotations

from webenv.openenv.app import main
from webenv.openenv.config import Settings
from webenv.runtime import run
from webenv.runtime.cli import service_app

app = service_app("webenv-openenv", "The OpenEnv server: catalog tasks on the farm over OpenEnv's WebSocket protocol.",
                  lambda: run(main, Settings, name="webenv-openenv"))
cli = app  # the console script (pyproject.toml)

if __name__ == "__main__":
    cli()

"""`python -m webenv.gateway` / `webenv-gateway`: serve the REST API, live streams and console (WEBENV_* settings)."""

from __future__ import annotations

from webenv.gateway.app import main
from webenv.gateway.config import Settings
from webenv.runtime import run
from webenv.runtime.cli import service_app

app = service_app("webenv-gateway", "The gateway: REST API, live streams and the web console over HTTP.",
                  lambda: run(main, Settings, name="webenv-gateway"))
cli = app  # the console script (pyproject.toml)


if __name__ == "__main__":
    cli()

"""`python -m webenv.gateway` / `webenv-gateway`: serve the REST API, live streams and console (WEBENV_* settings)."""

from __future__ import annotations

from webenv.gateway.app import main
from webenv.gateway.config import Settings
from webenv.runtime import run


def cli() -> None:
    run(main, Settings, name="webenv-gateway")


if __name__ == "__main__":
    cli()

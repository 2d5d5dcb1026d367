"""``python -m webenv.collector`` / ``webenv-collector``: run the collector service."""

from webenv.collector.app import main
from webenv.collector.config import Settings
from webenv.runtime import run
from webenv.runtime.cli import service_app

app = service_app("webenv-collector", "The collector: CollectorService (rollouts, storage, export, replay).",
                  lambda: run(main, Settings, name="webenv-collector"))
cli = app  # the console script (pyproject.toml)


if __name__ == "__main__":
    cli()

"""``python -m webenv.collector`` / ``webenv-collector``: run the collector service."""

from webenv.collector.app import main
from webenv.collector.config import Settings
from webenv.runtime import run


def cli() -> None:
    """Console-script entry point."""
    run(main, Settings, name="webenv-collector")


if __name__ == "__main__":
    cli()

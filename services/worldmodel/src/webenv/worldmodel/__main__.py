"""`python -m webenv.worldmodel` serves; `... dataset|train|evaluate|card` run the offline commands."""

from __future__ import annotations

import sys

COMMANDS = {
    "dataset": "webenv.worldmodel.dataset",
    "train": "webenv.worldmodel.train",
    "evaluate": "webenv.worldmodel.evaluate",
    "card": "webenv.worldmodel.card",
}


def cli() -> None:
    sub = sys.argv[1] if len(sys.argv) > 1 else ""
    if sub in COMMANDS:
        import importlib

        importlib.import_module(COMMANDS[sub]).main(sys.argv[2:])
    elif sub in ("", "serve"):
        from webenv.runtime import run
        from webenv.worldmodel.app import main
        from webenv.worldmodel.config import Settings

        run(main, Settings, name="webenv-worldmodel")
    else:
        print(f"webenv-worldmodel: unknown command {sub!r}; use serve (default), {', '.join(COMMANDS)}", file=sys.stderr)
        raise SystemExit(2)


if __name__ == "__main__":
    cli()

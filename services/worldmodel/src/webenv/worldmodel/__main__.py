"""`python -m webenv.worldmodel` serves; `... train|evaluate|collect` run the offline commands."""

from __future__ import annotations

import sys


def cli() -> None:
    sub = sys.argv[1] if len(sys.argv) > 1 else ""
    if sub == "train":
        from webenv.worldmodel.train import main as train_main

        train_main(sys.argv[2:])
    elif sub == "evaluate":
        from webenv.worldmodel.evaluate import main as evaluate_main

        evaluate_main(sys.argv[2:])
    elif sub == "collect":
        from webenv.worldmodel.collect import main as collect_main

        collect_main(sys.argv[2:])
    elif sub in ("", "serve"):
        from webenv.runtime import run
        from webenv.worldmodel.app import main
        from webenv.worldmodel.config import Settings

        run(main, Settings, name="webenv-worldmodel")
    else:
        print(f"webenv-worldmodel: unknown command {sub!r}; use serve (default), train, evaluate or collect", file=sys.stderr)
        raise SystemExit(2)


if __name__ == "__main__":
    cli()

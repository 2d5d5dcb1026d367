"""`python -m webenv.cli` runs the `webenv` command."""

from webenv.cli.main import app

if __name__ == "__main__":
    app()

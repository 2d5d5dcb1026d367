"""`webenv.runtime.cli.service_app`: a service's console script serves with no command or with `serve`, and only
then; `--help` and a mistyped command never start the service."""

from __future__ import annotations

from typer.testing import CliRunner
from webenv.runtime.cli import service_app


def test_serves_without_a_command_or_with_serve_and_never_on_help_or_a_typo() -> None:
    served: list[int] = []
    app = service_app("webenv-x", "The x service.", lambda: served.append(1))

    @app.command()
    def hello(name: str = "world") -> None:
        print(f"hello {name}")

    runner = CliRunner()
    assert runner.invoke(app, [], prog_name="webenv-x").exit_code == 0
    assert served == [1]
    assert runner.invoke(app, ["serve"], prog_name="webenv-x").exit_code == 0
    assert served == [1, 1]

    res = runner.invoke(app, ["hello", "--name", "farm"], prog_name="webenv-x")
    assert (res.exit_code, res.output) == (0, "hello farm\n")
    for args in (["--help"], ["serve", "--help"], ["hello", "--help"]):
        res = runner.invoke(app, args, prog_name="webenv-x")
        assert res.exit_code == 0 and "Usage: webenv-x" in res.output, res.output
    assert "Without a command it serves." in runner.invoke(app, ["--help"], prog_name="webenv-x").output
    for args in (["helo"], ["--port", "1"], ["serve", "extra"]):
        res = runner.invoke(app, args, prog_name="webenv-x")
        assert res.exit_code == 2, (args, res.output)
    assert served == [1, 1]

"""One CLI library for every command line: each console script of services/*/pyproject.toml, each
`python -m webenv.<service>` and `python -m webenv.cli`, is a typer app whose every command answers `--help`; no installed package parses
arguments with argparse (scripts that are not installed may: bench.py, tools/, deploy/)."""

from __future__ import annotations

import ast
import importlib
import runpy
import sys
import tomllib
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

ROOT = Path(__file__).resolve().parents[1]
SERVICES = ROOT / "services"


def console_scripts() -> dict[str, str]:
    """Console script name -> "module:attribute", from every service's pyproject.toml."""
    out: dict[str, str] = {}
    for path in sorted(SERVICES.glob("*/pyproject.toml")):
        out.update(tomllib.loads(path.read_text())["project"].get("scripts", {}))
    return out


def command_paths(command: object, path: tuple[str, ...] = ()) -> Iterator[tuple[str, ...]]:
    """The path of `command` and of every subcommand under it, e.g. (), ("serve",), ("worldmodel", "build")."""
    yield path
    for name, sub in sorted(getattr(command, "commands", {}).items()):
        yield from command_paths(sub, (*path, name))


def test_no_installed_package_imports_argparse() -> None:
    offenders = []
    for path in sorted([*SERVICES.glob("*/src/webenv/**/*.py"), *(ROOT / "libs").glob("*/src/webenv/**/*.py")]):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            if any(n.split(".")[0] == "argparse" for n in names):
                offenders.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert not offenders, f"installed commands use typer (webenv.runtime.cli.service_app), not argparse: {offenders}"


def test_every_service_has_a_console_script() -> None:
    scripts = console_scripts()
    services = {p.parent.name for p in SERVICES.glob("*/pyproject.toml")} - {"sdk", "cli"}  # cli: the client
    assert {f"webenv-{s}" for s in services} <= set(scripts), scripts
    assert scripts["webenv"] == "webenv.cli.main:app"  # the `webenv` command is the client's (services/cli)


@pytest.mark.parametrize("script", sorted(console_scripts()))
def test_help_answers_on_every_command_of_every_console_script(script: str) -> None:
    module, attr = console_scripts()[script].split(":")
    app = getattr(importlib.import_module(module), attr)
    assert isinstance(app, typer.Typer), f"{script} -> {module}:{attr} is not a typer app"
    paths = list(command_paths(typer.main.get_command(app)))
    if script != "webenv":
        assert ("serve",) in paths, f"{script}: built by webenv.runtime.cli.service_app, which adds `serve`"
    runner = CliRunner(env={"COLUMNS": "300"})  # help and errors unwrapped
    for path in paths:
        res = runner.invoke(app, [*path, "--help"], prog_name=script)
        assert res.exit_code == 0, f"{script} {' '.join(path)} --help: {res.output}"
        assert f"Usage: {' '.join([script, *path])}" in res.output, res.output
    res = runner.invoke(app, ["no-such-command"], prog_name=script)
    assert res.exit_code == 2 and "No such command" in res.output, res.output


@pytest.mark.parametrize("service", sorted(p.parent.name for p in SERVICES.glob("*/src/webenv/*/__main__.py")
                                            if p.parent.name != "cli"))
def test_python_m_runs_the_same_app(service: str, monkeypatch: pytest.MonkeyPatch,
                                    capsys: pytest.CaptureFixture[str]) -> None:
    """`python -m webenv.<service>` (what the Dockerfiles run) dispatches to the app; run in this process."""
    monkeypatch.setattr(sys, "argv", [f"webenv-{service}", "--help"])
    with warnings.catch_warnings(), pytest.raises(SystemExit) as exited:
        warnings.simplefilter("ignore", RuntimeWarning)  # runpy: the module is imported already (by the test above)
        runpy.run_module(f"webenv.{service}", run_name="__main__", alter_sys=True)
    assert exited.value.code == 0
    out = " ".join(capsys.readouterr().out.split())  # rich wraps the help at the terminal's width
    assert f"Usage: python -m webenv.{service} " in out and "Without a command it serves." in out, out


def test_python_m_webenv_cli_runs_the_webenv_command(monkeypatch: pytest.MonkeyPatch,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    """`python -m webenv.cli` is the `webenv` command (the client serves nothing: no `serve`)."""
    monkeypatch.setattr(sys, "argv", ["webenv", "--help"])
    with warnings.catch_warnings(), pytest.raises(SystemExit) as exited:
        warnings.simplefilter("ignore", RuntimeWarning)
        runpy.run_module("webenv.cli", run_name="__main__", alter_sys=True)
    assert exited.value.code == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "Usage: python -m webenv.cli " in out and "train and evaluate web agents" in out, out

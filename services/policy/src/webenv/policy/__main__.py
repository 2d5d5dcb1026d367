"""`python -m webenv.policy` / `webenv-policy`: serve PolicyService.

`webenv-policy build-tiny-model --out DIR` builds the tiny local model used by tests and demos.
"""

from __future__ import annotations

import json
from pathlib import Path

import typer
from webenv.runtime import run
from webenv.runtime.cli import service_app

from .app import serving_app
from .config import Settings


async def main(settings: Settings) -> None:
    async with serving_app(settings) as (server, _):
        await server.wait_for_termination()


app = service_app("webenv-policy", "The policy: PolicyService (oracle, random, explore and LLM policies).",
                  lambda: run(main, Settings, name="webenv-policy"))
cli = app  # the console script (pyproject.toml)


@app.command("build-tiny-model")
def build_tiny_model_command(
    out: Path = typer.Option(..., help="Folder to write (created if missing)."),
    vocab_size: int = typer.Option(2048),
    # head_dim = hidden / heads must be one vLLM's CPU attention supports (64 works; 16 does not).
    hidden: int = typer.Option(128),
    heads: int = typer.Option(2),
    layers: int = typer.Option(2),
    train_steps: int = typer.Option(0, help="Warm-up steps teaching the answer format."),
    seed: int = typer.Option(0),
) -> None:
    """A tiny Llama-style model + BPE tokenizer trained on memory prompts, built locally (tests, demos; no downloads)."""
    from webenv.llm.tinymodel import build_tiny_model

    from .synthetic import corpus

    path = build_tiny_model(out, corpus(2000, seed), vocab_size=vocab_size, hidden=hidden, layers=layers, heads=heads,
                            train_steps=train_steps, seed=seed)
    typer.echo(json.dumps({"model_path": str(path)}))


if __name__ == "__main__":
    cli()

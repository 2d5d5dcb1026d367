"""`python -m webenv.judge` / `webenv-judge`: serve JudgeService; commands build the tiny model and calibrate.

    webenv-judge                              serve (configured by WEBENV_* variables)
    webenv-judge build-tiny-model --out DIR   write a tiny local judge model (tests, benchmarks, demos)
    webenv-judge calibrate [--n N] [--out F]  agreement of the LLM judge with ground truth
"""

from __future__ import annotations

import asyncio
import json
import logging
from pathlib import Path
from typing import Literal

import typer
from webenv.judge.cache import VerdictCache
from webenv.judge.config import Settings
from webenv.judge.engine import Judge
from webenv.judge.llm import LlmJudge, make_backend
from webenv.judge.rubric import RubricCache
from webenv.judge.servicer import JudgeServicer
from webenv.runtime import run, serve
from webenv.runtime.cli import service_app
from webenv.v1 import judge_pb2_grpc

log = logging.getLogger("webenv.judge")


def make_llm_judge(settings: Settings) -> LlmJudge | None:
    """The LLM judge with the configured backend (not started), or None."""
    backend = make_backend(settings)
    if backend is None:
        return None
    return LlmJudge(
        backend,
        VerdictCache(settings.judge_cache_size),
        constrained=settings.judge_llm_constrained,
        concurrency=settings.judge_llm_concurrency,
        timeout_seconds=settings.judge_llm_timeout_seconds,
        max_tokens=settings.judge_llm_max_tokens,
        max_keypoints=settings.judge_max_keypoints,
        keypoint_chars=settings.judge_keypoint_chars,
    )


async def main(settings: Settings) -> None:
    """Serve JudgeService until SIGTERM."""
    judge = Judge(RubricCache(settings.judge_rubric_cache_size, settings.judge_max_regex_chars))

    async def start() -> None:  # the port is bound with health NOT_SERVING while the model loads
        llm = make_llm_judge(settings)
        if llm is not None:
            await llm.start()  # loads the model (may take a while)
        judge.llm = llm
        log.info("judge ready", extra={"llm_backend": settings.judge_llm_backend})

    async def close() -> None:
        if judge.llm is not None:
            await judge.llm.close()

    await serve("judge", settings, [(judge_pb2_grpc.add_JudgeServiceServicer_to_server,
                                     JudgeServicer(judge, settings.judge_max_regex_chars), "webenv.v1.JudgeService")],
                start=start, close=close)


app = service_app("webenv-judge", "The judge: JudgeService (rubrics, criteria, LLM judging).",
                  lambda: run(main, Settings, name="webenv-judge"))
cli = app  # the console script (pyproject.toml)


@app.command("build-tiny-model")
def build_tiny_model_command(out: str = typer.Option(..., help="Folder to write the model and tokenizer to."),
                             seed: int = typer.Option(0)) -> None:
    """Write a tiny local judge model and tokenizer (tests, benchmarks, demos; no downloads)."""
    from webenv.judge.examples import build_tiny_judge_model

    path = build_tiny_judge_model(out, seed=seed)
    typer.echo(f"tiny judge model written to {path}")


@app.command()
def calibrate(
    n: int = typer.Option(20, help="Episodes (half successful)."),
    steps: int = typer.Option(8, help="Steps per episode."),
    seed: int = typer.Option(0),
    model: str = typer.Option("", help="Local model folder (transformers backend)."),
    free: bool = typer.Option(False, "--free", help="transformers: free generation, not constrained."),
    base_url: str = typer.Option("", help="OpenAI-compatible server, e.g. http://localhost:8000/v1."),
    model_name: str = typer.Option("", help="Model name for the OpenAI-compatible server."),
    api: Literal["chat", "completions"] = typer.Option("chat"),
    timeout: float = typer.Option(60.0, help="Seconds per LLM call."),
    out: str = typer.Option("", help="Write the JSON report here."),
    sites: str = typer.Option("", envvar="WEBENV_SITES_ADDR", help="TaskService address for live calibration."),
    browser: str = typer.Option("", envvar="WEBENV_BROWSER_ADDR", help="Browser farm address for live calibration."),
) -> None:
    """Agreement of the LLM judge with ground truth: offline shop episodes, or live ones with --sites and --browser."""
    from webenv.judge import calibrate as cal

    backend = cal.backend(model, base_url=base_url, model_name=model_name, api=api)
    if backend is None:
        raise typer.BadParameter("give --model DIR or --base-url URL, or set WEBENV_JUDGE_LLM_BACKEND",
                                 param_hint="--model")
    llm = LlmJudge(backend, VerdictCache(0), constrained=not free, timeout_seconds=timeout, max_tokens=24)
    if sites and browser:
        report = asyncio.run(cal.calibrate_live(llm, sites, browser, n, seed))
    else:
        report = asyncio.run(cal.calibrate(llm, n, steps, seed))
    if out:
        Path(out).write_text(json.dumps(report, indent=2))
    typer.echo(cal.format_report(report))


if __name__ == "__main__":
    cli()

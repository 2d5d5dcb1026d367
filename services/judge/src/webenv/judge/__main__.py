"""Entry point: `python -m webenv.judge` serves JudgeService; subcommands build the tiny model and calibrate.

    webenv-judge                              serve (configured by WEBENV_* variables)
    webenv-judge build-tiny-model --out DIR   write a tiny local judge model (tests, benchmarks, demos)
    webenv-judge calibrate [--n N] [--out F]  agreement of the LLM judge with ground truth
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys

from webenv.judge.cache import VerdictCache
from webenv.judge.config import Settings
from webenv.judge.engine import Judge
from webenv.judge.llm import LlmJudge, make_backend
from webenv.judge.rubric import RubricCache
from webenv.judge.servicer import JudgeServicer
from webenv.runtime import run, serve
from webenv.v1 import judge_pb2_grpc

log = logging.getLogger("webenv.judge")


def make_llm_judge(settings: Settings) -> LlmJudge | None:
    """The LLM judge with the configured backend, or None (loads the model: may take a while)."""
    backend = make_backend(settings)
    if backend is None:
        return None
    return LlmJudge(
        backend,
        VerdictCache(settings.judge_cache_size),
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
        judge.llm = await asyncio.to_thread(make_llm_judge, settings)
        log.info("judge ready", extra={"llm_backend": settings.judge_llm_backend})

    async def close() -> None:
        if judge.llm is not None:
            await judge.llm.close()

    await serve("judge", settings, [(judge_pb2_grpc.add_JudgeServiceServicer_to_server,
                                     JudgeServicer(judge, settings.judge_max_regex_chars), "webenv.v1.JudgeService")],
                start=start, close=close)


def _build_tiny_model(argv: list[str]) -> None:
    from webenv.judge.tinymodel import build_tiny_model

    parser = argparse.ArgumentParser(prog="webenv-judge build-tiny-model")
    parser.add_argument("--out", required=True, help="folder to write the model and tokenizer to")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    path = build_tiny_model(args.out, seed=args.seed)
    print(f"tiny judge model written to {path}")


def cli() -> None:
    """Console script `webenv-judge`."""
    argv = sys.argv[1:]
    if argv and argv[0] == "build-tiny-model":
        _build_tiny_model(argv[1:])
        return
    if argv and argv[0] == "calibrate":
        from webenv.judge.calibrate import cli as calibrate_cli

        calibrate_cli(argv[1:])
        return
    if argv and argv[0] not in ("serve",):
        print(__doc__, file=sys.stderr)
        raise SystemExit(2)
    run(main, Settings, name="webenv-judge")


if __name__ == "__main__":
    cli()

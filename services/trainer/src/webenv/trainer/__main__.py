"""`python -m webenv.trainer` / `webenv-trainer`: serve TrainerService.

The port is bound with health NOT_SERVING while unfinished jobs are reloaded; they resume in the
background once the server is SERVING.
"""

from __future__ import annotations

from webenv.runtime import run, serve
from webenv.runtime.cli import service_app
from webenv.v1 import trainer_pb2_grpc

from .config import Settings
from .jobs import JobManager
from .servicer import TrainerServicer


async def main(settings: Settings) -> None:
    jobs = JobManager(settings)
    await serve("trainer", settings, [(trainer_pb2_grpc.add_TrainerServiceServicer_to_server, TrainerServicer(jobs),
                                       "webenv.v1.TrainerService")], start=jobs.start, close=jobs.close)


app = service_app("webenv-trainer", "The trainer: TrainerService (BC, filtered BC, policy gradient jobs).",
                  lambda: run(main, Settings, name="webenv-trainer"))
cli = app  # the console script (pyproject.toml)


if __name__ == "__main__":
    cli()

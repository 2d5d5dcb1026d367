"""`python -m webenv.trainer` / `webenv-trainer`: serve TrainerService.

The port is bound with health NOT_SERVING while unfinished jobs are reloaded; they resume in the
background once the server is SERVING.
"""

from __future__ import annotations

from webenv.runtime import Server, run
from webenv.v1 import trainer_pb2_grpc

from .config import Settings
from .jobs import JobManager
from .servicer import TrainerServicer


async def main(settings: Settings) -> None:
    jobs = JobManager(settings)
    server = Server("trainer", settings)
    server.add_service(trainer_pb2_grpc.add_TrainerServiceServicer_to_server, TrainerServicer(jobs),
                       "webenv.v1.TrainerService")
    try:
        async with server:
            await jobs.start()
            await server.set_serving()
            await server.wait_for_termination()
    finally:
        await jobs.close()


def cli() -> None:
    """Console script `webenv-trainer`."""
    run(main, Settings, name="webenv-trainer")


if __name__ == "__main__":
    cli()

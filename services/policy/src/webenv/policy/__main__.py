"""`python -m webenv.policy` / `webenv-policy`: serve PolicyService.

`webenv-policy build-tiny-model --out DIR` builds the tiny local model used by tests and demos.
"""

from __future__ import annotations

import sys

from webenv.runtime import Server, run
from webenv.v1 import policy_pb2_grpc

from .app import PolicyApp
from .config import Settings


async def main(settings: Settings) -> None:
    app = PolicyApp(settings)
    server = Server("policy", settings)
    server.add_service(policy_pb2_grpc.add_PolicyServiceServicer_to_server, app.servicer, "webenv.v1.PolicyService")
    try:
        async with server:
            await app.start()  # health stays NOT_SERVING until the model is loaded
            await server.set_serving()
            await server.wait_for_termination()
    finally:
        await app.close()


def cli() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "build-tiny-model":
        from .tinymodel import main as build

        build(sys.argv[2:])
        return
    run(main, Settings, name="webenv-policy")


if __name__ == "__main__":
    cli()

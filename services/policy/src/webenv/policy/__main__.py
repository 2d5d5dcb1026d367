"""`python -m webenv.policy` / `webenv-policy`: serve PolicyService.

`webenv-policy build-tiny-model --out DIR` builds the tiny local model used by tests and demos.
"""

from __future__ import annotations

import sys

from webenv.runtime import run, serve
from webenv.v1 import policy_pb2_grpc

from .app import PolicyApp
from .config import Settings


async def main(settings: Settings) -> None:
    app = PolicyApp(settings)  # health stays NOT_SERVING until app.start() has loaded the model
    await serve("policy", settings, [(policy_pb2_grpc.add_PolicyServiceServicer_to_server, app.servicer,
                                      "webenv.v1.PolicyService")], start=app.start, close=app.close)


def cli() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "build-tiny-model":
        from .tinymodel import main as build

        build(sys.argv[2:])
        return
    run(main, Settings, name="webenv-policy")


if __name__ == "__main__":
    cli()

"""The bare ASGI app for ASGI servers and openenv-core's tooling (`openenv.yaml`: `uvicorn webenv.openenv.asgi:app`),
settings from WEBENV_* as the service reads them. `python -m webenv.openenv` serves the same app with the runtime's
gRPC health and /metrics beside it; prefer it."""

from webenv.openenv.app import make_app
from webenv.openenv.config import Settings
from webenv.openenv.env import Backend

app = make_app(Backend(Settings()))

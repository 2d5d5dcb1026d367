"""Where the local stack runs, for every client: the CLI, the adapters (`webenv.compat`), the OpenEnv server and the
examples find a service by one rule (``address``).

``webenv up`` records where its services listen in ``.webenv/stack.json`` (``WEBENV_STACK_FILE`` names another file)
while it runs; ``running_stack`` reads it, and forgets a file whose ``webenv up`` is gone. A service's address is, in
order: the one given (a flag, an argument), ``WEBENV_<SERVICE>_ADDR``, the running stack's, the service's default
port on localhost. So a stack started with ``webenv up --free-ports`` is found without address flags, and one on the
default ports too.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

STATE_FILE = "stack.json"
#: Where each service listens when nothing says otherwise (its default WEBENV_GRPC_PORT).
DEFAULT_ADDRS = {
    "browser": "localhost:50051", "policy": "localhost:50052", "worldmodel": "localhost:50053",
    "judge": "localhost:50054", "sites": "localhost:50055", "collector": "localhost:50056",
    "trainer": "localhost:50057", "gateway": "localhost:50058",
}  # fmt: skip


def state_path() -> Path:
    """Where clients look for the stack `webenv up` runs: WEBENV_STACK_FILE, else .webenv/stack.json here."""
    return Path(os.environ.get("WEBENV_STACK_FILE") or Path(".webenv") / STATE_FILE)


def running_stack(path: Path | None = None) -> dict | None:
    """The state `webenv up` wrote (addresses by service), or None when there is none or its process is gone."""
    path = path or state_path()
    try:
        state = json.loads(path.read_text(encoding="utf-8"))
        os.kill(int(state["pid"]), 0)  # a stack whose `webenv up` died is stale
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return state if isinstance(state, dict) else None


def address(service: str, given: str | None = None) -> str:
    """The address of ``service`` (a key of DEFAULT_ADDRS): ``given``, else WEBENV_<SERVICE>_ADDR, else the running
    `webenv up`'s (``running_stack``), else its default port on localhost."""
    if given:
        return given
    if os.environ.get(f"WEBENV_{service.upper()}_ADDR"):
        return os.environ[f"WEBENV_{service.upper()}_ADDR"]
    state = running_stack()
    addresses = state.get("addresses") if state is not None else None
    if isinstance(addresses, dict) and addresses.get(service):
        return str(addresses[service])
    return DEFAULT_ADDRS[service]

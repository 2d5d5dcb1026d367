"""The local stack as processes: sites, browser farm, policy, judge, collector and gateway (and the world model when
a model directory is given), started health-gated. It is the platform client's (webenv-cli): `webenv up`, `webenv
demo`, `webenv train --stack`, `webenv worldmodel build`, the cross-service tests and the benches all use this one
launcher; it needs the services installed in the same environment (each runs as `python -m webenv.<name>`).

Each service is ``python -m webenv.<name>`` with WEBENV_* variables; start-up waits for its gRPC health check
to say SERVING before the next one that depends on it starts, and shutdown sends SIGTERM in reverse order
(killing what does not exit within the grace period), so Ctrl-C leaves no orphans. ``webenv up`` records the addresses in ``<data_dir>/stack.json`` while it runs, and
every client reads it (``webenv.client.stack``: the commands, the adapters, the OpenEnv server), so a stack on free
ports needs no address flags.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc
from webenv.client import make_sync_channel
from webenv.client.stack import STATE_FILE, running_stack
from webenv.runtime.ports import free_port

SERVICES = ("sites", "browser", "policy", "judge", "collector", "trainer", "gateway")
DEFAULT_PORTS = {
    "browser": (50051, 9451), "policy": (50052, 9452), "worldmodel": (50053, 9453), "judge": (50054, 9454),
    "sites": (50055, 9455), "collector": (50056, 9456), "trainer": (50057, 9457), "gateway": (50058, 9458),
}  # fmt: skip
#: Where `webenv worldmodel build` leaves its model, and where `webenv up` looks for one.
DEFAULT_WORLDMODEL = Path(".webenv") / "worldmodel" / "model"
DEFAULT_HTTP_PORT = 8800
DEFAULT_GATEWAY_HTTP_PORT = 8080


LOCK_FILE = "stack.lock"  # held (flock) by the process that runs a stack on its data folder, with its pid inside


#: The gRPC service each process of the stack serves, asked for by name in its health check: a health answer for
#: "" would also come from another service that holds the port (the process we started then failed to bind).
HEALTH_NAMES = {
    "sites": "webenv.v1.TaskService", "browser": "webenv.v1.EnvironmentService", "policy": "webenv.v1.PolicyService",
    "judge": "webenv.v1.JudgeService", "collector": "webenv.v1.CollectorService", "trainer": "webenv.v1.TrainerService",
    "worldmodel": "webenv.v1.EnvironmentService", "gateway": "",
}  # fmt: skip


def wait_serving(address: str, timeout: float, proc: subprocess.Popen | None = None, name: str = "") -> None:
    """Block until ``address`` answers grpc.health.v1 Check with SERVING (or raise RuntimeError); for a process of
    the stack (``name``), SERVING for its own service, and only while ``proc`` still runs."""
    deadline = time.monotonic() + timeout
    with make_sync_channel(address) as ch:
        stub = health_pb2_grpc.HealthStub(ch)
        while time.monotonic() < deadline:
            if proc is not None and proc.poll() is not None:
                raise RuntimeError(f"{name or address} exited with code {proc.returncode} during start-up")
            try:
                resp = stub.Check(health_pb2.HealthCheckRequest(service=HEALTH_NAMES.get(name, "")), timeout=1.0)
                if resp.status == health_pb2.HealthCheckResponse.SERVING and (proc is None or proc.poll() is None):
                    return
            except grpc.RpcError:
                pass
            time.sleep(0.1)
    raise RuntimeError(f"{name or address} not SERVING after {timeout:.0f}s")


def last_error(log: str) -> str:
    """The error a service's start-up ended with: the last ``module.Error: message`` line of its log (the
    final line of a Python traceback), bounded; '' when there is none."""
    for line in reversed(log.splitlines()[-200:]):
        m = re.match(r"^([A-Za-z_][\w.]*(?:Error|Exception|Exit)): (.+)$", line)
        if m:
            return f"{m.group(1).rsplit('.', 1)[-1]}: {m.group(2)}"[:1000]
    return ""


@dataclass
class Stack:
    """Ports, folders and processes of one local stack."""

    data_dir: Path
    free_ports: bool = False
    sites_count: int = 200
    worldmodel: str = ""  # a model directory: the world model is served too (same EnvironmentService, simulated)
    checkpoints: str = ""  # a folder of trained checkpoints to serve (default: WEBENV_POLICY_CHECKPOINT_DIR, if set)
    extra_env: dict[str, str] = field(default_factory=dict)
    procs: dict[str, subprocess.Popen] = field(default_factory=dict)
    ports: dict[str, tuple[int, int]] = field(default_factory=dict)
    http_port: int = DEFAULT_HTTP_PORT
    gateway_http_port: int = DEFAULT_GATEWAY_HTTP_PORT
    python: str = sys.executable
    _lock: IO[str] | None = field(default=None, init=False, repr=False)  # DATA_DIR/stack.lock, open while it runs

    def __post_init__(self) -> None:
        self.data_dir = Path(self.data_dir)
        for name in self.services:
            self.ports[name] = (free_port(), free_port()) if self.free_ports else DEFAULT_PORTS[name]
        if self.free_ports:
            self.http_port = free_port()
            self.gateway_http_port = free_port()

    @property
    def services(self) -> tuple[str, ...]:
        return SERVICES + (("worldmodel",) if self.worldmodel else ())

    @property
    def checkpoint_dir(self) -> Path:
        """The checkpoint folder the policy reads and the trainer publishes to: the one named (``checkpoints``, else
        WEBENV_POLICY_CHECKPOINT_DIR), else the stack's own ``<data_dir>/checkpoints``."""
        named = self.checkpoints or os.environ.get("WEBENV_POLICY_CHECKPOINT_DIR", "")
        return Path(named).resolve() if named else self.data_dir / "checkpoints"

    def served_checkpoints(self) -> list[str]:
        """The checkpoint families of a named folder, which the policy loads at start (latest version of each) so
        their names are policies from the first run; the stack's own folder is loaded on demand (LoadCheckpoint)."""
        if not (self.checkpoints or os.environ.get("WEBENV_POLICY_CHECKPOINT_DIR")):
            return []
        root = self.checkpoint_dir
        if not root.is_dir():
            return []
        return sorted(p.name for p in root.iterdir() if p.is_dir() and any((v / "checkpoint.json").is_file()
                                                                          for v in p.glob("v[0-9]*")))

    def address(self, name: str) -> str:
        return f"127.0.0.1:{self.ports[name][0]}"

    def env_for(self, name: str) -> dict[str, str]:
        """The WEBENV_* variables of one service."""
        grpc_port, metrics_port = self.ports[name]
        env = {
            **os.environ,
            "WEBENV_GRPC_PORT": str(grpc_port),
            "WEBENV_METRICS_PORT": str(metrics_port),
            "WEBENV_HOST": "127.0.0.1",
            "WEBENV_SITES_ADDR": self.address("sites"),
            "WEBENV_BROWSER_ADDR": self.address("browser"),
            "WEBENV_POLICY_ADDR": self.address("policy"),
            "WEBENV_JUDGE_ADDR": self.address("judge"),
            "WEBENV_COLLECTOR_ADDR": self.address("collector"),
        }
        if name == "sites":
            env |= {"WEBENV_HTTP_PORT": str(self.http_port), "WEBENV_HTTP_HOST": "127.0.0.1",
                    "WEBENV_SITES_COUNT": str(self.sites_count)}
        elif name == "browser":
            env |= {"WEBENV_FARM_SITES_HTTP_ADDR": f"127.0.0.1:{self.http_port}"}
        elif name == "policy":
            env.setdefault("WEBENV_POLICY_BACKEND", "none")
            env |= {"WEBENV_POLICY_CHECKPOINT_DIR": str(self.checkpoint_dir)}
            served = self.served_checkpoints()
            if served and not env.get("WEBENV_POLICY_CHECKPOINTS"):
                env["WEBENV_POLICY_CHECKPOINTS"] = ",".join(served)
        elif name == "judge":
            env.setdefault("WEBENV_JUDGE_LLM_BACKEND", "none")
        elif name == "collector":
            env |= {"WEBENV_DATA_DIR": str(self.data_dir)}
        elif name == "trainer":
            env |= {"WEBENV_TRAINER_CHECKPOINT_DIR": str(self.checkpoint_dir),
                    "WEBENV_TRAINER_DATA_DIR": str(self.data_dir / "trainer")}
        elif name == "gateway":  # serves the collector's screenshots (the collector creates the folder first)
            env |= {"WEBENV_HTTP_PORT": str(self.gateway_http_port), "WEBENV_HTTP_HOST": "127.0.0.1",
                    "WEBENV_BLOB_DIR": str((self.data_dir / "blobs").resolve()),
                    "WEBENV_TRAINER_ADDR": self.address("trainer")}
        elif name == "worldmodel":
            env |= {"WEBENV_WORLDMODEL_MODEL_PATH": str(Path(self.worldmodel).resolve()),
                    "WEBENV_WORLDMODEL_SITES_ADDR": self.address("sites")}  # OpenSession by task id, as the farm
        env |= self.extra_env
        return env

    def claim(self) -> None:
        """Hold DATA_DIR/stack.lock for as long as this stack runs (released by ``stop``, or when this process ends).

        One stack per data folder: its collector's embedded store admits one process. A second stack on the same
        folder (a second `webenv up` in the checkout, or one started while the first is still starting, before
        its stack.json exists) is refused here, before it starts anything, with a RuntimeError that names the
        running one; before, its collector failed on the store the first one holds, with chDB's opaque
        "Error initializing EmbeddedServer"."""
        if self._lock is not None:
            return
        self.data_dir.mkdir(parents=True, exist_ok=True)
        path = self.data_dir / LOCK_FILE
        lock = open(path, "a+", encoding="utf-8")  # held open until stop()
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            lock.seek(0)
            holder = lock.read().strip()[:20]
            lock.close()
            state = running_stack(self.data_dir / STATE_FILE)
            if state is not None:
                where = (f"`webenv up`, pid {state.get('pid')}; its addresses in {self.data_dir / STATE_FILE}"
                         + (f", console {state['console']}" if state.get("console") else ""))
            else:
                where = f"pid {holder or '?'}, still starting or not `webenv up`: no {STATE_FILE} yet"
            raise RuntimeError(
                f"a stack is already running on {self.data_dir.resolve()} ({where}): use it, stop it first "
                f"(kill {state.get('pid') if state else holder or 'its process'}), or start this one with another "
                "--data-dir") from None
        lock.seek(0)
        lock.truncate()
        lock.write(f"{os.getpid()}\n")
        lock.flush()
        self._lock = lock

    def start(self, services: tuple[str, ...] = (), timeout: float = 120.0, on_ready=None) -> None:
        """Start ``services`` (default: all of this stack's) in order, each health-gated, once this process holds
        the data folder (``claim``)."""
        self.claim()
        for name in services or self.services:
            self._launch(name, name, self.env_for(name), timeout)
            if on_ready is not None:
                on_ready(name, self.address(name))

    def add_browser_node(self, node: str, timeout: float = 120.0) -> str:
        """One more browser farm node like the stack's own (same settings) on free ports, ``WEBENV_NODE_NAME=node``,
        health-gated and stopped with the stack (``procs["browser-<node>"]``). Returns its address: a collector run
        spreads its episodes over the nodes its ``env_address`` lists ("a,b")."""
        key = f"browser-{node}"
        self.ports[key] = (free_port(), free_port())
        env = self.env_for("browser") | {"WEBENV_GRPC_PORT": str(self.ports[key][0]),
                                         "WEBENV_METRICS_PORT": str(self.ports[key][1]), "WEBENV_NODE_NAME": node}
        self._launch(key, "browser", env, timeout)
        return self.address(key)

    def _launch(self, key: str, service: str, env: dict[str, str], timeout: float) -> None:
        """``python -m webenv.<service>`` as ``procs[key]`` (log ``logs/<key>.log``), then wait until it serves."""
        logs = self.data_dir / "logs"
        logs.mkdir(parents=True, exist_ok=True)
        with open(logs / f"{key}.log", "ab") as log:
            self.procs[key] = subprocess.Popen(
                [self.python, "-m", f"webenv.{service}"], env=env, stdout=log, stderr=log,
                start_new_session=True,  # Ctrl-C goes to us; we stop the children in order
            )
        try:
            wait_serving(self.address(key), timeout, self.procs[key], service)
        except RuntimeError as exc:
            text = (logs / f"{key}.log").read_text(errors="replace")
            exited = self.procs[key].poll() is not None
            self.stop()
            error = last_error(text) if exited else ""  # first, so a long traceback's tail cannot cut it off
            raise RuntimeError(f"{exc}{': ' + error if error else ''}\n--- {logs / f'{key}.log'} (tail) ---\n"
                               f"{text[-2000:]}") from None

    def write_state(self) -> Path:
        """Record where the stack runs (``data_dir/stack.json``) so later commands find it without flags."""
        path = self.data_dir / STATE_FILE
        state = {
            "pid": os.getpid(),
            "data_dir": str(self.data_dir.resolve()),
            "addresses": {name: self.address(name) for name in self.procs},
            "metrics": {name: f"127.0.0.1:{self.ports[name][1]}" for name in self.procs},
            "http": f"127.0.0.1:{self.http_port}",
        }
        if "gateway" in self.procs:
            state["console"] = f"http://127.0.0.1:{self.gateway_http_port}/"
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(state, indent=1), encoding="utf-8")
        os.replace(tmp, path)
        return path

    def remove_state(self) -> None:
        """Forget the recorded stack (only if it is this process's)."""
        path = self.data_dir / STATE_FILE
        state = running_stack(path)
        if state is not None and state.get("pid") == os.getpid():
            path.unlink(missing_ok=True)

    def stop(self, grace: float = 15.0) -> None:
        """SIGTERM every service in reverse start order; SIGKILL what is still there after ``grace``."""
        for name in reversed(list(self.procs)):
            p = self.procs[name]
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + grace
        for name in reversed(list(self.procs)):
            p = self.procs[name]
            try:
                p.wait(max(deadline - time.monotonic(), 0.1))
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        self.procs.clear()
        if self._lock is not None:
            self._lock.close()
            self._lock = None

    def dead(self) -> list[str]:
        """Services that exited."""
        return [n for n, p in self.procs.items() if p.poll() is not None]

    def __enter__(self) -> Stack:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

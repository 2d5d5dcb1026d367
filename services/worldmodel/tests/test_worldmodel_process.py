"""`python -m webenv.worldmodel` starts the service (health SERVING once loaded), stops on SIGTERM, and bad
settings exit with code 2 and a message naming the variable; its offline commands name a bad option the same way."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc
from typer.testing import CliRunner
from webenv.testing import free_port
from webenv.worldmodel.__main__ import app


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("WEBENV_")}
    env.update(extra)
    return env


def test_module_serves_and_stops(tiny_model: str) -> None:
    port, mport = free_port(), free_port()
    proc = subprocess.Popen([sys.executable, "-m", "webenv.worldmodel"],
                            env=_env(WEBENV_GRPC_PORT=str(port), WEBENV_METRICS_PORT=str(mport), WEBENV_HOST="127.0.0.1",
                                     WEBENV_WORLDMODEL_MODEL_PATH=tiny_model),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        status = None
        with grpc.insecure_channel(f"127.0.0.1:{port}") as ch:
            health = health_pb2_grpc.HealthStub(ch)
            deadline = time.monotonic() + 90
            while time.monotonic() < deadline and proc.poll() is None:
                try:
                    status = health.Check(health_pb2.HealthCheckRequest(service="webenv.v1.WorldModelService"), timeout=2).status
                    if status == health_pb2.HealthCheckResponse.SERVING:
                        break
                except grpc.RpcError:
                    pass
                time.sleep(0.3)
        assert status == health_pb2.HealthCheckResponse.SERVING, proc.stdout.read() if proc.poll() is not None else ""
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_bad_settings_exit_2() -> None:
    res = subprocess.run([sys.executable, "-m", "webenv.worldmodel"], env=_env(), capture_output=True, text=True, timeout=60)
    assert res.returncode == 2
    assert "WEBENV_WORLDMODEL_MODEL_PATH" in res.stderr
    res = subprocess.run([sys.executable, "-m", "webenv.worldmodel"],
                         env=_env(WEBENV_WORLDMODEL_MODEL_PATH="/nonexistent", WEBENV_WORLDMODEL_BACKEND="nope"),
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 2 and "WEBENV_WORLDMODEL_BACKEND" in res.stderr


def test_evaluate_and_card_commands_write_their_files_and_name_a_bad_option(transitions_file: Path,
                                                                             tmp_path: Path) -> None:
    runner = CliRunner(env={"COLUMNS": "300"})  # errors on one line each
    res = runner.invoke(app, ["evaluate", "--data", str(transitions_file), "--rollout-episodes", "2",
                              "--out", str(tmp_path / "e.json")])
    assert res.exit_code == 0, res.output
    assert "copy" in (tmp_path / "e.md").read_text() and json.loads((tmp_path / "e.json").read_text())
    for args, needle in [(["evaluate", "--data", str(tmp_path / "missing.jsonl")], "does not exist"),
                         (["card", "--model", str(tmp_path)], "no config.json")]:
        res = runner.invoke(app, args)
        assert res.exit_code == 2 and needle in res.output, (args, res.output)

"""The webenv.v1 contract itself: it lints with buf, and loads in a second language (Node.js)."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
from google.protobuf import descriptor_pool
from webenv.v1 import (  # noqa: F401  (importing registers every file in the default pool)
    browser_pb2,
    collector_pb2,
    common_pb2,
    environment_pb2,
    judge_pb2,
    policy_pb2,
    task_pb2,
    trainer_pb2,
    worldmodel_pb2,
)

ROOT = Path(__file__).resolve().parents[1]
PROTO_DIR = ROOT / "protos" / "webenv" / "v1"
NODE_DIR = ROOT / "tests" / "node"


def python_services() -> dict[str, dict[str, tuple[bool, bool, str, str]]]:
    pool = descriptor_pool.Default()
    out = {}
    for proto in sorted(PROTO_DIR.glob("*.proto")):
        fd = pool.FindFileByName(f"webenv/v1/{proto.name}")
        assert fd.package == "webenv.v1"
        for svc in fd.services_by_name.values():
            out[svc.full_name] = {
                m.name: (m.client_streaming, m.server_streaming, m.input_type.name, m.output_type.name)
                for m in svc.methods
            }
    return out


def test_buf_lint_is_clean():
    buf = ROOT / ".venv" / "bin" / "buf"
    proc = subprocess.run([str(buf), "lint"], cwd=ROOT / "protos", capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_every_service_follows_the_style():
    services = python_services()
    assert set(services) == {
        "webenv.v1.EnvironmentService", "webenv.v1.BrowserFarmService", "webenv.v1.TaskService",
        "webenv.v1.PolicyService", "webenv.v1.WorldModelService", "webenv.v1.JudgeService",
        "webenv.v1.CollectorService", "webenv.v1.TrainerService",
    }
    for methods in services.values():
        for name, (_, _, req, resp) in methods.items():
            assert (req, resp) == (f"{name}Request", f"{name}Response")


def test_every_proto_loads_in_nodejs():
    npm, node = shutil.which("npm"), shutil.which("node")
    if not (npm and node):
        pytest.fail("Node.js is not installed: run `make install`")
    if not (NODE_DIR / "node_modules" / "@grpc" / "proto-loader").exists():
        proc = subprocess.run([npm, "install", "--no-audit", "--no-fund", "--silent"], cwd=NODE_DIR,
                              capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, f"npm install failed: {proc.stderr[-2000:]}"
    proc = subprocess.run([node, "load_protos.js"], cwd=NODE_DIR, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    loaded = json.loads(proc.stdout)
    node_view = {
        svc: {m: (d["requestStream"], d["responseStream"], d["requestType"], d["responseType"]) for m, d in methods.items()}
        for svc, methods in loaded.items()
    }
    assert node_view == python_services()


def test_no_breaking_change_since_the_latest_release_tag():
    tags = subprocess.run(["git", "tag", "--list", "v*", "--sort=-v:refname"], cwd=ROOT, capture_output=True,
                          text=True, check=True).stdout.split()
    if not tags:
        pytest.skip("no v* release tag yet: the contract may still change incompatibly (see docs/api.md)")
    buf = ROOT / ".venv" / "bin" / "buf"
    proc = subprocess.run([str(buf), "breaking", "--against", f"../.git#tag={tags[0]},subdir=protos"],
                          cwd=ROOT / "protos", capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr

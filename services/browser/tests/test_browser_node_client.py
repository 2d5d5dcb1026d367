"""A Node.js client generated from protos/ at run time (@grpc/proto-loader) opens a session and steps.

It leaves `step_index` unset as a client that never heard of it does: each step must act (a repeated click counts
twice), and only a step that sends the index of the one it repeats is answered from the retry cache."""

from __future__ import annotations

import asyncio
import json
import shutil
from pathlib import Path

import pytest

NODE_DIR = Path(__file__).parent / "node"
PROTOS = Path(__file__).resolve().parents[3] / "protos"


async def ensure_node_modules() -> None:
    if all((NODE_DIR / "node_modules" / pkg).is_dir() for pkg in ("@grpc/grpc-js", "@grpc/proto-loader", "protobufjs")):
        return
    npm = shutil.which("npm")
    assert npm, "npm is not installed: run `make install` (Debian packages nodejs, npm)"
    proc = await asyncio.create_subprocess_exec(npm, "install", "--no-audit", "--no-fund", cwd=NODE_DIR,
                                                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT)
    out, _ = await proc.communicate()
    if proc.returncode != 0:
        # never a skip: the registry is reachable wherever the project installs (as test_contract's Node client)
        pytest.fail(f"npm install failed:\n{out.decode(errors='replace')[-2000:]}")


async def test_node_client_opens_and_steps(farm, page_server):
    assert shutil.which("node"), "node is not installed: run `make install` (Debian package nodejs)"
    await ensure_node_modules()
    proc = await asyncio.create_subprocess_exec(
        "node", str(NODE_DIR / "client.js"), farm.address, page_server.url("basic"), str(PROTOS),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await asyncio.wait_for(proc.communicate(), 120)
    assert proc.returncode == 0, err.decode()
    res = json.loads(out.decode().strip().splitlines()[-1])
    assert '"Welcome"' in res["first_axtree"]
    assert "clicked 1" in res["step_axtree"]
    # step_index unset (the proto default): the same click again is a new step, taken on the page, not a cached answer
    assert "clicked 2" in res["again_axtree"] and res["step_indexes"] == [0, 1, 1]
    assert res["retry_axtree"] == res["again_axtree"] and res["step_count"] == 2  # the retry by index acted once
    assert res["bad_code"] == 3  # INVALID_ARGUMENT for an action without a kind
    # its ErrorInfo, decoded with the google/rpc protos that protos/ ships
    assert (res["bad_reason"], res["bad_field"]) == ("BAD_ACTION", "action")
    assert res["closed_state"] == "SESSION_STATE_CLOSED"

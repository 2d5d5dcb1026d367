"""`webenv worldmodel build`: the newcomer's one command, end to end on the real stack (smoke preset).

The command starts the sites service, the browser farm (Chromium), policy, judge and collector as processes,
collects the three WebWorld levels on two shop websites (one training, one held out by the task catalog),
exports TRANSITIONS, builds the dataset, trains a tiny model, evaluates it on the held-out website and writes
the model card; the model directory it leaves is then served by `python -m webenv.worldmodel`, which opens a
simulated session at a recorded start page and steps it. The smoke preset keeps this to about a minute on a quiet
machine; the model it makes is not meant to be good (the real presets are measured in bench/results).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import grpc
import pytest
from webenv.actions import parse_action
from webenv.cli.stack import wait_serving
from webenv.testing import free_port
from webenv.v1 import common_pb2, environment_pb2, environment_pb2_grpc

pytestmark = pytest.mark.timeout(600)


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("WEBENV_")} | {"WEBENV_LOG_JSON": "false"}


def test_build_leaves_a_served_model_with_its_card(tmp_path: Path) -> None:
    out = tmp_path / "wm"
    webenv = Path(sys.executable).with_name("webenv")
    res = subprocess.run([str(webenv), "worldmodel", "build", "--out", str(out), "--preset", "smoke"], env=_env(),
                         capture_output=True, text=True, timeout=540)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    for stage in ("[1/4] collect", "[2/4] dataset", "[3/4] train", "[4/4] evaluate", "model ready"):
        assert stage in res.stdout, stage
    model = out / "model"
    sites = json.loads((out / "data" / "sites.json").read_text())
    assert sorted(s["split"] for s in sites.values()) == ["test", "train"]  # the catalog's split, one of each
    build = json.loads((model / "build.json").read_text())
    assert set(build["collect"]["runs"]) == {"random_crawl", "exploration", "task_oriented"}
    assert all(r["steps"] > 0 and r["errored"] == 0 for r in build["collect"]["runs"].values())
    ev = json.loads((model / "eval.json").read_text())
    held_out = next(h for h, s in sites.items() if s["split"] == "test")
    assert ev["test_sites"] == 1 and ev["single_step"]["transitions"] > 0
    exemplar_sites = {json.loads(line)["site"] for line in (model / "page_actions.jsonl").read_text().splitlines()}
    assert held_out not in exemplar_sites  # the held-out website never taught the model
    for f in model.iterdir():  # no page of the held-out website ships in the model directory (nor its name)
        assert held_out.split(".")[0] not in f.read_text(errors="ignore"), f.name
    card = (model / "MODEL_CARD.md").read_text()
    for section in ("## Data", "## Model", "## Evaluation (held-out websites only)", "random_crawl", "| copy_state |",
                    "**retrieval by analogy**", "| rules_only |", "diff F1"):
        assert section in card, section

    # the directory is what the service serves: a simulated session from a recorded start page
    start = json.loads((model / "start_states.jsonl").read_text().splitlines()[0])
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "webenv.worldmodel"], stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT,
                            env=_env() | {"WEBENV_GRPC_PORT": str(port), "WEBENV_METRICS_PORT": str(free_port()),
                                          "WEBENV_HOST": "127.0.0.1", "WEBENV_WORLDMODEL_MODEL_PATH": str(model)})
    try:
        wait_serving(f"127.0.0.1:{port}", 120, proc, "worldmodel")
        with grpc.insecure_channel(f"127.0.0.1:{port}") as ch:
            env = environment_pb2_grpc.EnvironmentServiceStub(ch)
            opened = env.OpenSession(environment_pb2.OpenSessionRequest(start_url=start["url"]), timeout=30)
            assert opened.session.env_kind == common_pb2.ENV_KIND_WORLD_MODEL and opened.observation.axtree == start["state"]
            step = env.Step(environment_pb2.StepRequest(session_id=opened.session.session_id, step_index=0,
                                                        action=parse_action("scroll(0, 200)")), timeout=30)
            assert step.step_index == 0 and step.observation.axtree == start["state"]
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()

"""A collector run against the world model's address stores simulated episodes marked as such.

Everything is real and runs as processes on free ports: a tiny world model is built here with
`python -m webenv.worldmodel dataset` and `train` from the TRANSITIONS exports of a tiny two-shop web
(`webenv.worldmodel.tinyweb`), then served by `python -m webenv.worldmodel` (the model directory's recorded pages
are the start states); `python -m webenv.policy` serves the
`random` policy, which reads element ids from the AXTREE text the world model predicts; `python -m
webenv.collector` stores into embedded chDB in the test's folder, its environment address being the world
model's port (no judge is needed: goal-less crawl episodes are not judged, so the judge address points at a
closed port). A random-crawl run is started and watched over a real gRPC channel, then exported as JSONL and
TRANSITIONS, and every stored step is checked against the world model itself: asking `Predict` for the same
state, links, URL, action and history gives exactly the next observation the collector stored — or, where the
session went back to a URL it had loaded, that page again (a session remembers its pages; Predict is
stateless) — so the observations are the model's predictions and not copies or browser pages. Last, the stored
episodes read back through the collector's reader (`ReadEpisodes`) and replayed through the world model
(`webenv.worldmodel.conformance`) answer the same contract fields (done, truncated at the collector's horizon,
target_element_id, errors, formats, step counts).
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import grpc
import pytest
from google.protobuf import json_format
from grpc_health.v1 import health_pb2, health_pb2_grpc
from webenv.actions import format_action
from webenv.testing import free_port, scrape, wait_for_port
from webenv.v1 import collector_pb2, collector_pb2_grpc, common_pb2, worldmodel_pb2, worldmodel_pb2_grpc
from webenv.worldmodel import conformance, tinyweb
from webenv.worldmodel.page import links_from_markdown

pytestmark = pytest.mark.timeout(240)

START_URLS = ["http://shop-0000.web.test/", "http://shop-0001.web.test/products"]
EPISODES = 6
HORIZON = 4  # crawl episodes are medium difficulty: horizons.medium caps them
NO_CHANGE = {"wait", "noop", "scroll", "hover"}  # actions the simulated environment answers without the model

# Run in a subprocess against the stopped collector's chDB folder: argv = DSN, run id; prints JSON rows.
STORE_QUERY = """
import json, sys
import clickhouse_connect
client = clickhouse_connect.get_client(dsn=sys.argv[1])
rows = client.query(
    "SELECT env_kind, count(), sum(steps), countIf(error != '') FROM webenv.episodes FINAL"
    " WHERE run_id = {run:String} GROUP BY env_kind", parameters={"run": sys.argv[2]}).result_rows
print(json.dumps([list(r) for r in rows]))
"""


# --- processes ------------------------------------------------------------------------------------------------------
def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("WEBENV_")}
    env.update(WEBENV_HOST="127.0.0.1", WEBENV_LOG_JSON="false", **extra)
    return env


class Proc:
    """One service started as `python -m webenv.<name>`, its output in a log file."""

    def __init__(self, name: str, log_dir: Path, **env: str) -> None:
        self.name = name
        self.port, self.metrics_port = free_port(), free_port()
        self.log = log_dir / f"{name}.log"
        with self.log.open("wb") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", f"webenv.{name}"],
                env=_env(WEBENV_GRPC_PORT=str(self.port), WEBENV_METRICS_PORT=str(self.metrics_port), **env),
                stdout=out, stderr=subprocess.STDOUT, start_new_session=True)

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def tail(self, n: int = 3000) -> str:
        return f"--- {self.name} log (tail) ---\n" + self.log.read_text(errors="replace")[-n:]

    def wait_serving(self, timeout: float) -> None:
        """The port binds first; health says SERVING once the service is ready (the model loaded)."""
        deadline = time.monotonic() + timeout
        try:
            wait_for_port(self.port, timeout=timeout)
        except TimeoutError:
            raise AssertionError(f"{self.name} never bound its port\n{self.tail()}") from None
        with grpc.insecure_channel(self.address) as ch:
            health = health_pb2_grpc.HealthStub(ch)
            while time.monotonic() < deadline:
                assert self.proc.poll() is None, f"{self.name} exited with {self.proc.returncode}\n{self.tail()}"
                try:
                    if health.Check(health_pb2.HealthCheckRequest(), timeout=2).status == health_pb2.HealthCheckResponse.SERVING:
                        return
                except grpc.RpcError:
                    pass
                time.sleep(0.2)
        raise AssertionError(f"{self.name} not SERVING after {timeout:.0f}s\n{self.tail()}")

    def stop(self, grace: float = 20.0) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(grace)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode


def _dead_port_address() -> str:
    return f"127.0.0.1:{free_port()}"  # nothing listens: a crawl must not need the judge or the task catalog


# --- the test -------------------------------------------------------------------------------------------------------
def test_collector_rollouts_against_world_model(tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    logs.mkdir()
    exports = tinyweb.write_exports(tmp_path / "exports")
    transitions = tmp_path / "transitions.jsonl"

    # A tiny world model, built by the service's own CLI (seconds on one thread).
    res = subprocess.run([sys.executable, "-m", "webenv.worldmodel", "dataset", "--sites", str(exports["sites"]),
                          "--out", str(transitions), "--export", f"random_crawl:{exports['axtree']}:{exports['markdown']}"],
                         env=_env(), capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr[-3000:]
    model_out = tmp_path / "wm"
    res = subprocess.run(
        [sys.executable, "-m", "webenv.worldmodel", "train", "--data", str(transitions), "--out", str(model_out),
         "--size", "tiny", "--max-len", "1024", "--batch-size", "4", "--lr", "5e-3", "--max-steps", "60",
         "--eval-every", "60", "--max-minutes", "1.5", "--threads", "1"],
        env=_env(), capture_output=True, text=True, timeout=150)
    assert res.returncode == 0, res.stderr[-3000:]
    trained = json.loads(res.stdout.strip().splitlines()[-1])
    assert trained["last_loss"] < trained["first_loss"], trained
    model_dir = trained["model_dir"]

    procs: list[Proc] = []
    try:
        # shop-0001 is held out: its start pages come from the data, the model directory holds training websites' only
        wm = Proc("worldmodel", logs, WEBENV_WORLDMODEL_MODEL_PATH=model_dir, WEBENV_WORLDMODEL_MAX_NEW_TOKENS="160",
                  WEBENV_WORLDMODEL_START_STATES=str(transitions),
                  # the value memory off: what is checked below is that a stored page is the model's own prediction
                  # (the memory's rewrites are test_worldmodel_consistency.py's)
                  WEBENV_WORLDMODEL_THREADS="1", WEBENV_WORLDMODEL_VALUES_KEPT="0")
        policy = Proc("policy", logs, WEBENV_POLICY_BACKEND="none", WEBENV_POLICY_DEFAULT="random")
        procs += [wm, policy]
        wm.wait_serving(90)
        policy.wait_serving(60)
        collector = Proc("collector", logs, WEBENV_DATA_DIR=str(tmp_path / "data"),
                         WEBENV_STORE_URL=f"chdb://{tmp_path / 'store'}", WEBENV_BROWSER_ADDR=wm.address,
                         WEBENV_POLICY_ADDR=policy.address, WEBENV_JUDGE_ADDR=_dead_port_address(),
                         WEBENV_SITES_ADDR=_dead_port_address(), WEBENV_FLUSH_INTERVAL_SECONDS="0.05",
                         WEBENV_STEP_TIMEOUT_SECONDS="30", WEBENV_GRACE_SECONDS="2")
        procs.append(collector)
        collector.wait_serving(60)

        spec = collector_pb2.RunSpec(
            name="wm-crawl", start_urls=START_URLS, episodes=EPISODES, policy="random", seed=11, concurrency=3,
            env_address=wm.address, horizons=collector_pb2.Horizons(easy=HORIZON, medium=HORIZON, hard=HORIZON),
            episode_timeout_seconds=60,
            # A farm-style spec: the world model simulates AXTREE (and MARKDOWN derived from it) and leaves HTML
            # out instead of refusing it, so the run switches to simulation by address alone.
            observation_spec=common_pb2.ObservationSpec(formats=[common_pb2.OBSERVATION_FORMAT_AXTREE,
                                                                 common_pb2.OBSERVATION_FORMAT_HTML,
                                                                 common_pb2.OBSERVATION_FORMAT_MARKDOWN]))
        with grpc.insecure_channel(collector.address) as ch:
            stub = collector_pb2_grpc.CollectorServiceStub(ch)
            run = (stub.StartRun(collector_pb2.StartRunRequest(spec=spec), timeout=30)).run
            last = None
            for report in stub.WatchRun(collector_pb2.WatchRunRequest(run_id=run.run_id), timeout=90):
                last = report
            assert last is not None
            counts = last.run.counts
            assert last.run.state == collector_pb2.RUN_STATE_SUCCEEDED, (str(last.run), collector.tail())
            assert (counts.planned, counts.finished, counts.errored) == (EPISODES, EPISODES, 0), str(counts)

            exp = stub.ExportRun(collector_pb2.ExportRunRequest(
                run_id=run.run_id, format=collector_pb2.EXPORT_FORMAT_JSONL, destination=str(tmp_path / "jsonl")), timeout=60)
            episodes = [json.loads(line) for line in Path(exp.paths[0]).read_text().splitlines()]
            exp_t = stub.ExportRun(collector_pb2.ExportRunRequest(
                run_id=run.run_id, format=collector_pb2.EXPORT_FORMAT_TRANSITIONS,
                destination=str(tmp_path / "transitions-out")), timeout=60)
            exported_transitions = [json.loads(line) for p in exp_t.paths if p.endswith(".jsonl")
                                    for line in Path(p).read_text().splitlines()]

        # Stored: every episode, simulated, error-free, with its steps.
        assert len(episodes) == EPISODES
        for ep in episodes:
            assert ep["env_kind"] == "world_model", ep["env_kind"]
            assert ep["env_address"] == wm.address
            assert ep["level"] == "random_crawl" and ep["policy"] == "random"
            assert ep["error"] == "" and ep["attempts"] == 1, ep["error"]
            site = ep["site"]  # a crawl task's site is the start URL's host
            assert json.loads(ep["site_state_json"])["simulated"] is True  # the world model's CloseSession evidence
            assert 1 <= ep["steps"] <= HORIZON and len(ep["steps_detail"]) == ep["steps"]
            assert [s["step_index"] for s in ep["steps_detail"]] == list(range(ep["steps"]))
            assert ep["steps_detail"][0]["url"] in START_URLS
            assert ep["steps_detail"][0]["axtree"] == tinyweb.page(site, "/" + ep["steps_detail"][0]["url"].split("/", 3)[3])[0]
        assert {ep["site"] for ep in episodes} == set(tinyweb.SITES)
        n_steps = sum(ep["steps"] for ep in episodes)
        assert counts.steps == n_steps
        assert exported_transitions and all(t["env_kind"] == "world_model" for t in exported_transitions)
        assert len(exported_transitions) == n_steps

        # The stored observations are the world model's predictions: replaying each step through Predict
        # (same state, links, URL, action, history and instruction; greedy) gives exactly what was stored after it,
        # unless the session loaded that URL before and recalled its page.
        predicted = navigated = 0
        with grpc.insecure_channel(wm.address) as ch:
            wm_stub = worldmodel_pb2_grpc.WorldModelServiceStub(ch)
            for ep in episodes:
                history: list[worldmodel_pb2.Transition] = []
                steps = ep["steps_detail"]
                loaded = {steps[0]["url"]: steps[0]["axtree"]}
                for i, st in enumerate(steps):
                    action = json_format.Parse(st["action_json"], common_pb2.Action())
                    after_axtree = steps[i + 1]["axtree"] if i + 1 < len(steps) else ep["final_axtree"]
                    after_url = steps[i + 1]["url"] if i + 1 < len(steps) else ep["final_url"]
                    assert st["url_after"] == after_url
                    assert st["last_action_error"] == "", st
                    kind = action.WhichOneof("kind")
                    if kind in NO_CHANGE or kind == "answer":
                        assert (after_axtree, after_url) == (st["axtree"], st["url"]), (kind, ep["episode_id"], i)
                    else:
                        pred = wm_stub.Predict(worldmodel_pb2.PredictRequest(
                            format=worldmodel_pb2.STATE_FORMAT_AXTREE, state=st["axtree"], url=st["url"], action=action,
                            links=links_from_markdown(st["markdown"]), history=history, instruction=ep["instruction"]),
                            timeout=60)
                        history_move = kind in ("go_back", "go_forward")  # the session's own back stack decides
                        recalled = (after_url != st["url"] or history_move) and loaded.get(after_url) == after_axtree
                        assert (pred.next_state, pred.next_url) == (after_axtree, after_url) or recalled, (
                            f"episode {ep['episode_id']} step {i} {format_action(action)}: stored observation is not "
                            f"the model's prediction\nstored url {after_url}\npredicted url {pred.next_url}")
                        predicted += 1
                        navigated += after_url != st["url"]
                        if after_url != st["url"]:
                            loaded.setdefault(after_url, after_axtree)
                    history.append(worldmodel_pb2.Transition(url=st["url"], action_text=format_action(action)))
                    # MARKDOWN is rendered from the predicted a11y tree and links, so it is there too.
                    assert st["markdown"] and st["html"] == ""
        assert predicted > 0, "no step asked the model (every action was a no-change one)"
        assert navigated > 0, "the model never predicted a navigation: it only kept states"

        # The world model counted the simulated sessions and steps it served (Predict calls above are not steps).
        text = scrape(wm.metrics_port)
        assert _metric(text, "webenv_worldmodel_simulated_sessions_total") == EPISODES
        assert _metric(text, "webenv_worldmodel_simulated_steps_total") == n_steps

        # Replay conformance through the collector's reader (ReadEpisodes): the stored episodes replayed through the
        # world model answer the stored contract fields again (the collector's horizon cut is the session's truncated)
        stored = conformance.read_collector(collector.address, [run.run_id])
        assert len(stored) == EPISODES and all(len(e.trajectory.steps) == e.step_count for e in stored)
        rep = asyncio.run(conformance.run(wm.address, stored))
        assert rep.episodes == EPISODES and not rep.failed, rep.failed
        for name in ("start", "step_index", "done", "truncated", "reward", "target_element_id", "last_action_error",
                     "formats", "step_count"):
            assert rep.fields[name].differ == 0 and rep.fields[name].agree, (name, rep.fields[name])
        assert rep.fields["truncated"].agree == rep.steps and any(e.truncated for e in stored)

        # Durable in the store itself: after the collector stopped, its chDB folder is read directly (in a
        # subprocess: chDB opens one data folder per process, and this pytest process may hold another).
        assert collector.stop() == 0, collector.tail()
        res = subprocess.run([sys.executable, "-c", STORE_QUERY, f"chdb://{tmp_path / 'store'}", run.run_id],
                             env=_env(), capture_output=True, text=True, timeout=60)
        assert res.returncode == 0, res.stderr[-3000:]
        assert json.loads(res.stdout.strip().splitlines()[-1]) == [["world_model", EPISODES, n_steps, 0]]
    finally:
        for p in reversed(procs):
            p.stop()


def _metric(text: str, name: str) -> float:
    m = re.search(rf"^{name}(?:{{[^}}]*}})? ([0-9.e+-]+)$", text, re.M)
    assert m, f"{name} not in /metrics"
    return float(m.group(1))

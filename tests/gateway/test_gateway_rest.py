"""The REST API over real HTTP against the real platform: every route, the error mapping, auth, live streams.

Every request goes to the gateway process (`python -m webenv.gateway`, started by `webenv up`'s launcher) and
from it over gRPC to the real services. The last test reads the gateway's own metrics and checks that every
route of the OpenAPI document was called.
"""

from __future__ import annotations

import base64
import json
import re
import secrets
import time
import urllib.request

import pytest
from google.protobuf import descriptor_pool
from webenv.gateway import app  # noqa: F401  (registers every service's descriptors)
from webenv.gateway.config import UPSTREAMS
from webenv.gateway.transcoder import routes_for
from websockets.exceptions import InvalidStatus
from websockets.sync.client import connect

pytestmark = pytest.mark.timeout(600)

JPEG = b"\xff\xd8"


def status_of(resp) -> tuple[int, str, dict]:
    """(google.rpc code, ErrorInfo reason, metadata) of an error response."""
    body = resp.json()
    info = next((d for d in body.get("details", []) if d["@type"].endswith("google.rpc.ErrorInfo")), {})
    return body["code"], info.get("reason", ""), info.get("metadata", {})


def ndjson(client, path: str, **kw) -> list[dict]:
    with client.stream("GET", path, **kw) as resp:
        assert resp.status_code == 200, resp.read()
        assert resp.headers["content-type"].startswith("application/x-ndjson")
        return [json.loads(line) for line in resp.iter_lines() if line.strip()]


# -- auth, health, OpenAPI, console files ------------------------------------------------------------------------------


def test_auth_is_required_on_the_api_and_open_for_probes(platform):
    with platform.client(token=None) as anon:
        r = anon.get("/v1/runs")
        assert r.status_code == 401 and r.headers["www-authenticate"].startswith("Bearer")
        assert status_of(r)[:2] == (16, "BAD_TOKEN")
        for path in ("/healthz", "/openapi.json", "/console/", "/console/app.js"):
            assert anon.get(path).status_code == 200, path
        assert anon.get("/console/auth").json() == {"required": True, "authenticated": False}
        assert anon.get("/", follow_redirects=False).headers["location"] == "/console/"
        # The console's login sets an HttpOnly, SameSite=Strict cookie that then authorizes the API.
        assert anon.post("/console/login", json={"token": "wrong"}).status_code == 401
        r = anon.post("/console/login", json={"token": platform.token})
        assert r.status_code == 200
        cookie = r.headers["set-cookie"].lower()
        assert "httponly" in cookie and "samesite=strict" in cookie
        assert anon.get("/v1/runs").status_code == 200
        assert anon.get("/console/auth").json() == {"required": True, "authenticated": True}
        anon.post("/console/logout")
        anon.cookies.clear()
        assert anon.get("/v1/runs").status_code == 401
    with platform.client(token="not-the-token") as wrong:
        assert wrong.get("/v1/policies").status_code == 401
    with pytest.raises(InvalidStatus) as info:
        connect(f"{platform.ws_url}/v1/runs/{platform.runs['oracle']}/live")
    assert info.value.response.status_code == 403


def test_health_reports_every_upstream(platform):
    with platform.client(token=None) as c:
        body = c.get("/healthz?upstreams=1").json()
    assert body["status"] == "SERVING"
    services = {s for u in body["upstreams"].values() for s in u["services"]}
    assert {"EnvironmentService", "CollectorService", "TrainerService", "WorldModelService"} <= services
    assert all(u["status"] == "SERVING" for u in body["upstreams"].values()), body


def test_openapi_documents_every_route_with_the_contracts_comments(platform):
    with platform.client(token=None) as c:
        doc = c.get("/openapi.json").json()
    assert doc["openapi"].startswith("3.1")
    ops = {(verb.upper(), path): op for path, item in doc["paths"].items() for verb, op in item.items()}
    assert ("POST", "/v1/sessions/{session_id}:step") in ops and ("GET", "/v1/tasks/{task_id}") in ops
    step = ops[("POST", "/v1/sessions/{session_id}:step")]
    assert step["operationId"] == "EnvironmentService_Step"
    assert "last_action_error" in step["description"]  # the proto comment
    assert step["requestBody"]["content"]["application/json"]["schema"]["$ref"].endswith("webenv.v1.StepRequest")
    schemas = doc["components"]["schemas"]
    assert schemas["webenv.v1.RunCounts"]["properties"]["steps"]["type"] == "string"  # int64 as JSON string
    assert schemas["webenv.v1.RunState"]["enum"][0] == "RUN_STATE_UNSPECIFIED"
    assert "sessionId" in schemas["webenv.v1.StepRequest"]["properties"]
    watch = ops[("GET", "/v1/runs/{run_id}:watch")]
    assert "application/x-ndjson" in watch["responses"]["200"]["content"]
    refs = re.findall(r'"\$ref": "#/components/schemas/([^"]+)"', json.dumps(doc))
    assert set(refs) <= set(schemas)


# -- sessions (EnvironmentService, BrowserFarmService) ---------------------------------------------------------------


def test_session_open_step_get_renew_fork_screenshot_close(platform):
    spec = {"formats": ["OBSERVATION_FORMAT_AXTREE", "OBSERVATION_FORMAT_ELEMENTS"]}
    with platform.client() as c:
        r = c.post("/v1/sessions", json={"startUrl": "http://shop-0000.web.test/", "observationSpec": spec,
                                         "labels": {"who": "rest-test"}})
        assert r.status_code == 200, r.text
        opened = r.json()
        sid = opened["session"]["sessionId"]
        assert opened["session"]["state"] == "SESSION_STATE_OPEN" and opened["observation"]["axtree"]
        link = next(e for e in opened["observation"]["elements"] if e["tag"] == "a" and e["visible"])
        step = c.post(f"/v1/sessions/{sid}:step", json={"action": {"click": {"target": {"elementId": link["elementId"]}}},
                                                        "stepIndex": 0})
        assert step.status_code == 200, step.text
        body = step.json()
        assert body["stepIndex"] == 0 and body["timings"]["totalSeconds"] > 0
        assert body["observation"]["lastActionError"] == ""
        got = c.get(f"/v1/sessions/{sid}").json()["session"]
        assert got["stepCount"] == 1 and got["labels"] == {"who": "rest-test"}
        listed = c.get("/v1/sessions", params={"page_size": 100}).json()["sessions"]
        assert sid in {s["sessionId"] for s in listed}
        renewed = c.post(f"/v1/sessions/{sid}:renewLease", json={"leaseSeconds": 120}).json()["session"]
        assert renewed["leaseExpiresAt"] > got["createdAt"]
        forked = c.post(f"/v1/sessions/{sid}:fork", json={"count": 2, "labels": {"branch": "b"}})
        assert forked.status_code == 200, forked.text
        copies = forked.json()["sessions"]
        assert len(copies) == 2 and all(x["session"]["stepCount"] == 0 and x["session"]["labels"] ==
                                        {"who": "rest-test", "branch": "b"} for x in copies)
        assert copies[0]["observation"]["url"] == body["observation"]["url"]
        for x in copies:
            c.post(f"/v1/sessions/{x['session']['sessionId']}:close", json={})
        r = c.post(f"/v1/sessions/{sid}:fork", json={"count": 100})
        assert r.status_code == 400 and status_of(r)[1:] == ("BAD_COUNT", {"field": "count", "max": "32"})
        shot = c.get(f"/v1/sessions/{sid}/screenshot",
                     params={"screenshot.width": 320, "screenshot.codec": "IMAGE_CODEC_JPEG"}).json()
        assert base64.b64decode(shot["screenshot"]["data"])[:2] == JPEG and shot["screenshot"]["width"] == 320
        closed = c.post(f"/v1/sessions/{sid}:close", json={"captureEvidence": True}).json()
        assert closed["session"]["state"] == "SESSION_STATE_CLOSED"
        # A closed session: FAILED_PRECONDITION -> 400, with the service's reason.
        r = c.post(f"/v1/sessions/{sid}:step", json={"action": {"noop": {}}})
        assert r.status_code == 400 and status_of(r)[:2] == (9, "SESSION_CLOSED")


def test_error_mapping_of_real_service_errors(platform):
    with platform.client() as c:
        r = c.get("/v1/sessions/no-such-session")
        assert r.status_code == 404 and status_of(r)[:2] == (5, "SESSION_NOT_FOUND")
        r = c.post("/v1/sessions", json={})  # no start: the farm's INVALID_ARGUMENT naming the field
        assert r.status_code == 400 and status_of(r)[2]["field"] == "start"
        r = c.post("/v1/sessions", json={"startUrl": "http://127.0.0.1:9/"})  # the URL guard
        assert r.status_code == 403 and status_of(r)[:2] == (7, "URL_BLOCKED")
        r = c.post("/v1/runs", json={"spec": {"repeats": -1}})
        assert r.status_code == 400 and status_of(r)[0] == 3 and status_of(r)[2]["field"].startswith("spec.")
        assert c.post("/v1/farm:drain", json={"draining": True}).json()["capacity"]["draining"] is True
        r = c.post("/v1/sessions", json={"startUrl": "http://shop-0000.web.test/"})
        assert r.status_code == 503 and status_of(r)[:2] == (14, "DRAINING")
        assert c.post("/v1/farm:drain", json={"draining": False}).json()["capacity"]["draining"] is False
        cap = c.get("/v1/farm/capacity").json()
        assert cap["maxSessions"] > 0 and {q["name"] for q in cap["queues"]} == {"open", "act", "observe"}
        r = c.get("/v1/runs/run-does-not-exist")
        assert r.status_code == 404 and status_of(r)[:2] == (5, "RUN_NOT_FOUND")


def test_error_mapping_of_the_gateways_own_errors(platform):
    with platform.client() as c:
        r = c.post("/v1/sessions", content=b"{not json")
        assert r.status_code == 400 and status_of(r)[1:] == ("BAD_JSON", {"field": "body"})
        r = c.post("/v1/sessions", json={"startUrl": 5})
        assert r.status_code == 400 and status_of(r)[2]["field"] == "startUrl"
        r = c.post("/v1/sessions", json={"noSuchField": 1})
        assert r.status_code == 400 and status_of(r)[2]["field"] == "noSuchField"
        r = c.get("/v1/tasks", params={"filter.split": "SPLIT_NOPE"})
        assert r.status_code == 400 and status_of(r)[2]["field"] == "filter.split"
        r = c.get("/v1/tasks", params={"page_size": "ten"})
        assert r.status_code == 400 and status_of(r)[1:] == ("BAD_PARAMETER", {"field": "page_size"})
        r = c.get("/v1/tasks", params={"nope": "1"})
        assert r.status_code == 400 and status_of(r)[1] == "UNKNOWN_FIELD"
        r = c.get("/v1/nowhere")
        assert r.status_code == 404 and status_of(r)[:2] == (5, "NO_ROUTE")
        r = c.delete("/v1/runs")
        assert r.status_code == 405 and status_of(r)[:2] == (12, "METHOD_NOT_ALLOWED")
        r = c.post("/v1/sessions", content=b" " * (5 * 1024 * 1024))  # WEBENV_MAX_BODY_MB=4
        assert r.status_code == 413 and status_of(r)[1] == "BODY_TOO_LARGE"


# -- tasks and site state (TaskService) ------------------------------------------------------------------------------


def test_tasks_and_site_state(platform):
    with platform.client() as c:
        page = c.get("/v1/tasks", params=[("filter.sources", "TASK_SOURCE_SYNTHETIC"), ("filter.split", "SPLIT_TRAIN"),
                                          ("page_size", "5")]).json()
        assert len(page["tasks"]) == 5 and page["nextPageToken"] and page["totalSize"] > 5
        assert all(t["split"] == "SPLIT_TRAIN" and t["source"] == "TASK_SOURCE_SYNTHETIC" for t in page["tasks"])
        task_id = page["tasks"][0]["taskId"]
        assert "/" in task_id  # served by the {task_id=**} template
        assert c.get(f"/v1/tasks/{task_id}").json()["task"]["taskId"] == task_id
        r = c.get("/v1/tasks/synthetic/none/such")
        assert r.status_code == 404
        # a session opened by task id alone: the farm resolves the task from the catalog
        opened = c.post("/v1/sessions", json={"task": {"taskId": task_id}})
        assert opened.status_code == 200, opened.text
        assert opened.json()["session"]["taskId"] == task_id
        assert opened.json()["instruction"] == page["tasks"][0]["instruction"]
        assert opened.json()["observation"]["url"].startswith(page["tasks"][0]["startUrl"].rstrip("/"))
        c.post(f"/v1/sessions/{opened.json()['session']['sessionId']}:close", json={})
        r = c.post("/v1/sessions", json={"task": {"taskId": "synthetic/none/such"}})
        assert r.status_code == 400 and status_of(r)[:3] == (3, "UNKNOWN_TASK", {"field": "task.task_id"}), r.text
        site = page["tasks"][0]["site"]
        name = "gw-" + secrets.token_hex(4)
        assert c.post(f"/v1/siteSessions/{name}:reset", json={"site": site}).json()["siteSession"] == name
        snap = c.post(f"/v1/siteSessions/{name}:snapshot", json={"requestId": secrets.token_hex(4)}).json()
        assert snap["snapshotId"], snap
        fork = c.post("/v1/siteSessions:fork", json={"requestId": secrets.token_hex(4), "snapshotId": snap["snapshotId"]})
        assert fork.status_code == 200, fork.text
        state = c.get(f"/v1/siteSessions/{fork.json()['siteSession']}/state").json()
        assert isinstance(json.loads(state["stateJson"]), dict)
        r = c.post("/v1/siteSessions:fork", json={"siteSession": "gw-never-seen"})
        assert r.status_code == 404 and status_of(r)[1] == "SITE_SESSION_NOT_FOUND"


# -- policies, verdicts, world model -----------------------------------------------------------------------------------


def test_policies_act_and_checkpoints(platform):
    with platform.client() as c:
        listed = c.get("/v1/policies").json()
        names = {p["name"] for p in listed["policies"]}
        assert {"oracle", "random"} <= names
        task = c.get("/v1/tasks", params={"filter.sources": "TASK_SOURCE_SYNTHETIC", "page_size": 1}).json()["tasks"][0]
        act = c.post("/v1/policies:act", json={"policy": "oracle", "task": task, "episodeId": "gw-act",
                                               "observation": {"url": task["startUrl"]}}).json()
        assert act["actionText"] and act["policy"] == "oracle"
        r = c.post("/v1/policies:loadCheckpoint", json={"ref": "no-such-family@1"})
        assert (r.status_code, status_of(r)[0]) == (404, 5), r.text


def _episodes(c, run_id: str, **params) -> list[dict]:
    lines = ndjson(c, "/v1/episodes", params={"run_ids": run_id, "filter.include_errored": "true", **params})
    assert all("result" in line for line in lines), lines
    return [line["result"]["episode"] for line in lines]


def test_episodes_verdicts_and_blobs(platform):
    with platform.client() as c:
        light = _episodes(c, platform.runs["oracle"], read_mask="episodeId,passed,stepCount,task.taskId")
        assert len(light) == 3 and all("trajectory" not in e or not e["trajectory"].get("steps") for e in light)
        ep = _episodes(c, platform.runs["oracle"], episode_ids=light[0]["episodeId"])[0]
        steps = ep["trajectory"]["steps"]
        assert len(steps) == ep["stepCount"] and ep["verdict"]["results"]
        assert steps[0]["observation"]["elements"] and steps[0]["observation"]["axtree"]
        key = steps[0]["screenshotKey"]
        assert re.fullmatch(r"[0-9a-f]{64}\.jpg", key)
        blob = c.get(f"/v1/blobs/{key}")
        assert blob.status_code == 200 and blob.content[:2] == JPEG and blob.headers["content-type"] == "image/jpeg"
        assert "immutable" in blob.headers["cache-control"]
        assert c.get(f"/v1/blobs/{key}", headers={"If-None-Match": blob.headers["etag"]}).status_code == 304
        assert c.get("/v1/blobs/" + "0" * 64 + ".png").status_code == 404
        assert c.get("/v1/blobs/../../etc/passwd").status_code in (400, 404)
        assert status_of(c.get("/v1/blobs/not-a-key"))[1] == "BAD_BLOB_KEY"
        # the same image through the collector's GetScreenshot, transcoded; unknown NOT_FOUND, malformed INVALID_ARGUMENT
        shot = c.get(f"/v1/screenshots/{key}")
        assert shot.status_code == 200 and shot.json()["screenshotKey"] == key
        assert base64.b64decode(shot.json()["data"]) == blob.content and shot.json()["codec"] == "IMAGE_CODEC_JPEG"
        missing = c.get("/v1/screenshots/" + "0" * 64 + ".png")
        assert missing.status_code == 404 and status_of(missing)[1] == "SCREENSHOT_NOT_FOUND"
        bad = c.get("/v1/screenshots/not-a-key")
        assert bad.status_code == 400 and status_of(bad)[1] == "BAD_SCREENSHOT_KEY"
        # The judge over REST grades the stored trajectory the same way the collector's call did.
        task = _episodes(c, platform.runs["oracle"], episode_ids=ep["episodeId"], read_mask="task")[0]["task"]
        verdict = c.post("/v1/verdicts", json={"task": task, "trajectory": ep["trajectory"]}).json()["verdict"]
        assert verdict["passed"] == ep["verdict"]["passed"]
        assert [f["outcome"] for f in verdict["results"]] == [f["outcome"] for f in ep["verdict"]["results"]]
        bad = {"groups": [{"groupId": "g", "facts": [{"factId": "f", "criterion": {"page": {"condition": "__import__('os')"}}}]}]}
        valid = c.post("/v1/rubrics:validate", json={"rubric": bad}).json()
        assert valid["valid"] is False and valid["problems"]
        failed = _episodes(c, platform.runs["random"], **{"filter.passed": "false", "read_mask": "passed"})
        assert len(failed) == 3 and not any(e["passed"] for e in failed)
        r = c.get("/v1/episodes")
        assert r.status_code == 400 and status_of(r)[2]["field"] == "run_ids"


def test_world_model(platform):
    with platform.client() as c:
        info = c.get("/v1/worldModel").json()
        assert info["backend"] == "transformers" and int(info["parameters"]) > 0
        pred = c.post("/v1/worldModel:predict", json={
            "format": "STATE_FORMAT_AXTREE", "state": '[0] RootWebArea "Shop"\n  [1] link "About"',
            "url": "http://shop-0000.web.test/", "action": {"click": {"target": {"elementId": "1"}}}, "maxNewTokens": 8})
        assert pred.status_code == 200, pred.text
        assert "nextState" in pred.json() and pred.json()["latencySeconds"] > 0
        r = c.post("/v1/worldModel:predict", json={"state": "x"})  # no format
        assert r.status_code == 400


# -- runs (CollectorService) --------------------------------------------------------------------------------------------


def test_runs_start_watch_list_get_stop_export(platform, tmp_path):
    with platform.client() as c:
        runs = c.get("/v1/runs", params={"page_size": 50}).json()["runs"]
        assert {platform.runs["oracle"], platform.runs["random"]} <= {r["runId"] for r in runs}
        oracle = c.get(f"/v1/runs/{platform.runs['oracle']}").json()["run"]
        assert oracle["counts"]["passed"] == 3 and oracle["state"] == "RUN_STATE_SUCCEEDED"
        done = c.get("/v1/runs", params={"state": "RUN_STATE_SUCCEEDED"}).json()["runs"]
        assert all(r["state"] == "RUN_STATE_SUCCEEDED" for r in done)
        spec = {"name": "gw-stop", "policy": "random", "episodes": 50, "concurrency": 1, "tasks": {
            "sources": ["TASK_SOURCE_SYNTHETIC"]}, "taskLimit": 5}
        run = c.post("/v1/runs", json={"requestId": secrets.token_hex(6), "spec": spec}).json()["run"]
        stopped = c.post(f"/v1/runs/{run['runId']}:stop", json={}).json()["run"]
        assert stopped["state"] in ("RUN_STATE_STOPPED", "RUN_STATE_SUCCEEDED")
        reports = ndjson(c, f"/v1/runs/{run['runId']}:watch")
        assert reports[-1]["result"]["run"]["state"] == "RUN_STATE_STOPPED"
        dest = tmp_path / "export"
        exp = c.post(f"/v1/runs/{platform.runs['oracle']}:export",
                     json={"format": "EXPORT_FORMAT_JSONL", "destination": str(dest)}).json()
        assert exp["episodes"] == "3" and exp["paths"] and (dest / "episodes.jsonl").exists()
        every = c.post("/v1/runs:export", json={"format": "EXPORT_FORMAT_PARQUET", "destination": str(tmp_path / "all")})
        assert every.status_code == 200 and int(every.json()["episodes"]) >= 6
        r = c.post(f"/v1/runs/{platform.runs['oracle']}:export", json={"destination": str(dest)})
        assert r.status_code == 400 and status_of(r)[2]["field"] == "format"


# -- training (TrainerService) ------------------------------------------------------------------------------------------


def test_jobs_checkpoints_and_loading_one(platform):
    """The real trainer: a tiny BC job on the oracle run, watched to the end; its checkpoint loads in the policy."""
    with platform.client() as c:
        spec = {"name": "gwagent", "algorithm": "TRAINING_ALGORITHM_BC", "model": "MODEL_KIND_SCORER",
                "data": {"runIds": [platform.runs["oracle"]]},
                "hyper": {"maxSteps": 6, "batchSize": 4, "seed": 1, "validationFraction": 0}}
        job = c.post("/v1/jobs", json={"requestId": "gw-job-1", "spec": spec}).json()["job"]
        assert c.post("/v1/jobs", json={"requestId": "gw-job-1", "spec": spec}).json()["job"]["jobId"] == job["jobId"]
        reports = ndjson(c, f"/v1/jobs/{job['jobId']}:watch")
        final = reports[-1]["result"]["job"]
        assert final["state"] == "JOB_STATE_SUCCEEDED", final
        assert final["checkpoint"]["ref"] == "gwagent@1" and final["progress"]["loss"] > 0
        assert c.get(f"/v1/jobs/{job['jobId']}").json()["job"]["state"] == "JOB_STATE_SUCCEEDED"
        assert job["jobId"] in {j["jobId"] for j in c.get("/v1/jobs").json()["jobs"]}
        second = c.post("/v1/jobs", json={"spec": {**spec, "hyper": {**spec["hyper"], "maxSteps": 400}}}).json()["job"]
        stopped = c.post(f"/v1/jobs/{second['jobId']}:stop", json={}).json()["job"]
        ndjson(c, f"/v1/jobs/{second['jobId']}:watch")
        assert c.get(f"/v1/jobs/{second['jobId']}").json()["job"]["state"] in ("JOB_STATE_STOPPED", "JOB_STATE_SUCCEEDED"), stopped
        cps = c.get("/v1/checkpoints", params={"name": "gwagent"}).json()["checkpoints"]
        assert cps and cps[-1]["ref"] == "gwagent@1"
        cp = c.get("/v1/checkpoints/gwagent@1").json()["checkpoint"]
        assert cp["dataRunIds"] == [platform.runs["oracle"]] and cp["algorithm"] == "TRAINING_ALGORITHM_BC"
        loaded = c.post("/v1/policies:loadCheckpoint", json={"ref": "gwagent@1"})
        assert loaded.status_code == 200, loaded.text
        assert loaded.json()["policy"]["version"] == "gwagent@1"
        r = c.post("/v1/jobs", json={"spec": {**spec, "name": "Bad Name"}})
        assert r.status_code == 400 and status_of(r)[2]["field"] == "spec.name"
        r = c.post("/v1/jobs", json={"spec": {**spec, "data": {"runIds": [platform.runs["oracle"]],
                                                               "filter": {"split": "SPLIT_TEST"}}}})
        assert r.status_code == 400 and status_of(r)[2]["field"].startswith("spec.data.filter.split")
        assert c.get("/v1/checkpoints/nothing@9").status_code == 404


# -- live streams (WebSocket) -------------------------------------------------------------------------------------------


def _frames(ws, until: str, limit: float = 60.0) -> list[dict]:
    out: list[dict] = []
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        out.append(json.loads(ws.recv(timeout=deadline - time.monotonic())))
        if out[-1]["type"] == until:
            return out
    raise AssertionError(f"no {until!r} frame in {[f['type'] for f in out]}")


def test_live_run_progress(platform):
    auth = {"Authorization": f"Bearer {platform.token}"}
    with platform.client() as c:
        spec = {"name": "gw-live", "policy": "oracle", "taskLimit": 2, "concurrency": 2, "tasks": {
            "sources": ["TASK_SOURCE_SYNTHETIC"], "difficulties": ["DIFFICULTY_EASY"]}}
        run = c.post("/v1/runs", json={"requestId": secrets.token_hex(6), "spec": spec}).json()["run"]
    with connect(f"{platform.ws_url}/v1/runs/{run['runId']}/live", additional_headers=auth) as ws:
        frames = _frames(ws, "end", limit=120)
    progress = [f["progress"] for f in frames if f["type"] == "progress"]
    assert progress and progress[-1]["run"]["state"] == "RUN_STATE_SUCCEEDED"
    assert sum(len(p["finished"]) for p in progress) == 2


def test_live_session_steps_frames_and_slow_viewers(platform):
    """Steps through the gateway reach viewers at once; a viewer that never reads slows neither the agent nor
    the other viewers (its queue drops old frames)."""
    auth = {"Authorization": f"Bearer {platform.token}"}
    spec = {"formats": ["OBSERVATION_FORMAT_AXTREE", "OBSERVATION_FORMAT_SCREENSHOT"],
            "screenshot": {"codec": "IMAGE_CODEC_JPEG", "width": 320}}
    with platform.client() as c:
        sid = c.post("/v1/sessions", json={"startUrl": "http://shop-0001.web.test/", "observationSpec": spec}).json()[
            "session"]["sessionId"]
        with connect(f"{platform.ws_url}/v1/sessions/{sid}/live?frames=1", additional_headers=auth) as ws, \
                connect(f"{platform.ws_url}/v1/sessions/{sid}/live?frames=1", additional_headers=auth,
                        max_size=None) as stalled:
            _frames(ws, "progress")  # the poller is on
            t0 = time.monotonic()
            for i in range(12):
                r = c.post(f"/v1/sessions/{sid}:step", json={"action": {"scroll": {"dy": 200 if i % 2 else -200}},
                                                             "stepIndex": i})
                assert r.status_code == 200, r.text
            stepping = time.monotonic() - t0
            seen = _frames(ws, "frame")
            while not any(f["type"] == "step" and f["stepIndex"] == 11 for f in seen):
                seen.append(json.loads(ws.recv(timeout=30)))
            steps = [f for f in seen if f["type"] == "step"]
            assert steps[-1]["actionText"].startswith("scroll(") and steps[-1]["timings"]["totalSeconds"] > 0
            assert steps[-1]["observation"]["url"] == "http://shop-0001.web.test/"
            frames = [f for f in seen if f["type"] == "frame"]
            assert frames and base64.b64decode(frames[-1]["data"])[:2] == JPEG
            c.post(f"/v1/sessions/{sid}:close", json={})
            assert _frames(ws, "end")[-1]["state"] == "SESSION_STATE_CLOSED"
            assert stalled.protocol.state.name == "OPEN"  # never read, never waited for
    assert stepping < 60


def test_two_clients_never_see_each_others_sessions_or_pages(platform):
    """Issue 50: the gateway has one principal (the platform token), so isolation between its clients is by session
    id, an unguessable capability: a session is stepped only by calls that name it, an id a client was not given is
    NOT_FOUND, a session's live stream carries only its own steps, and each session is on its own page."""
    auth = {"Authorization": f"Bearer {platform.token}"}
    with platform.client() as a, platform.client() as b:
        def open_session(c, url: str, who: str) -> str:
            r = c.post("/v1/sessions", json={"startUrl": url, "labels": {"client": who}})
            assert r.status_code == 200, r.text
            return r.json()["session"]["sessionId"]

        sa = open_session(a, "http://shop-0000.web.test/", "a")
        sb = open_session(b, "http://shop-0001.web.test/", "b")
        assert sa != sb and len(sa) >= 32 and len(sb) >= 32  # uuid4 hex: not guessable from one's own
        with connect(f"{platform.ws_url}/v1/sessions/{sb}/live", additional_headers=auth) as ws:
            _frames(ws, "progress")  # b's viewer is on
            for i, url in enumerate(["http://shop-0000.web.test/help", "http://shop-0000.web.test/about"]):
                r = a.post(f"/v1/sessions/{sa}:step", json={"action": {"navigate": {"url": url}}, "stepIndex": i})
                assert r.status_code == 200 and r.json()["observation"]["url"] == url, r.text
            r = b.post(f"/v1/sessions/{sb}:step", json={"action": {"scroll": {"dy": 200}}, "stepIndex": 0})
            assert r.status_code == 200 and r.json()["observation"]["url"] == "http://shop-0001.web.test/", r.text
            seen = _frames(ws, "step")
            while not any(f["type"] == "progress" and f["session"].get("stepCount") == 1 for f in seen):
                seen.append(json.loads(ws.recv(timeout=30)))
        # b's stream: b's one step on b's page, nothing of a's session or pages
        steps = [f for f in seen if f["type"] == "step"]
        assert [(f["sessionId"], f["stepIndex"]) for f in steps] == [(sb, 0)], steps
        assert steps[0]["observation"]["url"] == "http://shop-0001.web.test/"
        assert sa not in json.dumps(seen) and "shop-0000" not in json.dumps(seen)
        # each session was stepped only by its own client's calls, and is on its own page
        got_a = a.get(f"/v1/sessions/{sa}").json()["session"]
        got_b = b.get(f"/v1/sessions/{sb}").json()["session"]
        assert got_a["stepCount"] == 2 and got_b["stepCount"] == 1
        assert [t["url"] for t in got_a["tabs"]] == ["http://shop-0000.web.test/about"]
        assert [t["url"] for t in got_b["tabs"]] == ["http://shop-0001.web.test/"]
        # the list is the farm's (the operators' view, with the same token): b's entry is b's page alone
        listed = {x["sessionId"]: x for x in b.get("/v1/sessions", params={"page_size": 1000}).json()["sessions"]}
        assert listed[sb]["labels"] == {"client": "b"} and "shop-0000" not in json.dumps(listed[sb])
        # an id b was not given: NOT_FOUND on every route, and its stream is a NOT_FOUND error frame
        guess = sa[:-4] + ("0000" if not sa.endswith("0000") else "ffff")
        for r in (b.get(f"/v1/sessions/{guess}"), b.post(f"/v1/sessions/{guess}:step", json={"action": {"noop": {}}}),
                  b.post(f"/v1/sessions/{guess}:close", json={})):
            assert r.status_code == 404 and status_of(r)[:2] == (5, "SESSION_NOT_FOUND"), r.text
        with connect(f"{platform.ws_url}/v1/sessions/{guess}/live", additional_headers=auth) as ws:
            err = _frames(ws, "error")[-1]["error"]
            assert err["code"] == 5, err
        assert a.get(f"/v1/sessions/{sa}").json()["session"]["state"] == "SESSION_STATE_OPEN"  # untouched
        for c, sid in ((a, sa), (b, sb)):
            assert c.post(f"/v1/sessions/{sid}:close", json={}).status_code == 200


# -- coverage: every route answered ----------------------------------------------------------------------------------


def test_zz_every_route_was_called(platform):
    """Runs last: the gateway's request counter has a series for every route of the API."""
    with platform.client(token=None) as c:
        doc = c.get("/openapi.json").json()
    metrics = urllib.request.urlopen(f"http://127.0.0.1:{platform.stack.ports['gateway'][1]}/metrics", timeout=10).read().decode()
    called = set(re.findall(r'^webenv_gateway_http_requests_total\{[^}]*route="([^"]+)"', metrics, re.M))
    labels = {r.label for r in routes_for(descriptor_pool.Default().FindServiceByName(s) for s in UPSTREAMS)}
    assert labels - called == set(), f"routes never called: {sorted(labels - called)}"
    documented = {(v.upper(), p) for p, item in doc["paths"].items() for v in item}
    assert {(r.split(" ")[0], re.sub(r"=[^}]*}", "}", r.split(" ")[1])) for r in labels} <= documented

"""`webenv validate` on deliberately broken tasks (issue 50): each caught by its property, on a real farm node and
the real judge, and a sound task passing every check. The tasks are one rubric JSON task file over small pages a
local HTTP server serves for a few `*.web.test` hosts (the farm maps that domain to it, as it maps it to the sites
service), so nothing leaves loopback: the page that "calls another host" loads an image of another `*.web.test`
host, which the farm would carry to this server and `validate` refuses from the page alone."""

from __future__ import annotations

import asyncio
import json
import secrets
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from typer.testing import CliRunner
from webenv import errors
from webenv.cli.main import app
from webenv.cli.stack import Stack
from webenv.cli.validation import Validator, draw_sample, in_shard, read_jsonl
from webenv.v1 import common_pb2 as pb
from webenv.v1 import environment_pb2, judge_pb2

pytestmark = pytest.mark.timeout(300)
CODE = "Zanzibar-42"
LINK = '<p><a href="/code">The code page</a></p>'
START = {  # host -> start page body (every host's /code page states the code)
    "good": LINK,
    "leak": LINK + f'<p><small>ref. {CODE}</small></p>',  # the answer on the start page, the oracle goes on
    "done": LINK,
    "flaky": LINK,  # and a token that changes on every load (below)
    "caller": LINK + '<img src="http://tracker.web.test/pixel.gif" alt="">',
    "badoracle": LINK,
}
EXPECTED_FAILURE = {"good": None, "leak": "leak", "done": "floor", "flaky": "determinism", "caller": "egress",
                    "badoracle": "oracle"}


class Pages(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        host = self.headers.get("Host", "").split(":")[0].removesuffix(".web.test")
        if self.path == "/code":
            body = f"<h1>Code</h1><p>The code is {CODE}.</p>"
        elif self.path == "/" and host in START:
            body = f"<h1>Welcome to {host}</h1>{START[host]}"
            if host == "flaky":
                body += f"<p>Visitor token {secrets.token_hex(6)}</p>"
        else:
            self.send_error(404)
            return
        data = f"<!doctype html><html><head><title>{host}</title></head><body>{body}</body></html>".encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: object) -> None:
        pass


def task(host: str) -> dict:
    criterion = {"mode": "MATCH_MODE_REGEX", "expected": f"^(done|{CODE})$"} if host == "done" else {
        "mode": "MATCH_MODE_CONTAINS", "expected": CODE}
    answer = "Not-the-code" if host == "badoracle" else CODE
    return {"task_id": f"validate/{host}", "start_url": f"http://{host}.web.test/",
            "instruction": "What is the code on the site's code page?",
            "fact_groups": [{"facts": [{"description": "the code", "criterion": {"answer": criterion}}]}],
            "oracle": ["click(\"a[href='/code']\")", f'answer("{answer}")']}


@pytest.fixture(scope="module")
def farm(tmp_path_factory):
    server = ThreadingHTTPServer(("127.0.0.1", 0), Pages)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    # a loaded CI machine takes more than the default 10 s to load a page now and then: that would be an errored task
    with Stack(tmp_path_factory.mktemp("validate"), free_ports=True, sites_count=1,
               extra_env={"WEBENV_FARM_NAV_TIMEOUT_MS": "30000"}) as s:
        s.start(("judge",))
        s.http_port = server.server_address[1]  # the node maps *.web.test to these pages
        s.browser_node = s.add_browser_node("validate")
        yield s
    server.shutdown()


def test_each_broken_task_is_caught_by_its_property(farm: Stack, tmp_path: Path) -> None:
    tasks = tmp_path / "broken.json"
    tasks.write_text(json.dumps({"tasks": [task(h) for h in START]}))
    report = tmp_path / "report.json"
    out = CliRunner().invoke(app, ["validate", "--task-file", str(tasks), "--browser", farm.browser_node,
                                   "--judge", farm.address("judge"), "--concurrency", "3", "--report", str(report)])
    assert out.exit_code == 1 and report.is_file(), (out.output, out.exception)  # tasks failed
    got = {t["task_id"].rsplit("/", 1)[-1]: t for t in json.loads(report.read_text())["tasks"]}
    assert set(got) == set(START)
    for host, expected in EXPECTED_FAILURE.items():
        t = got[host]
        failed = {name for name, c in t["checks"].items() if c["ok"] is False}
        assert t["error"] == "" and failed == ({expected} if expected else set()), (host, t)
        assert t["status"] == ("failed" if expected else "passed")
    assert "start page's text" in got["leak"]["checks"]["leak"]["why"]
    assert "done passes" in got["done"]["checks"]["floor"]["why"] and got["done"]["floor"] == 1.0
    assert "tracker.web.test" in got["caller"]["checks"]["egress"]["why"]
    assert got["good"]["oracle_score"] == 1.0 and got["good"]["floor"] == 0.0
    for host in EXPECTED_FAILURE:  # the table, and each failing task with why
        assert (f"failed rubric/validate/{host}:" in out.output) == (host != "good"), out.output


def _run(*args: str) -> object:
    return CliRunner().invoke(app, ["validate", *args])


def test_the_catalog_mode_catches_them_too_and_resumes_and_merges(farm: Stack, tmp_path: Path) -> None:
    """``--catalog`` (one oracle session, the non-answers graded on a start-state session; every task in the sample
    here, ``--check-rate 1``) catches each broken task by the same property; ``--resume`` runs only the tasks its
    JSONL lacks, a torn last line (a killed run) not counted; ``--from-jsonl`` of the file split in two builds the
    same table."""
    tasks = tmp_path / "broken.json"
    tasks.write_text(json.dumps({"tasks": [task(h) for h in START]}))
    where = ["--task-file", str(tasks), "--browser", farm.browser_node, "--judge", farm.address("judge"),
             "--concurrency", "3", "--catalog", "--check-rate", "1"]
    lines = tmp_path / "run.jsonl"
    out = _run(*where, "--jsonl", str(lines), "--markdown", str(tmp_path / "run.md"))
    assert out.exit_code == 1, (out.output, out.exception)
    got = {r.task_id.rsplit("/", 1)[-1]: r for r in read_jsonl([lines])[0]}
    assert set(got) == set(START)
    for host, expected in EXPECTED_FAILURE.items():
        r = got[host]
        assert r.error == "" and r.mode == "catalog" and r.sampled, (host, r)
        assert {n for n, c in r.checks.items() if c.ok is False} == ({expected} if expected else set()), (host, r)
    assert got["done"].floor == 1.0 and "done passes" in got["done"].checks["floor"].why
    assert got["good"].floor == 0.0 and got["good"].checks["isolation"].ok is True
    assert "checks run, of 6 tasks not errored: oracle 6, floor 6, leak 6 (1 n/a), determinism 6, egress 6, " \
           "isolation 6, random 6" in (tmp_path / "run.md").read_text()

    # a run killed after 4 tasks, in the middle of the 5th line: --resume runs the 2 others
    text = lines.read_text().splitlines(keepends=True)
    lines.write_text("".join(text[:4]) + text[4][: len(text[4]) // 2])
    assert read_jsonl([lines])[0] and read_jsonl([lines])[1] == 1  # the torn line is left out, counted
    out = _run(*where, "--jsonl", str(lines), "--resume")
    assert "validating 2 of 6 selected tasks" in out.output and "4 done before" in out.output, out.output
    reports, torn = read_jsonl([lines])
    assert {r.task_id for r in reports} == {f"rubric/validate/{h}" for h in START} and torn == 1

    # merged from two files: the same table as the run's
    half = len(text) // 2
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    a.write_text("".join(text[:half]))
    b.write_text("".join(text[half:]))
    out = _run("--from-jsonl", str(a), "--from-jsonl", str(b), "--markdown", str(tmp_path / "merged.md"))
    assert out.exit_code == 1 and "6 tasks from 2 file(s)" in out.output, out.output
    assert (tmp_path / "merged.md").read_text() == (tmp_path / "run.md").read_text()


def test_shards_partition_and_the_sample_is_every_shards(tmp_path: Path) -> None:
    ids = [f"synthetic/site-{i:04d}/info-{i % 7}" for i in range(2000)]
    shards = [{t for t in ids if in_shard(t, (i, 3))} for i in range(3)]
    assert set().union(*shards) == set(ids) and sum(map(len, shards)) == len(ids)
    assert all(500 < len(s) < 840 for s in shards)  # about a third each
    catalog = [pb.Task(task_id=t, source=pb.TASK_SOURCE_SYNTHETIC, kind=pb.TASK_KIND_INFORMATION + (i % 2),
                       builder=("classic", "storefront")[i % 3 % 2]) for i, t in enumerate(ids)]
    sample = draw_sample(catalog, 5, 0.01, seed=0)
    assert sample == draw_sample(list(reversed(catalog)), 5, 0.01, seed=0)  # whatever the order a shard sees
    assert 20 <= len(sample) <= 20 + 60 and sample != draw_sample(catalog, 5, 0.01, seed=1)


@pytest.mark.parametrize(("args", "flag"), [
    (["--shard", "2/2"], "--shard"), (["--shard", "a"], "--shard"), (["--resume"], "--resume"),
    (["--check-rate", "1.5"], "--check-rate"), (["--from-jsonl", "missing.jsonl"], "--from-jsonl")])
def test_bad_flags_name_the_flag(args: list[str], flag: str) -> None:
    out = _run("--task-file", "nonexistent.yaml", *args)
    assert out.exit_code == 2 and flag in out.output, out.output



class CountingFarm:
    """The farm's open and close, counted (no browser): each session a page at the task's start URL."""

    def __init__(self, fail_first: int = 0) -> None:
        self.opened: list[str] = []
        self.fail_first = fail_first

    async def open(self, *, task: pb.Task, **_: object) -> environment_pb2.OpenSessionResponse:
        await asyncio.sleep(0.01)  # the tasks of a group ask while the first open is in flight
        if self.fail_first:
            self.fail_first -= 1
            raise errors.Unavailable("the farm is down", reason="TEST")
        self.opened.append(task.task_id)
        return environment_pb2.OpenSessionResponse(
            session=environment_pb2.Session(session_id=f"s{len(self.opened)}"),
            observation=pb.Observation(url=task.start_url, title="Home", axtree="[1] link 'Home'"))

    async def close(self, session_id: str, *, capture_evidence: bool = False) -> environment_pb2.CloseSessionResponse:
        return environment_pb2.CloseSessionResponse(site_state_json='{"cart": []}' if capture_evidence else "")


class EchoJudge:
    """Fails every trajectory, and records which task each was graded as."""

    def __init__(self) -> None:
        self.graded: list[tuple[str, str, str]] = []  # (task, trajectory's task_id, answer)

    async def Evaluate(self, request: judge_pb2.EvaluateRequest, **_: object) -> judge_pb2.EvaluateResponse:
        self.graded.append((request.task.task_id, request.trajectory.task_id, request.trajectory.final_answer))
        return judge_pb2.EvaluateResponse(verdict=pb.Verdict(passed=False, score=0.0))


def test_the_catalog_mode_opens_one_start_state_per_site_and_start_url() -> None:
    """The synthetic tasks of one site and start URL share one start-state session (opened and closed with its site
    state once, each task graded on it as itself); other tasks open their own, even on the same URL; a failed open
    is the errored task's, and the next task of its group opens it again."""
    def synthetic(site: str, n: int) -> pb.Task:
        return pb.Task(task_id=f"synthetic/{site}/info-{n}", source=pb.TASK_SOURCE_SYNTHETIC, site=f"{site}.web.test",
                       start_url=f"http://{site}.web.test/", instruction=f"Question {n}?")
    tasks = [*(synthetic("shop-0000", n) for n in range(3)), synthetic("mail-0000", 0),
             *(pb.Task(task_id=f"rubric/t{n}", source=pb.TASK_SOURCE_RUBRIC_JSON, start_url="http://a.web.test/")
               for n in range(2))]
    farm, judge = CountingFarm(), EchoJudge()
    validator = Validator(farm, judge)  # type: ignore[arg-type]

    async def run(ts: list[pb.Task]) -> list:
        return await asyncio.gather(*(validator.validate(t, catalog=True, sampled=False) for t in ts))

    reports = asyncio.run(run(tasks))
    assert farm.opened == ["synthetic/shop-0000/info-0", "synthetic/mail-0000/info-0", "rubric/t0", "rubric/t1"]
    assert all(r.error == "" and r.checks["floor"].ok and r.checks["egress"].ok for r in reports), reports
    for t in tasks:  # doing nothing, "", "done" and the instruction, each graded as the task itself
        assert sorted(a for task, traj, a in judge.graded if task == traj == t.task_id) == sorted(
            ["", "", "done", t.instruction])
    farm = validator.env = CountingFarm(fail_first=1)
    validator._starts.clear()
    first, second = asyncio.run(run(tasks[:1])) + asyncio.run(run(tasks[1:2]))
    assert "the farm is down" in first.error and second.error == "" and farm.opened == [tasks[1].task_id]


def test_an_oracle_that_fails_after_a_timed_out_step_is_errored_not_failed() -> None:
    """A verdict after a step that ran out of time on a loaded farm is the machine's: the task is errored (typed,
    run again by --resume); an oracle that fails with no timeout stays failed, its step errors in the why."""
    from types import SimpleNamespace

    from webenv.cli.validation import TaskReport, _Run

    def run(error: str) -> _Run:
        records = [SimpleNamespace(step_index=0, last_action_error=""), SimpleNamespace(step_index=1, last_action_error=error)]
        return _Run(SimpleNamespace(records=records), pb.Verdict(passed=False, score=0.0))  # type: ignore[arg-type]

    nothing = {"none": _Run(SimpleNamespace(records=[]), pb.Verdict(passed=False, score=0.0))}  # type: ignore[arg-type]
    validator = Validator(CountingFarm(), EchoJudge())  # type: ignore[arg-type]
    task = pb.Task(task_id="synthetic/shop-0011/tx-0")
    late, wrong = (TaskReport(task.task_id, "synthetic", "transaction", "classic") for _ in range(2))
    validator._verdicts(task, late, run("fill failed: ElementHandle.fill: Timeout 5000ms exceeded."), nothing, None)
    validator._verdicts(task, wrong, run(""), nothing, None)
    assert late.status == "errored" and "step 1: fill failed" in late.error
    assert wrong.status == "failed" and "no step failed" in wrong.checks["oracle"].why

"""Oracle solutions run through the real browser farm (EnvironmentService), the path rollouts take.

The farm runs as a subprocess (`python -m webenv.browser`) wired to this test session's sites service:
it resets the site state at open, sets the `site_session` cookie, resolves the oracle's selectors and
returns the site state at close; the real judge (also a subprocess) then grades the trajectory, and the sites
tests' own rubric reading (services/sites/tests/rubriceval.py) agrees.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import os
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from webenv.sites.config import Settings
from webenv.sites.families import FAMILIES
from webenv.sites.service import SitesService
from webenv.testing import free_port
from webenv.v1 import common_pb2 as pb
from webenv.v1 import environment_pb2, environment_pb2_grpc, judge_pb2, judge_pb2_grpc

_RUBRICEVAL = Path(__file__).resolve().parents[1] / "services" / "sites" / "tests" / "rubriceval.py"
_spec = importlib.util.spec_from_file_location("sites_rubriceval", _RUBRICEVAL)
assert _spec and _spec.loader
rubriceval = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = rubriceval  # dataclasses look their module up while the class is built
_spec.loader.exec_module(rubriceval)
Evidence, failing_facts = rubriceval.Evidence, rubriceval.failing_facts


@pytest.fixture(scope="module")
async def sites_service() -> AsyncIterator[SitesService]:
    """The sites service in-process (gRPC + HTTP on free ports), a small web: every family, both splits."""
    svc = SitesService(Settings(host="127.0.0.1", grpc_port=0, metrics_port=0, http_port=0, http_host="127.0.0.1",
                                sites_count=32, log_json=False))
    async with svc:
        yield svc


async def _serve(module: str, env: dict[str, str], port: int, log) -> AsyncIterator[grpc.aio.Channel]:  # type: ignore[no-untyped-def]
    """Run `python -m <module>` until its health is SERVING; yield a channel to it."""
    with log.open("wb") as fh:
        proc = await asyncio.create_subprocess_exec(sys.executable, "-m", module, env={**os.environ, **env},
                                                    stdout=asyncio.subprocess.DEVNULL, stderr=fh)
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as ch:
            health = health_pb2_grpc.HealthStub(ch)
            for _ in range(600):
                if proc.returncode is not None:
                    pytest.fail(f"{module} exited: {log.read_text()[-2000:]}")
                try:
                    r = await health.Check(health_pb2.HealthCheckRequest(), timeout=1)
                    if r.status == health_pb2.HealthCheckResponse.SERVING:
                        break
                except grpc.aio.AioRpcError:
                    pass
                await asyncio.sleep(0.1)
            else:
                pytest.fail(f"{module} did not become SERVING")
            yield ch
    finally:
        proc.terminate()
        try:
            await asyncio.wait_for(proc.wait(), timeout=20)
        except TimeoutError:
            proc.kill()
            await proc.wait()


@pytest.fixture(scope="module")
async def judge(tmp_path_factory) -> AsyncIterator[judge_pb2_grpc.JudgeServiceStub]:
    """The real judge (deterministic criteria only)."""
    port = free_port()
    env = {"WEBENV_GRPC_PORT": str(port), "WEBENV_METRICS_PORT": "0", "WEBENV_HOST": "127.0.0.1",
           "WEBENV_JUDGE_LLM_BACKEND": "none", "WEBENV_LOG_LEVEL": "WARNING"}
    async for ch in _serve("webenv.judge", env, port, tmp_path_factory.mktemp("judge") / "judge.log"):
        yield judge_pb2_grpc.JudgeServiceStub(ch)


@pytest.fixture(scope="module")
async def farm(sites_service, chromium_path, tmp_path_factory) -> AsyncIterator[environment_pb2_grpc.EnvironmentServiceStub]:
    port = free_port()
    env = {"WEBENV_GRPC_PORT": str(port), "WEBENV_METRICS_PORT": "0", "WEBENV_HOST": "127.0.0.1",
           "WEBENV_FARM_CHROMIUM_PATH": chromium_path, "WEBENV_FARM_WARM_CONTEXTS": "1",
           "WEBENV_FARM_SITES_HTTP_ADDR": f"127.0.0.1:{sites_service.http_port}",
           "WEBENV_SITES_ADDR": f"127.0.0.1:{sites_service.port}", "WEBENV_LOG_LEVEL": "WARNING"}
    async for ch in _serve("webenv.browser", env, port, tmp_path_factory.mktemp("farm") / "farm.log"):
        yield environment_pb2_grpc.EnvironmentServiceStub(ch)


def _sample(tasks: list[pb.Task]) -> list[pb.Task]:
    """One task per site builder (the sites tests run every builder x kind in Chromium; here, through the farm, each
    builder once): kinds rotate over the builders and families over both, the hardest task of its cell."""
    kinds = (pb.TASK_KIND_TRANSACTION, pb.TASK_KIND_INFORMATION, pb.TASK_KIND_NAVIGATION)
    fams = list(FAMILIES)
    out = []
    for i, name in enumerate(dict.fromkeys(t.builder for t in tasks if t.builder)):
        of = [t for t in tasks if t.builder == name and t.source == pb.TASK_SOURCE_SYNTHETIC and t.kind == kinds[i % 3]]
        fam = next(f for f in fams[i % len(fams):] + fams[:i % len(fams)] if any(t.family == f for t in of))
        out.append(max((t for t in of if t.family == fam), key=lambda t: (t.difficulty, len(t.oracle), t.task_id)))
    return out


async def test_oracles_through_the_farm(sites_service, farm, judge) -> None:
    spec = pb.ObservationSpec(formats=[pb.OBSERVATION_FORMAT_HTML])
    sample = _sample(sites_service.world.tasks.tasks)
    assert {t.builder for t in sample} == set(sites_service.world.sites.builders) and len({t.kind for t in sample}) == 3
    for task in sample:
        opened = await farm.OpenSession(environment_pb2.OpenSessionRequest(task=task, observation_spec=spec), timeout=60)
        sid = opened.session.session_id
        urls, html, answer, done = [opened.observation.url], opened.observation.html, "", False
        traj = pb.Trajectory(episode_id=sid, task_id=task.task_id, env_kind=pb.ENV_KIND_BROWSER)
        obs = opened.observation
        for i, act in enumerate(task.oracle):
            resp = await farm.Step(environment_pb2.StepRequest(session_id=sid, action=act), timeout=60)
            assert not resp.observation.last_action_error, (task.task_id, act, resp.observation.last_action_error)
            urls.append(resp.observation.url)
            html = resp.observation.html or html
            traj.steps.add(step_index=i, observation=obs, action=act, done=resp.done, url_after=resp.observation.url)
            obs = resp.observation
            if act.HasField("answer"):
                answer, done = act.answer.text, resp.done
        closed = await farm.CloseSession(environment_pb2.CloseSessionRequest(session_id=sid, capture_evidence=True),
                                         timeout=60)
        assert done, task.task_id
        state = json.loads(closed.site_state_json)
        texts = {f.criterion.page.css_selector: (html if f.criterion.page.text in html else "")
                 for g in task.rubric.groups for f in g.facts if f.criterion.HasField("page")}
        ev = Evidence(answer=answer, urls=urls, page_texts=texts, site_state=state)
        assert failing_facts(task, ev) == [], (task.task_id, task.instruction, urls)
        # the real judge agrees, and fails a wrong answer / an untouched site
        traj.final_observation.CopyFrom(obs)
        traj.final_answer, traj.site_state_json = answer, closed.site_state_json
        verdict = (await judge.Evaluate(judge_pb2.EvaluateRequest(task=task, trajectory=traj), timeout=60)).verdict
        assert verdict.passed, (task.task_id, [(r.fact_id, r.reason) for r in verdict.results if r.outcome != 1])
        wrong = pb.Trajectory()
        wrong.CopyFrom(traj)
        wrong.final_answer = "I could not find it"
        wrong.site_state_json = json.dumps({"site": task.site, "auth": {"logged_in": False, "user": None},
                                            "cart": {"items": []}, "orders": []})
        wrong.final_observation.CopyFrom(opened.observation)
        del wrong.steps[:]
        verdict = (await judge.Evaluate(judge_pb2.EvaluateRequest(task=task, trajectory=wrong), timeout=60)).verdict
        assert not verdict.passed, task.task_id


async def test_a_session_opens_by_task_id(sites_service, farm) -> None:
    """OpenSession given only a task id (what a client that has no Task message at hand sends) resolves the task from
    the catalog (TaskService.GetTask): the same instruction and start page as the whole task; an id the catalog
    lacks is INVALID_ARGUMENT naming task.task_id."""
    from webenv import errors

    task = _sample(sites_service.world.tasks.tasks)[0]
    opened = await farm.OpenSession(environment_pb2.OpenSessionRequest(task=pb.Task(task_id=task.task_id)), timeout=60)
    assert opened.session.task_id == task.task_id and opened.instruction == task.instruction
    assert opened.observation.url.startswith(task.start_url.rstrip("/"))
    await farm.CloseSession(environment_pb2.CloseSessionRequest(session_id=opened.session.session_id), timeout=60)
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await farm.OpenSession(environment_pb2.OpenSessionRequest(task=pb.Task(task_id="synthetic/none/such")), timeout=60)
    err = errors.from_rpc_error(info.value)
    assert isinstance(err, errors.InvalidArgument) and (err.reason, err.metadata) == ("UNKNOWN_TASK", {"field": "task.task_id"})


async def test_fork_mid_task_forks_the_site_state(sites_service, farm) -> None:
    """ForkSession halfway through a transaction: the copies start on the parent's page with a copy of its site state
    (TaskService.ForkSiteState); one finishes the oracle and passes the rubric, and neither the other copy nor the
    parent sees what it did."""
    from webenv.v1 import task_pb2, task_pb2_grpc

    task = next(t for t in _sample(sites_service.world.tasks.tasks)
                if t.kind == pb.TASK_KIND_TRANSACTION and len(t.oracle) >= 4)
    sid = (await farm.OpenSession(environment_pb2.OpenSessionRequest(task=task), timeout=60)).session.session_id
    # Fork right after a page load past the middle: a copy loads the page again, so DOM that the parent's scripts
    # changed since its load (the cart's "added" modal closed by a click) would be back in the copy (fork.py).
    url, half = "", 0
    for i, act in enumerate(task.oracle[:-1]):
        resp = await farm.Step(environment_pb2.StepRequest(session_id=sid, action=act), timeout=60)
        assert not resp.observation.last_action_error, resp.observation.last_action_error
        obs, half = resp.observation, i + 1
        if half >= len(task.oracle) // 2 and obs.url != url:
            break
        url = obs.url
    async with grpc.aio.insecure_channel(f"127.0.0.1:{sites_service.port}") as ch:
        at_fork = json.loads((await task_pb2_grpc.TaskServiceStub(ch).GetSiteState(
            task_pb2.GetSiteStateRequest(site_session=sid, site=task.site), timeout=30)).state_json)
    forked = await farm.ForkSession(environment_pb2.ForkSessionRequest(session_id=sid, count=2), timeout=60)
    a, b = (f.session.session_id for f in forked.sessions)
    assert all(f.observation.url == obs.url for f in forked.sessions)
    urls, answer = [obs.url], ""
    for act in task.oracle[half:]:
        resp = await farm.Step(environment_pb2.StepRequest(session_id=a, action=act), timeout=60)
        assert not resp.observation.last_action_error, (act, resp.observation.last_action_error)
        urls.append(resp.observation.url)
        if act.HasField("answer"):
            answer = act.answer.text
    done = json.loads((await farm.CloseSession(environment_pb2.CloseSessionRequest(session_id=a, capture_evidence=True),
                                               timeout=60)).site_state_json)
    assert done != at_fork
    texts = {f.criterion.page.css_selector: "" for g in task.rubric.groups for f in g.facts if f.criterion.HasField("page")}
    assert failing_facts(task, Evidence(answer=answer, urls=urls, page_texts=texts, site_state=done)) == [], task.task_id
    for other in (b, sid):
        closed = await farm.CloseSession(environment_pb2.CloseSessionRequest(session_id=other, capture_evidence=True),
                                         timeout=60)
        assert json.loads(closed.site_state_json) == at_fork, other


async def test_the_oracle_answers_only_what_its_pages_showed(sites_service, farm) -> None:
    """Every builder's oracle, on a one-record information task, answers only values the pages it went through showed
    (in the AXTREE, what an agent reads; a policy's memory carries facts from page to page): where a builder keeps a record's own attributes in a hidden
    tab, the oracle opens that tab first (Builder.details_tab). A demonstration that answers what no page showed
    teaches a policy answers it could never have read."""
    from webenv.sites import builders

    spec = pb.ObservationSpec(formats=[pb.OBSERVATION_FORMAT_AXTREE])
    tasks = sites_service.world.tasks.tasks
    for name in sites_service.world.sites.builders:
        tab = builders.get(name).details_tab
        one = [t for t in tasks if t.builder == name and t.kind == pb.TASK_KIND_INFORMATION and len(t.rubric.groups) == 1 and t.oracle
               and t.oracle[-1].answer.text.count(";") >= 1]
        # where the builder hides attributes, a task that needs them (its oracle opens the tab)
        task = next((t for t in one if any(a.click.target.selector == tab for a in t.oracle)), None) if tab else None
        assert task is not None or not tab, f"{name}: no information task asks for an attribute behind {tab}"
        task = task or one[0]
        opened = await farm.OpenSession(environment_pb2.OpenSessionRequest(task=task, observation_spec=spec), timeout=60)
        sid, seen = opened.session.session_id, opened.observation.axtree
        for act in task.oracle[:-1]:
            resp = await farm.Step(environment_pb2.StepRequest(session_id=sid, action=act), timeout=60)
            assert not resp.observation.last_action_error, (task.task_id, act, resp.observation.last_action_error)
            seen += "\n" + resp.observation.axtree  # what the agent has read so far (its memory carries facts)
        await farm.CloseSession(environment_pb2.CloseSessionRequest(session_id=sid), timeout=60)
        want = [f.criterion.answer.expected for g in task.rubric.groups for f in g.facts if f.criterion.HasField("answer")]
        missing = [w for w in want if w.lower() not in seen.lower()]
        assert not missing, (name, task.task_id, task.instruction, missing)

"""Task adapters: MiniWoB++ solved by scripted actions, synthetic-web tasks through a real TaskService."""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys

import grpc
import pytest
from webenv.testing import free_port, wait_for_port
from webenv.v1 import common_pb2, environment_pb2, task_pb2, task_pb2_grpc


def miniwob_task(name: str) -> common_pb2.Task:
    return common_pb2.Task(task_id=f"miniwob/{name}", source=common_pb2.TASK_SOURCE_MINIWOB,
                           metadata={"miniwob_task": name})


@pytest.mark.parametrize("seed", [1, 7])
async def test_miniwob_click_test(env, farm, seed):
    r = await env.open(task=miniwob_task("click-test"), seed=seed)
    assert r.instruction == "Click the button."
    sid = r.session.session_id
    step = await env.step(sid, 'click("#subbtn")')
    assert step.done and step.raw_reward == 1.0 and 0 < step.reward <= 1.0
    closed = await env.close(sid)
    assert closed.env_reward == 1.0


async def test_miniwob_enter_text(env, farm):
    r = await env.open(task=miniwob_task("enter-text"), seed=3)
    sid = r.session.session_id
    m = re.search(r'"(.+)"', r.instruction)
    assert m, r.instruction
    first = await env.step(sid, f'fill("#tt", {json.dumps(m.group(1))})')
    assert not first.done and first.reward == 0
    step = await env.step(sid, 'click("#subbtn")')
    assert step.done and step.raw_reward == 1.0, step.reward_reason
    await env.close(sid)


async def test_miniwob_wrong_answer_gets_negative_reward(env, farm):
    r = await env.open(task=miniwob_task("enter-text"), seed=4)
    sid = r.session.session_id
    await env.step(sid, 'fill("#tt", "definitely wrong")')
    step = await env.step(sid, 'click("#subbtn")')
    assert step.done and step.raw_reward == -1.0
    await env.close(sid)


def untimed(axtree: str) -> list[str]:
    """The axtree's lines but the countdown's ("9 / 10sec")."""
    return [line for line in axtree.splitlines() if not re.search(r"\d+ / \d+sec", line)]


@pytest.mark.parametrize("name", ["click-test", "ascending-numbers"])
async def test_miniwob_go_back_on_the_task_page_keeps_the_episode(env, farm, name):
    """go_back on the task page is "no history entry" and the page stays as it was. It used to go back to the tab's
    first entry, about:blank: an empty page, the episode (in the task page's JavaScript) gone and never done, which
    the checkpoint policies then refused (an errored episode)."""
    r = await env.open(task=miniwob_task(name), seed=2)
    sid = r.session.session_id
    for _ in range(2):
        back = await env.step(sid, "go_back()")
        assert back.observation.last_action_error == "go_back: no history entry"
        assert back.observation.url == r.observation.url and not back.done
        assert untimed(back.observation.axtree) == untimed(r.observation.axtree) != []
    if name == "click-test":  # the episode goes on and ends with its reward
        step = await env.step(sid, 'click("#subbtn")')
        assert step.done and step.raw_reward == 1.0
        closed = await env.close(sid)
        assert closed.env_reward == 1.0
    else:
        await env.close(sid)


class SiteState(task_pb2_grpc.TaskServiceServicer):
    """A TaskService holding state per site session, served on a real channel for the adapter to call."""

    def __init__(self) -> None:
        self.resets: list[tuple[str, str]] = []

    async def ResetSiteState(self, request, context):
        self.resets.append((request.site_session, request.site))
        return task_pb2.ResetSiteStateResponse(site_session=request.site_session)

    async def GetSiteState(self, request, context):
        return task_pb2.GetSiteStateResponse(state_json=json.dumps({"site_session": request.site_session,
                                                                    "site": request.site}))


async def test_synthetic_task_resets_and_captures_site_state(farm_factory, page_server):
    server = grpc.aio.server()
    svc = SiteState()
    task_pb2_grpc.add_TaskServiceServicer_to_server(svc, server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        async with farm_factory(sites_addr=f"127.0.0.1:{port}") as f:
            task = common_pb2.Task(task_id="synthetic/shop-0001/x", source=common_pb2.TASK_SOURCE_SYNTHETIC,
                                   start_url="http://shop-0001.web.test/echo-cookie", site="shop-0001.web.test",
                                   instruction="Buy a thing")
            r = await f.env.OpenSession(environment_pb2.OpenSessionRequest(task=task))
            sid = r.session.session_id
            assert r.instruction == "Buy a thing"
            assert svc.resets == [(sid, "shop-0001.web.test")]
            assert f"site_session={sid}" in r.observation.axtree  # the cookie reached the site
            closed = await f.env.CloseSession(environment_pb2.CloseSessionRequest(session_id=sid, capture_evidence=True))
            assert json.loads(closed.site_state_json) == {"site_session": sid, "site": "shop-0001.web.test"}
            # a fork: the site session comes from the labels and is not reset
            r = await f.env.OpenSession(environment_pb2.OpenSessionRequest(task=task, labels={"site_session": "fork-1"}))
            assert len(svc.resets) == 1 and "site_session=fork-1" in r.observation.axtree
    finally:
        await server.stop(0)


def start_sites(http_port: int, grpc_port: int, cwd: object) -> subprocess.Popen[bytes]:
    """`python -m webenv.sites` on the given ports, a small web (16 sites)."""
    env_vars = dict(os.environ, WEBENV_HTTP_PORT=str(http_port), WEBENV_GRPC_PORT=str(grpc_port),
                    WEBENV_METRICS_PORT="0", WEBENV_HTTP_HOST="127.0.0.1", WEBENV_SITES_COUNT="16")
    return subprocess.Popen([sys.executable, "-m", "webenv.sites"], env=env_vars, cwd=str(cwd),
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


async def test_against_the_sites_service(farm_factory, tmp_path):
    """The real sites service as a subprocess: a MiniWoB page and a synthetic task from its catalog."""
    # The farm meets the sites service over gRPC and HTTP, never by import (`make install` installs it).
    http_port, grpc_port = free_port(), free_port()
    proc = start_sites(http_port, grpc_port, tmp_path)
    try:
        try:
            await asyncio.to_thread(wait_for_port, grpc_port, "127.0.0.1", 60)
            await asyncio.to_thread(wait_for_port, http_port, "127.0.0.1", 60)
        except TimeoutError:
            proc.kill()
            pytest.fail(f"sites did not start: {proc.stderr.read().decode()[-2000:] if proc.stderr else ''}")
        async with farm_factory(sites_addr=f"127.0.0.1:{grpc_port}", farm_sites_http_addr=f"127.0.0.1:{http_port}") as f:
            chan = grpc.aio.insecure_channel(f"127.0.0.1:{grpc_port}")
            tasks = await task_pb2_grpc.TaskServiceStub(chan).ListTasks(task_pb2.ListTasksRequest(
                filter=task_pb2.TaskFilter(sources=[common_pb2.TASK_SOURCE_SYNTHETIC]), page_size=1), timeout=30)
            await chan.close()
            assert tasks.tasks, "the sites service listed no synthetic task"
            task = tasks.tasks[0]
            r = await f.env.OpenSession(environment_pb2.OpenSessionRequest(task=task), timeout=60)
            assert r.observation.axtree and not r.observation.last_action_error
            closed = await f.env.CloseSession(environment_pb2.CloseSessionRequest(
                session_id=r.session.session_id, capture_evidence=True))
            assert closed.site_state_json.startswith("{")
            r = await f.env.OpenSession(environment_pb2.OpenSessionRequest(task=miniwob_task("click-test")), timeout=60)
            assert r.instruction == "Click the button."
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()


@pytest.mark.parametrize("name", ["social-media-all", "count-shape", "identify-shape", "click-checkboxes",
                                  "book-flight", "choose-date", "use-autocomplete", "drag-box"])
async def test_miniwob_reset_of_many_kinds(farm, name):
    """Open and reset MiniWoB tasks of different kinds (canvas, jQuery UI, d3, long pages): the reset waits
    for the page's own onload (click canvas and sync cover exist) before starting the episode."""
    r = await farm.env.OpenSession(environment_pb2.OpenSessionRequest(task=miniwob_task(name), seed=5), timeout=60)
    sid = r.session.session_id
    try:
        assert r.instruction, name
        assert "START" not in r.observation.axtree, r.observation.axtree[:500]  # the sync cover is hidden
    finally:
        await farm.env.CloseSession(environment_pb2.CloseSessionRequest(session_id=sid))


async def test_miniwob_start_pages_are_loaded_ahead(farm_factory):
    """Once a MiniWoB task has been opened, the farm keeps contexts with its page loaded (primed): the next open
    of that task takes one (no page load) and still gets its own seeded episode; another task's open never gets
    a page primed for a different URL."""
    async with farm_factory(farm_primed_contexts=2) as f:
        pool, registry = f.farm.pool, f.farm.registry

        async def open_(name: str, seed: int) -> tuple[str, str, str]:
            r = await f.env.OpenSession(environment_pb2.OpenSessionRequest(task=miniwob_task(name), seed=seed),
                                        timeout=60)
            sid = r.session.session_id
            primed = registry.get(sid).slot.primed_url
            await f.env.CloseSession(environment_pb2.CloseSessionRequest(session_id=sid))
            return r.instruction, primed, r.observation.url

        cold, primed, _ = await open_("enter-text", 3)
        assert not primed
        for _ in range(300):  # the pool primes in the background (after its warm contexts)
            if pool.primed_count() == 2:
                break
            await asyncio.sleep(0.1)
        assert pool.primed_count() == 2
        again, primed, url = await open_("enter-text", 3)
        assert primed == url and url.endswith("/miniwob/enter-text.html")
        assert again == cold  # the same seed, the same episode, primed or not
        other, primed, url = await open_("enter-text", 4)  # another primed context, another seed
        assert primed and other != cold
        instr, primed, url = await open_("click-test", 1)  # not primed yet: a warm context, loaded now
        assert instr == "Click the button." and not primed and url.endswith("/miniwob/click-test.html")

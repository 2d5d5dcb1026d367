"""ForkSession on real Chromium: every item a fork keeps (fork.py's list), what it does not, independence, errors."""

from __future__ import annotations

import uuid

import grpc
import pytest
from webenv import errors
from webenv.v1 import browser_pb2, common_pb2, environment_pb2

PAGE_STATE_JS = """() => ({
  url: location.href, seen: document.getElementById('seen').textContent, cookie: document.cookie,
  ls: localStorage.getItem('ls'), ss: sessionStorage.getItem('ss'), heap: window.heap === undefined ? null : window.heap,
  text: document.getElementById('text').value, check: document.getElementById('check').checked,
  r2: document.getElementById('r2').checked, sel: document.getElementById('sel').value,
  multi: Array.from(document.getElementById('multi').selectedOptions).map((o) => o.text),
  area: document.getElementById('area').value, box: document.getElementById('box').scrollTop, y: window.scrollY,
  focus: document.activeElement ? document.activeElement.id : '', history: history.length,
})"""


async def _state(farm, sid: str) -> dict:
    return await farm.farm.registry.sessions[sid].page.evaluate(PAGE_STATE_JS)


async def _prepared(env, page_server) -> str:
    """A session with two pages behind it and every kind of state on the current page."""
    r = await env.open(start_url=page_server.url("second"))
    sid = r.session.session_id
    for action in (f'goto("{page_server.url("products")}")', f'goto("{page_server.url("fork")}")', 'click("#store")', 'fill("#text", "hello")',
                   'click("#check")', 'click("#r2")', 'select("#sel", "b")', 'select("#multi", "x", "z")',
                   'scroll_element("#box", 0, 200)', 'fill("#area", "notes")', "scroll(0, 500)"):
        step = await env.step(sid, action)
        assert not step.observation.last_action_error, (action, step.observation.last_action_error)
    return sid


async def test_fork_keeps_page_history_storage_fields_and_scroll(env, farm, page_server):
    sid = await _prepared(env, page_server)
    parent = await _state(farm, sid)
    assert parent["text"] == "hello" and parent["box"] == 200 and parent["y"] == 500 and parent["heap"] == "H"
    res = await env.fork(sid, 2, labels={"branch": "x"})
    assert len(res.sessions) == 2 and res.fork_seconds > 0
    forks = [r.session.session_id for r in res.sessions]
    assert len({sid, *forks}) == 3
    for r in res.sessions:
        assert r.session.state == environment_pb2.SESSION_STATE_OPEN and r.session.step_count == 0
        assert r.observation.url == page_server.url("fork") and r.observation.title == "Fork"
        assert r.session.labels["branch"] == "x" and r.open_seconds > 0
        st = await _state(farm, r.session.session_id)
        # storage was there before the page's own scripts ran
        assert st["seen"] == "ls=L1 ss=S1 ck=C1", st["seen"]
        assert (st["ls"], st["ss"], st["cookie"]) == ("L1", "S1", "ck=C1")
        assert (st["text"], st["check"], st["r2"], st["sel"], st["multi"], st["area"]) == (
            "hello", True, True, "b", ["x", "z"], "notes")
        assert st["box"] == 200 and st["y"] == 500
        assert st["focus"] == parent["focus"] == "area"
        assert st["heap"] is None  # the JS heap is not copied (documented)
        assert st["history"] == parent["history"] == 4  # about:blank (the pooled tab's first), second, products, fork
    # history: go_back leads to the pages before, loaded from the server, as in the parent
    for page in ("products", "second"):
        back = await env.step(forks[0], "go_back()")
        assert (back.observation.url, back.observation.title) == (page_server.url(page), page.title()), back.observation
    for page in ("products", "fork"):
        fwd = await env.step(forks[0], "go_forward()")
        assert (fwd.observation.url, fwd.observation.title) == (page_server.url(page), page.title()), fwd.observation
    for f in forks:
        await env.close(f)
    assert (await env.get(sid)).state == environment_pb2.SESSION_STATE_OPEN
    await env.close(sid)


async def test_forks_are_independent_sessions(env, farm, page_server):
    r = await env.open(start_url=page_server.url("fork"))
    sid = r.session.session_id
    await env.step(sid, 'fill("#text", "base")')
    forks = [x.session.session_id for x in (await env.fork(sid, 2, lease_seconds=120)).sessions]
    await env.step(forks[0], 'fill("#text", "changed")')
    await env.step(forks[0], 'click("#store")')  # cookie + storage written in fork 0 only
    assert (await _state(farm, forks[0]))["text"] == "changed"
    for other in (forks[1], sid):
        st = await _state(farm, other)
        assert (st["text"], st["ls"], st["cookie"]) == ("base", None, ""), other
    # own lease, own step count, closed separately
    info = await env.get(forks[1])
    assert info.step_count == 0 and (await env.get(sid)).step_count == 1
    await env.close(forks[0])
    step = await env.step(forks[1], 'fill("#text", "still here")')
    assert not step.observation.last_action_error and step.step_index == 0
    step = await env.step(sid, 'fill("#text", "parent")')
    assert step.step_index == 1
    for x in (forks[1], sid):
        await env.close(x)


async def test_fork_request_id_is_idempotent(env, farm, page_server):
    sid = (await env.open(start_url=page_server.url("second"))).session.session_id
    rid = uuid.uuid4().hex
    first = await env.fork(sid, 2, request_id=rid)
    again = await env.fork(sid, 2, request_id=rid)
    ids = [x.session.session_id for x in first.sessions]
    assert [x.session.session_id for x in again.sessions] == ids
    for x in [*ids, sid]:
        await env.close(x)


async def test_fork_errors(env, farm, page_server):
    with pytest.raises(errors.NotFound) as e:
        await env.fork("no-such-session", 1)
    assert e.value.reason == "SESSION_NOT_FOUND"
    sid = (await env.open(start_url=page_server.url("second"))).session.session_id
    for bad in (0, -1, 33):
        with pytest.raises(errors.InvalidArgument) as e:
            await env.fork(sid, bad)
        assert e.value.metadata["field"] == "count" and "1..32" in str(e.value)
    with pytest.raises(errors.InvalidArgument) as e:
        await env.fork(sid, 1, lease_seconds=-1)
    assert e.value.metadata["field"] == "lease_seconds"
    await env.close(sid)
    with pytest.raises(errors.FailedPrecondition) as e:
        await env.fork(sid, 1)
    assert e.value.reason == "SESSION_CLOSED"
    # MiniWoB: the episode is page JS, which cannot be copied
    task = common_pb2.Task(task_id="miniwob/click-test", source=common_pb2.TASK_SOURCE_MINIWOB,
                           metadata={"miniwob_task": "click-test"})
    mw = (await env.open(task=task, seed=1)).session.session_id
    with pytest.raises(errors.FailedPrecondition) as e:
        await env.fork(mw, 2)
    assert e.value.reason == "FORK_UNSUPPORTED" and "seed" in str(e.value)
    await env.close(mw)


async def _open_ids(farm) -> set[str]:
    return {s.session_id for s in (await farm.admin.ListSessions(browser_pb2.ListSessionsRequest())).sessions}


async def test_fork_capacity_is_resource_exhausted_like_open(farm_factory, page_server):
    async with farm_factory(farm_max_sessions=2, farm_warm_contexts=1) as f:
        opened = await f.env.OpenSession(environment_pb2.OpenSessionRequest(start_url=page_server.url("second")))
        sid = opened.session.session_id
        with pytest.raises(grpc.aio.AioRpcError) as e:
            await f.env.ForkSession(environment_pb2.ForkSessionRequest(session_id=sid, count=2))
        err = errors.from_rpc_error(e.value)
        assert isinstance(err, errors.ResourceExhausted) and err.reason == "FARM_FULL"
        assert err.retry_after_seconds and err.retry_after_seconds > 0
        assert await _open_ids(f) == {sid}
        one = await f.env.ForkSession(environment_pb2.ForkSessionRequest(session_id=sid, count=1))
        assert len(one.sessions) == 1


async def test_a_failed_copy_leaves_no_fork_behind(env, farm, page_server):
    token = uuid.uuid4().hex
    url = f"http://pages.web.test/flaky?token={token}&ok=2"  # the parent's load and one fork's, then refused
    sid = (await env.open(start_url=url)).session.session_id
    before = await _open_ids(farm)
    with pytest.raises(errors.FailedPrecondition) as e:
        await env.fork(sid, 3)
    assert e.value.reason == "FORK_LOAD_FAILED", e.value
    assert await _open_ids(farm) == before and farm.farm.registry.opening == 0
    await env.close(sid)

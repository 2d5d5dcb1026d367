"""Every TaskService RPC over a real gRPC channel, including the error statuses."""

from __future__ import annotations

import json

import grpc
import httpx
import pytest
from webenv import errors
from webenv.v1 import common_pb2 as pb
from webenv.v1 import task_pb2


async def _err(coro) -> errors.WebenvError:  # type: ignore[no-untyped-def]
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await coro
    return errors.from_rpc_error(info.value)


async def test_list_tasks_paginates_over_the_whole_filter(task_stub) -> None:
    f = task_pb2.TaskFilter(sources=[pb.TASK_SOURCE_SYNTHETIC], families=["travel"])
    seen: list[str] = []
    token = ""
    while True:
        resp = await task_stub.ListTasks(task_pb2.ListTasksRequest(filter=f, page_size=7, page_token=token))
        assert len(resp.tasks) <= 7
        seen += [t.task_id for t in resp.tasks]
        token = resp.next_page_token
        if not token:
            break
    assert len(seen) == len(set(seen)) == resp.total_size > 0
    assert all(t.startswith("synthetic/travel-") for t in seen)


async def test_list_tasks_filters_by_every_field(task_stub) -> None:
    resp = await task_stub.ListTasks(task_pb2.ListTasksRequest(filter=task_pb2.TaskFilter(
        split=pb.SPLIT_TEST, difficulties=[pb.DIFFICULTY_HARD], kinds=[pb.TASK_KIND_TRANSACTION]), page_size=1000))
    assert resp.tasks
    for t in resp.tasks:
        assert (t.split, t.difficulty, t.kind) == (pb.SPLIT_TEST, pb.DIFFICULTY_HARD, pb.TASK_KIND_TRANSACTION)
    site = resp.tasks[0].site
    by_site = await task_stub.ListTasks(task_pb2.ListTasksRequest(filter=task_pb2.TaskFilter(sites=[site]), page_size=1000))
    assert {t.site for t in by_site.tasks} == {site}
    ids = [resp.tasks[0].task_id, resp.tasks[1].task_id]
    by_id = await task_stub.ListTasks(task_pb2.ListTasksRequest(filter=task_pb2.TaskFilter(task_ids=ids)))
    assert sorted(t.task_id for t in by_id.tasks) == sorted(ids)
    by_builder = await task_stub.ListTasks(task_pb2.ListTasksRequest(filter=task_pb2.TaskFilter(builders=["ledger"]),
                                                                     page_size=1000))
    assert by_builder.total_size > 0 and {t.builder for t in by_builder.tasks} == {"ledger"}
    mw = await task_stub.ListTasks(task_pb2.ListTasksRequest(filter=task_pb2.TaskFilter(sources=[pb.TASK_SOURCE_MINIWOB])))
    assert mw.total_size >= 100 and mw.tasks[0].metadata["miniwob_task"]


async def test_list_tasks_rejects_bad_tokens_and_filters(task_stub) -> None:
    e = await _err(task_stub.ListTasks(task_pb2.ListTasksRequest(page_token="garbage!!")))
    assert e.code == grpc.StatusCode.INVALID_ARGUMENT and e.reason == "BAD_PAGE_TOKEN" and "page_token" in str(e)
    first = await task_stub.ListTasks(task_pb2.ListTasksRequest(page_size=2))
    other = task_pb2.TaskFilter(families=["shop"])
    e = await _err(task_stub.ListTasks(task_pb2.ListTasksRequest(filter=other, page_token=first.next_page_token)))
    assert e.code == grpc.StatusCode.INVALID_ARGUMENT and "different filter" in str(e)
    e = await _err(task_stub.ListTasks(task_pb2.ListTasksRequest(filter=task_pb2.TaskFilter(families=["casino"]))))
    assert e.code == grpc.StatusCode.INVALID_ARGUMENT and e.metadata["field"] == "filter.families"
    # Task ids and sites that do not exist are named, not silently matched by nothing.
    bad = task_pb2.TaskFilter(task_ids=["synthetic/shop-0000/tx-2", "synthetic/nope-0000/info-0"])
    e = await _err(task_stub.ListTasks(task_pb2.ListTasksRequest(filter=bad)))
    assert e.code == grpc.StatusCode.INVALID_ARGUMENT and e.metadata["field"] == "filter.task_ids"
    assert "1 unknown task ids: 'synthetic/nope-0000/info-0'" in str(e)
    e = await _err(task_stub.ListTasks(task_pb2.ListTasksRequest(filter=task_pb2.TaskFilter(sites=["nowhere.web.test"]))))
    assert e.code == grpc.StatusCode.INVALID_ARGUMENT and e.metadata["field"] == "filter.sites" and "nowhere" in str(e)
    e = await _err(task_stub.ListTasks(task_pb2.ListTasksRequest(filter=task_pb2.TaskFilter(builders=["ledger", "wix"]))))
    assert e.code == grpc.StatusCode.INVALID_ARGUMENT and e.metadata["field"] == "filter.builders"
    assert "1 unknown builders: 'wix'" in str(e) and "storefront" in str(e)
    e = await _err(task_stub.ListTasks(task_pb2.ListTasksRequest(filter=task_pb2.TaskFilter(kinds=[99]))))
    assert e.code == grpc.StatusCode.INVALID_ARGUMENT and "filter.kinds" in str(e)
    e = await _err(task_stub.ListTasks(task_pb2.ListTasksRequest(page_size=-1)))
    assert e.code == grpc.StatusCode.INVALID_ARGUMENT and "page_size" in str(e)


async def test_get_task_and_not_found(task_stub) -> None:
    resp = await task_stub.GetTask(task_pb2.GetTaskRequest(task_id="synthetic/shop-0000/tx-2"))
    t = resp.task
    assert t.family == "shop" and t.kind == pb.TASK_KIND_TRANSACTION and t.oracle[-1].HasField("answer")
    assert t.rubric.groups and t.start_url == "http://shop-0000.web.test/"
    # the template it was generated from: the same kind of task on every shop (the template frontier pools over it)
    other = (await task_stub.GetTask(task_pb2.GetTaskRequest(task_id="synthetic/shop-0001/tx-2"))).task
    assert t.template_id == other.template_id == "synthetic/shop/tx-2" and other.instruction != t.instruction
    e = await _err(task_stub.GetTask(task_pb2.GetTaskRequest(task_id="synthetic/shop-9999/tx-2")))
    assert e.code == grpc.StatusCode.NOT_FOUND and e.reason == "TASK_NOT_FOUND"
    e = await _err(task_stub.GetTask(task_pb2.GetTaskRequest()))
    assert e.code == grpc.StatusCode.INVALID_ARGUMENT


async def _order(http_port: int, session: str, sku: str, qty: int) -> None:
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{http_port}", headers={"host": "shop-0000.web.test"},
                                 cookies={"site_session": session}) as c:
        r = await c.post("/cart/add", data={"sku": sku, "qty": str(qty)})
        assert r.status_code == 303


async def test_state_reset_snapshot_fork_get(sites_service, task_stub) -> None:
    host = "shop-0000.web.test"
    sess = "parent-session-1"
    await task_stub.ResetSiteState(task_pb2.ResetSiteStateRequest(site_session=sess, site=host))
    await _order(sites_service.http_port, sess, "P1001", 2)
    state = json.loads((await task_stub.GetSiteState(task_pb2.GetSiteStateRequest(site_session=sess, site=host))).state_json)
    assert state["cart"]["items"][0]["sku"] == "P1001" and state["cart"]["items"][0]["qty"] == 2

    snap = (await task_stub.SnapshotSiteState(task_pb2.SnapshotSiteStateRequest(site_session=sess, request_id="s1"))).snapshot_id
    again = (await task_stub.SnapshotSiteState(task_pb2.SnapshotSiteStateRequest(site_session=sess, request_id="s1"))).snapshot_id
    assert snap == again  # idempotent
    fork = (await task_stub.ForkSiteState(task_pb2.ForkSiteStateRequest(site_session=sess, request_id="f1"))).site_session
    fork_again = (await task_stub.ForkSiteState(task_pb2.ForkSiteStateRequest(site_session=sess, request_id="f1"))).site_session
    assert fork == fork_again and fork != sess

    # the fork diverges; the parent is untouched
    await _order(sites_service.http_port, fork, "P1002", 1)
    parent = json.loads((await task_stub.GetSiteState(task_pb2.GetSiteStateRequest(site_session=sess, site=host))).state_json)
    child = json.loads((await task_stub.GetSiteState(task_pb2.GetSiteStateRequest(site_session=fork, site=host))).state_json)
    assert [x["sku"] for x in parent["cart"]["items"]] == ["P1001"]
    assert [x["sku"] for x in child["cart"]["items"]] == ["P1001", "P1002"]

    # the parent changes after the snapshot; a fork of the snapshot has the old state
    await _order(sites_service.http_port, sess, "P1003", 1)
    named = (await task_stub.ForkSiteState(task_pb2.ForkSiteStateRequest(snapshot_id=snap, new_site_session="from-snap"))).site_session
    assert named == "from-snap"
    snapped = json.loads((await task_stub.GetSiteState(task_pb2.GetSiteStateRequest(site_session=named))).state_json)
    assert [x["sku"] for x in snapped[host]["cart"]["items"]] == ["P1001"]

    await task_stub.ResetSiteState(task_pb2.ResetSiteStateRequest(site_session=sess))
    cleared = json.loads((await task_stub.GetSiteState(task_pb2.GetSiteStateRequest(site_session=sess, site=host))).state_json)
    assert cleared["cart"]["items"] == [] and cleared["orders"] == []


async def test_state_errors(task_stub) -> None:
    e = await _err(task_stub.GetSiteState(task_pb2.GetSiteStateRequest(site_session="never-seen")))
    assert e.code == grpc.StatusCode.NOT_FOUND and e.reason == "SITE_SESSION_NOT_FOUND"
    e = await _err(task_stub.SnapshotSiteState(task_pb2.SnapshotSiteStateRequest(site_session="never-seen")))
    assert e.code == grpc.StatusCode.NOT_FOUND
    e = await _err(task_stub.ForkSiteState(task_pb2.ForkSiteStateRequest(snapshot_id="snap-missing")))
    assert e.code == grpc.StatusCode.NOT_FOUND and e.reason == "SNAPSHOT_NOT_FOUND"
    e = await _err(task_stub.ForkSiteState(task_pb2.ForkSiteStateRequest()))
    assert e.code == grpc.StatusCode.INVALID_ARGUMENT
    e = await _err(task_stub.ResetSiteState(task_pb2.ResetSiteStateRequest(site_session="")))
    assert e.code == grpc.StatusCode.INVALID_ARGUMENT and e.metadata["field"] == "site_session"
    e = await _err(task_stub.ResetSiteState(task_pb2.ResetSiteStateRequest(site_session="bad session!")))
    assert e.code == grpc.StatusCode.INVALID_ARGUMENT
    e = await _err(task_stub.ResetSiteState(task_pb2.ResetSiteStateRequest(site_session="ok", site="evil.example.com")))
    assert e.code == grpc.StatusCode.NOT_FOUND and e.reason == "SITE_NOT_FOUND"
    await task_stub.ResetSiteState(task_pb2.ResetSiteStateRequest(site_session="exists-1"))
    await task_stub.ResetSiteState(task_pb2.ResetSiteStateRequest(site_session="exists-2"))
    e = await _err(task_stub.ForkSiteState(task_pb2.ForkSiteStateRequest(site_session="exists-1", new_site_session="exists-2")))
    assert e.code == grpc.StatusCode.ALREADY_EXISTS


async def test_health_and_metrics(sites_service, scrape) -> None:
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    async with grpc.aio.insecure_channel(f"127.0.0.1:{sites_service.port}") as ch:
        resp = await health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(service="webenv.v1.TaskService"))
    assert resp.status == health_pb2.HealthCheckResponse.SERVING
    async with httpx.AsyncClient() as c:
        r = await c.get(f"http://127.0.0.1:{sites_service.http_port}/", headers={"host": "forum-0001.web.test"})
    assert r.status_code == 200 and "site_session" in r.cookies
    async with httpx.AsyncClient(cookies={"site_session": "bad value!"}) as c:
        r = await c.get(f"http://127.0.0.1:{sites_service.http_port}/", headers={"host": "forum-0001.web.test"})
    assert r.cookies["site_session"] != "bad value!"  # a malformed cookie is replaced
    text = scrape(sites_service.server.metrics_port)
    assert "webenv_sites_http_requests_total" in text and "grpc_server_handled_total" in text

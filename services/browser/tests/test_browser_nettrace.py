"""The per-session network trace (webenv.browser.nettrace): CloseSession with capture_evidence returns the requests the
session's pages made (method, URL with its query, status, navigation), in order, and nothing of a session that ran
beside it; without capture_evidence it returns none."""

from __future__ import annotations

import asyncio

from webenv.v1 import common_pb2, environment_pb2


async def _walk(farm, page_server, name: str) -> environment_pb2.CloseSessionResponse:
    opened = await farm.env.OpenSession(environment_pb2.OpenSessionRequest(start_url=page_server.url("basic")))
    sid = opened.session.session_id
    for url in (f"http://pages.web.test/slow/{name}?ms=20&q={name}-query", f"http://pages.web.test/pages/no-{name}"):
        await farm.env.Step(environment_pb2.StepRequest(
            session_id=sid, action=common_pb2.Action(navigate=common_pb2.NavigateAction(url=url))))
    return await farm.env.CloseSession(environment_pb2.CloseSessionRequest(session_id=sid, capture_evidence=True))


async def test_the_trace_holds_its_own_sessions_requests_only(farm, page_server) -> None:
    a, b = await asyncio.gather(_walk(farm, page_server, "alpha"), _walk(farm, page_server, "beta"))
    for mine, other in ((a, "beta"), (b, "alpha")):
        events = list(mine.network_events)
        name = "alpha" if other == "beta" else "beta"
        docs = [(e.method, e.url, e.status, e.navigation) for e in events if e.resource_type == "document"]
        assert ("GET", f"http://pages.web.test/slow/{name}?ms=20&q={name}-query", 200, True) in docs, docs
        assert ("GET", f"http://pages.web.test/pages/no-{name}", 404, True) in docs, docs
        assert not any(other in e.url for e in events), [e.url for e in events]
        assert [e.seconds for e in events] == sorted(e.seconds for e in events)
        assert all("cookie" not in {k.lower() for k in e.request_headers} for e in events)


async def test_no_trace_without_capture_evidence(farm, page_server) -> None:
    opened = await farm.env.OpenSession(environment_pb2.OpenSessionRequest(start_url=page_server.url("basic")))
    await farm.env.Step(environment_pb2.StepRequest(session_id=opened.session.session_id, action=common_pb2.Action(
        navigate=common_pb2.NavigateAction(url="http://pages.web.test/slow/x?ms=1"))))
    closed = await farm.env.CloseSession(environment_pb2.CloseSessionRequest(session_id=opened.session.session_id))
    assert not closed.network_events

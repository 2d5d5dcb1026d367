"""Open, step and close over a real channel: the core loop."""

from __future__ import annotations

from webenv.v1 import common_pb2, environment_pb2

F = common_pb2.ObservationFormat


async def test_open_step_close(farm, page_server):
    spec = common_pb2.ObservationSpec(formats=[F.OBSERVATION_FORMAT_AXTREE, F.OBSERVATION_FORMAT_ELEMENTS,
                                               F.OBSERVATION_FORMAT_SCREENSHOT])
    opened = await farm.env.OpenSession(environment_pb2.OpenSessionRequest(
        start_url=page_server.url("basic"), observation_spec=spec))
    obs = opened.observation
    assert "Welcome" in obs.axtree
    assert obs.screenshot.data[:4] == b"\x89PNG"
    btn = next(e for e in obs.elements if e.name == "Press me")
    sid = opened.session.session_id
    r = await farm.env.Step(environment_pb2.StepRequest(
        session_id=sid, step_index=0,
        action=common_pb2.Action(click=common_pb2.ClickAction(target=common_pb2.ElementTarget(element_id=btn.element_id)))))
    assert r.observation.last_action_error == ""
    assert "clicked 1" in r.observation.axtree
    closed = await farm.env.CloseSession(environment_pb2.CloseSessionRequest(session_id=sid))
    assert closed.session.state == environment_pb2.SESSION_STATE_CLOSED

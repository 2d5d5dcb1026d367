"""Bring your own LM: a tiny random Qwen3 folder (built here, no download) served in WebWorld's format behind the
same EnvironmentService and Predict RPC, over a real gRPC channel."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import pytest
from pydantic import ValidationError
from webenv.actions import parse_action
from webenv.testing import scrape
from webenv.v1 import environment_pb2, environment_pb2_grpc, worldmodel_pb2, worldmodel_pb2_grpc
from webenv.worldmodel import webworld
from webenv.worldmodel.dataset import read_transitions
from webenv.worldmodel.predict import Query, load_world_model


@pytest.fixture(scope="module")
def qwen3(transitions_file: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("qwen3")
    records = read_transitions([transitions_file])
    webworld.tiny_random_model(path, [t for r in records for t in (r.state, r.action_text, r.url)])
    assert json.loads((path / "config.json").read_text())["model_type"] == "qwen3"
    return path


@pytest.fixture(scope="module")
async def byo_channel(tiny_model: str, qwen3: Path, transitions_file: Path) -> AsyncIterator[grpc.aio.Channel]:
    from webenv.worldmodel.app import serving
    from webenv.worldmodel.config import Settings

    settings = Settings(grpc_port=0, metrics_port=0, host="127.0.0.1", worldmodel_model_path=tiny_model,
                        worldmodel_lm_path=str(qwen3), worldmodel_max_new_tokens=24, worldmodel_horizon=10,
                        worldmodel_start_states=str(transitions_file))
    async with serving(settings) as (server, _, _):
        channel = grpc.aio.insecure_channel(f"127.0.0.1:{server.port}")
        channel.metrics_port = server.metrics_port  # type: ignore[attr-defined]
        yield channel
        await channel.close()
        await server.stop()


def test_prompt_and_parse_in_webworld_format() -> None:
    msgs = webworld.prompt("Buy it", [("http://a/", 'click("3")')], "http://a/p", '[1] heading "P"', 'click("2")',
                           ("http://a/q", '[1] heading "Q"'))
    assert [m.role for m in msgs] == ["system", "user"]
    text = msgs[1].content
    for part in ("## Instruction\nBuy it", '1. click("3") (on http://a/)', "## Current URL\nhttp://a/p",
                 '## Current state\n[1] heading "P"', '## Action\nclick("2")', 'URL: http://a/q\n[1] heading "Q"'):
        assert part in text
    p = webworld.parse('<think>x</think>URL: http://a/q\n[1] heading "Q"\n', "http://a/p", "S")
    assert (p.next_url, p.next_state, p.fallback) == ("http://a/q", '[1] heading "Q"', False)
    p = webworld.parse("URL: http://a/q\n  \n", "http://a/p", "S")
    assert (p.next_url, p.next_state, p.fallback) == ("http://a/p", "S", True)  # no state: the page is kept


async def test_retrieval_result_goes_in_as_context(tiny_model: str, qwen3: Path, transitions_file: Path) -> None:
    r = next(r for r in read_transitions([transitions_file]) if r.split == "test" and r.action_text.startswith("click"))
    for on in (True, False):
        p = await load_world_model("transformers", tiny_model, threads=1, lm_path=str(qwen3), retrieval_context=on)
        try:
            assert p.mode == "webworld" and p.info.model == str(qwen3)
            req = p.request(Query(r.page, r.action_text, instruction="Find it"))
            assert req.is_chat and ("## Reference" in req.prompt[1].content) == on
        finally:
            await p.llm.close()


async def test_steps_of_a_simulated_session_come_from_the_model(byo_channel: grpc.aio.Channel,
                                                                 transitions_file: Path, qwen3: Path) -> None:
    wm = worldmodel_pb2_grpc.WorldModelServiceStub(byo_channel)
    info = await wm.GetModelInfo(worldmodel_pb2.GetModelInfoRequest())
    assert info.model == str(qwen3) and info.parameters > 0
    env = environment_pb2_grpc.EnvironmentServiceStub(byo_channel)
    ep = [r for r in read_transitions([transitions_file]) if r.episode_id == "shop-0001.web.test-search"]
    s = (await env.OpenSession(environment_pb2.OpenSessionRequest(start_url=ep[0].url))).session
    for i, r in enumerate(ep[:3]):
        step = await env.Step(environment_pb2.StepRequest(session_id=s.session_id, action=parse_action(r.action_text),
                                                          step_index=i))
        assert step.step_index == i and step.observation.axtree and step.timings.total_seconds > 0
    text = scrape(byo_channel.metrics_port)  # type: ignore[attr-defined]
    assert 'webenv_worldmodel_decisions_total{decided_by="lm"}' in text
    assert "webenv_worldmodel_generated_tokens_total" in text
    await env.CloseSession(environment_pb2.CloseSessionRequest(session_id=s.session_id))


def test_settings_name_a_bad_lm_path(tiny_model: str, tmp_path: Path) -> None:
    from webenv.worldmodel.config import Settings

    with pytest.raises(ValidationError, match="WEBENV_WORLDMODEL_LM_PATH"):
        Settings(worldmodel_model_path=tiny_model, worldmodel_lm_path=str(tmp_path))

"""Open tabs in every observation and in every adapter's (issue 52): a page whose link opens a second tab shows both
tabs (title, URL, which is active) in the farm's Observation, BrowserGym's dict, the Gymnasium client's and the MCP
tools' text (the adapters of libs/compat), each over the real farm on Chromium. The OpenEnv observation's (a service:
services/openenv) is tests/test_openenv_tabs.py's, since a service's tests import no other service."""

from __future__ import annotations

import asyncio
import re

import pytest
from webenv.client import EnvironmentClient, open_tabs
from webenv.client.episode import Episode
from webenv.compat import browsergym as bgym
from webenv.compat.gym import WebEnv
from webenv.compat.mcp import FarmSession
from webenv.v1 import common_pb2 as pb

pytestmark = pytest.mark.timeout(180)

NEW_TAB = pb.Action(click=pb.ClickAction(target=pb.ElementTarget(selector="#newtab")))


def both_tabs(page_server) -> list[dict]:
    return [{"title": "Basic page", "url": page_server.url("basic"), "active": False},
            {"title": "Second", "url": page_server.url("second"), "active": True}]


async def test_a_page_that_opens_a_second_tab_shows_both_everywhere(farm, page_server) -> None:
    expected = both_tabs(page_server)
    async with EnvironmentClient(farm.channel) as env:
        episode = await Episode.open(env, start_url=page_server.url("basic"),
                                     spec=pb.ObservationSpec(formats=[pb.OBSERVATION_FORMAT_AXTREE]))
        try:
            assert open_tabs(episode.observation) == [{"title": "Basic page", "url": page_server.url("basic"),
                                                       "active": True}]
            obs = (await episode.step(NEW_TAB)).observation
            # the farm's observation: both tabs, the popup active, its id the active one
            assert [(t.title, t.url, t.active) for t in obs.tabs] == [tuple(t.values()) for t in expected]
            assert obs.active_tab_id == obs.tabs[1].tab_id and obs.url == page_server.url("second")
            assert open_tabs(obs) == expected
            # BrowserGym's names
            d = bgym.observation_dict(obs, goal="", chat=bgym.Chat())
            assert d["open_pages_urls"] == (page_server.url("basic"), page_server.url("second"))
            assert d["open_pages_titles"] == ("Basic page", "Second")
            assert d["active_page_index"].tolist() == [1]
        finally:
            await episode.close()

    # the MCP tools' text after the click
    mcp = FarmSession(farm.address, start_url=page_server.url("basic"))
    try:
        text = await mcp.act(NEW_TAB)
    finally:
        await mcp.close()
    assert f'  [0] {page_server.url("basic")} "Basic page"\n  [1] {page_server.url("second")} (active) "Second"' in text

    # the Gymnasium client, both interfaces (synchronous: in a thread while this loop serves the farm)
    def gym(api: str) -> dict:
        env = WebEnv(farm.address, start_url=page_server.url("basic"), api=api, formats=["axtree"])
        try:
            first, _ = env.reset()
            [bid] = re.findall(r"\[(\w+)\] link .Open in new tab", first["axtree_txt" if api == "browsergym" else "axtree"])
            obs, *_ = env.step(f"click('{bid}')" if api == "browsergym" else f"click({bid})")
            return obs
        finally:
            env.close()

    native = await asyncio.to_thread(gym, "webenv")
    assert native["tabs"] == expected
    bg = await asyncio.to_thread(gym, "browsergym")
    assert bg["open_pages_titles"] == ("Basic page", "Second") and bg["active_page_index"].tolist() == [1]

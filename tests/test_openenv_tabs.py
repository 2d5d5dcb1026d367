"""Open tabs in the OpenEnv observation (issue 52): after a click that opens a second tab, services/openenv's
observation lists both tabs (title, URL, which is active) as the farm's Observation does, over the real farm on
Chromium. Here rather than in the farm's tests (services/browser/tests/test_browser_tabs.py, which checks the farm
and the libraries' adapters), since a service's tests import no other service."""

from __future__ import annotations

from pathlib import Path

import pytest
from webenv.client import EnvironmentClient
from webenv.client.episode import Episode
from webenv.openenv.config import Settings
from webenv.openenv.env import Backend, WebEnvironment
from webenv.testing import load_test_module
from webenv.v1 import common_pb2 as pb

pytestmark = pytest.mark.timeout(180)

ROOT = Path(__file__).resolve().parents[1]
_browser = load_test_module(ROOT / "services" / "browser" / "tests" / "conftest.py", "webenv_browser_test_fixtures")
page_server, farm = _browser.page_server, _browser.farm

NEW_TAB = pb.Action(click=pb.ClickAction(target=pb.ElementTarget(selector="#newtab")))  # the basic page's new-tab link


async def test_the_openenv_observation_shows_both_tabs(farm, page_server) -> None:
    expected = [{"title": "Basic page", "url": page_server.url("basic"), "active": False},
                {"title": "Second", "url": page_server.url("second"), "active": True}]
    async with EnvironmentClient(farm.channel) as env:
        episode = await Episode.open(env, start_url=page_server.url("basic"),
                                     spec=pb.ObservationSpec(formats=[pb.OBSERVATION_FORMAT_AXTREE]))
        try:
            obs = (await episode.step(NEW_TAB)).observation
            # its episode opened on the farm at a URL instead of a catalog task
            openenv = WebEnvironment(Backend(Settings(browser_addr=farm.address, sites_addr=farm.address,
                                                      judge_addr=farm.address)))
            openenv.episode = episode
            assert [t.model_dump() for t in openenv._observation(obs, step_index=0).tabs] == expected
        finally:
            await episode.close()

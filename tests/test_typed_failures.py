"""Infrastructure failures are typed, never a reward of 0 (issue 50): the TRL environment, the OpenEnv server, the
MCP answer tool and the sdk's `Episode` on a real farm node that is killed mid-episode (SIGKILL, as a crashed node),
with the real sites service and judge as processes. Each tells the interrupted episode from a failed one."""

from __future__ import annotations

import asyncio
import re
import signal
import urllib.request
from pathlib import Path

import pytest
from mcp.server.mcpserver.exceptions import ToolError
from webenv import errors
from webenv.cli.stack import Stack
from webenv.client import EnvironmentClient, make_channel
from webenv.client.episode import INTERRUPTED, Episode
from webenv.compat.mcp import FarmSession
from webenv.compat.trl import WebTaskEnv
from webenv.openenv.client import WebEnvClient
from webenv.openenv.env import WebAction
from webenv.testing import free_port, load_test_module
from webenv.v1 import common_pb2, environment_pb2, judge_pb2_grpc, task_pb2, task_pb2_grpc

pytestmark = pytest.mark.timeout(300)
serve_openenv = load_test_module(Path(__file__).with_name("test_openenv.py"), "_test_openenv").serve_openenv
TASK = "miniwob/click-test"


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    with Stack(tmp_path_factory.mktemp("typed-failures"), free_ports=True, sites_count=8) as s:
        s.start(("sites", "judge"))
        yield s


def test_a_farm_that_dies_mid_episode_is_an_error_never_a_reward_of_zero(stack: Stack) -> None:
    node = stack.add_browser_node("doomed")
    trl = WebTaskEnv(browser=node, sites=stack.address("sites"), judge=stack.address("judge"))
    page = trl.reset(task_id=TASK, seed=0)
    button = re.search(r'\[(\w+)\] button "Click Me!"', page).group(1)
    assert "URL:" in trl.scroll(10)

    async def open_episode() -> tuple[Episode, FarmSession]:
        async with make_channel(stack.address("sites")) as ch:
            task = (await task_pb2_grpc.TaskServiceStub(ch).GetTask(task_pb2.GetTaskRequest(task_id=TASK))).task
        episode = await Episode.open(EnvironmentClient(node), task)
        await episode.step(common_pb2.Action(scroll=common_pb2.ScrollAction(dy=10)))
        mcp = FarmSession(node, sites=stack.address("sites"), task_id=TASK, judge=stack.address("judge"))
        await mcp.act(common_pb2.Action(noop=common_pb2.NoopAction()))
        return episode, mcp

    loop = asyncio.new_event_loop()
    episode, mcp = loop.run_until_complete(open_episode())
    with serve_openenv(stack, browser=node), WebEnvClient(base_url=stack.openenv_url).sync() as openenv:
        openenv.reset(task_id=TASK, seed=0)
        assert openenv.step(WebAction(action="noop()")).reward is not None

        stack.procs["browser-doomed"].send_signal(signal.SIGKILL)  # the node dies with its Chromium's sessions open
        stack.procs["browser-doomed"].wait(30)

        # OpenEnv: the step answers a typed error, the episode ends ungraded, and the metric counts it apart
        with pytest.raises(RuntimeError, match=f"UNAVAILABLE {INTERRUPTED}: session_id: episode"):
            openenv.step(WebAction(action=f"click({button})"))
        with pytest.raises(RuntimeError, match="NO_EPISODE"):
            openenv.step(WebAction(action="noop()"))
        metrics = urllib.request.urlopen(stack.openenv_metrics, timeout=10).read().decode()
        assert 'webenv_openenv_interrupted_total{code="UNAVAILABLE"} 1.0' in metrics
        assert 'webenv_openenv_graded_total{passed="false"}' not in metrics

    # TRL: the tool says the episode was interrupted; get_reward is None (TRL's unscorable rollout), not 0.0
    assert trl.click(button).startswith("The episode was interrupted: UNAVAILABLE")
    assert trl.get_reward() is None and isinstance(trl.error, errors.Unavailable)
    assert trl.click(button) == "The episode has ended: no more actions."

    async def grade() -> None:
        # the sdk's Episode (every adapter's grading): the step fails typed, grading raises, never a failed verdict
        with pytest.raises(errors.Unavailable):
            await episode.step(common_pb2.Action(noop=common_pb2.NoopAction()))
        async with make_channel(stack.address("judge")) as ch:
            with pytest.raises(errors.Unavailable) as caught:
                await episode.grade(judge_pb2_grpc.JudgeServiceStub(ch))
        assert caught.value.reason == INTERRUPTED and caught.value.metadata["cause"]
        # MCP: the answer tool is the typed error, not "Verdict: failed"
        with pytest.raises(ToolError, match=f"UNAVAILABLE {INTERRUPTED}"):
            await mcp.answer("done")
        await mcp.close()
        await episode.client.aclose()

    loop.run_until_complete(grade())
    loop.close()
    trl._close()
    del stack.procs["browser-doomed"]


def test_site_state_that_cannot_be_read_at_the_close_is_an_interrupted_episode_not_a_failed_one(stack: Stack) -> None:
    """The farm reads a synthetic task's site state from the sites service when the episode closes; with that service
    gone, the close fails typed (UNAVAILABLE SITES_UNAVAILABLE) and grading raises EPISODE_INTERRUPTED, never a failed
    verdict of an empty state. A sites service and a farm node of their own, so the stack's stay up."""
    sites_key, node_key = "sites-doomed", "browser-sites-doomed"
    http = f"127.0.0.1:{free_port()}"
    stack.ports[sites_key] = (free_port(), free_port())
    stack._launch(sites_key, "sites", stack.env_for("sites") | {
        "WEBENV_GRPC_PORT": str(stack.ports[sites_key][0]), "WEBENV_METRICS_PORT": str(stack.ports[sites_key][1]),
        "WEBENV_HTTP_PORT": http.rsplit(":", 1)[1]}, 120)
    stack.ports[node_key] = (free_port(), free_port())
    stack._launch(node_key, "browser", stack.env_for("browser") | {
        "WEBENV_GRPC_PORT": str(stack.ports[node_key][0]), "WEBENV_METRICS_PORT": str(stack.ports[node_key][1]),
        "WEBENV_NODE_NAME": "sites-doomed", "WEBENV_SITES_ADDR": stack.address(sites_key),
        "WEBENV_FARM_SITES_HTTP_ADDR": http}, 120)
    node, sites = stack.address(node_key), stack.address(sites_key)

    async def main() -> None:
        async with make_channel(sites) as ch:
            listed = await task_pb2_grpc.TaskServiceStub(ch).ListTasks(task_pb2.ListTasksRequest(
                filter=task_pb2.TaskFilter(sources=[common_pb2.TASK_SOURCE_SYNTHETIC]), page_size=1))
        [task] = listed.tasks
        client = EnvironmentClient(node)
        episode = await Episode.open(client, task)
        await episode.step(common_pb2.Action(noop=common_pb2.NoopAction()))
        stack.procs[sites_key].send_signal(signal.SIGKILL)  # the sites service dies before the close
        stack.procs[sites_key].wait(30)
        async with make_channel(stack.address("judge")) as ch:
            with pytest.raises(errors.Unavailable) as caught:
                await episode.grade(judge_pb2_grpc.JudgeServiceStub(ch))
        assert caught.value.reason == INTERRUPTED and caught.value.metadata["cause"] == "SITES_UNAVAILABLE"
        assert episode.evidence == ""  # no state was made up for the judge
        session = await client.get(episode.session_id)  # closed without the evidence, not left to its lease
        assert session.state == environment_pb2.SESSION_STATE_CLOSED
        await client.aclose()

    asyncio.run(main())
    stack.procs.pop(node_key).terminate()
    del stack.procs[sites_key]

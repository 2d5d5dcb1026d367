"""The sdk's EnvironmentClient and Gymnasium wrapper against the real farm."""

from __future__ import annotations

import asyncio

import pytest
from webenv import errors
from webenv.client.environment import EnvironmentClient, observation_spec
from webenv.compat.gym import WebEnv
from webenv.v1 import common_pb2


async def test_environment_client(farm, page_server):
    async with EnvironmentClient(farm.address) as env:
        o = await env.open(start_url=page_server.url("basic"), formats=["axtree", "elements"])
        sid = o.session.session_id
        r = await env.step(sid, 'click("#btn")')
        assert r.step_index == 0 and "clicked 1" in r.observation.axtree
        r = await env.step(sid, 'click("#btn")', spec=observation_spec(["markdown"]))
        assert r.step_index == 1 and "clicked 2" in r.observation.markdown
        with pytest.raises(errors.InvalidArgument):
            await env.step(sid, common_pb2.Action())
        others = [(await env.open(start_url=page_server.url("basic"))).session.session_id for _ in range(3)]
        async with env.stream() as stream:
            rs = await asyncio.gather(*(stream.step(s, 'click("#btn")') for s in [sid, *others]))
            with pytest.raises(errors.NotFound):
                await stream.step("missing", "noop()")
        assert [x.step_index for x in rs] == [2, 0, 0, 0]
        assert all("clicked" in x.observation.axtree for x in rs)
        s = await env.renew(sid, 120)
        assert s.session_id == sid and (await env.get(sid)).step_count == 3
        for x in [sid, *others]:
            await env.close(x)
        with pytest.raises(errors.FailedPrecondition):
            await env.step(sid, "noop()")


async def test_gym_wrapper(farm):
    task = common_pb2.Task(task_id="miniwob/click-test", source=common_pb2.TASK_SOURCE_MINIWOB,
                           metadata={"miniwob_task": "click-test"})

    def episode() -> tuple:
        env = WebEnv(farm.address, task=task, formats=("axtree", "screenshot"), max_steps=3)
        try:
            obs, info = env.reset(seed=5)
            assert info["instruction"] == "Click the button." and "Click Me!" in obs["axtree"]
            assert obs["screenshot"][:4] == b"\x89PNG"
            bad = env.step("click(")  # unparsable text costs a step, not the rollout
            assert bad[4]["action_error"] and bad[0]["last_action_error"].startswith("could not parse")
            return env.step('click("#subbtn")')
        finally:
            env.close()

    obs, reward, terminated, truncated, info = await asyncio.to_thread(episode)
    assert terminated and not truncated and reward > 0 and info["raw_reward"] == 1.0

"""Kill -9 of one browser-farm node mid-run, with two nodes serving one collector.

Everything real, as processes on free loopback ports: sites, two browser farm nodes on real Chromium (node-a,
node-b), the oracle policy, the judge and the collector, whose run names both nodes (`env_address="a,b"`,
`max_retries=2`). Once a few episodes are stored and others are in flight, node-a's whole process group (the
farm and its Chromium) is SIGKILLed, as when a pod dies. The run must still succeed with every planned
episode stored exactly once: the episodes node-a was running, and those later sent to it, are retried on
node-b (attempts > 1), none is lost, none is stored twice, and no episode's steps are doubled.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
from collections import Counter
from pathlib import Path

import grpc
import pytest
from webenv.runtime.stack import Stack
from webenv.v1 import collector_pb2, collector_pb2_grpc, common_pb2

pytestmark = pytest.mark.timeout(300)
EPISODES = 10


def read_jsonl(path: str) -> list[dict]:
    return [json.loads(line) for line in Path(path).read_text().splitlines()]


async def test_episodes_of_a_killed_farm_node_are_retried_on_the_other_once(tmp_path: Path) -> None:
    st = Stack(tmp_path / "stack", free_ports=True, sites_count=12,
               extra_env={"WEBENV_LOG_JSON": "false", "WEBENV_FARM_WARM_CONTEXTS": "2", "WEBENV_NODE_NAME": "node-a"})
    try:
        st.start(("sites", "browser", "policy", "judge"), timeout=120)
        b_addr = await asyncio.to_thread(st.add_browser_node, "node-b")
        st.start(("collector",), timeout=120)
        node_a = st.procs["browser"]

        async with grpc.aio.insecure_channel(st.address("collector")) as ch:
            stub = collector_pb2_grpc.CollectorServiceStub(ch)
            spec = collector_pb2.RunSpec(policy="oracle", episodes=EPISODES, seed=5, concurrency=4, max_retries=2,
                                         env_address=f"{st.address('browser')},{b_addr}")
            spec.tasks.sources.append(common_pb2.TASK_SOURCE_SYNTHETIC)
            spec.tasks.difficulties.append(common_pb2.DIFFICULTY_EASY)
            run = (await stub.StartRun(collector_pb2.StartRunRequest(spec=spec), timeout=120)).run
            killed_at = None
            last = None
            async with asyncio.timeout(240):
                async for resp in stub.WatchRun(collector_pb2.WatchRunRequest(run_id=run.run_id)):
                    last = resp
                    c = resp.run.counts
                    if killed_at is None and c.finished >= 2 and c.started > c.finished:
                        os.killpg(node_a.pid, signal.SIGKILL)  # the node and its Chromium, mid-episode
                        killed_at = c.finished
            assert killed_at is not None and node_a.wait(10) == -signal.SIGKILL
            assert last.run.state == collector_pb2.RUN_STATE_SUCCEEDED, last.run
            assert last.run.counts.finished == EPISODES and last.run.counts.errored == 0, last.run.counts

            exp = await stub.ExportRun(collector_pb2.ExportRunRequest(
                run_id=run.run_id, format=collector_pb2.EXPORT_FORMAT_JSONL, destination=str(tmp_path / "export")),
                timeout=120)
        episodes = read_jsonl(exp.paths[0])
        ids = Counter(e["episode_id"] for e in episodes)
        assert len(ids) == EPISODES and set(ids.values()) == {1}  # none lost, none doubled
        assert {e["episode_index"] for e in episodes} == set(range(EPISODES))
        for e in episodes:
            assert [s["step_index"] for s in e["steps_detail"]] == list(range(e["steps"])), e["episode_id"]
        retried = [e for e in episodes if e["attempts"] > 1]
        assert retried, "no episode was retried after node-a died"
        assert all(e["browser_node"] == "node-b" for e in retried)
        assert all(not e["error"] for e in episodes)
    finally:
        st.stop()  # node-b too

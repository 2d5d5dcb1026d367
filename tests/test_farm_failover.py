"""Browser-farm replicas that come and go under one collector: a replica joining and leaving the name a run
targets (as a Kubernetes headless Service's pods do), then kill -9 of one node mid-run.

Replicas: the run's ``env_address`` is ``dns:///farm.test:PORT``; the name's answer (all its A/AAAA records, here
given by the test, since loopback nodes differ by port rather than by address) starts as node-a alone; once
episodes run, node-b starts and joins the answer, and once node-b has taken episodes node-a leaves it. Every
episode is stored once, none errors, node-b takes new episodes as soon as it joins (it has the most free
capacity by GetCapacity), and no episode starts on node-a after it left (its running ones finish there).

Kill -9: everything real, as processes on free loopback ports: sites, two browser farm nodes on real Chromium (node-a,
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
from webenv.cli.stack import Stack
from webenv.v1 import collector_pb2, collector_pb2_grpc, common_pb2

pytestmark = pytest.mark.timeout(300)
EPISODES = 10


@pytest.fixture(scope="module")
def stack(tmp_path_factory) -> Stack:
    """sites, a browser node (node-a), policy and judge, shared by this module's tests; node-b is added by the first
    test that needs it (``stack.node_b``)."""
    st = Stack(tmp_path_factory.mktemp("stack"), free_ports=True, sites_count=12,
               extra_env={"WEBENV_LOG_JSON": "false", "WEBENV_FARM_WARM_CONTEXTS": "2", "WEBENV_NODE_NAME": "node-a"})
    st.node_b = ""
    try:
        st.start(("sites", "browser", "policy", "judge"), timeout=120)
        yield st
    finally:
        st.stop()  # node-b too


def node_b(st: Stack) -> str:
    if not st.node_b:
        st.node_b = st.add_browser_node("node-b")
    return st.node_b


async def test_replicas_joining_and_leaving_a_name_share_a_run(stack: Stack, tmp_path: Path) -> None:
    from webenv.collector.app import Collector
    from webenv.collector.config import Settings

    a = stack.address("browser")
    answer = [a]

    async def resolver(host: str, port: int) -> list[str]:
        assert host == "farm.test"
        return list(answer)

    col = await Collector.start(Settings(
        grpc_port=0, metrics_port=0, host="127.0.0.1", log_json=False, data_dir=str(tmp_path / "c"),
        store_url=f"chdb://{tmp_path / 'chdb'}", browser_addr=a, policy_addr=stack.address("policy"),
        judge_addr=stack.address("judge"), sites_addr=stack.address("sites"), env_refresh_seconds=0.2))
    col.engine.ctx.replicas.resolver = resolver
    n = 12
    try:
        async with grpc.aio.insecure_channel(col.address) as ch:
            stub = collector_pb2_grpc.CollectorServiceStub(ch)
            spec = collector_pb2.RunSpec(policy="oracle", episodes=n, seed=9, concurrency=3, max_retries=2,
                                         env_address="dns:///farm.test:50051")
            spec.tasks.sources.append(common_pb2.TASK_SOURCE_SYNTHETIC)
            spec.tasks.difficulties.append(common_pb2.DIFFICULTY_EASY)
            run = (await stub.StartRun(collector_pb2.StartRunRequest(spec=spec), timeout=120)).run
            b = left_at = None
            last = None
            async with asyncio.timeout(240):
                async for resp in stub.WatchRun(collector_pb2.WatchRunRequest(run_id=run.run_id)):
                    last = resp
                    c = resp.run.counts
                    if b is None and c.finished >= 1:
                        b = await asyncio.to_thread(node_b, stack)  # a replica starts: the name lists it
                        answer[:] = [a, b]
                        joined = c.started
                    elif b and left_at is None and c.started >= joined + 3:
                        answer[:] = [b]  # node-a leaves the name: it drains
                        await asyncio.sleep(0.3)  # older than a refresh: every later pick has seen it
                        left_at = (await stub.GetRun(collector_pb2.GetRunRequest(run_id=run.run_id))).run.counts.started
            assert last.run.state == collector_pb2.RUN_STATE_SUCCEEDED, last.run
            assert last.run.counts.finished == n and last.run.counts.errored == 0, last.run.counts
        rows = await col.store.query("SELECT episode_id, episode_index, browser_node, started_at FROM {db}.episodes "
                                     "FINAL WHERE run_id = {r:String} ORDER BY started_at", {"r": run.run_id})
    finally:
        await col.close()
    assert len({r["episode_id"] for r in rows}) == len(rows) == n  # none lost, none doubled
    nodes = [r["browser_node"] for r in rows]
    assert nodes[0] == "node-a" and "node-b" in nodes
    assert left_at is not None and all(x == "node-b" for x in nodes[left_at:]), nodes  # none after it left


def read_jsonl(path: str) -> list[dict]:
    return [json.loads(line) for line in Path(path).read_text().splitlines()]


async def test_episodes_of_a_killed_farm_node_are_retried_on_the_other_once(stack: Stack, tmp_path: Path) -> None:
    st = stack
    b_addr = await asyncio.to_thread(node_b, st)
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

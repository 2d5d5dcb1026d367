"""The rollout engine against test peers over real channels: horizons, retries, straggler cutoff, repetition."""

from __future__ import annotations

from webenv.v1 import collector_pb2, common_pb2


def spec(**kw) -> collector_pb2.RunSpec:
    base = dict(name="t", policy="oracle", repeats=1, seed=3, concurrency=8)
    base.update(kw)
    return collector_pb2.RunSpec(**base)


async def start(stub, **kw):
    return (await stub.StartRun(collector_pb2.StartRunRequest(spec=spec(**kw)))).run


async def episodes(collector, run_id):
    return await collector.store.query(
        "SELECT * FROM {db}.episodes FINAL WHERE run_id = {r:String} ORDER BY episode_id",
        {"r": run_id},
    )


async def steps(collector, run_id):
    return await collector.store.query(
        "SELECT * FROM {db}.steps FINAL WHERE run_id = {r:String} ORDER BY episode_id, step_index",
        {"r": run_id},
    )


async def test_horizons_by_difficulty(stub, watch, collector, world):
    # The random policy never answers, so every episode runs to its horizon: 10/20/30 by default, here 2/3/4.
    run = await start(stub, policy="random", horizons=collector_pb2.Horizons(easy=2, medium=3, hard=4))
    await watch(stub, run.run_id)
    rows = await episodes(collector, run.run_id)
    caps = {"easy": 2, "medium": 3, "hard": 4}
    assert len(rows) == len(world.tasks)
    for r in rows:
        assert r["steps"] == caps[r["difficulty"]] == r["horizon"]
        assert r["truncated"] == 1 and r["passed"] == 0


async def test_default_horizons_apply(stub, watch, collector):
    run = await start(stub, policy="random", tasks=collector_pb2.RunSpec().tasks.__class__(
        difficulties=[common_pb2.DIFFICULTY_EASY]), task_limit=2)
    await watch(stub, run.run_id)
    assert {r["steps"] for r in await episodes(collector, run.run_id)} == {10}


async def test_oracle_passes_and_rows_carry_provenance(stub, watch, collector, world):
    run = await start(stub, keep_formats=[common_pb2.OBSERVATION_FORMAT_AXTREE])
    assert list(run.spec.observation_spec.formats) == [common_pb2.OBSERVATION_FORMAT_AXTREE, common_pb2.OBSERVATION_FORMAT_HTML]
    last = await watch(stub, run.run_id)
    assert last.run.counts.passed == len(world.tasks)
    rows = await episodes(collector, run.run_id)
    for r in rows:
        assert r["passed"] == 1 and r["judge_version"] == "test-judge-1" and r["rubric_id"]
        assert r["webenv_version"] and r["collector_id"] and r["browser_node"] == "node-a"
        assert r["split"] in ("train", "test") and r["level"] == "task_oriented" and r["env_kind"] == "browser"
        assert r["site_state_json"]  # evidence captured at close
    s = await steps(collector, run.run_id)
    assert len(s) == sum(len(t.oracle) for t in world.tasks)
    assert all(x["axtree"] and not x["html"] for x in s)  # only the kept format is stored
    assert world.env.opened == world.env.closed  # every session closed


async def test_repetition_flags(stub, watch, collector):
    run = await start(stub, policy="random", horizons=collector_pb2.Horizons(easy=6, medium=6, hard=6))
    await watch(stub, run.run_id)
    s = await steps(collector, run.run_id)
    noops = [x for x in s if x["action_text"] == "noop()"]
    clicks = [x for x in s if x["action_text"].startswith("click")]
    assert noops and clicks
    assert all(x["repeated_state"] == 1 for x in noops)  # nothing changed
    assert all(x["repeated_state"] == 0 for x in clicks)  # the page changed
    ep = await episodes(collector, run.run_id)
    assert sum(r["repeated_steps"] for r in ep) == len(noops)


async def test_env_failure_is_retried_on_another_node(stub, watch, collector, world):
    world.env.fail_steps = True  # node a is broken; node b works
    addresses = f"{world.addr['env']},{world.addr['env2']}"
    run = await start(stub, env_address=addresses, max_retries=1)
    last = await watch(stub, run.run_id)
    assert last.run.counts.passed == len(world.tasks) and last.run.counts.errored == 0
    rows = await episodes(collector, run.run_id)
    retried = [r for r in rows if r["attempts"] == 2]
    assert retried and all(r["browser_node"] == "node-b" for r in rows)  # what failed on a went to b, once
    assert all(r["attempts"] in (1, 2) for r in rows)
    assert world.env.opened == world.env.closed  # failed sessions were closed too


async def test_env_failure_without_retries_is_an_errored_episode(stub, watch, collector, world):
    world.env.fail_steps = True
    run = await start(stub, max_retries=0, episodes=3)
    last = await watch(stub, run.run_id)
    # Every episode stored (nothing lost), but a run in which nothing ran is a failed run, with the cause.
    assert last.run.state == collector_pb2.RUN_STATE_FAILED
    assert last.run.error.startswith("all 3 episodes errored") and "environment failed" in last.run.error
    assert last.run.counts.errored == 3 == last.run.counts.finished
    rows = await episodes(collector, run.run_id)
    assert all("environment failed" in r["error"] and "down" in r["error"] for r in rows)


async def test_straggler_cutoff_finishes_without_the_slow_episode(stub, watch, collector, world):
    slow = world.tasks[0].task_id
    world.policy.slow_tasks[slow] = 60.0  # one episode would take minutes
    n = len(world.tasks)
    run = await start(stub, finish_fraction=0.9, concurrency=n)
    last = await watch(stub, run.run_id)
    assert last.run.state == collector_pb2.RUN_STATE_SUCCEEDED
    target = -(-n * 9 // 10)
    assert last.run.counts.finished == target < n
    rows = await episodes(collector, run.run_id)
    assert len(rows) == target and slow not in {r["task_id"] for r in rows}


async def test_episode_deadline(stub, watch, collector, world):
    world.policy.delay = 0.5
    run = await start(stub, episode_timeout_seconds=0.2, episodes=2)
    last = await watch(stub, run.run_id)
    assert last.run.counts.errored == 2
    rows = await episodes(collector, run.run_id)
    assert all("deadline" in r["error"] for r in rows)


async def test_lock_step_mode_gives_the_same_episodes(stub, watch, collector, world):
    a = await start(stub, seed=11)
    b = await start(stub, seed=11, mode=collector_pb2.ROLLOUT_MODE_LOCK_STEP, concurrency=4)
    la, lb = await watch(stub, a.run_id), await watch(stub, b.run_id)
    assert la.run.counts.passed == lb.run.counts.passed == len(world.tasks)
    ea, eb = await episodes(collector, a.run_id), await episodes(collector, b.run_id)
    assert [(r["task_id"], r["steps"]) for r in ea] == [(r["task_id"], r["steps"]) for r in eb]


async def test_sampling_strategies(stub, watch, collector):
    easy = await start(stub, episodes=12, sampling=collector_pb2.SAMPLING_STRATEGY_EASY_ONLY, policy="random",
                       horizons=collector_pb2.Horizons(easy=1, medium=1, hard=1))
    await watch(stub, easy.run_id)
    assert {r["difficulty"] for r in await episodes(collector, easy.run_id)} == {"easy"}
    hard = await start(stub, episodes=60, sampling=collector_pb2.SAMPLING_STRATEGY_HARD_BIASED, policy="random",
                       horizons=collector_pb2.Horizons(easy=1, medium=1, hard=1), concurrency=32)
    await watch(stub, hard.run_id)
    diffs = [r["difficulty"] for r in await episodes(collector, hard.run_id)]
    assert diffs.count("hard") > diffs.count("easy")


async def test_crawl_run_from_start_urls(stub, watch, collector, world):
    run = await start(stub, policy="random", start_urls=["http://shop-0001.web.test/page/0"], episodes=3,
                      horizons=collector_pb2.Horizons(medium=4))
    last = await watch(stub, run.run_id)
    assert last.run.spec.level == collector_pb2.COLLECTION_LEVEL_RANDOM_CRAWL
    rows = await episodes(collector, run.run_id)
    assert len(rows) == 3 and all(r["level"] == "random_crawl" and r["steps"] == 4 for r in rows)
    assert all(r["verdict_json"] == "" for r in rows)  # no goal, no judge


async def test_only_the_oracle_is_shown_solutions(stub, watch, collector, world):
    # What the policy service received: a policy without needs_solution gets the instruction and the task's
    # identity, never its rubric, oracle, metadata or seed; the oracle (needs_solution) gets the whole task.
    from webenv import solutions

    world.policy.seen.clear()
    run = await start(stub, policy="random", horizons=collector_pb2.Horizons(easy=2, medium=2, hard=2))
    await watch(stub, run.run_id)
    by_id = {t.task_id: t for t in world.tasks}
    seen = world.policy.seen["random"]
    assert len(seen) == 2 * len(world.tasks)
    for task in seen:
        assert task == solutions.policy_task(by_id[task.task_id]) and task.instruction
        assert not task.oracle and not task.HasField("rubric") and not task.metadata and not task.seed
    run = await start(stub, policy="oracle")
    last = await watch(stub, run.run_id)
    assert last.run.counts.passed == len(world.tasks)
    assert all(task == by_id[task.task_id] for task in world.policy.seen["oracle"])
    # the store keeps the whole task (the judge and the trainer's provenance need it)
    rows = await episodes(collector, run.run_id)
    stored = common_pb2.Task()
    stored.ParseFromString(bytes.fromhex(rows[0]["task_pb"]))
    assert stored == by_id[stored.task_id]


async def test_oracle_slack_raises_caps_to_the_solution(stub, watch, collector, world):
    # caps of 1 step are below every oracle (1-3 clicks + an answer); with a slack of 2 each task's cap is its
    # oracle's length + 2, recorded as the episode's horizon, and the oracle solves every task under it
    h = collector_pb2.Horizons(easy=1, medium=1, hard=1, oracle_slack=2)
    run = await start(stub, policy="random", horizons=h)
    await watch(stub, run.run_id)
    need = {t.task_id: len(t.oracle) for t in world.tasks}
    rows = await episodes(collector, run.run_id)
    assert rows and all(r["horizon"] == need[r["task_id"]] + 2 == r["steps"] for r in rows)
    run = await start(stub, policy="oracle", horizons=h)
    assert (await watch(stub, run.run_id)).run.counts.passed == len(world.tasks)
    run = await start(stub, policy="oracle", horizons=collector_pb2.Horizons(easy=1, medium=1, hard=1))
    assert (await watch(stub, run.run_id)).run.counts.passed == 0  # without the slack no task is feasible


async def test_bad_oracle_slack_is_refused(stub):
    import grpc
    import pytest

    with pytest.raises(grpc.aio.AioRpcError) as exc:
        await start(stub, horizons=collector_pb2.Horizons(oracle_slack=-1))
    assert exc.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "spec.horizons.oracle_slack" in exc.value.details()

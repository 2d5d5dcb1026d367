"""Learning signal beyond passed, on the collector's side, over real channels: group rollouts (k episodes of one
task with distinct seeds and one group id), branching runs (an anchor forked k times, the forks stored with
their parent and branch step), the frontier curriculum from the store, and bad specs naming their field."""

from __future__ import annotations

from collections import Counter, defaultdict

import grpc
import pytest
from webenv.collector import sampling
from webenv.v1 import collector_pb2, common_pb2

HORIZONS = collector_pb2.Horizons(easy=3, medium=3, hard=3)
LONG = collector_pb2.Horizons(easy=10, medium=10, hard=10)


def spec(**kw) -> collector_pb2.RunSpec:
    base = dict(name="t", policy="random", seed=3, concurrency=8, horizons=HORIZONS)
    base.update(kw)
    return collector_pb2.RunSpec(**base)


async def start(stub, **kw):
    return (await stub.StartRun(collector_pb2.StartRunRequest(spec=spec(**kw)))).run


async def read(stub, run_id: str) -> list[collector_pb2.StoredEpisode]:
    req = collector_pb2.ReadEpisodesRequest(run_ids=[run_id], filter=collector_pb2.ExportFilter(include_errored=True))
    return [r.episode async for r in stub.ReadEpisodes(req)]


async def test_group_rollouts_store_k_episodes_per_task_with_one_group_id(stub, watch, collector):
    run = await start(stub, episodes=12, group_size=4)
    last = await watch(stub, run.run_id)
    assert last.run.state == collector_pb2.RUN_STATE_SUCCEEDED and last.run.counts.finished == 12
    eps = await read(stub, run.run_id)
    groups = defaultdict(list)
    for ep in eps:
        groups[ep.group_id].append(ep)
    assert len(groups) == 3 and all(len(g) == 4 for g in groups.values()), {k: len(v) for k, v in groups.items()}
    for gid, members in groups.items():
        assert gid.startswith(run.run_id + "-g")
        assert len({ep.task.task_id for ep in members}) == 1, "a group is one task"
        rows = await collector.store.query(
            "SELECT seed, group_id FROM {db}.episodes FINAL WHERE run_id = {r:String} AND group_id = {g:String}",
            {"r": run.run_id, "g": gid})
        assert len({r["seed"] for r in rows}) == 4, "distinct seeds, stored with the group id"
        actions = {tuple(s.action_text for s in ep.trajectory.steps) for ep in members}
        assert len(actions) > 1, "distinct seeds make distinct rollouts of the random policy"
    # with repeats, every task x repeat is a group of k
    rep = await start(stub, repeats=1, group_size=2, task_limit=3)
    last = await watch(stub, rep.run_id)
    assert last.run.counts.planned == 6 and last.run.counts.finished == 6
    assert Counter(Counter(ep.group_id for ep in await read(stub, rep.run_id)).values()) == {2: 3}


async def test_group_seeds_are_distinct_within_a_group():
    tasks = [common_pb2.Task(task_id=f"t{i}") for i in range(5)]
    plan = sampling.plan(tasks, strategy=collector_pb2.SAMPLING_STRATEGY_UNIFORM, episodes=20, repeats=0, seed=1,
                         group_size=4)
    by_group = defaultdict(list)
    for p in plan:
        by_group[p.group].append(p)
    assert len(by_group) == 5 and all(len({p.seed for p in g}) == 4 for g in by_group.values())
    assert all(len({p.task.task_id for p in g}) == 1 for g in by_group.values())
    assert [p.index for p in plan] == list(range(20)) and all(
        plan[i].group == i // 4 for i in range(20)), "a group's episodes are planned next to each other"


async def test_branching_run_forks_anchors_and_stores_the_branch_groups(stub, watch, world):
    run = await start(stub, episodes=9, branching=collector_pb2.Branching(count=2, at_step=1),
                      horizons=collector_pb2.Horizons(easy=4, medium=4, hard=4))
    last = await watch(stub, run.run_id)
    assert last.run.state == collector_pb2.RUN_STATE_SUCCEEDED, last.run.error
    assert last.run.counts.planned == last.run.counts.finished == 9 and last.run.counts.errored == 0
    assert world.env.forks == 3
    eps = {ep.episode_id: ep for ep in await read(stub, run.run_id)}
    anchors = [ep for ep in eps.values() if not ep.parent_episode_id]
    assert len(anchors) == 3
    for a in anchors:
        forks = [ep for ep in eps.values() if ep.parent_episode_id == a.episode_id]
        assert len(forks) == 2 and a.group_id == a.episode_id
        for f in forks:
            assert f.group_id == a.episode_id and f.branch_step == 1 and f.task.task_id == a.task.task_id
            assert f.trajectory.steps[0].action_text == a.trajectory.steps[0].action_text, "the shared prefix"
            assert [s.step_index for s in f.trajectory.steps] == list(range(len(f.trajectory.steps)))
            assert len(f.trajectory.steps) == a.step_count == 4, "the fork continues the anchor's step budget"
    assert world.env.opened == world.env.closed, "every session, forks included, closed"


async def test_branching_anchor_that_ends_early_is_stored_alone_and_refused_forks_are_errors(stub, watch, world):
    early = await start(stub, policy="oracle", episodes=4, task_limit=2,
                        branching=collector_pb2.Branching(count=1, at_step=8))
    last = await watch(stub, early.run_id)
    assert last.run.state == collector_pb2.RUN_STATE_SUCCEEDED
    assert last.run.counts.planned == last.run.counts.finished == 2, "anchors that answered before step 8"
    assert world.env.forks == 0
    world.env.refuse_forks = True
    refused = await start(stub, episodes=4, branching=collector_pb2.Branching(count=1, at_step=1))
    last = await watch(stub, refused.run_id)
    assert last.run.counts.finished == 4 and last.run.counts.errored == 2
    errored = [ep for ep in await read(stub, refused.run_id) if ep.error]
    assert all(ep.parent_episode_id and "ForkSession" in ep.error and "FAILED_PRECONDITION" in ep.error
               for ep in errored)


async def test_frontier_sampling_draws_what_the_policy_solves_sometimes(stub, watch, world):
    solved = [t.task_id for t in world.tasks[:3]]
    hist = await start(stub, policy="oracle", repeats=30, concurrency=32, tasks=collector_pb2.RunSpec().tasks.__class__(
        task_ids=solved))
    await watch(stub, hist.run_id)
    run = await start(stub, episodes=90, sampling=collector_pb2.SAMPLING_STRATEGY_FRONTIER,
                      history_run_ids=[hist.run_id], horizons=collector_pb2.Horizons(easy=1, medium=1, hard=1),
                      concurrency=32)
    await watch(stub, run.run_id)
    drawn = Counter(ep.task.task_id for ep in await read(stub, run.run_id))
    share = sum(drawn[t] for t in solved) / 90
    assert share < 0.5 * len(solved) / len(world.tasks), (share, drawn)
    w = sampling.frontier_weight
    assert w(None) == w(sampling.TaskHistory(2, 1)) == 0.25
    assert w(sampling.TaskHistory(20, 20)) < w(sampling.TaskHistory(1, 0)) < 0.25


async def test_template_frontier_pools_pass_rates_over_a_template(stub, watch, world):
    # the oracle solves one site's nav-0 thirty times: under the task frontier only that task is drawn less, under
    # the template frontier every site's nav-0 is (one template), since its pooled pass rate is ~1
    first = world.tasks[0]
    hist = await start(stub, policy="oracle", repeats=30, concurrency=32, tasks=collector_pb2.RunSpec().tasks.__class__(
        task_ids=[first.task_id]))
    await watch(stub, hist.run_id)
    shares = {}
    for strategy in (collector_pb2.SAMPLING_STRATEGY_FRONTIER, collector_pb2.SAMPLING_STRATEGY_TEMPLATE_FRONTIER):
        run = await start(stub, episodes=90, sampling=strategy, history_run_ids=[hist.run_id],
                          horizons=collector_pb2.Horizons(easy=1, medium=1, hard=1), concurrency=32)
        await watch(stub, run.run_id)
        eps = [ep for ep in await read(stub, run.run_id) if ep.task.task_id != first.task_id]
        shares[strategy] = sum(ep.task.template_id == first.template_id for ep in eps) / len(eps)
    # nav-0 is a third of the other tasks: the task frontier draws it so, the template frontier far less
    assert shares[collector_pb2.SAMPLING_STRATEGY_FRONTIER] > 0.2, shares
    assert shares[collector_pb2.SAMPLING_STRATEGY_TEMPLATE_FRONTIER] < 0.15, shares
    pool = [t for t in world.tasks if t.template_id in (first.template_id, world.tasks[1].template_id)]
    weights = sampling.frontier_weights(pool, {first.task_id: sampling.TaskHistory(30, 30)}, by_template=True)
    assert all(w < 0.05 for t, w in zip(pool, weights, strict=True) if t.template_id == first.template_id)
    assert all(w == 0.25 for t, w in zip(pool, weights, strict=True) if t.template_id != first.template_id)
    untemplated = common_pb2.Task(task_id="x")
    assert sampling.template_of(untemplated) == "x"


async def _demo(stub, watch, world) -> collector_pb2.StoredEpisode:
    """One oracle episode of a task whose goal is page 3: three clicks, then the answer."""
    task = next(t for t in world.tasks if t.metadata["goal"] == "3")
    run = await start(stub, policy="oracle", episodes=1, horizons=LONG,
                      tasks=collector_pb2.RunSpec().tasks.__class__(task_ids=[task.task_id]))
    await watch(stub, run.run_id)
    (demo,) = await read(stub, run.run_id)
    assert demo.passed and len(demo.trajectory.steps) == 4
    return demo


async def test_a_start_replays_a_stored_episode_then_the_policy_acts(stub, watch, world):
    demo = await _demo(stub, watch, world)
    starts = [collector_pb2.EpisodeStart(episode_id=demo.episode_id, steps=n) for n in (0, 2, 3)]
    run = await start(stub, policy="oracle", starts=starts, horizons=LONG)
    last = await watch(stub, run.run_id)
    assert last.run.state == collector_pb2.RUN_STATE_SUCCEEDED and last.run.counts.planned == 3
    eps = sorted(await read(stub, run.run_id), key=lambda e: e.start_steps)
    assert [e.start_steps for e in eps] == [0, 2, 3]
    for ep, n in zip(eps, (0, 2, 3), strict=True):
        # the same task; its first n actions the stored ones, then the policy's own steps, counted on from n
        assert ep.start_episode_id == demo.episode_id and ep.task.task_id == demo.task.task_id and ep.passed
        steps = ep.trajectory.steps
        assert [s.action_text for s in steps] == [s.action_text for s in demo.trajectory.steps]
        assert all(s.raw_output == f"replayed from {demo.episode_id}" and not s.policy_version for s in steps[:n])
        assert all(s.policy_version == "oracle@1" for s in steps[n:])
        assert [s.step_index for s in steps] == list(range(4))


async def test_a_replayed_action_that_fails_ends_the_episode_with_an_error(stub, watch, world):
    demo = await _demo(stub, watch, world)
    world.env.missing_selectors = world.env2.missing_selectors = {"#next"}  # the page the demo clicked has parted
    try:
        run = await start(stub, policy="random", starts=[collector_pb2.EpisodeStart(episode_id=demo.episode_id,
                                                                                      steps=2)], horizons=LONG)
        last = await watch(stub, run.run_id)
    finally:
        world.env.missing_selectors = world.env2.missing_selectors = set()
    assert last.run.counts.errored == 1
    (ep,) = await read(stub, run.run_id)
    # stored as errored (never a training example), saying which replayed step failed and why, and not retried
    assert ep.error.startswith(f"replay of {demo.episode_id} step 0") and "no element matches #next" in ep.error
    assert not ep.passed and len(ep.trajectory.steps) == 1


@pytest.mark.parametrize("field,kw", [
    ("spec.episodes", dict(episodes=4)),
    ("spec.tasks", dict(tasks=collector_pb2.RunSpec().tasks.__class__(task_ids=["x"]))),
    ("spec.group_size", dict(group_size=2)),
    ("spec.starts", dict(mode=collector_pb2.ROLLOUT_MODE_LOCK_STEP)),
    ("spec.starts[0].steps", dict(steps=-1)),
    ("spec.starts[0].steps", dict(steps=4)),  # as many as the episode took: the policy would take none
    ("spec.starts[0].episode_id", dict(episode_id="run-none-000000")),
    ("spec.starts[0].episode_id", dict(episode_id="")),
])
async def test_bad_starts_name_the_field(stub, watch, world, field, kw):
    demo = await _demo(stub, watch, world)
    st = collector_pb2.EpisodeStart(episode_id=kw.pop("episode_id", demo.episode_id), steps=kw.pop("steps", 1))
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await start(stub, starts=[st], horizons=LONG, **kw)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert err.value.details().startswith(field + ":"), err.value.details()


@pytest.mark.parametrize("field,kw", [
    ("spec.group_size", dict(group_size=-1)),
    ("spec.group_size", dict(group_size=100_000)),
    ("spec.group_size", dict(group_size=4, episodes=10)),
    ("spec.branching.count", dict(branching=collector_pb2.Branching(count=33))),
    ("spec.branching.count", dict(branching=collector_pb2.Branching(count=-2))),
    ("spec.branching.at_step", dict(branching=collector_pb2.Branching(count=2, at_step=-1))),
    ("spec.branching.count", dict(branching=collector_pb2.Branching(at_step=3))),
    ("spec.branching.count", dict(episodes=10, branching=collector_pb2.Branching(count=2))),
    ("spec.branching", dict(group_size=2, branching=collector_pb2.Branching(count=1))),
    ("spec.branching", dict(mode=collector_pb2.ROLLOUT_MODE_LOCK_STEP, branching=collector_pb2.Branching(count=1))),
    ("spec.history_run_ids[0]", dict(history_run_ids=[""])),
    ("spec.sampling", dict(sampling=99)),
])
async def test_bad_group_and_branching_specs_name_the_field(stub, field, kw):
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await start(stub, **kw)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert err.value.details().startswith(field + ":"), err.value.details()


def test_served_policy_is_the_one_check_against_listpolicies():
    from webenv import errors
    from webenv.collector import spec as specs
    from webenv.v1 import policy_pb2

    listed = [policy_pb2.PolicyInfo(name="oracle"), policy_pb2.PolicyInfo(name="agent", version="agent@2")]
    assert specs.served_policy("oracle", listed, "p:1").name == "oracle"
    assert specs.served_policy("agent", listed, "p:1").version == "agent@2"
    assert specs.served_policy("agent@2", listed, "p:1").name == "agent"
    for name in ("agent@1", "llm", "nobody"):  # a version not served now is refused, not run as the family
        with pytest.raises(errors.InvalidArgument) as info:
            specs.served_policy(name, listed, "p:1")
        assert info.value.reason == "UNKNOWN_POLICY" and info.value.metadata["field"] == "spec.policy"
    with pytest.raises(errors.InvalidArgument) as info:
        specs.served_policy("agent@1", listed, "p:1")
    assert "agent@2" in info.value.message and "LoadCheckpoint" in info.value.message

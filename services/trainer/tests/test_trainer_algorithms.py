"""Each training algorithm's example weights on crafted stored episodes (the StoredEpisode messages ReadEpisodes
sends): group-relative advantages, partial credit and subtask relabeling, branching's anchor-state advantages,
the 1/k step normaliser, and errored episodes that never become a reward of 0."""

from __future__ import annotations

import math

import pytest
from webenv.agent.prompt import PromptBudget, step_prompt
from webenv.testing import assert_grounded
from webenv.trainer.algorithms import episode_weights, fact_group_share, select
from webenv.v1 import collector_pb2, common_pb2, trainer_pb2

T = trainer_pb2
HOLDS, FAILS = common_pb2.FACT_OUTCOME_HOLDS, common_pb2.FACT_OUTCOME_FAILS
OBS = common_pb2.Observation(url="http://shop-0001.web.test/", formats=[common_pb2.OBSERVATION_FORMAT_AXTREE],
                             axtree='[1] RootWebArea "Shop"\n  [2] link "Help"\n  [3] button "Buy"')


def task(task_id: str = "synthetic/shop-0001.web.test/tx-0") -> common_pb2.Task:
    t = common_pb2.Task(task_id=task_id, instruction="Find the order and cancel it", site="shop-0001.web.test",
                        split=common_pb2.SPLIT_TRAIN)
    t.rubric.groups.add(group_id="found")
    t.rubric.groups.add(group_id="cancelled")
    t.subtasks.add(subtask_id=f"{task_id}/sub-0", instruction="Find the order", group_ids=["found"])
    return t


def episode(eid: str, *, passed=False, groups=(), steps=2, error="", group_id="", parent="", branch_step=0,
            t: common_pb2.Task | None = None, run_id="run-1") -> collector_pb2.StoredEpisode:
    ep = collector_pb2.StoredEpisode(run_id=run_id, episode_id=eid, task=t or task(), passed=passed, error=error,
                                     group_id=group_id, parent_episode_id=parent, branch_step=branch_step,
                                     policy_version="agent@1")
    for g in ("found", "cancelled"):
        for f in range(2):
            ep.verdict.results.add(fact_id=f"{g}-{f}", group_id=g, outcome=HOLDS if g in groups else FAILS)
    ep.verdict.passed = passed
    for i in range(steps):
        ep.trajectory.steps.add(step_index=i, observation=OBS, action=common_pb2.Action(
            click=common_pb2.ClickAction(target=common_pb2.ElementTarget(element_id="2" if i % 2 == 0 else "3"))))
    ep.trajectory.steps.add(step_index=steps, observation=OBS,
                            action=common_pb2.Action(answer=common_pb2.AnswerAction(text="done")))
    return ep


def weight(ws: dict, eid: str) -> float:
    (span,) = ws[eid]
    return span[2]


def test_group_relative_advantages_count_failures_and_flat_groups_give_nothing():
    eps = [episode("a", passed=True, group_id="g1"), episode("b", group_id="g1"), episode("c", group_id="g1"),
           episode("d", passed=True, group_id="g2"), episode("e", passed=True, group_id="g2")]
    ws = episode_weights(eps, T.TRAINING_ALGORITHM_GROUP_RELATIVE)
    std = math.sqrt(2 / 9)  # rewards 1, 0, 0: mean 1/3
    assert weight(ws, "a") == pytest.approx((1 - 1 / 3) / (std + 1e-6))
    assert weight(ws, "b") == pytest.approx((0 - 1 / 3) / (std + 1e-6)), "a failure pushes probability away"
    assert "d" not in ws and "e" not in ws, "a group whose rewards are all equal gives no signal"
    sel = select(eps, T.TRAINING_ALGORITHM_GROUP_RELATIVE, False)
    assert sel.flat_groups == 1 and sel.episodes == 3 and len(sel.steps) == 9
    # without group ids, a run's episodes of one task are its group
    plain = [episode("x", passed=True), episode("y")]
    assert set(episode_weights(plain, T.TRAINING_ALGORITHM_GROUP_RELATIVE)) == {"x", "y"}


def test_group_relative_on_fact_group_rewards():
    eps = [episode("a", groups=("found",), group_id="g"), episode("b", group_id="g")]
    opts = T.AlgorithmOptions(reward=T.REWARD_KIND_FACT_GROUPS, advantage_epsilon=0.5)
    ws = episode_weights(eps, T.TRAINING_ALGORITHM_GROUP_RELATIVE, opts)
    assert weight(ws, "a") == pytest.approx(0.25 / (0.25 + 0.5)) and weight(ws, "b") == pytest.approx(-1 / 3)
    assert episode_weights(eps, T.TRAINING_ALGORITHM_GROUP_RELATIVE) == {}, "both failed: nothing by pass/fail"


def test_partial_credit_and_subtask_relabeling():
    half = episode("half", groups=("found",))
    none = episode("none")
    full = episode("full", passed=True, groups=("found", "cancelled"))
    assert [fact_group_share(e) for e in (half, none, full)] == [0.5, 0.0, 1.0]
    ws = episode_weights([half, none, full], T.TRAINING_ALGORITHM_PARTIAL_CREDIT)
    assert weight(ws, "half") == 0.5 and weight(ws, "full") == 1.0 and "none" not in ws
    assert weight(ws, "half#Find the order") == 1.0, "the failure did the subtask: a success for its instruction"
    sel = select([half, none, full], T.TRAINING_ALGORITHM_PARTIAL_CREDIT, False)
    relabeled = [st for st, w, eid in sel.steps if st.ctx.instruction == "Find the order"]
    assert len(relabeled) == sel.relabeled == 6, "both rollouts that found the order, every step (3 each)"
    assert {st.request.instruction for st in relabeled} == {"Find the order"}, "the prompt-based models see it too"
    # relabeling as an option of filtered BC: the failure's subtask becomes an example, the failure itself not, and a
    # passed rollout stays its whole task's example only
    fbc = episode_weights([half, none, full], T.TRAINING_ALGORITHM_FILTERED_BC,
                          T.AlgorithmOptions(relabel_subtasks=True))
    assert fbc == {"half#Find the order": [(0, -1, 1.0)], "full": [(0, -1, 1.0)]}


def test_branching_weighs_continuations_against_their_anchor_state():
    t = 2
    anchor = episode("run-1-000000", passed=True, steps=4, group_id="run-1-000000")
    forks = [episode(f"run-1-000000-b{j:02d}", passed=j == 1, steps=4, group_id="run-1-000000",
                     parent="run-1-000000", branch_step=t) for j in (1, 2, 3)]
    # a second branch group of the same task, all failed: the first group's prefix was the better state
    anchor2 = episode("run-1-000001", steps=4, group_id="run-1-000001")
    forks2 = [episode(f"run-1-000001-b{j:02d}", steps=4, group_id="run-1-000001", parent="run-1-000001",
                      branch_step=t) for j in (1, 2, 3)]
    ws = episode_weights([anchor, *forks, anchor2, *forks2], T.TRAINING_ALGORITHM_BRANCHING)
    adv = 0.5 / (0.5 + 1e-6)  # rewards 1, 1, 0, 0: mean 1/2, std 1/2
    spans = dict(((s[0], s[1]), s[2]) for s in ws["run-1-000000"])
    assert spans[(t, -1)] == pytest.approx(adv), "the anchor's continuation, from step t"
    assert spans[(0, t)] == pytest.approx(1.0, rel=1e-5), "the prefix, once, by its group against the task's"
    assert ws["run-1-000000-b02"] == [(t, -1, pytest.approx(-adv))], "a fork: only its own steps"
    assert ws["run-1-000001"] == [(0, t, pytest.approx(-1.0, rel=1e-5))], "a flat group: only its prefix"
    sel = select([anchor, *forks, anchor2, *forks2], T.TRAINING_ALGORITHM_BRANCHING, False)
    assert sel.flat_groups == 1
    fork_steps = [st.index for st, _, eid in sel.steps if eid == "run-1-000000-b01"]
    assert fork_steps == [2, 3, 4], "the copied prefix is never trained on from a fork"


def test_step_normaliser_divides_each_episode_by_its_steps():
    short, long = episode("s", passed=True, steps=1), episode("l", passed=True, steps=5)
    sel = select([short, long], T.TRAINING_ALGORITHM_FILTERED_BC, False, T.AlgorithmOptions(step_normalize=True))
    total = {eid: sum(w for _, w, e in sel.steps if e == eid) for eid in ("s", "l")}
    assert total == {"s": pytest.approx(1.0), "l": pytest.approx(1.0)}
    plain = select([short, long], T.TRAINING_ALGORITHM_FILTERED_BC, False)
    assert {w for _, w, _ in plain.steps} == {1.0}


@pytest.mark.parametrize("algorithm", [a for a in T.TrainingAlgorithm.values() if a])
def test_errored_episodes_are_never_a_reward_of_zero(algorithm):
    ok = episode("ok", passed=True, group_id="g", groups=("found", "cancelled"))
    bad = episode("bad", group_id="g", error="environment failed after 1 attempt(s): Step: UNAVAILABLE")
    fork = episode("ok-b01", group_id="g", parent="ok", branch_step=1,
                   error="environment failed (branching retries nothing)")
    sel = select([ok, bad, fork], algorithm, False, T.AlgorithmOptions(relabel_subtasks=True))
    assert sel.errored == 2
    assert {eid for _, _, eid in sel.steps} <= {"ok"}, "no step of an errored episode is ever a target"
    ws = episode_weights([ok, bad, fork], algorithm)
    assert not any(k.startswith(("bad", "ok-b01")) for k in ws)
    if algorithm in (T.TRAINING_ALGORITHM_GROUP_RELATIVE, T.TRAINING_ALGORITHM_BRANCHING):
        # with the errored ones as failures the group would have had a signal; without, it is one episode
        assert ws == {} and sel.flat_groups == 1


@pytest.mark.parametrize("algorithm", [a for a in T.TrainingAlgorithm.values() if a])
def test_replayed_steps_of_a_start_are_never_targets(algorithm):
    # an episode begun along a stored one (RunSpec.starts): its first 3 steps were replayed, not the policy's
    started = episode("st", passed=True, steps=4, groups=("found", "cancelled"))
    started.start_episode_id, started.start_steps = "demo-1", 3
    sel = select([started, episode("other", steps=4)], algorithm, False, T.AlgorithmOptions(step_normalize=True))
    own = [st.index for st, _, eid in sel.steps if eid == "st"]
    assert own and min(own) == 3, own
    if algorithm == T.TRAINING_ALGORITHM_FILTERED_BC:  # the 1/k normaliser counts only its own steps (2 of 5)
        assert sum(w for _, w, eid in sel.steps if eid == "st") == pytest.approx(1.0)


def test_a_demonstrations_selectors_reach_the_context_as_the_element_ids_its_pages_showed():
    """The trainer's own contexts (webenv.agent.steps) show a demonstration's earlier actions as the policy would
    have written them from their pages: the oracle's `click("#help")` as the `click(2)` its observation offered, a
    select by the option the next page shows chosen; the prompt never names a selector the policy was never shown."""
    form = common_pb2.Observation(url="http://shop-0001.web.test/help", axtree=(
        '[1] RootWebArea "Help"\n\t[5] combobox "Size" value="L"\n\t\t[6] option "Small"\n\t\t[7] option "Large"'))
    chosen = common_pb2.Observation(url=form.url, axtree=form.axtree.replace('"Large"', '"Large" selected'))
    ep = collector_pb2.StoredEpisode(run_id="r", episode_id="oracle-1", task=task(), passed=True, policy_version="oracle")
    sel = common_pb2.ElementTarget
    ep.trajectory.steps.add(step_index=0, observation=OBS, target_element_id="2", action_text='click("#help")',
                            action=common_pb2.Action(click=common_pb2.ClickAction(target=sel(selector="#help"))))
    ep.trajectory.steps.add(step_index=1, observation=form, target_element_id="5", action_text='select("#f-size", "L")',
                            action=common_pb2.Action(select=common_pb2.SelectAction(target=sel(selector="#f-size"),
                                                                                    options=["L"])))
    ep.trajectory.steps.add(step_index=2, observation=chosen, action_text='answer("done")',
                            action=common_pb2.Action(answer=common_pb2.AnswerAction(text="done")))
    steps = select([ep], T.TRAINING_ALGORITHM_BC, False).steps
    assert len(steps) == 3, "every demonstration step maps to a candidate"
    last = steps[-1][0]
    shown = ["click(2)", 'select(5, "Large")']
    assert [h.action_text for h in last.request.history] == shown and last.ctx.history == shown
    user = step_prompt(last.request, PromptBudget()).user
    assert "click(2)" in user and "#help" not in user and "#f-size" not in user
    assert assert_grounded([(OBS.axtree, shown[0]), (form.axtree, shown[1])]) == 2

"""`webenv.solutions`: what a policy may see of a task, and that training rebuilds what acting saw.

The collector stores the whole task (the judge and the trainer's provenance need it) while a trained policy is
shown only `policy_task(task)`; the trainer rebuilds each step's context from the stored episode
(`webenv.agent.steps.episode_steps`). These must agree step by step, or the policy would train on inputs it never
has when it acts.
"""

from __future__ import annotations

from webenv import solutions
from webenv.agent.steps import HISTORY_WINDOW, episode_steps, request_context
from webenv.v1 import collector_pb2, common_pb2, policy_pb2


def whole_task() -> common_pb2.Task:
    return common_pb2.Task(
        task_id="synthetic/shop-0001.web.test/info-1", source=common_pb2.TASK_SOURCE_SYNTHETIC,
        kind=common_pb2.TASK_KIND_INFORMATION, instruction='On Shop One, what does "Blue Mug" cost? Answer the price.',
        start_url="http://shop-0001.web.test/", site="shop-0001.web.test", family="shop", split=common_pb2.SPLIT_TRAIN,
        difficulty=common_pb2.DIFFICULTY_EASY, seed=77, category="shopping", metadata={"price": "$12.50"},
        rubric=common_pb2.Rubric(rubric_id="r", version=1, groups=[common_pb2.FactGroup(group_id="g", facts=[
            common_pb2.Fact(fact_id="f", criterion=common_pb2.Criterion(
                answer=common_pb2.AnswerCriterion(expected="$12.50")))])]),
        subtasks=[common_pb2.Subtask(subtask_id="s", instruction="find the mug", group_ids=["g"])],
        oracle=[common_pb2.Action(answer=common_pb2.AnswerAction(text="$12.50"))],
    )


def page(n: int) -> common_pb2.Observation:
    axtree = "\n".join([f'[1] RootWebArea "Shop One page {n}"', '  [2] link "Blue Mug"', '  [3] link "Next"',
                        f'  [4] StaticText "Blue Mug costs $12.5{n}"', '  [5] searchbox "Search"'])
    return common_pb2.Observation(url=f"http://shop-0001.web.test/p/{n}", title=f"page {n}", axtree=axtree)


def test_training_contexts_are_the_ones_acting_saw():
    task = whole_task()
    actions = ['click("3")', 'click("2")', 'fill("5", "mug")'] * 5  # longer than the history window
    steps = [common_pb2.StepRecord(step_index=i, observation=page(i), action_text=a, url_after=page(i + 1).url,
                                   last_action_error="element gone" if i == 4 else "")
             for i, a in enumerate(actions)]
    stored = collector_pb2.StoredEpisode(episode_id="e", task=task, trajectory=common_pb2.Trajectory(
        steps=steps, final_observation=page(len(actions))))
    # acting: the policy is shown the stripped task, its observation and its own history (with its memory)
    shown = solutions.policy_task(task)
    assert not solutions.reveals_solution(shown) and shown.instruction == task.instruction
    history: list[policy_pb2.HistoryEntry] = []
    acted = []
    for rec in steps:
        req = policy_pb2.ActRequest(episode_id="e", task=shown, observation=rec.observation,
                                    history=history[-HISTORY_WINDOW:], step_index=rec.step_index)
        ctx = request_context(req)
        acted.append(ctx)
        history.append(policy_pb2.HistoryEntry(action_text=rec.action_text, url=rec.url_after,
                                               last_action_error=rec.last_action_error, memory=ctx.memory))
    rebuilt = [s.ctx for s in episode_steps(stored)]
    assert rebuilt == acted

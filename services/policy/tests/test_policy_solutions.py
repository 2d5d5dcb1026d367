"""Only a policy that declares needs_solution sees a task's solution and rubric, whatever the client sends.

Over a real channel: a client (not the collector, which strips tasks itself) sends the whole catalog task with
every Act; a policy without needs_solution receives the instruction and the task's identity, nothing that grades
or solves it, on Act and on ActStream; the oracle still receives the whole task and solves it.
"""

from __future__ import annotations

from webenv import solutions
from webenv.policy.policies import Decision
from webenv.v1 import common_pb2, policy_pb2


def full_task() -> common_pb2.Task:
    """A task with every field that carries its answer set."""
    answer = common_pb2.Criterion(answer=common_pb2.AnswerCriterion(expected="42", values=["4", "2"]))
    url = common_pb2.Criterion(url=common_pb2.UrlCriterion(value="/checkout/done"))
    return common_pb2.Task(
        task_id="synthetic/shop-0001.web.test/info-3", source=common_pb2.TASK_SOURCE_SYNTHETIC,
        kind=common_pb2.TASK_KIND_INFORMATION, instruction="How many items does the cart hold?",
        start_url="http://shop-0001.web.test/", site="shop-0001.web.test", family="shop",
        split=common_pb2.SPLIT_TRAIN, difficulty=common_pb2.DIFFICULTY_EASY,
        rubric=common_pb2.Rubric(rubric_id="r1", version=1, groups=[common_pb2.FactGroup(
            group_id="g1", description="the cart holds 42 items",
            facts=[common_pb2.Fact(fact_id="f1", description="answers 42", criterion=answer),
                   common_pb2.Fact(fact_id="f2", description="reaches checkout", criterion=url)])]),
        subtasks=[common_pb2.Subtask(subtask_id="s1", instruction="open the cart, count 42", group_ids=["g1"])],
        oracle=[common_pb2.Action(click=common_pb2.ClickAction(target=common_pb2.ElementTarget(selector="#cart"))),
                common_pb2.Action(answer=common_pb2.AnswerAction(text="42"))],
        max_steps=9, timeout_seconds=30, category="shopping", seed=1234, metadata={"answer": "42"},
    )


class Spy:
    """Records the task of every request it is asked to act on; answers noop."""

    description = "records what it is shown"
    backend = "none"
    model = ""

    def __init__(self, name: str, needs_solution: bool) -> None:
        self.name = name
        self.needs_solution = needs_solution
        self.seen: list[common_pb2.Task] = []

    async def act(self, request: policy_pb2.ActRequest) -> Decision:
        seen = common_pb2.Task()
        seen.CopyFrom(request.task)
        self.seen.append(seen)
        return Decision(action=common_pb2.Action(noop=common_pb2.NoopAction()))


def act_request(policy: str, step: int = 0) -> policy_pb2.ActRequest:
    return policy_pb2.ActRequest(episode_id="e1", policy=policy, task=full_task(), step_index=step,
                                 observation=common_pb2.Observation(url="http://shop-0001.web.test/", axtree="[1] link 'Cart'"))


def assert_stripped(seen: common_pb2.Task) -> None:
    task = full_task()
    assert seen == solutions.policy_task(task)
    assert seen.instruction == task.instruction and seen.start_url == task.start_url and seen.task_id == task.task_id
    assert not seen.HasField("rubric") and not seen.oracle and not seen.subtasks and not seen.metadata
    assert not seen.category and not seen.seed and not seen.kind and not seen.difficulty and not seen.family
    assert "42" not in str(seen) and "checkout" not in str(seen)


async def test_a_policy_without_needs_solution_never_sees_it(serve_policy, policy_stub):
    async with serve_policy() as (server, app), policy_stub(server) as stub:
        spy, told = Spy("spy", False), Spy("spy-told", True)
        app.servicer.policies.update({spy.name: spy, told.name: told})
        await stub.Act(act_request("spy"))

        async def items():
            for i in range(3):
                yield policy_pb2.ActStreamRequest(tag=str(i), request=act_request("spy", i))

        answers = [r async for r in stub.ActStream(items())]
        assert len(answers) == 3 and all(a.HasField("response") for a in answers)
        await stub.Act(act_request("spy-told"))
        # the oracle is handed the whole task and still solves it: its first action is the solution's first
        first = await stub.Act(act_request("oracle"))
        last = await stub.Act(act_request("oracle", 1))
    assert len(spy.seen) == 4
    for seen in spy.seen:
        assert_stripped(seen)
    assert told.seen == [full_task()]  # a policy that declares needs_solution gets every field
    assert first.action == full_task().oracle[0] and last.action.answer.text == "42"


def test_policy_task_is_an_allowlist():
    task = full_task()
    stripped = solutions.policy_task(task)
    assert {f.name for f, _ in stripped.ListFields()} <= set(solutions.VISIBLE_FIELDS)
    assert task == full_task()  # the original is left whole (the judge and the store still need it)
    assert solutions.reveals_solution(task) and not solutions.reveals_solution(stripped)

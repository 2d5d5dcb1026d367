"""What a policy may see of a task: the platform's one rule, applied by the collector and again by the policy service.

Only a policy that declares it needs the solution (``PolicyInfo.needs_solution``: the oracle) receives the whole
Task. Every other policy (random, explore, every trained checkpoint, every LLM) acts from the instruction, the
observation and its own history: the Task it is handed keeps only the fields below, which say what to do and
where, never how it is graded. The rule is an allowlist, not a list of answer fields to delete, so a field added
to Task later stays hidden until someone decides a policy may read it: the rubric (every criterion's expected
URL, answer, page text and site-state value), the subtasks (their instructions decompose the solution and name
rubric groups), the oracle, the category (what a category criterion expects), the metadata (free-form: a
MiniWoB task's name, a generator's parameters) and the generator seed (which regenerates the site's data and so
the answers) are all outside it, as are kind, difficulty (a count of the rubric's facts), family, split and the
template id (which names the kind of task).
"""

from __future__ import annotations

from webenv.v1 import common_pb2

#: The Task fields a policy without ``needs_solution`` receives.
VISIBLE_FIELDS = ("task_id", "source", "instruction", "start_url", "site", "max_steps", "timeout_seconds")


def policy_task(task: common_pb2.Task) -> common_pb2.Task:
    """``task`` as a policy that does not need the solution sees it (a new message; ``task`` is not changed)."""
    out = common_pb2.Task()
    for name in VISIBLE_FIELDS:
        setattr(out, name, getattr(task, name))
    return out


def reveals_solution(task: common_pb2.Task) -> bool:
    """Whether ``task`` carries anything beyond what ``policy_task`` keeps."""
    return task != policy_task(task)

"""`oracle`: follows a task's known solution, to make task-oriented data and prove tasks solvable.

Synthetic-web tasks carry their solution in Task.oracle (actions addressed by CSS selector, ending
with an answer); step i answers oracle[i], and past the end the final answer again. MiniWoB tasks
have no stored solution: for a few of them a script reads the utterance and the observation.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from webenv import errors
from webenv.v1 import common_pb2, policy_pb2

from ..observe import Candidate, candidates
from . import build
from .base import Decision

Script = Callable[[str, common_pb2.Observation], common_pb2.Action]


def _quoted(text: str) -> list[str]:
    return re.findall(r'"([^"]*)"', text)


def _find(cands: list[Candidate], pred: Callable[[Candidate], bool]) -> Candidate | None:
    return next((c for c in cands if pred(c)), None)


def _is_button(c: Candidate) -> bool:
    return c.tag == "button" or c.role == "button"


def _click_test(instruction: str, obs: common_pb2.Observation) -> common_pb2.Action:
    cands = candidates(obs)
    target = _find(cands, lambda c: _is_button(c) and "click me" in c.label.lower()) or _find(cands, _is_button)
    return build.click(target.element_id) if target else build.noop()


def _click_button(instruction: str, obs: common_pb2.Observation) -> common_pb2.Action:
    words = _quoted(instruction)
    want = words[0] if words else instruction.rsplit("button", 1)[0].split()[-1]
    target = _find(candidates(obs), lambda c: _is_button(c) and c.label.strip() == want)
    return build.click(target.element_id) if target else build.noop()


def _click_link(instruction: str, obs: common_pb2.Observation) -> common_pb2.Action:
    words = _quoted(instruction)
    want = words[0] if words else ""
    target = _find(candidates(obs), lambda c: c.is_link and c.label.strip() == want)
    return build.click(target.element_id) if target else build.noop()


def _focus_text(instruction: str, obs: common_pb2.Observation) -> common_pb2.Action:
    target = _find(candidates(obs), lambda c: c.fillable)
    return build.click(target.element_id) if target else build.noop()


def _enter_text(instruction: str, obs: common_pb2.Observation) -> common_pb2.Action:
    words = _quoted(instruction)
    text = words[0] if words else ""
    cands = candidates(obs)
    field = _find(cands, lambda c: c.fillable)
    if field is not None and field.value != text:
        return build.fill(field.element_id, text)
    submit = _find(cands, lambda c: _is_button(c) and "submit" in c.label.lower()) or _find(cands, _is_button)
    return build.click(submit.element_id) if submit else build.noop()


#: MiniWoB task name -> script reading (utterance, observation).
MINIWOB_SCRIPTS: dict[str, Script] = {
    "click-test": _click_test,
    "click-test-2": _click_button,
    "click-button": _click_button,
    "click-link": _click_link,
    "focus-text": _focus_text,
    "enter-text": _enter_text,
}


class OraclePolicy:
    name = "oracle"
    description = "follows the task's oracle solution (synthetic web) or a scripted MiniWoB solution"
    backend = "none"
    model = ""

    async def act(self, request: policy_pb2.ActRequest) -> Decision:
        if not request.HasField("task"):
            raise errors.InvalidArgument("policy 'oracle' needs request.task (its oracle solution); none was given",
                                         reason="MISSING_TASK", metadata={"field": "task", "policy": self.name})
        task = request.task
        if task.source == common_pb2.TASK_SOURCE_MINIWOB and not len(task.oracle):
            return Decision(action=self._miniwob(request))
        if not len(task.oracle):
            raise errors.InvalidArgument(
                f"task '{task.task_id}' has no oracle solution; the oracle policy cannot act on it",
                reason="NO_ORACLE_SOLUTION", metadata={"field": "task.oracle", "task_id": task.task_id})
        index = min(max(request.step_index, 0), len(task.oracle) - 1)
        action = common_pb2.Action()
        action.CopyFrom(task.oracle[index])
        return Decision(action=action, memory=f"oracle step {index + 1}/{len(task.oracle)}")

    def _miniwob(self, request: policy_pb2.ActRequest) -> common_pb2.Action:
        task = request.task
        name = task.metadata.get("miniwob_task", "")
        script = MINIWOB_SCRIPTS.get(name)
        if script is None:
            raise errors.InvalidArgument(
                f"no scripted oracle for MiniWoB task '{name}'; scripted: {', '.join(sorted(MINIWOB_SCRIPTS))}",
                reason="NO_ORACLE_SOLUTION", metadata={"field": "task.metadata.miniwob_task", "task": name})
        if not request.HasField("observation"):
            raise errors.InvalidArgument(
                f"the scripted oracle for MiniWoB '{name}' reads the page: request.observation is required",
                reason="MISSING_OBSERVATION", metadata={"field": "observation", "policy": self.name})
        instruction = request.instruction or task.instruction
        return script(instruction, request.observation)

"""`oracle`: follows a task's known solution, to make task-oriented data and prove tasks solvable.

Synthetic-web tasks carry their solution in Task.oracle (actions addressed by CSS selector, ending
with an answer); step i answers oracle[i], and past the end the final answer again. MiniWoB tasks
have no stored solution: for 22 of them a script reads the utterance and the observation (enough for the
learning loop's zero-shot MiniWoB++ suite of 20). Scripts count steps rather than read back a control's
checked state or value, which an AXTREE observation need not show (the learning loop's format: enter-text
filled its field again and again under it).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from webenv import errors
from webenv.actions import format_action
from webenv.agent.observe import Candidate, candidates
from webenv.v1 import common_pb2, policy_pb2

from ..state import EpisodeStore
from . import build
from .base import Decision

#: A script reads (utterance, observation, step index) and returns the next action.
Script = Callable[[str, common_pb2.Observation, int], common_pb2.Action]


def _quoted(text: str) -> list[str]:
    return re.findall(r'"([^"]*)"', text)


def _find(cands: list[Candidate], pred: Callable[[Candidate], bool]) -> Candidate | None:
    return next((c for c in cands if pred(c)), None)


def _is_button(c: Candidate) -> bool:
    return c.tag == "button" or c.role == "button"


def _click_test(instruction: str, obs: common_pb2.Observation, step: int) -> common_pb2.Action:
    cands = candidates(obs)
    target = _find(cands, lambda c: _is_button(c) and "click me" in c.label.lower()) or _find(cands, _is_button)
    return build.click(target.element_id) if target else build.noop()


def _click_button(instruction: str, obs: common_pb2.Observation, step: int) -> common_pb2.Action:
    # `Click on the "next" button.` (click-button) or `Click button ONE.` (click-test-2)
    words = _quoted(instruction)
    bare = re.search(r"[Bb]utton\s+(\S+?)\.?$", instruction.strip())
    want = words[0] if words else (bare.group(1) if bare else "")
    target = _find(candidates(obs), lambda c: _is_button(c) and c.label.strip() == want)
    return build.click(target.element_id) if target else build.noop()


def _click_link(instruction: str, obs: common_pb2.Observation, step: int) -> common_pb2.Action:
    words = _quoted(instruction)
    want = words[0] if words else ""
    target = _find(candidates(obs), lambda c: c.is_link and c.label.strip() == want)
    if target is not None:
        return build.click(target.element_id)
    # MiniWoB's "links" are <span class="alink"> with click handlers, children of #area, which element
    # lists leave out: find the span in the DOM format and address it by position.
    nodes = obs.dom_nodes
    area = next((i for i, n in enumerate(nodes) if n.attributes.get("id") == "area"), None)
    if area is None:
        return build.noop()
    spans = [i for i, n in enumerate(nodes) if n.parent_index == area and n.tag == "span"]
    for k, i in enumerate(spans, start=1):
        text = "".join(n.text for n in nodes if n.parent_index == i and n.tag == "#text").strip()
        if text == want:
            return common_pb2.Action(click=common_pb2.ClickAction(
                target=common_pb2.ElementTarget(selector=f"#area > span:nth-of-type({k})")))
    return build.noop()


def _enter_text_counted(instruction: str, obs: common_pb2.Observation, step: int) -> common_pb2.Action:
    # Enter "x" into the text field and press Submit: fill, then submit (counted, as an AXTREE need not show
    # the field's value).
    words = _quoted(instruction)
    return _fill_css("#tt", words[0] if words else "") if step == 0 else _css("#subbtn")


def _focus_text(instruction: str, obs: common_pb2.Observation, step: int) -> common_pb2.Action:
    target = _find(candidates(obs), lambda c: c.fillable)
    return build.click(target.element_id) if target else build.noop()


def _text_inputs(cands: list[Candidate]) -> list[Candidate]:
    """Text-like inputs in page order (password inputs may carry no text role)."""
    return [c for c in cands if c.fillable or (c.tag == "input" and c.role in ("", "textbox"))]


def _fill_then_submit(values: list[str], button_words: tuple[str, ...]) -> Script:
    """Step i < len(values): fill the i-th text input with values[i]; then click the named button."""

    def script(instruction: str, obs: common_pb2.Observation, step: int) -> common_pb2.Action:
        del instruction
        cands = candidates(obs)
        inputs = _text_inputs(cands)
        if step < len(values) and step < len(inputs):
            return build.fill(inputs[step].element_id, values[step])
        button = _find(cands, lambda c: _is_button(c) and c.label.strip().lower() in button_words)
        button = button or _find(cands, _is_button)
        return build.click(button.element_id) if button else build.noop()

    return script


def _login_user(instruction: str, obs: common_pb2.Observation, step: int) -> common_pb2.Action:
    words = _quoted(instruction)  # Enter the username "x" and the password "y" into the text fields and press login.
    return _fill_then_submit(words[:2], ("login", "log in"))(instruction, obs, step)


def _enter_password(instruction: str, obs: common_pb2.Observation, step: int) -> common_pb2.Action:
    words = _quoted(instruction)  # Enter the password "x" into both text fields and press submit.
    pw = words[0] if words else ""
    return _fill_then_submit([pw, pw], ("submit",))(instruction, obs, step)


def _click_visible_part(obs: common_pb2.Observation, element_id: str) -> common_pb2.Action:
    """Click an element by id, or at a point of it that no other element's box covers (MiniWoB places
    buttons at random and they may overlap; a click on the covered centre would hit the other one)."""
    boxes = {el.element_id: el.bbox for el in obs.elements if el.HasField("bbox") and el.bbox.width > 0}
    box = boxes.get(element_id)
    others = [b for eid, b in boxes.items() if eid != element_id]

    def inside(x: float, y: float, b) -> bool:
        return b.x <= x < b.x + b.width and b.y <= y < b.y + b.height

    if box is None or not any(inside(box.x + box.width / 2, box.y + box.height / 2, b) for b in others):
        return build.click(element_id)
    # Candidate points from the centre out to half a pixel inside the edges (MiniWoB can leave a 1 px sliver).
    xs = [box.x + box.width * f for f in (0.5, 0.25, 0.75, 0.1, 0.9)] + [box.x + 0.5, box.x + box.width - 0.5]
    ys = [box.y + box.height * f for f in (0.5, 0.25, 0.75, 0.1, 0.9)] + [box.y + 0.5, box.y + box.height - 0.5]
    for x in xs:
        for y in ys:
            if not any(inside(x, y, b) for b in others):
                return common_pb2.Action(click_at=common_pb2.ClickAtAction(x=round(x, 2), y=round(y, 2)))
    return build.click(element_id)


def _click_button_sequence(instruction: str, obs: common_pb2.Observation, step: int) -> common_pb2.Action:
    want = "ONE" if step == 0 else "TWO"  # Click button ONE, then click button TWO.
    target = _find(candidates(obs), lambda c: _is_button(c) and c.label.strip() == want)
    return _click_visible_part(obs, target.element_id) if target else build.noop()


def _css(selector: str) -> common_pb2.Action:
    return common_pb2.Action(click=common_pb2.ClickAction(target=common_pb2.ElementTarget(selector=selector)))


def _fill_css(selector: str, text: str) -> common_pb2.Action:
    return common_pb2.Action(fill=common_pb2.FillAction(target=common_pb2.ElementTarget(selector=selector), text=text))


def _enter_text_2(instruction: str, obs: common_pb2.Observation, step: int) -> common_pb2.Action:
    # Type "ALICE" in all lower case letters in the text input and press Submit.
    words = _quoted(instruction)
    text = words[0] if words else ""
    text = text.lower() if "lower case" in instruction else text.upper()
    return _fill_css("#tt", text) if step == 0 else _css("#subbtn")


def _focus_text_2(instruction: str, obs: common_pb2.Observation, step: int) -> common_pb2.Action:
    # Focus into the 2nd input textbox.
    m = re.search(r"(\d)(?:st|nd|rd|th) input", instruction)
    return _css(f"#tt{m.group(1)}") if m else build.noop()


def _choice_label(c: Candidate) -> str:
    return c.label.strip()


def _click_option(instruction: str, obs: common_pb2.Observation, step: int) -> common_pb2.Action:
    # Select qJz and click Submit. Step-counted: an AXTREE observation need not show the radio's checked state.
    m = re.match(r"Select (.*) and click Submit", instruction.strip())
    want = m.group(1) if m else ""
    cands = candidates(obs)
    target = _find(cands, lambda c: c.role == "radio" and _choice_label(c) == want) or _find(
        cands, lambda c: _choice_label(c) == want)
    if step == 0 and target is not None:
        return build.click(target.element_id)
    return _css("#subbtn")


def _click_checkboxes(instruction: str, obs: common_pb2.Observation, step: int) -> common_pb2.Action:
    # Select a, b, c and click Submit. (or "Select nothing and click Submit.") The page starts with every box
    # unchecked; step i clicks the i-th wanted one (counted, as an AXTREE need not show checked states).
    m = re.match(r"Select (.*) and click Submit", instruction.strip())
    names = m.group(1) if m else ""
    want = set() if names == "nothing" else {w.strip() for w in names.split(",")}
    boxes = [c for c in candidates(obs) if c.role == "checkbox" and _choice_label(c) in want]
    return build.click(boxes[step].element_id) if step < len(boxes) else _css("#subbtn")


def _click_collapsible(instruction: str, obs: common_pb2.Observation, step: int) -> common_pb2.Action:
    return _css("#area h3") if step == 0 else _css("#subbtn")


def _click_dialog(instruction: str, obs: common_pb2.Observation, step: int) -> common_pb2.Action:
    return _css("button.ui-dialog-titlebar-close")


def _click_dialog_2(instruction: str, obs: common_pb2.Observation, step: int) -> common_pb2.Action:
    # Click the button in the dialog box labeled "OK" ("x" is the title bar's close button).
    words = _quoted(instruction)
    want = words[0] if words else ""
    if want == "x":
        return _css("button.ui-dialog-titlebar-close")
    target = _find(candidates(obs), lambda c: _is_button(c) and c.label.strip() == want)
    return build.click(target.element_id) if target else build.noop()


def _click_tab(instruction: str, obs: common_pb2.Observation, step: int) -> common_pb2.Action:
    m = re.search(r"Tab #(\d)", instruction)  # Click on Tab #2.
    return _css(f'#area ul a[href="#tabs-{m.group(1)}"]') if m else build.noop()


def _choose_list(instruction: str, obs: common_pb2.Observation, step: int) -> common_pb2.Action:
    m = re.match(r"Select (.*) from the list and click Submit", instruction.strip())
    if step == 0 and m:
        return common_pb2.Action(select=common_pb2.SelectAction(
            target=common_pb2.ElementTarget(selector="#options"), options=[m.group(1)]))
    button = _find(candidates(obs), _is_button)
    return build.click(button.element_id) if button else build.noop()


def _enter_date(instruction: str, obs: common_pb2.Observation, step: int) -> common_pb2.Action:
    m = re.search(r"(\d{2})/(\d{2})/(\d{4})", instruction)  # Enter 05/12/2016 as the date and hit submit.
    if step == 0 and m:
        return _fill_css("#tt", f"{m.group(3)}-{m.group(1)}-{m.group(2)}")
    return _css("#subbtn")


def _use_spinner(instruction: str, obs: common_pb2.Observation, step: int) -> common_pb2.Action:
    m = re.search(r"Select (-?\d+) with the spinner", instruction)
    return _fill_css("#spinner", m.group(1)) if step == 0 and m else _css("#subbtn")


#: MiniWoB task name -> script reading (utterance, observation, step).
MINIWOB_SCRIPTS: dict[str, Script] = {
    "enter-text-dynamic": _enter_text_counted,
    "enter-text-2": _enter_text_2,
    "focus-text-2": _focus_text_2,
    "click-option": _click_option,
    "click-checkboxes": _click_checkboxes,
    "click-collapsible": _click_collapsible,
    "click-dialog": _click_dialog,
    "click-dialog-2": _click_dialog_2,
    "click-tab": _click_tab,
    "unicode-test": _click_button,
    "choose-list": _choose_list,
    "enter-date": _enter_date,
    "use-spinner": _use_spinner,
    "click-test": _click_test,
    "click-test-2": _click_button,
    "click-button": _click_button,
    "click-link": _click_link,
    "focus-text": _focus_text,
    "enter-text": _enter_text_counted,
    "login-user": _login_user,
    "enter-password": _enter_password,
    "click-button-sequence": _click_button_sequence,
}


@dataclass(slots=True)
class OracleState:
    """Where an episode is in its oracle solution."""

    position: int = 0
    last_step: int = -1
    retries: int = 0


class OraclePolicy:
    name = "oracle"
    description = "follows the task's oracle solution (synthetic web) or a scripted MiniWoB solution"
    backend = "none"
    model = ""
    needs_solution = True
    #: Task ids of the scripted MiniWoB++ tasks (the sites service names them miniwob/<name>).
    solved_task_ids = tuple(f"miniwob/{name}" for name in sorted(MINIWOB_SCRIPTS))

    #: How often an oracle action that failed on the page (last_action_error) is tried again.
    MAX_RETRIES = 2

    def __init__(self, max_episodes: int = 10000, ttl_seconds: float = 3600.0) -> None:
        self.states: EpisodeStore[OracleState] = EpisodeStore(OracleState, max_episodes, ttl_seconds)

    def _position(self, request: policy_pb2.ActRequest) -> int:
        """Oracle index for this step: the step index, except that an action the page reports as failed
        (a click racing a navigation, a modal still opening) is retried before moving on."""
        step = request.step_index
        if not request.episode_id:
            return step
        if step == 0:  # a new episode (or a rerun of the id) starts at the beginning
            self.states.forget(request.episode_id)
            self.states.get(request.episode_id).last_step = 0
            return 0
        st = self.states.get(request.episode_id)
        if step == st.last_step:  # the same step asked again: same answer
            return st.position
        if step == st.last_step + 1:
            if request.observation.last_action_error and st.retries < self.MAX_RETRIES:
                st.retries += 1
            else:
                st.position += 1
                st.retries = 0
        else:  # state forgotten or steps skipped: fall back to the step index
            st.position, st.retries = step, 0
        st.last_step = step
        return st.position

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
        index = min(self._position(request), len(task.oracle) - 1)
        action = common_pb2.Action()
        action.CopyFrom(task.oracle[index])
        try:
            format_action(action)
        except ValueError as exc:
            raise errors.InvalidArgument(f"task.oracle[{index}] of '{task.task_id}' is not a valid action: {exc}",
                                         reason="BAD_ORACLE_ACTION",
                                         metadata={"field": f"task.oracle[{index}]", "task_id": task.task_id}) from exc
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
        return script(instruction, request.observation, request.step_index)

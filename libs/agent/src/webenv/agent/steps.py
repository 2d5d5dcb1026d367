"""One step's context, built the same way from a live ActRequest (policy) and from a stored episode (trainer).

The collector shows a policy the last ``HISTORY_WINDOW`` steps and the memory of the newest one; the
trainer rebuilds exactly that from the stored steps, folding memory over the stored observations, so
the candidates and features it trains on are the ones the policy computes when it acts.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from webenv.actions import format_action
from webenv.solutions import policy_task
from webenv.v1 import collector_pb2, common_pb2, policy_pb2

from .candidates import Candidate, Context, context, parse_axtree, propose, words
from .prompt import answer_sections, previous_memory

#: Past steps a policy sees (the collector's ActRequest.history window).
HISTORY_WINDOW = 10


def request_context(request: policy_pb2.ActRequest) -> Context:
    """Context of a live request."""
    instruction = request.instruction or request.task.instruction
    history = [(h.action_text, h.last_action_error) for h in request.history]
    return context(instruction, request.observation, previous_memory(request.history), history, request.step_index)


def _selected_option(axtree: str, element_id: str) -> str:
    nodes = parse_axtree(axtree)
    for i, n in enumerate(nodes):
        if n.element_id == element_id:
            for m in nodes[i + 1:]:
                if m.depth <= n.depth:
                    break
                if m.role == "option" and m.selected:
                    return m.name
    return ""


def grounded_action(action: common_pb2.Action, element_id: str, next_axtree: str) -> common_pb2.Action | None:
    """The action as an agent writes it from its observation, which shows element ids, never CSS selectors.

    A selector-addressed element action (the synthetic web's oracle) becomes a copy addressed by the element id
    the farm resolved it to (``element_id``: StepRecord.target_element_id, the ``[id]`` of the observation's
    AXTREE); a select's options become the option the next observation (``next_axtree``) shows selected (they stay
    as given when it shows none, e.g. the select navigated away). None when the target resolved to no element. Any
    other action (already addressed by element id, or addressing no element) is returned as it is.
    """
    kind = action.WhichOneof("kind")
    msg = getattr(action, kind) if kind else None
    if msg is None or not hasattr(msg, "target") or msg.target.WhichOneof("ref") != "selector":
        return action
    if not element_id:
        return None
    out = common_pb2.Action()
    out.CopyFrom(action)
    msg = getattr(out, kind)
    msg.target.element_id = element_id
    label = _selected_option(next_axtree, element_id) if kind == "select" else ""
    if label:
        del msg.options[:]
        msg.options.append(label)
    return out


def grounded_text(action: common_pb2.Action, action_text: str, element_id: str, next_axtree: str) -> str:
    """The text of :func:`grounded_action`: what the history of a policy's prompt, an exported conversation and a
    transition show for a stored step. The stored ``action_text`` when the action needs no rewriting (a policy's
    own text stays exactly as the policy wrote it) or cannot be rewritten."""
    grounded = grounded_action(action, element_id, next_axtree)
    if grounded is None or grounded is action:
        return action_text
    try:
        return format_action(grounded)
    except ValueError:
        return action_text


def target_index(rec: common_pb2.StepRecord, next_obs: common_pb2.Observation, cands: list[Candidate]) -> int:
    """Index of the candidate the stored step took, or -1 when the proposer cannot express it.

    Actions addressed by element id (a policy's own) match by action text. Selector-addressed ones (the
    synthetic web's oracle) are matched as :func:`grounded_action` writes them, a click on a control's label as
    the click on the control; an answer is "done" or the answer candidate sharing most words with it.
    """
    kind = rec.action.WhichOneof("kind")
    if kind is None:
        return -1
    action = rec.action
    by_text = {c.text: i for i, c in enumerate(cands)}
    if kind == "answer":
        text = action.answer.text.strip()
        if text.lower() == "done":
            return by_text.get(format_action(action), -1)
        want = set(words(text))
        best, best_score = -1, 0.0
        for i, c in enumerate(cands):
            if c.kind == "answer" and c.answer_type != "done":
                got = set(words(c.value))
                score = len(want & got) / max(len(want), 1)
                if score > best_score:
                    best, best_score = i, score
        return best if best_score >= 0.6 else -1
    action = grounded_action(action, rec.target_element_id, next_obs.axtree)
    if action is None:
        return -1
    try:
        found = by_text.get(format_action(action), -1)
    except ValueError:
        return -1
    if found < 0 and kind == "click":
        found = _labelled_control(rec.observation.axtree, action.click.target.element_id, cands)
    return found


#: Roles a click on their label toggles: a click on the label is the click on the control.
_LABELLED = frozenset({"radio", "checkbox", "switch"})


def _labelled_control(axtree: str, element_id: str, cands: list[Candidate]) -> int:
    """A click on a control's label (radio cards: the oracle clicks `label[for=...]`) as the click candidate of the
    control it labels: the radio, checkbox or switch of the same name next to it (within two nodes). -1 if none."""
    if not element_id:
        return -1
    label = next((n for n in parse_axtree(axtree) if n.element_id == element_id), None)
    if label is None or label.role != "labeltext" or not label.name:
        return -1
    near = [(abs(c.node.index - label.index), i) for i, c in enumerate(cands)
            if c.kind == "click" and c.node is not None and c.node.role in _LABELLED
            and c.node.name.strip() == label.name.strip() and abs(c.node.index - label.index) <= 2]
    return min(near)[1] if near else -1


def fold(text: str) -> str:
    """The judge's form for CONTAINS checks (webenv.judge.textnorm.fold): whitespace collapsed, case-folded."""
    return " ".join(text.split()).casefold()


def accepted_answers(task: common_pb2.Task, cands: list[Candidate]) -> tuple[int, ...] | None:
    """Indices of the answer candidates the task's rubric accepts (every answer fact of its required groups, CONTAINS
    or EXACT, checked as the judge does), or None when its rubric has no answer fact or one of another kind (a regex,
    an LLM-judged text fact), which cannot be decided here."""
    checks = []
    for group in task.rubric.groups:
        if group.optional:
            continue
        for fact in group.facts:
            crit = fact.criterion
            if crit.HasField("llm"):
                return None
            if not crit.HasField("answer"):
                continue
            mode, want = crit.answer.mode, crit.answer.expected
            if mode == common_pb2.MATCH_MODE_CONTAINS:
                checks.append(lambda a, w=fold(want): w in fold(a))
            elif mode == common_pb2.MATCH_MODE_EXACT:
                checks.append(lambda a, w=want.strip(): a.strip() == w)
            else:
                return None
    if not checks:
        return None
    return tuple(i for i, c in enumerate(cands) if c.kind == "answer" and c.answer_type != "done"
                 and all(ok(c.action.answer.text) for ok in checks))


@dataclass(slots=True)
class StoredStep:
    """A stored step with the context and candidates the policy had, and the index it took."""

    index: int
    ctx: Context
    candidates: list[Candidate]
    target: int
    request: policy_pb2.ActRequest  # the ActRequest the policy got (for prompt-based models)
    record: common_pb2.StepRecord | None = None  # the stored step (its sampled tokens and logprobs for LM jobs)
    # at an answer step the rubric accepts (the target among them): every answer candidate it accepts (answer
    # relabeling, AlgorithmOptions.relabel_answers); else just the target
    accepted: tuple[int, ...] = ()


def episode_steps(episode: collector_pb2.StoredEpisode, instruction: str = "") -> Iterator[StoredStep]:
    """Every step of a stored episode, with its rebuilt context (memory folded as the policy folded it).

    ``instruction`` replaces the task's (subtask relabeling: the same steps as a success for a subtask).
    """
    traj = episode.trajectory
    instruction = instruction or episode.task.instruction
    shown = policy_task(episode.task)  # what a trained policy is shown of the task when it acts (webenv.solutions)
    memory = ""
    steps = list(traj.steps)
    nexts = [s.observation for s in steps[1:]] + [traj.final_observation]
    # the history shows each earlier action as the policy would have written it (grounded_text): a demonstration's
    # selectors as the element ids its pages showed
    texts = [grounded_text(rec.action, rec.action_text, rec.target_element_id, nxt.axtree)
             for rec, nxt in zip(steps, nexts, strict=True)]
    entries: list[policy_pb2.HistoryEntry] = []
    for i, rec in enumerate(steps):
        history = [(texts[j], steps[j].last_action_error) for j in range(max(0, i - HISTORY_WINDOW), i)]
        # the policy saw the memory the previous step wrote, i.e. folded over every earlier page
        ctx = context(instruction, rec.observation, memory, history, rec.step_index)
        memory = ctx.memory
        cands = propose(ctx)
        next_obs = nexts[i]
        request = policy_pb2.ActRequest(episode_id=episode.episode_id, task=shown, observation=rec.observation,
                                        history=entries[-HISTORY_WINDOW:], step_index=rec.step_index,
                                        instruction=instruction)
        target = target_index(rec, next_obs, cands)
        accepted: tuple[int, ...] = (target,) if target >= 0 else ()
        if target >= 0 and cands[target].kind == "answer":
            ok = accepted_answers(episode.task, cands)
            if ok and target in ok:
                accepted = ok
        yield StoredStep(i, ctx, cands, target, request, rec, accepted)
        # the memory the collector handed on: a language model's own (its answer's Memory line), else the folded one
        said = answer_sections(rec.raw_output).get("memory", "") if rec.completion_token_ids else memory
        entries.append(policy_pb2.HistoryEntry(action_text=texts[i], url=rec.url_after,
                                               last_action_error=rec.last_action_error, memory=said))

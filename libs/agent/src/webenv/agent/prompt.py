"""WebGym's memory prompt: instruction, the agent's own memory, recent history and the page.

The model answers in four labelled lines: `Memory:` (what to remember across steps, carried to the
next prompt through HistoryEntry.memory), `Progress:`, `Intention:` and `Action:` (one action in the
sdk's action text grammar). Keeping memory in the model's own words lets a short history window
stand in for the whole trajectory.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from webenv.v1 import common_pb2, policy_pb2

SYSTEM_PROMPT = """You are a web agent. You see a web page and choose ONE action at a time to complete the instruction.
Actions (element ids are the numbers in [brackets]):
click(id)  fill(id, "text")  select(id, "option")  hover(id)  press(id, "Enter")  press("Enter")
scroll(0, 400)  goto("https://...")  go_back()  go_forward()  new_tab("url")  switch_tab("id")  close_tab()
type("text")  click_at(x, y)  wait(500)  answer("final answer, or done when the task needs no answer")
Reply in exactly this form:
Memory: <facts to remember for later steps>
Progress: <what is done so far>
Intention: <what you do next and why>
Action: <one action>"""

FORMAT_NAMES = {
    common_pb2.OBSERVATION_FORMAT_AXTREE: "axtree",
    common_pb2.OBSERVATION_FORMAT_MARKDOWN: "markdown",
    common_pb2.OBSERVATION_FORMAT_HTML: "html",
    common_pb2.OBSERVATION_FORMAT_ELEMENTS: "elements",
}


_LABEL = re.compile(r"^\s*(?:[-*#>]\s*)?\**(memory|progress|intention|action)\**\s*:\s*(.*)$", re.IGNORECASE)


def answer_sections(text: str) -> dict[str, str]:
    """A model answer's labelled lines: label -> text (multi-line values continue until the next label); the last
    occurrence wins. The policy parses its answers with it, and the trainer reads the memory a stored answer wrote
    (the next step's prompt shows it) with it."""
    out: dict[str, str] = {}
    current = None
    for line in text.splitlines():
        m = _LABEL.match(line)
        if m:
            current = m.group(1).lower()
            out[current] = m.group(2).strip()
        elif current is not None and current != "action" and line.strip():
            out[current] = (out[current] + "\n" + line.strip()).strip()
    return out


@dataclass(frozen=True, slots=True)
class PromptBudget:
    """What a language-model policy reads and writes per step, one value shared by serving and training.

    The policy service's ``llm`` policy builds its prompts with it (its settings fill it), and the trainer's
    causal-LM jobs rebuild every stored step's prompt with the same one, so the tokens a model is trained on are
    the tokens it is served. The token rule is webenv.llm.encode's: the prompt keeps its last
    ``context_tokens - new_tokens`` tokens, and the answer gets ``new_tokens``.
    """

    #: The model's context (prompt + answer), tokens: webenv.llm.model_context_tokens of its config.
    context_tokens: int = 2048
    #: Tokens an answer may take (the serving max_new_tokens).
    new_tokens: int = 128
    #: Characters of the observation text before it is cut ("... (truncated)").
    observation_chars: int = 6000
    #: Past actions listed in the prompt.
    history_window: int = 5
    #: Observation format of the prompt: axtree, markdown, html, elements (or screenshot for a VLM).
    fmt: str = "axtree"

    @property
    def prompt_room(self) -> int:
        """Prompt tokens kept (the last ones)."""
        return max(1, self.context_tokens - self.new_tokens)


@dataclass(slots=True)
class Prompt:
    """A chat prompt: system + user text, and optionally one image for vision backends."""

    system: str
    user: str
    image: bytes = b""
    image_mime: str = ""


def render_elements(elements) -> str:
    """ELEMENTS as axtree-like lines, for observations that carry no text format."""
    lines = []
    for el in elements:
        if not el.visible:
            continue
        label = (el.name or el.text).strip().replace("\n", " ")[:80]
        extra = []
        if el.value:
            extra.append(f'value="{el.value[:40]}"')
        if el.checked:
            extra.append("checked")
        if el.disabled:
            extra.append("disabled")
        if el.focused:
            extra.append("focused")
        if el.href:
            extra.append(f"href={el.href[:80]}")
        lines.append(f'[{el.element_id}] {el.role or el.tag} "{label}" {" ".join(extra)}'.rstrip())
    return "\n".join(lines)


def observation_text(obs: common_pb2.Observation, fmt: str, max_chars: int) -> tuple[str, str]:
    """The observation in `fmt`, falling back to whatever text format it carries. Returns (fmt used, text)."""
    order = [fmt, "axtree", "markdown", "elements", "html"]
    for name in order:
        text = render_elements(obs.elements) if name == "elements" else getattr(obs, name)
        if text:
            if len(text) > max_chars:
                text = text[:max_chars] + "\n... (truncated)"
            return name, text
    return fmt, "(empty page)"


def previous_memory(history) -> str:
    for entry in reversed(history):
        if entry.memory:
            return entry.memory
    return ""


def build_prompt(request: policy_pb2.ActRequest, instruction: str, *, fmt: str, history_window: int,
                 max_chars: int, with_image: bool = False) -> Prompt:
    """Render one request as the memory prompt."""
    obs = request.observation
    parts = [f"Instruction: {instruction}"]
    memory = previous_memory(request.history)
    parts.append(f"Memory: {memory or '(empty)'}")
    recent = list(request.history)[-history_window:] if history_window > 0 else []
    if recent:
        first = len(request.history) - len(recent)
        lines = []
        for i, h in enumerate(recent, start=first):
            line = f"{i}. {h.action_text}"
            if h.url:
                line += f"  -> {h.url}"
            if h.last_action_error:
                line += f"  (error: {h.last_action_error})"
            lines.append(line)
        parts.append("Previous actions:\n" + "\n".join(lines))
    if obs.last_action_error:
        parts.append(f"Last action failed: {obs.last_action_error}")
    tabs = "; ".join(f"[{t.tab_id}]{'*' if t.active else ''} {t.title[:40]}" for t in obs.tabs)
    header = f"URL: {obs.url}\nTitle: {obs.title}" + (f"\nTabs: {tabs}" if len(obs.tabs) > 1 else "")
    if fmt == "screenshot":  # a vision prompt: the page is the image
        parts.append(f"{header}\nObservation: the attached screenshot of the viewport.")
    else:
        used, text = observation_text(obs, fmt, max_chars)
        parts.append(f"{header}\nObservation ({used}):\n{text}")
    parts.append(f"Step {request.step_index}. Reply with Memory, Progress, Intention and Action.")
    image, mime = b"", ""
    if (with_image or fmt == "screenshot") and obs.HasField("screenshot") and obs.screenshot.data:
        image = obs.screenshot.data
        mime = "image/jpeg" if obs.screenshot.codec == common_pb2.IMAGE_CODEC_JPEG else "image/png"
    return Prompt(system=SYSTEM_PROMPT, user="\n\n".join(parts), image=image, image_mime=mime)


def step_prompt(request: policy_pb2.ActRequest, budget: PromptBudget, *, fmt: str = "",
                history_window: int = 0, with_image: bool = False) -> Prompt:
    """The memory prompt of one step under ``budget`` (``fmt`` / ``history_window`` override it per request)."""
    instruction = request.task.instruction or request.instruction
    return build_prompt(request, instruction, fmt=fmt or budget.fmt, history_window=history_window or budget.history_window,
                        max_chars=budget.observation_chars, with_image=with_image)


def messages(prompt: Prompt) -> list[dict[str, str]]:
    """The prompt as chat messages (system, user)."""
    return [{"role": "system", "content": prompt.system}, {"role": "user", "content": prompt.user}]


def chat_messages(prompt: Prompt):
    """The prompt as the LLM layer's chat turns (system, user): what the policy sends and the trainer tokenizes."""
    from webenv.llm.types import Message

    return (Message("system", prompt.system), Message("user", prompt.user))


def generation_request(prompt: Prompt, params=None, adapter: str = ""):
    """A memory prompt as an LLM request (chat turns; its screenshot, if any, as the image of the user turn): what
    the policy sends, and what the trainer encodes a stored step's prompt from."""
    from webenv.llm.types import GenerationRequest, ImageInput, SamplingParams

    images = (ImageInput(prompt.image, prompt.image_mime or "image/png"),) if prompt.image else ()
    return GenerationRequest(chat_messages(prompt), params or SamplingParams(), images=images, adapter=adapter)


def prompt_ids(tokenizer, prompt: Prompt, budget: PromptBudget) -> list[int]:
    """The prompt's token ids as a local engine serving ``budget`` feeds them (webenv.llm.encode: the chat template,
    the last ``budget.prompt_room`` tokens): the training prompt of a stored step. ``tokenizer`` may be a vision
    model's webenv.llm.vision.VisionProcessor: a prompt with a screenshot then has its image tokens."""
    return prompt_inputs(tokenizer, prompt, budget).input_ids


def prompt_inputs(tokenizer, prompt: Prompt, budget: PromptBudget):
    """:func:`prompt_ids` with the images (a webenv.llm.types.VisionPrompt: ids, images, pixel values)."""
    from webenv.llm.types import VisionPrompt, encode

    request = generation_request(prompt)
    if hasattr(tokenizer, "encode_request"):  # a vision-language model's processor
        return tokenizer.encode_request(request, budget.prompt_room)
    return VisionPrompt(encode(tokenizer, request, budget.prompt_room))


def render(tokenizer, prompt: Prompt) -> str:
    """Text to feed a local model: its chat template when it has one. The trainer renders training prompts
    with this function and the LLM backends serve the same turns through webenv.llm.render_chat, the one
    renderer, so a fine-tuned model sees at serving time what it saw in training."""
    from webenv.llm.types import Message, render_chat

    return render_chat(tokenizer, [Message(m["role"], m["content"]) for m in messages(prompt)])

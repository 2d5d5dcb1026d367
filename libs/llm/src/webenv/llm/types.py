"""The protocol every LLM backend implements: requests in, results out, in order.

A :class:`GenerationRequest` is a prompt (raw text, or chat messages the backend renders with the model's chat
template), its :class:`SamplingParams` and optional inputs; a :class:`GenerationResult` is the text, its token ids
and per-token logprobs where the engine gives them, and token counts. ``await backend.generate(requests)`` answers
every request of the list in order. A backend says what it serves in :class:`Capabilities`; a request that needs
something its backend does not serve is refused with :class:`Unsupported` before any work, never silently
degraded.

Nothing here imports torch, transformers, vLLM or httpx: the engines are imported by their modules only.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable


class LLMError(RuntimeError):
    """A backend failed: an HTTP error, an unexpected response, a missing engine package, a model error."""


class Unsupported(LLMError):
    """A request asks for something its backend does not serve (images, regex, choices, an adapter)."""


class AdapterError(LLMError):
    """An adapter could not be loaded: ``field`` names what was wrong ("path": no adapter there; "adapter": it
    does not fit this base model), ``incompatible`` is True for the latter."""

    def __init__(self, message: str, field: str, incompatible: bool = False) -> None:
        super().__init__(message)
        self.field, self.incompatible = field, incompatible


@dataclass(frozen=True, slots=True)
class Message:
    """One chat turn (role ``system``, ``user`` or ``assistant``)."""

    role: str
    content: str


@dataclass(frozen=True, slots=True)
class ImageInput:
    """An image that goes with the prompt's last user turn (vision models)."""

    data: bytes
    mime: str = "image/png"


@dataclass(slots=True)
class VisionPrompt:
    """A prompt's token ids (a vision model's image placeholders expanded, webenv.llm.vision) and its images with
    their image-processor outputs (empty / None for a text prompt)."""

    input_ids: list[int]
    images: list[bytes] = field(default_factory=list)
    pixel_values: Any = None
    image_grid_thw: Any = None


@dataclass(frozen=True, slots=True)
class SamplingParams:
    """How to decode. Requests with equal params (the seed aside) can share one batch."""

    max_tokens: int = 128
    #: 0 is greedy decoding.
    temperature: float = 0.0
    top_p: float = 1.0
    #: 0 = no seed (the engine's own randomness).
    seed: int = 0
    #: Generation ends before the first of these strings (it is not part of the text).
    stop: tuple[str, ...] = ()
    #: Generate all ``max_tokens`` tokens even past the end-of-sequence token (benchmarks).
    ignore_eos: bool = False
    #: Special tokens (markers a model was trained with) are dropped from the text unless False.
    skip_special_tokens: bool = True
    #: Return the logprob of every generated token (GenerationResult.logprobs).
    logprobs: bool = False
    #: The whole output must match this regular expression (Capabilities.regex).
    regex: str = ""
    #: The output is the most likely of these strings, scored after the prompt (Capabilities.choices).
    choices: tuple[str, ...] = ()

    @property
    def batch_key(self) -> tuple:
        """What a batch must share: everything but the seed (keying on it would make batches of one)."""
        return (self.max_tokens, self.temperature, self.top_p, self.stop, self.ignore_eos, self.skip_special_tokens,
                self.logprobs, self.regex, self.choices)


@dataclass(frozen=True, slots=True)
class GenerationRequest:
    """One prompt to complete.

    ``prompt`` is raw text (tokenized as the tokenizer does by default, ``prepend_bos`` puts its BOS token first
    when it adds none) or a sequence of :class:`Message` rendered with the model's chat template (or, for a model
    without one, the contents joined by blank lines). Local engines keep the end of an over-long prompt: the last
    ``max_context_tokens - max_tokens`` tokens.
    """

    prompt: str | Sequence[Message]
    params: SamplingParams = field(default_factory=SamplingParams)
    #: Images for the last user turn (Capabilities.images).
    images: tuple[ImageInput, ...] = ()
    #: LoRA adapter to apply, by name (Capabilities.adapters; "" = the base model). The transformers backend serves
    #: the adapters loaded with its ``load_adapter``; a backend without adapters refuses it with Unsupported.
    adapter: str = ""
    #: Raw-text prompts on local engines: put the tokenizer's BOS token first when tokenizing added none (a model
    #: trained that way). Remote servers tokenize themselves and ignore it.
    prepend_bos: bool = False
    #: Seconds this request may take from submission; 0 = no limit. Past it the result has finish_reason "timeout"
    #: (the text generated so far, possibly empty).
    timeout_seconds: float = 0.0

    @property
    def is_chat(self) -> bool:
        return not isinstance(self.prompt, str)


@dataclass(slots=True)
class GenerationResult:
    """One completion."""

    text: str
    #: Generated token ids (empty where the engine does not say: OpenAI-compatible servers).
    token_ids: tuple[int, ...] = ()
    #: Logprob of each generated token when SamplingParams.logprobs asked for it and the engine gives them.
    logprobs: tuple[float, ...] | None = None
    prompt_tokens: int = 0
    completion_tokens: int = 0
    #: "stop" (end of sequence or a stop string), "length" (max_tokens), "timeout", or "" (the engine did not say).
    finish_reason: str = ""
    #: How it was served: seconds queued before its batch, seconds of the batch, requests in it (the Batcher sets
    #: these; a backend called directly reports its own generate time and batch).
    queue_seconds: float = 0.0
    inference_seconds: float = 0.0
    batch_size: int = 1


@dataclass(frozen=True, slots=True)
class Capabilities:
    """What a backend serves besides text prompts and the plain sampling params."""

    images: bool = False
    regex: bool = False
    choices: bool = False
    logprobs: bool = False
    adapters: bool = False


@runtime_checkable
class LLMBackend(Protocol):
    """A model that completes prompts. ``start`` loads it, ``generate`` serves, ``close`` frees it."""

    #: Engine name: "transformers", "vllm", "openai".
    name: str
    #: Model name reported to users (a folder name, a served model name).
    model: str
    #: True when the engine batches by itself (vLLM's scheduler, a remote server): the Batcher then hands it each
    #: request on arrival; otherwise the Batcher groups requests into batches.
    continuous: bool
    capabilities: Capabilities
    #: Longest prompt + completion in tokens (0 = unknown until started, or not known).
    max_context_tokens: int
    #: Parameter count (0 = not known).
    parameters: int

    async def start(self) -> None:
        """Load the model (slow). Raises LLMError when the engine is missing."""

    async def generate(self, requests: Sequence[GenerationRequest]) -> list[GenerationResult]:
        """One result per request, in order. Raises Unsupported before any work for a request it cannot serve."""

    async def close(self) -> None:
        """Free the model and its threads or connections."""


def check_supported(backend: LLMBackend, requests: Sequence[GenerationRequest]) -> None:
    """Unsupported naming the first thing a request needs and ``backend`` does not serve."""
    caps = backend.capabilities
    for r in requests:
        p = r.params
        needs = [("images", bool(r.images), caps.images), ("adapter", bool(r.adapter), caps.adapters),
                 ("regex", bool(p.regex), caps.regex), ("choices", bool(p.choices), caps.choices),
                 ("logprobs", p.logprobs, caps.logprobs)]
        for what, asked, served in needs:
            if asked and not served:
                raise Unsupported(f"the {backend.name} backend does not serve {what}")
        loaded = getattr(backend, "adapters", None)  # the adapters a backend that loads them by name holds now
        if r.adapter and loaded is not None and r.adapter not in loaded:
            raise Unsupported(f"adapter: {r.adapter!r} is not loaded in the {backend.name} backend "
                              f"(loaded: {', '.join(loaded) or 'none'})")
        if p.max_tokens < 1:
            raise ValueError("SamplingParams.max_tokens must be >= 1")


def render_chat(tokenizer, messages: Sequence[Message], images: int = 0) -> str:
    """Chat messages as the text a local model sees: its chat template with the assistant cue, or (a model
    without one) the contents joined by blank lines. The trainer renders training prompts the same way
    (webenv.agent.prompt.render), so a fine-tuned model sees at serving time what it saw in training.

    ``images`` > 0 (a vision-language model, webenv.llm.vision): the last user turn becomes content parts, that
    many ``{"type": "image"}`` parts before its text, which the template renders as its image placeholders."""
    turns: list[dict] = [{"role": m.role, "content": m.content} for m in messages]
    if images:
        last = max(i for i, t in enumerate(turns) if t["role"] == "user")
        turns[last]["content"] = [{"type": "image"}] * images + [{"type": "text", "text": turns[last]["content"]}]
    if getattr(tokenizer, "chat_template", None):
        return tokenizer.apply_chat_template(turns, tokenize=False, add_generation_prompt=True)
    if images:
        raise ValueError("images need a chat template that renders image parts")
    return "".join(f"{m.content}\n\n" for m in messages)


def model_context_tokens(config) -> int:
    """A model's context in tokens as every local engine and the trainer read it (its max_position_embeddings, or
    its text model's for a vision-language model; 2048 when the config says none)."""
    text = getattr(config, "text_config", None)
    return int(getattr(config, "max_position_embeddings", None) or getattr(text, "max_position_embeddings", None)
               or 2048)


def is_vision_model(model_path) -> bool:
    """Whether the local Hugging Face folder holds a vision-language model (its config.json has a vision_config):
    read without importing transformers, so a backend knows before it loads."""
    import json
    from pathlib import Path

    try:
        config = json.loads((Path(model_path) / "config.json").read_text())
    except (OSError, ValueError):
        return False
    return isinstance(config, dict) and bool(config.get("vision_config"))


def encode(tokenizer, request: GenerationRequest, room: int) -> list[int]:
    """The prompt's token ids for a local engine, keeping the last ``room`` of them (at least one)."""
    if request.is_chat:  # the template carries the special tokens
        ids = list(tokenizer(render_chat(tokenizer, request.prompt), add_special_tokens=False)["input_ids"])
    else:
        ids = list(tokenizer(request.prompt)["input_ids"])
        bos = tokenizer.bos_token_id
        if request.prepend_bos and bos is not None and (not ids or ids[0] != bos):
            ids.insert(0, bos)
    room = max(room, 1)
    return ids[-room:] if len(ids) > room else ids

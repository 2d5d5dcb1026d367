"""The backend interface (the factory that picks one from settings is factory.py).

A backend turns a list of prompts into a list of generations with token counts. `continuous` says
whether it batches by itself (vLLM's scheduler, a remote server): the batcher then hands it each
request at once and lets it interleave them; otherwise the batcher groups requests into batches.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from webenv.agent.prompt import Prompt



@dataclass(frozen=True, slots=True)
class GenerationParams:
    """Sampling settings of one request (requests with equal params can share a batch)."""

    max_new_tokens: int = 128
    temperature: float = 0.0
    seed: int = 0
    ignore_eos: bool = False
    stop: tuple[str, ...] = field(default_factory=tuple)
    #: Regular expression the whole output must match (backends with `supports_constraints` only).
    regex: str = ""


@dataclass(slots=True)
class Generation:
    """One completion and its token counts."""

    text: str
    prompt_tokens: int
    completion_tokens: int
    finish_reason: str = ""


class LLMBackend(Protocol):
    """What the batcher and the llm policy need from a model server."""

    name: str  # "transformers", "vllm", "openai"
    model: str
    continuous: bool
    supports_images: bool
    supports_constraints: bool  # honours GenerationParams.regex

    async def start(self) -> None:
        """Load the model (health stays NOT_SERVING until this returns)."""

    async def generate(self, prompts: list[Prompt], params: GenerationParams) -> list[Generation]:
        """Complete every prompt with the same params; one Generation per prompt, in order."""

    async def close(self) -> None:
        """Free the model."""

"""The backend interface and the factory that picks one from settings.

A backend turns a list of prompts into a list of generations with token counts. `continuous` says
whether it batches by itself (vLLM's scheduler, a remote server): the batcher then hands it each
request at once and lets it interleave them; otherwise the batcher groups requests into batches.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from webenv.agent.prompt import Prompt

    from ..config import Settings


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


def make_backend(settings: Settings) -> LLMBackend | None:
    """The backend the settings ask for (imported lazily: vLLM is only on some machines)."""
    kind = settings.resolved_backend
    if kind == "none":
        return None
    if kind == "transformers":
        from .hf_backend import TransformersBackend

        return TransformersBackend(settings.policy_model_path, model_name=settings.model_name,
                                   device=settings.policy_device, threads=settings.policy_torch_threads)
    if kind == "vllm":
        from .vllm_backend import VllmBackend

        return VllmBackend(settings.policy_model_path, model_name=settings.model_name,
                           max_model_len=settings.policy_vllm_max_model_len,
                           gpu_memory_utilization=settings.policy_vllm_gpu_memory_utilization,
                           max_num_seqs=settings.policy_vllm_max_num_seqs, dtype=settings.policy_vllm_dtype)
    if kind == "openai":
        from .openai_backend import OpenAIBackend

        return OpenAIBackend(settings.policy_openai_url, model_name=settings.policy_openai_model or settings.model_name,
                             api_key=settings.policy_openai_api_key,
                             timeout_seconds=settings.policy_openai_timeout_seconds)
    raise ValueError(f"unknown backend {kind!r}")

"""The backend the policy's settings ask for, imported lazily (vLLM is only on some machines).

Apart from base.py (the types every backend implements), so no backend and base import each other.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..config import Settings
    from .base import LLMBackend


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

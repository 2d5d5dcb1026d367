"""The backend a configuration names, with its engine imported only when chosen (vLLM is on some machines only).

Each service keeps its own WEBENV_* settings (WEBENV_POLICY_BACKEND, WEBENV_JUDGE_LLM_BACKEND,
WEBENV_WORLDMODEL_BACKEND, ...) and maps them onto one :class:`BackendConfig`; this module turns that into a backend.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from .types import LLMBackend

#: Engines make_backend knows ("none" is no backend).
BACKENDS = ("none", "transformers", "vllm", "openai")


@dataclass(frozen=True)
class BackendConfig:
    """Everything any backend is built from; each engine reads its own fields."""

    backend: str = "none"
    #: transformers, vllm: the local model folder (save_pretrained layout).
    model_path: str | Path = ""
    #: The model name reported (default: the folder's name); openai: the model sent to the server.
    model_name: str = ""
    # transformers
    device: str = "auto"
    threads: int = 0
    #: torch dtype name ("float32", "bfloat16"; "" or "auto" = what the engine picks from the model's config).
    dtype: str = ""
    sequential: bool = False
    lookup_draft: int = 10
    # vllm
    max_model_len: int = 0
    gpu_memory_utilization: float = 0.85
    max_num_seqs: int = 64
    enforce_eager: bool = True
    #: LoRA adapters the engine holds at once (0 = no LoRA), and their largest rank.
    max_loras: int = 0
    max_lora_rank: int = 16
    # openai
    base_url: str = ""
    api: str = "chat"
    api_key: str = ""
    timeout_seconds: float = 120.0


def make_backend(config: BackendConfig) -> LLMBackend | None:
    """The backend ``config`` names (not started), or None for ``none``."""
    kind = config.backend
    if kind == "none":
        return None
    if kind == "transformers":
        from .transformers_backend import TransformersBackend

        return TransformersBackend(config.model_path, model_name=config.model_name, device=config.device,
                                   threads=config.threads, dtype=config.dtype, sequential=config.sequential,
                                   lookup_draft=config.lookup_draft)
    if kind == "vllm":
        from .vllm_backend import VllmBackend

        return VllmBackend(config.model_path, model_name=config.model_name, max_model_len=config.max_model_len,
                           gpu_memory_utilization=config.gpu_memory_utilization, max_num_seqs=config.max_num_seqs,
                           dtype=config.dtype or "auto", enforce_eager=config.enforce_eager,
                           max_loras=config.max_loras, max_lora_rank=config.max_lora_rank)
    if kind == "openai":
        from .openai_backend import OpenAIBackend

        return OpenAIBackend(config.base_url, model=config.model_name, api=config.api, api_key=config.api_key,
                             timeout_seconds=config.timeout_seconds)
    raise ValueError(f"unknown LLM backend {kind!r}; known: {', '.join(BACKENDS)}")

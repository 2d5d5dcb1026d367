"""Judge configuration: ``WEBENV_*`` environment variables (see the README for each)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, SecretStr, model_validator
from webenv.llm import BackendConfig
from webenv.runtime import ServiceSettings


class Settings(ServiceSettings):
    """Settings of the judge service."""

    grpc_port: int = Field(50054, ge=0, le=65535, description="gRPC port; 0 picks a free port.")
    metrics_port: int = Field(9454, ge=0, le=65535, description="Prometheus /metrics port; 0 picks a free port.")

    judge_llm_backend: Literal["none", "openai", "transformers", "vllm"] = Field(
        "none", description="Backend of LLM-judged facts: none, openai (HTTP), transformers (CPU), vllm (GPU)."
    )
    judge_model_path: str = Field("", description="Local model folder for the transformers and vllm backends.")
    judge_llm_base_url: str = Field(
        "", description="Base URL of an OpenAI-compatible server, e.g. http://localhost:8000/v1 (openai backend)."
    )
    judge_llm_model: str = Field("", description="Model name sent to the OpenAI-compatible server.")
    judge_llm_api: Literal["chat", "completions"] = Field(
        "chat", description="OpenAI-compatible endpoint: /chat/completions or /completions."
    )
    judge_llm_api_key: SecretStr = Field(SecretStr(""), description="Bearer key for the OpenAI-compatible server.")
    judge_llm_constrained: bool = Field(
        True, description="Choose HOLDS/FAILS among the two verdicts (transformers: by likelihood; vllm: constrained "
        "decoding), generate only the reason. The openai backend always generates the whole reply."
    )
    judge_llm_timeout_seconds: float = Field(30.0, gt=0, le=600, description="Default time limit of one LLM call.")
    judge_llm_max_tokens: int = Field(48, ge=4, le=1024, description="Tokens the judge may generate per fact.")
    judge_llm_concurrency: int = Field(4, ge=1, le=256, description="LLM calls in flight at once.")
    judge_max_keypoints: int = Field(3, ge=1, le=32, description="Default number of keypoint steps per prompt.")
    judge_keypoint_chars: int = Field(1500, ge=100, le=100_000, description="Characters of each keypoint excerpt.")
    judge_cache_size: int = Field(4096, ge=0, description="Entries of the LLM verdict cache (0 disables it).")
    judge_rubric_cache_size: int = Field(1024, ge=1, description="Compiled rubrics kept.")
    judge_max_regex_chars: int = Field(512, ge=1, le=10_000, description="Longest regex a rubric may carry.")

    def backend_config(self) -> BackendConfig:
        """The LLM backend these settings ask for (webenv.llm.make_backend builds it)."""
        return BackendConfig(
            backend=self.judge_llm_backend, model_path=self.judge_model_path, model_name=self.judge_llm_model,
            device="cpu", dtype="float32", base_url=self.judge_llm_base_url, api=self.judge_llm_api,
            api_key=self.judge_llm_api_key.get_secret_value(), timeout_seconds=60.0)

    @model_validator(mode="after")
    def _backend_needs(self) -> Settings:
        if self.judge_llm_backend in ("transformers", "vllm") and not self.judge_model_path:
            raise ValueError(
                f"WEBENV_JUDGE_MODEL_PATH is required when WEBENV_JUDGE_LLM_BACKEND={self.judge_llm_backend}"
            )
        if self.judge_llm_backend == "openai" and not self.judge_llm_base_url:
            raise ValueError("WEBENV_JUDGE_LLM_BASE_URL is required when WEBENV_JUDGE_LLM_BACKEND=openai")
        return self

"""Service configuration: every knob is a WEBENV_* environment variable, validated at start."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field, field_validator, model_validator
from webenv.llm import BackendConfig
from webenv.runtime import ServiceSettings

POLICY_NAMES = ("oracle", "random", "explore", "llm")

#: Default action mix of the random (level-1 crawling) policy: relative weights.
DEFAULT_RANDOM_MIX = "click=0.55,fill=0.15,select=0.05,scroll=0.1,back=0.06,navigate=0.04,press=0.05"


def parse_mix(text: str) -> dict[str, float]:
    """Parse `kind=weight,...` into a dict; unknown kinds or negative weights are errors."""
    known = {"click", "fill", "select", "scroll", "back", "navigate", "press", "hover"}
    mix: dict[str, float] = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        kind, sep, weight = part.partition("=")
        kind = kind.strip()
        if not sep or kind not in known:
            raise ValueError(f"bad mix entry {part!r}: expected kind=weight with kind in {sorted(known)}")
        value = float(weight)
        if value < 0:
            raise ValueError(f"bad mix entry {part!r}: weight must be >= 0")
        mix[kind] = value
    if not mix or sum(mix.values()) <= 0:
        raise ValueError("the mix needs at least one positive weight")
    return mix


class Settings(ServiceSettings):
    """Policy service settings (env prefix WEBENV_)."""

    grpc_port: int = 50052
    metrics_port: int = 9452

    policy_default: str = Field("random", description="policy used when a request names none")
    policy_backend: Literal["auto", "none", "transformers", "vllm", "openai"] = Field(
        "auto", description="LLM backend; auto = openai if a URL is set, transformers if a model path is set"
    )
    policy_model_path: Path | None = Field(None, description="local folder of the model (save_pretrained layout)")
    policy_model_name: str = Field("", description="model name reported in responses (default: folder name)")
    policy_openai_url: str = Field("", description="base URL of an OpenAI-compatible server, e.g. http://h:8000/v1")
    policy_openai_api_key: str = Field("", description="bearer token for the OpenAI-compatible server")
    policy_openai_model: str = Field("", description="model name sent to the OpenAI-compatible server")
    policy_openai_timeout_seconds: float = Field(120.0, gt=0)
    policy_device: str = Field("auto", description="transformers device: auto, cpu or cuda")
    policy_torch_threads: int = Field(0, ge=0, description="torch intra-op threads (0 = torch's default)")
    policy_max_batch: int = Field(16, ge=1, le=1024, description="largest batch sent to the backend")
    policy_batch_window_ms: float = Field(10.0, ge=0, le=1000, description="how long a batch waits to fill")
    policy_max_queue: int = Field(4096, ge=1, description="queued LLM requests before RESOURCE_EXHAUSTED")
    policy_max_new_tokens: int = Field(128, ge=1, le=32768)
    policy_temperature: float = Field(0.0, ge=0, le=5)
    policy_history_window: int = Field(5, ge=0, le=100)
    policy_prompt_format: Literal["axtree", "markdown", "html", "elements"] = "axtree"
    policy_max_observation_chars: int = Field(6000, ge=200)
    policy_max_episodes: int = Field(10000, ge=1, description="per-episode states kept (LRU eviction)")
    policy_episode_ttl_seconds: float = Field(3600.0, gt=0, description="idle episodes are forgotten after")
    policy_random_mix: str = Field(DEFAULT_RANDOM_MIX, description="random policy's action weights")
    policy_vision: bool = Field(False, description=(
        "send the screenshot with every prompt on an OpenAI-compatible backend (a vision-language model on the "
        "transformers backend always gets it)"))
    policy_constrained: bool = Field(
        False, description="constrain decoding to the answer format and this page's element ids (vLLM only)")
    policy_stream_max_inflight: int = Field(512, ge=1, description="unanswered requests per ActStream")
    policy_checkpoint_dir: Path = Field(Path(".webenv/checkpoints"),
                                        description="folder of trained checkpoints, shared with the trainer")
    policy_checkpoints: str = Field("", description="checkpoint refs to load at start, comma-separated (name or name@N)")
    policy_checkpoint_keep: int = Field(4, ge=1, le=64, description="versions of one checkpoint family kept loaded")
    policy_vllm_max_loras: int = Field(0, ge=0, le=256, description=(
        "vLLM: LoRA adapters held at once (0 = LoRA off; the transformers backend always takes adapters)"))
    policy_vllm_max_lora_rank: int = Field(16, ge=1, le=512, description="vLLM: largest LoRA rank served")
    policy_http_host: str = Field("127.0.0.1", description="address of the OpenAI-compatible HTTP API")
    policy_http_port: int = Field(-1, ge=-1, le=65535, description=(
        "port of the OpenAI-compatible HTTP API (POST /v1/chat/completions, GET /v1/models); -1 = off, 0 = a free port"))
    policy_vllm_max_model_len: int = Field(2048, ge=64)
    policy_vllm_gpu_memory_utilization: float = Field(0.85, gt=0, le=1)
    policy_vllm_max_num_seqs: int = Field(64, ge=1)
    policy_vllm_dtype: str = "auto"

    @field_validator("policy_default")
    @classmethod
    def _known_default(cls, value: str) -> str:
        if value not in POLICY_NAMES:
            raise ValueError(f"unknown policy {value!r}; known: {', '.join(POLICY_NAMES)}")
        return value

    @field_validator("policy_random_mix")
    @classmethod
    def _valid_mix(cls, value: str) -> str:
        parse_mix(value)
        return value

    @model_validator(mode="after")
    def _backend_inputs(self) -> Settings:
        backend = self.resolved_backend
        if backend in ("transformers", "vllm"):
            if self.policy_model_path is None:
                raise ValueError(f"WEBENV_POLICY_BACKEND={backend} needs WEBENV_POLICY_MODEL_PATH")
            if not (self.policy_model_path / "config.json").is_file():
                raise ValueError(f"WEBENV_POLICY_MODEL_PATH={self.policy_model_path} has no config.json")
        if backend == "openai" and not self.policy_openai_url:
            raise ValueError("WEBENV_POLICY_BACKEND=openai needs WEBENV_POLICY_OPENAI_URL")
        if self.policy_default == "llm" and backend == "none":
            raise ValueError("WEBENV_POLICY_DEFAULT=llm needs an LLM backend (set WEBENV_POLICY_MODEL_PATH)")
        return self

    @property
    def resolved_backend(self) -> str:
        """The backend actually used once `auto` is resolved."""
        if self.policy_backend != "auto":
            return self.policy_backend
        if self.policy_openai_url:
            return "openai"
        if self.policy_model_path is not None:
            return "transformers"
        return "none"

    def backend_config(self, **override) -> BackendConfig:
        """The LLM backend these settings ask for (webenv.llm.make_backend builds it); `override` replaces fields."""
        fields = dict(
            backend=self.resolved_backend, model_path=self.policy_model_path or "", model_name=self.model_name,
            device=self.policy_device, threads=self.policy_torch_threads,
            max_model_len=self.policy_vllm_max_model_len,
            gpu_memory_utilization=self.policy_vllm_gpu_memory_utilization,
            max_num_seqs=self.policy_vllm_max_num_seqs, max_loras=self.policy_vllm_max_loras,
            max_lora_rank=self.policy_vllm_max_lora_rank, dtype=self.policy_vllm_dtype, base_url=self.policy_openai_url, api_key=self.policy_openai_api_key,
            timeout_seconds=self.policy_openai_timeout_seconds)
        if self.resolved_backend == "openai":
            fields["model_name"] = self.policy_openai_model or self.model_name
        return BackendConfig(**(fields | override))

    @property
    def model_name(self) -> str:
        if self.policy_model_name:
            return self.policy_model_name
        if self.resolved_backend == "openai":
            return self.policy_openai_model or "default"
        return self.policy_model_path.name if self.policy_model_path else ""

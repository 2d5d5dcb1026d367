"""Settings of the world-model service (WEBENV_* environment variables, validated at start)."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field, field_validator, model_validator
from webenv.runtime import ServiceSettings


class Settings(ServiceSettings):
    """The world model's settings; see services/worldmodel/README.md for the full table."""

    grpc_port: int = Field(50053, ge=0, le=65535, description="gRPC port; 0 picks a free port.")
    metrics_port: int = Field(9453, ge=0, le=65535, description="Prometheus /metrics port; 0 picks a free port.")
    worldmodel_model_path: str = Field("", description="Model directory written by `webenv worldmodel build` / `train`.")
    worldmodel_lm_path: str = Field("", description="A Hugging Face causal LM folder served in WebWorld's format instead of the model directory's tiny LM.")
    worldmodel_retrieval_context: bool = Field(True, description="With WEBENV_WORLDMODEL_LM_PATH: give retrieval's prediction to the model as a reference.")
    worldmodel_backend: Literal["transformers", "vllm"] = Field("transformers", description="transformers (CPU) or vllm (GPU).")
    worldmodel_device: str = Field("cpu", description="torch device for the transformers backend.")
    worldmodel_threads: int = Field(1, ge=0, description="torch threads (0 = torch's default; 1 is fastest for tiny models on shared CPUs).")
    worldmodel_max_state_chars: int = Field(200_000, gt=0, description="Largest state accepted, in characters.")
    worldmodel_max_new_tokens: int = Field(256, gt=0, le=32768, description="Default cap on generated tokens.")
    worldmodel_max_batch: int = Field(16, gt=0, description="Most predictions sent to the backend in one call.")
    worldmodel_start_states: str = Field("", description="Comma-separated start-state or transitions JSONL files, besides the model's own.")
    worldmodel_reasoning: Literal["auto", "on", "off"] = Field("auto", description="Reason before predicting (auto: when trained with reasoning examples).")
    worldmodel_horizon: int = Field(30, gt=0, description="Steps after which a simulated episode is truncated.")
    worldmodel_lease_seconds: float = Field(300.0, gt=0, description="Idle lease of a simulated session.")
    worldmodel_max_lease_seconds: float = Field(3600.0, gt=0, description="Longest lease a client may ask for.")
    worldmodel_max_wait_ms: int = Field(10000, ge=0, description="Cap on a WaitAction (as the farm's).")
    worldmodel_max_sessions: int = Field(1000, gt=0, description="Open simulated sessions at most (then RESOURCE_EXHAUSTED).")
    worldmodel_done_lease_seconds: float = Field(
        30.0, ge=0, description="A session whose episode ended (done or truncated) stays open this long after its last "
        "step (for its CloseSession and a retried last step), then is evicted as EXPIRED; 0: at the next sweep.")
    worldmodel_reaper_interval_seconds: float = Field(1.0, gt=0, description="How often idle and ended sessions are swept.")
    worldmodel_ended_sessions_kept: int = Field(
        2000, ge=1, description="Ended sessions remembered (their final state, for GetSession and the ended-session "
        "errors); older ones are forgotten (then NOT_FOUND), as the farm's.")
    worldmodel_request_ids_kept: int = Field(10_000, ge=1, description="OpenSession and ForkSession request ids kept "
                                             "for retries (each), the oldest forgotten first.")
    worldmodel_farm_addr: str = Field(
        "", description="Browser farm (EnvironmentService) address: a start page with no recorded state is opened "
        "there once and its first observation simulated on from; empty: such a start is FAILED_PRECONDITION.")
    worldmodel_sites_addr: str = Field(
        "", description="TaskService (sites) address: an OpenSession task given by id alone is resolved there; empty: "
        "such a task is INVALID_ARGUMENT (send the whole task).")
    worldmodel_farm_start_pages: int = Field(256, ge=1, description="First observations taken from the farm kept "
                                             "(per start), the oldest forgotten first.")
    worldmodel_values_kept: int = Field(
        512, ge=0, description="Values a simulated session keeps consistent (an item's price, a typed text: the first "
        "shown stays on later pages), the oldest dropped first; 0: no value memory (every page as predicted).")
    worldmodel_farm_timeout_seconds: float = Field(60.0, gt=0, description="Deadline of one OpenSession on the farm.")

    @field_validator("worldmodel_farm_addr", "worldmodel_sites_addr")
    @classmethod
    def _farm_addr(cls, v: str) -> str:
        v = v.strip()
        port = v.rpartition(":")[2]
        if v and (not port.isdigit() or not 0 < int(port) < 65536 or any(c.isspace() for c in v)):
            raise ValueError(f"expected host:port (e.g. localhost:50051), got {v!r}")
        return v

    @model_validator(mode="after")
    def _model_present(self) -> Settings:
        if not self.worldmodel_model_path:
            raise ValueError("WEBENV_WORLDMODEL_MODEL_PATH is required (a directory written by `webenv worldmodel build`)")
        if self.worldmodel_lm_path:
            if not (Path(self.worldmodel_lm_path) / "config.json").exists():
                raise ValueError(f"WEBENV_WORLDMODEL_LM_PATH={self.worldmodel_lm_path}: no config.json there")
            if not Path(self.worldmodel_model_path).is_dir():
                raise ValueError(f"WEBENV_WORLDMODEL_MODEL_PATH={self.worldmodel_model_path}: not a directory")
        elif self.worldmodel_backend == "transformers" and not (Path(self.worldmodel_model_path) / "config.json").exists():
            raise ValueError(f"WEBENV_WORLDMODEL_MODEL_PATH={self.worldmodel_model_path}: no config.json there")
        for p in filter(None, self.worldmodel_start_states.split(",")):
            if not Path(p).exists():
                raise ValueError(f"WEBENV_WORLDMODEL_START_STATES: {p} does not exist")
        return self

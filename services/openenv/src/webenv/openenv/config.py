"""OpenEnv server settings: every field is read from WEBENV_<FIELD> (e.g. WEBENV_HTTP_PORT, WEBENV_BROWSER_ADDR)."""

from __future__ import annotations

from pydantic import Field, model_validator
from webenv.client.stack import address
from webenv.runtime import ServiceSettings


class Settings(ServiceSettings):
    """The OpenEnv server's configuration; bad values stop it at start-up with the variable named."""

    grpc_port: int = Field(50059, ge=0, le=65535, description="gRPC port (grpc.health.v1 and reflection only).")
    metrics_port: int = Field(9459, ge=0, le=65535)
    http_port: int = Field(8000, ge=0, le=65535, description="OpenEnv HTTP and WebSocket (/ws); 0 picks a free port.")
    http_host: str = Field("0.0.0.0", description="Address the HTTP server binds to.")
    browser_addr: str = Field("", description="EnvironmentService: the browser farm (or the world model); empty: the "
                              "running `webenv up`'s (.webenv/stack.json), else localhost:50051.")
    sites_addr: str = Field("", description="TaskService: the task catalog; empty: as browser_addr (localhost:50055).")
    judge_addr: str = Field("", description="JudgeService: grades each episode at its end; empty: as browser_addr "
                            "(localhost:50054).")
    openenv_max_sessions: int = Field(64, ge=1, le=10_000, description="Concurrent WebSocket sessions (episodes) at most.")
    openenv_max_steps: int = Field(30, ge=1, le=1000, description="Steps of an episode at most; the last one is graded.")
    openenv_session_timeout_seconds: float = Field(600.0, gt=0, description="Idle WebSocket sessions are closed after this.")
    upstream_timeout_seconds: float = Field(120.0, gt=0, description="Deadline of each call to the farm, sites and judge.")

    @model_validator(mode="after")
    def _peers_of_the_running_stack(self) -> Settings:
        """An address not set (WEBENV_BROWSER_ADDR etc.) is the running `webenv up`'s, else the default port: the one
        rule every client finds the stack by (`webenv.client.stack.address`)."""
        for service in ("browser", "sites", "judge"):
            setattr(self, f"{service}_addr", address(service, getattr(self, f"{service}_addr")))
        return self

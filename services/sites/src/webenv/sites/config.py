"""Settings of the sites service, read from WEBENV_* variables (fails fast on bad values)."""

from __future__ import annotations

from pydantic import Field, field_validator
from webenv.runtime import ServiceSettings
from webenv.sites import builders


class Settings(ServiceSettings):
    """WEBENV_SITES_* options plus the runtime's common ones (ports, logging, TLS, auth)."""

    grpc_port: int = Field(50055, ge=0, le=65535, description="TaskService gRPC port; 0 picks a free port.")
    metrics_port: int = Field(9455, ge=0, le=65535, description="Prometheus /metrics port; 0 picks a free port.")
    http_port: int = Field(8800, ge=0, le=65535, description="Port of the websites (HTTP); 0 picks a free port.")
    http_host: str = Field("0.0.0.0", description="Address the websites' HTTP server binds to.")
    sites_count: int = Field(1000, ge=8, le=100_000, description="Number of synthetic sites (spread over 8 families).")
    sites_builders: list[str] = Field(default_factory=list, description=(
        'Site builders the sites are spread over, e.g. \'["platform"]\' (the single-platform web); empty = all.'))
    sites_seed: int = Field(0, ge=0, description="Seed of the generated web: same seed, same sites and tasks.")
    sites_yaml_dirs: list[str] = Field(default_factory=list, description="Extra folders of seed-format YAML tasks.")
    sites_rubric_dirs: list[str] = Field(default_factory=list, description="Extra folders of WebGym-style rubric JSON tasks.")
    sites_builtin_tasks: bool = Field(True, description="Load the YAML and rubric JSON examples shipped with the service.")
    sites_miniwob: bool = Field(True, description="Serve MiniWoB++ under miniwob.web.test and list its tasks.")
    sites_real_web: bool = Field(False, description="List the shipped real-web tasks (networks with internet access only).")
    sites_uvloop: bool = Field(True, description="Run the event loop on uvloop when installed (about 10x more pages/s here).")
    sites_max_sessions: int = Field(100_000, ge=1, description="Site sessions kept in memory (least recently used evicted).")

    @field_validator("sites_builders")
    @classmethod
    def _known_builders(cls, v: list[str]) -> list[str]:
        unknown = [x for x in v if x not in builders.REGISTRY]
        if unknown:
            raise ValueError(f"unknown builders {unknown[:5]}; builders: {', '.join(builders.REGISTRY)}")
        return v

"""Service configuration from ``WEBENV_*`` environment variables (and an optional ``.env`` file).

Every service subclasses :class:`ServiceSettings` and adds its own fields; a field ``farm_max_sessions`` is read
from ``WEBENV_FARM_MAX_SESSIONS``. Bad values fail at start-up with a message naming the variable (see
:func:`describe_validation_error`), never later in the middle of a run.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, SecretStr, ValidationError, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

ENV_PREFIX = "WEBENV_"


class ServiceSettings(BaseSettings):
    """Settings every service has: ports, limits, logging, TLS and auth."""

    model_config = SettingsConfigDict(
        env_prefix=ENV_PREFIX, env_file=".env", env_file_encoding="utf-8", extra="ignore", validate_default=True
    )

    host: str = Field("0.0.0.0", description="Address the gRPC and metrics servers bind to.")
    grpc_port: int = Field(50050, ge=0, le=65535, description="gRPC port; 0 picks a free port.")
    metrics_port: int = Field(9450, ge=0, le=65535, description="Prometheus /metrics port; 0 picks a free port.")
    metrics_enabled: bool = Field(True, description="Serve /metrics over HTTP.")
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = "INFO"
    log_json: bool = Field(True, description="One JSON object per log line (for log shippers).")
    grace_seconds: float = Field(10.0, ge=0, description="How long in-flight RPCs may finish after SIGTERM.")
    max_message_mb: int = Field(64, ge=1, le=2047, description="Largest gRPC message, both directions (MiB).")
    max_concurrent_rpcs: int = Field(0, ge=0, description="Cap on concurrent RPCs (0 = unlimited); excess gets RESOURCE_EXHAUSTED.")
    keepalive_seconds: float = Field(30.0, gt=0, description="HTTP/2 keepalive ping interval.")
    heap_trim_idle_seconds: float = Field(
        5.0, ge=0, description="Give freed heap back to the OS after this long without RPC activity (0 = never)."
    )
    malloc_arena_max: int = Field(2, ge=0, le=1024, description="glibc malloc arenas (0 = glibc's default of 8 per core).")
    tls_cert_file: str = Field("", description="PEM certificate; with tls_key_file turns TLS on.")
    tls_key_file: str = Field("", description="PEM private key.")
    auth_token: SecretStr = Field(SecretStr(""), description="When set, every RPC needs `authorization: Bearer <token>`.")

    @model_validator(mode="after")
    def _tls_pair(self) -> ServiceSettings:
        if bool(self.tls_cert_file) != bool(self.tls_key_file):
            raise ValueError("WEBENV_TLS_CERT_FILE and WEBENV_TLS_KEY_FILE must be set together")
        return self


def describe_validation_error(exc: ValidationError) -> str:
    """One line per bad variable, named as the operator sets it (``WEBENV_GRPC_PORT: ...``)."""
    lines = []
    for err in exc.errors():
        loc = err.get("loc") or ()
        name = f"{ENV_PREFIX}{str(loc[0]).upper()}" if loc else "configuration"
        value = err.get("input")
        shown = f" (got {value!r})" if loc and not isinstance(value, dict) else ""
        lines.append(f"{name}: {err.get('msg', 'invalid')}{shown}")
    return "\n".join(lines)

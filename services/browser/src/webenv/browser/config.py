"""Settings of the browser farm, read from WEBENV_* variables (see README for the full list)."""

from __future__ import annotations

from pydantic import Field, field_validator
from webenv.runtime import ServiceSettings


class Settings(ServiceSettings):
    """Farm options; every field is `WEBENV_<FIELD>` in the environment."""

    grpc_port: int = Field(50051, ge=0, le=65535)
    metrics_port: int = Field(9451, ge=0, le=65535)
    node_name: str = Field("", description="Name reported as Session.node; the host name when empty.")

    farm_chromium_path: str = Field("/usr/lib/chromium/chromium", description="Chromium executable.")
    farm_browsers: int = Field(1, ge=1, le=64, description="Chromium processes per node.")
    farm_max_sessions: int = Field(64, ge=1, description="Open sessions per node; more is RESOURCE_EXHAUSTED.")
    farm_warm_contexts: int = Field(4, ge=0, description="Pre-created contexts kept ready for OpenSession.")
    farm_primed_contexts: int = Field(
        2, ge=0, description="Contexts kept with their page loaded ahead at the start pages of MiniWoB tasks opened "
        "lately (an open of such a task then skips the page load); 0: none.")
    farm_contexts_per_browser: int = Field(200, ge=1, description="Contexts a browser serves before it is recycled.")
    farm_headless: bool = True
    farm_extra_args: str = Field("", description="Extra Chromium switches, space separated.")
    farm_viewport_width: int = Field(1280, ge=100, le=8192)
    farm_viewport_height: int = Field(720, ge=100, le=8192)

    farm_sites_http_addr: str = Field("127.0.0.1:8800", description="Where *.web.test hosts are mapped.")
    farm_allow_hosts: str = Field("*.web.test", description="Comma-separated host globs trusted by the URL guard.")
    farm_url_guard: bool = Field(True, description="Refuse local/private addresses and non-http schemes.")
    farm_egress_proxy: bool = Field(True, description="With the URL guard on: send every browser connection through "
                                    "the farm's egress proxy, which refuses non-public addresses (the network guard).")
    sites_addr: str = Field("localhost:50055", description="TaskService (sites) address, for synthetic tasks.")

    farm_lease_seconds: float = Field(300.0, gt=0, description="Default idle lease of a session.")
    farm_max_lease_seconds: float = Field(3600.0, gt=0)
    farm_reaper_interval_seconds: float = Field(1.0, gt=0)
    farm_step_timeout_seconds: float = Field(30.0, gt=0, description="Default per-step deadline.")
    farm_open_timeout_seconds: float = Field(30.0, gt=0)
    farm_settle_quiet_ms: int = Field(15, ge=0, description="DOM must be quiet this long after an action.")
    farm_settle_max_ms: int = Field(1000, ge=0, description="Cap on the DOM-quiet wait.")
    farm_network_idle_ms: int = Field(1000, ge=0, description="Cap on waiting for in-flight requests.")
    farm_nav_timeout_ms: int = Field(10000, ge=100, description="Cap on a navigation's load.")
    farm_max_wait_ms: int = Field(10000, ge=0, description="Cap on a WaitAction.")
    farm_max_text_chars: int = Field(200000, ge=1000, description="Default cap on each text format.")

    farm_queue_open: int = Field(8, ge=1, description="Concurrent opens/navigations.")
    farm_queue_act: int = Field(64, ge=1, description="Concurrent actions.")
    farm_queue_observe: int = Field(64, ge=1, description="Concurrent observations.")
    farm_capture_concurrency: int = Field(
        2, ge=0, description="Concurrent CaptureScreenshot previews per node (0 refuses them); more are refused, not queued.")

    @field_validator("farm_sites_http_addr")
    @classmethod
    def _host_port(cls, v: str) -> str:
        host, _, port = v.rpartition(":")
        if not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError(f"expected host:port (e.g. 127.0.0.1:8800), got {v!r}")
        return v

    def allow_host_list(self) -> list[str]:
        """The allowlist as a list of lower-case globs."""
        return [h.strip().lower() for h in self.farm_allow_hosts.split(",") if h.strip()]

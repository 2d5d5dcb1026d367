"""The shared service runtime: one ``Server``, one start-up/shutdown order (``serve``) and one ``run`` for every
webenv service."""

from webenv.runtime.config import ServiceSettings, describe_validation_error
from webenv.runtime.metrics import LATENCY_BUCKETS
from webenv.runtime.serve import serve, serving
from webenv.runtime.server import Server, load_settings, run

__all__ = ["LATENCY_BUCKETS", "Server", "ServiceSettings", "describe_validation_error", "load_settings", "run", "serve", "serving"]

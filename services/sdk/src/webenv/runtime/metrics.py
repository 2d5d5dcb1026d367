"""Prometheus metrics for every RPC, and the /metrics endpoint.

The names follow the go-grpc-prometheus convention so existing Grafana dashboards work:
``grpc_server_started_total``, ``grpc_server_handled_total{grpc_code}``, ``grpc_server_handling_seconds``,
``grpc_server_msg_received_total``, ``grpc_server_msg_sent_total``, labelled by ``grpc_service``,
``grpc_method`` and ``grpc_type``. Buckets are wide (1 ms to 2 min) because one histogram covers a 1 ms health
check and a 60 s page load alike.
"""

from __future__ import annotations

import threading
from wsgiref.simple_server import WSGIServer

from prometheus_client import Counter, Histogram, start_http_server

#: Latency buckets in seconds for anything from a cache hit to a slow page load or model call.
LATENCY_BUCKETS: tuple[float, ...] = (
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0,
)

_LABELS = ("grpc_service", "grpc_method", "grpc_type")

STARTED = Counter("grpc_server_started_total", "RPCs started on the server.", _LABELS)
HANDLED = Counter("grpc_server_handled_total", "RPCs completed on the server, by status code.", (*_LABELS, "grpc_code"))
HANDLING = Histogram(
    "grpc_server_handling_seconds", "Time from RPC start to completion.", _LABELS, buckets=LATENCY_BUCKETS
)
RECEIVED = Counter("grpc_server_msg_received_total", "Messages received from clients.", _LABELS)
SENT = Counter("grpc_server_msg_sent_total", "Messages sent to clients.", _LABELS)


class MetricsEndpoint:
    """The /metrics HTTP server (prometheus_client's, in a thread, so it answers even if the loop is busy)."""

    def __init__(self, host: str, port: int) -> None:
        self._httpd: WSGIServer
        self._thread: threading.Thread
        self._httpd, self._thread = start_http_server(port, addr=host)

    @property
    def port(self) -> int:
        return int(self._httpd.server_port)

    def close(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()

"""The gateway's own Prometheus metrics (the gRPC health port's come from the sdk runtime).

``route`` is the HTTP rule's template (``POST /v1/sessions/{session_id}:step``), never the concrete path, so
the label's values are bounded by the contract.
"""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram
from webenv.runtime import LATENCY_BUCKETS

HTTP_REQUESTS = Counter("webenv_gateway_http_requests_total", "API requests, by route, HTTP method and HTTP status.",
                        ("route", "method", "code"))
HTTP_SECONDS = Histogram("webenv_gateway_http_request_seconds", "API request latency (upstream call included), by route.",
                         ("route",), buckets=LATENCY_BUCKETS)
TRANSCODE_SECONDS = Histogram(
    "webenv_gateway_transcode_seconds", "Time a unary API request spends in the gateway itself (JSON <-> protobuf, "
    "routing), i.e. its latency minus the upstream call.", ("route",),
    buckets=(0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0))
VIEWERS = Gauge("webenv_gateway_viewers", "Live-stream viewers connected, by stream (run, session).", ("stream",))
WATCHES = Gauge("webenv_gateway_watches", "Upstream watches shared by the viewers of one run or session, by stream.",
                ("stream",))
FRAMES_SENT = Counter("webenv_gateway_frames_sent_total", "Live-stream frames sent to viewers, by stream.", ("stream",))
FRAMES_DROPPED = Counter("webenv_gateway_frames_dropped_total",
                         "Frames dropped from slow viewers' full queues (oldest first), by stream.", ("stream",))
BLOBS = Counter("webenv_gateway_blobs_total", "Blob (screenshot) requests, by result (ok, not_modified, missing).",
                ("result",))

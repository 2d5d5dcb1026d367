"""The farm's own Prometheus metrics (the generic gRPC ones come from the sdk runtime)."""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram
from webenv.runtime import LATENCY_BUCKETS

STEP_SECONDS = Histogram(
    "webenv_browser_step_seconds", "Time of one step phase, by operation (queue, action, settle, observe, total).",
    ("operation",), buckets=LATENCY_BUCKETS,
)
OBSERVE_SECONDS = Histogram(
    "webenv_browser_observe_seconds", "Time to produce an observation, by format ('text' = one JS pass for all text formats).",
    ("format",), buckets=LATENCY_BUCKETS,
)
OPEN_SECONDS = Histogram("webenv_browser_open_seconds", "OpenSession latency.", buckets=LATENCY_BUCKETS)
FORK_SECONDS = Histogram("webenv_browser_fork_seconds", "ForkSession latency (all copies).", buckets=LATENCY_BUCKETS)
QUEUE_WAIT_SECONDS = Histogram(
    "webenv_browser_queue_wait_seconds", "Time an operation waited for its queue.", ("queue",), buckets=LATENCY_BUCKETS,
)
SESSIONS_ACTIVE = Gauge("webenv_browser_sessions_active", "Open sessions.")
CONTEXTS_POOLED = Gauge("webenv_browser_contexts_pooled", "Pre-warmed contexts ready for OpenSession.")
CONTEXTS_PRIMED = Gauge("webenv_browser_contexts_primed",
                        "Contexts whose page is loaded ahead at a start page asked for lately (MiniWoB tasks).")
CONTEXTS_LIVE = Gauge(
    "webenv_browser_contexts_live",
    "Browser contexts alive in the farm's Chromium processes: sessions' plus warm and primed ones (more means leaked).")
OPEN_CONTEXTS = Counter("webenv_browser_open_contexts_total",
                        "Contexts given to new sessions, by where they came from (primed, warm, new).", ("source",))
BROWSERS = Gauge("webenv_browser_browsers", "Chromium processes running.")
BROWSER_RESTARTS = Counter("webenv_browser_browser_restarts_total", "Chromium processes replaced, by reason.", ("reason",))
ACTION_ERRORS = Counter("webenv_browser_action_errors_total", "Actions that failed on the page, by action kind.", ("kind",))
ACTIONS = Counter("webenv_browser_actions_total", "Actions executed, by kind.", ("kind",))
BLOCKED_REQUESTS = Counter("webenv_browser_blocked_requests_total", "Requests refused by the URL guard.")
EGRESS_CONNECTIONS = Counter(
    "webenv_browser_egress_connections_total",
    "Connections the browsers asked the egress proxy (network guard) for, by outcome (allowed, refused, failed).",
    ("outcome",),
)
SESSIONS_CLOSED = Counter("webenv_browser_sessions_closed_total", "Sessions ended, by final state.", ("state",))
STEP_TIMEOUTS = Counter("webenv_browser_step_timeouts_total", "Steps past their deadline (page reset).")
CAPTURES = Counter("webenv_browser_captures_total", "CaptureScreenshot previews, by result (ok, busy, failed).", ("result",))
OBSERVE_ELEMENTS = Counter("webenv_browser_observe_elements_total",
                           "Elements of incremental observation passes, by what the pass did with each: walked, or "
                           "reused with its subtree (the subtree's lines from the last pass).", ("how",))
OBSERVE_WHOLE_PASSES = Counter("webenv_browser_observe_whole_passes_total",
                               "Incremental observation passes that walked the whole page, by why (due, page).",
                               ("why",))

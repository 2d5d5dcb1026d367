"""The collector's own Prometheus metrics (the generic gRPC ones come from the sdk runtime)."""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

_LATENCY = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120)

EPISODES_STARTED = Counter("webenv_collector_episodes_started_total", "Episodes started (attempts included).")
EPISODES_FINISHED = Counter(
    "webenv_collector_episodes_finished_total", "Episodes finished, by outcome.", ["outcome"]
)  # outcome: passed | failed | errored | cancelled
EPISODE_RETRIES = Counter("webenv_collector_episode_retries_total", "Episodes retried after an environment failure.")
PEER_RETRIES = Counter("webenv_collector_peer_retries_total", "Policy and judge calls asked again while the peer was unavailable.",
                       ["peer"])
STEPS = Counter("webenv_collector_steps_total", "Steps taken (rate() gives steps/s).")
STEP_PHASE = Histogram(
    "webenv_collector_step_phase_seconds",
    "Per-step latency by phase: queue (waiting for a slot), environment, policy, judge, store.",
    ["phase"],
    buckets=_LATENCY,
)
EPISODE_SECONDS = Histogram("webenv_collector_episode_seconds", "Episode wall time.", buckets=_LATENCY)
STORE_BATCH_ROWS = Histogram(
    "webenv_collector_store_batch_rows", "Rows per store insert.", buckets=(1, 10, 50, 100, 500, 1000, 5000, 20000)
)
STORE_LAG = Histogram(
    "webenv_collector_store_lag_seconds", "Time from an episode's end to its rows being durable.", buckets=_LATENCY
)
SPOOL_ROWS = Gauge("webenv_collector_spool_rows", "Rows waiting in the disk spool for the store to return.")
QUEUE_DEPTH = Gauge("webenv_collector_queue_depth", "Episodes waiting in the Redis stream (not yet delivered).")
IN_FLIGHT = Gauge("webenv_collector_episodes_in_flight", "Episodes running now.")
RUNS_ACTIVE = Gauge("webenv_collector_runs_active", "Runs running now.")
EXPORT_SECONDS = Histogram("webenv_collector_export_seconds", "Export wall time.", buckets=_LATENCY)
EPISODES_READ = Counter("webenv_collector_episodes_read_total", "Stored episodes streamed by ReadEpisodes (training data).")
ROWS_REPLICATED = Counter(
    "webenv_collector_rows_replicated_total",
    "Rows of shared runs copied into this collector's store from other collectors (embedded stores, through Redis).",
    ["table"],
)
RUNS_ORPHANED = Counter(
    "webenv_collector_runs_orphaned_total",
    "Runs found pending or running with no live owner (their collector stopped) and failed, their stored episodes kept.",
)

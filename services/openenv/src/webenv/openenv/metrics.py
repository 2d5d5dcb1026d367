"""The OpenEnv server's own metrics (beside the runtime's gRPC and process metrics on WEBENV_METRICS_PORT)."""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

SESSIONS = Gauge("webenv_openenv_sessions", "Open OpenEnv sessions (WebSocket episodes).")
EPISODES = Counter("webenv_openenv_episodes_total", "Episodes started (resets).")
GRADED = Counter("webenv_openenv_graded_total", "Episodes graded by the judge, by verdict.", ["passed"])
INTERRUPTED = Counter("webenv_openenv_interrupted_total", "Episodes interrupted by an infrastructure failure (never "
                      "graded, never a reward), by the failure's status code.", ["code"])
STEPS = Counter("webenv_openenv_steps_total", "Steps, by outcome (ok, action_error, error).", ["outcome"])
STEP_SECONDS = Histogram("webenv_openenv_step_seconds", "Time of one step through the adapter (farm included).",
                         buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60))

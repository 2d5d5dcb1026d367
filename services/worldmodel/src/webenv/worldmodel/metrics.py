"""The world model's own Prometheus metrics (generic gRPC metrics come from the sdk runtime)."""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)

PREDICTIONS = Counter("webenv_worldmodel_predictions_total",
                      "Next-page predictions by where the page came from (rule, edit, recall, compose, sibling, prune, keep)", ["source"])
DECISIONS = Counter("webenv_worldmodel_decisions_total",
                    "Next-page predictions by who decided the action's effect (rule, analogy, lm)", ["decided_by"])
FALLBACKS = Counter("webenv_worldmodel_fallbacks_total",
                    "Predictions whose output was malformed, by reason (output: the page kept; url: a predicted URL "
                    "that is not a web URL, the clicked link's href loaded instead or the page kept)", ["reason"])
REPAIRED = Counter("webenv_worldmodel_repaired_edits_total", "Predicted edits applied leniently (did not apply as a whole)")
TOKENS = Counter("webenv_worldmodel_generated_tokens_total", "Tokens generated (rate = tokens/s)")
PREDICT_SECONDS = Histogram("webenv_worldmodel_predict_seconds", "Latency of one prediction", buckets=_BUCKETS)
GENERATE_SECONDS = Histogram("webenv_worldmodel_generate_seconds", "Latency of one backend generate call (a batch)",
                             buckets=_BUCKETS)
SIM_STEPS = Counter("webenv_worldmodel_simulated_steps_total", "Steps of simulated sessions")
SIM_SESSIONS_OPENED = Counter("webenv_worldmodel_simulated_sessions_total", "Simulated sessions opened")
SIM_SESSIONS_OPEN = Gauge("webenv_worldmodel_simulated_sessions_open", "Simulated sessions currently open")
SIM_SESSIONS_CLOSED = Counter("webenv_worldmodel_simulated_sessions_closed_total",
                              "Simulated sessions ended, by final state (closed, expired: idle past the lease, or "
                              "ended episodes past WEBENV_WORLDMODEL_DONE_LEASE_SECONDS)", ["state"])
FARM_STARTS = Counter("webenv_worldmodel_farm_starts_total",
                      "Start pages without a recorded state, by result (taken: opened on the browser farm, kept: "
                      "answered from those kept, failed: the farm refused or could not be reached)", ["result"])
SIM_STEP_SECONDS = Histogram("webenv_worldmodel_simulated_step_seconds", "Latency of one simulated step", buckets=_BUCKETS)


def observe_prediction(seconds: float, tokens: int, fallback: bool, source: str, decided_by: str,
                       fallback_reason: str = "") -> None:
    PREDICTIONS.labels(source=source).inc()
    DECISIONS.labels(decided_by=decided_by).inc()
    TOKENS.inc(tokens)
    PREDICT_SECONDS.observe(seconds)
    if fallback:
        FALLBACKS.labels(reason=fallback_reason or "output").inc()

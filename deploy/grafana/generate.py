"""Write the webenv Grafana dashboards (deploy/grafana/dashboards/*.json) from one readable description.

    python deploy/grafana/generate.py          # rewrite the JSON files
    python deploy/grafana/generate.py --check  # exit 1 if a JSON file differs from what this script writes

The JSON files are committed (Grafana's file provisioning reads them); edit this script, not the JSON, and run it.
tests/test_deploy.py checks that the committed files match and that every PromQL expression names only metrics the
services export. Metrics: the sdk's grpc_server_* (every service) and each service's webenv_<service>_* ones.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

DATASOURCE = {"type": "prometheus", "uid": "webenv-prometheus"}
OUT_DIR = Path(__file__).resolve().parent / "dashboards"

# Health checks and reflection are not application traffic.
APP_RPCS = 'app="webenv", job=~"$job", grpc_service!~"grpc[.].*"'
SERVER_ERRORS = "UNKNOWN|INTERNAL|UNAVAILABLE|DEADLINE_EXCEEDED|DATA_LOSS|UNIMPLEMENTED"
RATE = "$__rate_interval"


class Board:
    """Panels laid out left to right on a 24-column grid, rows stacked."""

    def __init__(self, uid: str, title: str, description: str, tags: list[str]) -> None:
        self.uid, self.title, self.description, self.tags = uid, title, description, tags
        self.panels: list[dict] = []
        self.variables: list[dict] = []
        self._x = 0
        self._y = 0
        self._row_h = 0

    def _place(self, w: int, h: int) -> dict:
        if self._x + w > 24:
            self._x, self._y = 0, self._y + self._row_h
            self._row_h = 0
        pos = {"h": h, "w": w, "x": self._x, "y": self._y}
        self._x += w
        self._row_h = max(self._row_h, h)
        return pos

    def row(self, title: str) -> None:
        if self._x:
            self._x, self._y, self._row_h = 0, self._y + self._row_h, 0
        self.panels.append({
            "id": len(self.panels) + 1, "type": "row", "title": title, "collapsed": False, "panels": [],
            "gridPos": {"h": 1, "w": 24, "x": 0, "y": self._y},
        })
        self._y += 1

    def _targets(self, queries: list[tuple[str, str]]) -> list[dict]:
        return [
            {"refId": chr(ord("A") + i), "datasource": DATASOURCE, "expr": expr, "legendFormat": legend, "range": True}
            for i, (expr, legend) in enumerate(queries)
        ]

    def graph(self, title: str, queries: list[tuple[str, str]], unit: str = "short", w: int = 12, h: int = 8,
              description: str = "", stack: bool = False, max_value: float | None = None) -> None:
        defaults: dict = {
            "unit": unit,
            "custom": {"drawStyle": "line", "lineWidth": 1, "fillOpacity": 15 if stack else 5, "showPoints": "never",
                       "stacking": {"mode": "normal" if stack else "none", "group": "A"}},
        }
        if max_value is not None:
            defaults["max"] = max_value
            defaults["min"] = 0
        self.panels.append({
            "id": len(self.panels) + 1, "type": "timeseries", "title": title, "description": description,
            "datasource": DATASOURCE, "gridPos": self._place(w, h), "targets": self._targets(queries),
            "fieldConfig": {"defaults": defaults, "overrides": []},
            "options": {"legend": {"displayMode": "table", "placement": "bottom", "calcs": ["mean", "max", "lastNotNull"]},
                        "tooltip": {"mode": "multi", "sort": "desc"}},
        })

    def stat(self, title: str, expr: str, unit: str = "short", w: int = 4, h: int = 4, description: str = "",
             legend: str = "", thresholds: list[tuple[float | None, str]] | None = None) -> None:
        steps = [{"color": color, "value": value} for value, color in (thresholds or [(None, "green")])]
        self.panels.append({
            "id": len(self.panels) + 1, "type": "stat", "title": title, "description": description,
            "datasource": DATASOURCE, "gridPos": self._place(w, h), "targets": self._targets([(expr, legend)]),
            "fieldConfig": {"defaults": {"unit": unit, "thresholds": {"mode": "absolute", "steps": steps}},
                            "overrides": []},
            "options": {"reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False},
                        "colorMode": "background", "graphMode": "area", "textMode": "auto", "justifyMode": "auto"},
        })

    def job_variable(self) -> None:
        self.variables.append({
            "name": "job", "label": "service", "type": "query", "datasource": DATASOURCE,
            "query": {"query": 'label_values(up{app="webenv"}, job)', "refId": "jobs"},
            "definition": 'label_values(up{app="webenv"}, job)',
            "multi": True, "includeAll": True, "allValue": ".*", "refresh": 2, "sort": 1,
            "current": {"selected": True, "text": ["All"], "value": ["$__all"]},
        })

    def to_json(self) -> dict:
        return {
            "uid": self.uid, "title": self.title, "description": self.description, "tags": ["webenv", *self.tags],
            "editable": False, "graphTooltip": 1, "schemaVersion": 39, "version": 1, "refresh": "30s",
            "time": {"from": "now-1h", "to": "now"}, "timezone": "utc", "timepicker": {},
            "templating": {"list": self.variables}, "annotations": {"list": []}, "links": [
                {"type": "dashboards", "tags": ["webenv"], "asDropdown": True, "title": "webenv dashboards"},
            ],
            "panels": self.panels,
        }


def quantiles(metric: str, selector: str, by: str, qs: tuple[float, ...] = (0.5, 0.95)) -> list[tuple[str, str]]:
    """histogram_quantile queries of ``metric`` (a histogram base name), one per quantile."""
    legend_by = " ".join("{{" + label.strip() + "}}" for label in by.split(",") if label.strip())
    matchers = f"{{{selector}}}" if selector else ""
    return [
        (f"histogram_quantile({q}, sum by ({by}, le) (rate({metric}_bucket{matchers}[{RATE}])))",
         f"p{round(q * 100)} {legend_by}".strip())
        for q in qs
    ]


def overview() -> Board:
    b = Board("webenv-overview", "webenv / Overview",
              "Every service's gRPC traffic from the sdk's interceptor metrics: rate, errors, latency.", ["grpc"])
    b.job_variable()
    b.row("Targets")
    b.stat("Targets up", 'sum(up{app="webenv", job=~"$job"})', w=4, description="Scraped /metrics endpoints answering.")
    b.stat("Targets down", 'count(up{app="webenv", job=~"$job"} == 0) or vector(0)', w=4,
           thresholds=[(None, "green"), (1, "red")])
    b.stat("RPCs/s", f"sum(rate(grpc_server_handled_total{{{APP_RPCS}}}[{RATE}]))", unit="reqps", w=4)
    b.stat("Server error ratio",
           f'(sum(rate(grpc_server_handled_total{{{APP_RPCS}, grpc_code=~"{SERVER_ERRORS}"}}[{RATE}])) or vector(0))'
           f" / sum(rate(grpc_server_handled_total{{{APP_RPCS}}}[{RATE}]))",
           unit="percentunit", w=4, thresholds=[(None, "green"), (0.01, "orange"), (0.05, "red")],
           description="Server-side failures (as in the WebenvHighErrorRatio alert) over all RPCs.")
    b.stat("RPCs in flight", f"sum(grpc_server_started_total{{{APP_RPCS}}}) - sum(grpc_server_handled_total{{{APP_RPCS}}})",
           w=4, description="Started minus completed, streams included.")
    b.stat("Slowest unary p95",
           f'max(histogram_quantile(0.95, sum by (job, grpc_method, le) (rate(grpc_server_handling_seconds_bucket{{{APP_RPCS}, grpc_type="unary"}}[{RATE}]))))',
           unit="s", w=4, thresholds=[(None, "green"), (1, "orange"), (15, "red")])

    b.row("Traffic")
    b.graph("RPC rate by service and method",
            [(f"sum by (job, grpc_method) (rate(grpc_server_handled_total{{{APP_RPCS}}}[{RATE}]))",
              "{{job}} {{grpc_method}}")], unit="reqps")
    b.graph("Non-OK status codes",
            [(f'sum by (job, grpc_method, grpc_code) (rate(grpc_server_handled_total{{{APP_RPCS}, grpc_code!="OK"}}[{RATE}]))',
              "{{job}} {{grpc_method}} {{grpc_code}}")], unit="reqps",
            description="Client errors (INVALID_ARGUMENT, NOT_FOUND...) included; the alert counts server errors only.")
    b.graph("Server error ratio by method",
            [(f'sum by (job, grpc_method) (rate(grpc_server_handled_total{{{APP_RPCS}, grpc_code=~"{SERVER_ERRORS}"}}[{RATE}]))'
              f" / sum by (job, grpc_method) (rate(grpc_server_handled_total{{{APP_RPCS}}}[{RATE}]))",
              "{{job}} {{grpc_method}}")], unit="percentunit", max_value=1)
    b.graph("RPCs in flight by method",
            [(f"sum by (job, grpc_method) (grpc_server_started_total{{{APP_RPCS}}})"
              f" - sum by (job, grpc_method) (grpc_server_handled_total{{{APP_RPCS}}})",
              "{{job}} {{grpc_method}}")],
            description="Open streams (StepStream, ActStream, WatchRun) count for their whole life.")

    b.row("Latency (unary RPCs)")
    unary = f'{APP_RPCS}, grpc_type="unary"'
    b.graph("p50 latency by service and method",
            quantiles("grpc_server_handling_seconds", unary, "job, grpc_method", (0.5,)), unit="s")
    b.graph("p95 latency by service and method",
            quantiles("grpc_server_handling_seconds", unary, "job, grpc_method", (0.95,)), unit="s")
    b.graph("p99 latency by service",
            quantiles("grpc_server_handling_seconds", unary, "job", (0.99,)), unit="s")
    b.graph("Mean latency by service and method",
            [(f"sum by (job, grpc_method) (rate(grpc_server_handling_seconds_sum{{{unary}}}[{RATE}]))"
              f" / sum by (job, grpc_method) (rate(grpc_server_handling_seconds_count{{{unary}}}[{RATE}]))",
              "{{job}} {{grpc_method}}")], unit="s")

    b.row("Streams")
    streams = f'{APP_RPCS}, grpc_type=~"bidi_stream|server_stream|client_stream"'
    b.graph("Stream messages received/s",
            [(f"sum by (job, grpc_method) (rate(grpc_server_msg_received_total{{{streams}}}[{RATE}]))",
              "{{job}} {{grpc_method}}")], unit="short")
    b.graph("Stream messages sent/s",
            [(f"sum by (job, grpc_method) (rate(grpc_server_msg_sent_total{{{streams}}}[{RATE}]))",
              "{{job}} {{grpc_method}}")], unit="short")
    return b


def rollouts() -> Board:
    b = Board("webenv-rollouts", "webenv / Rollouts",
              "Collector throughput and outcomes, per-step latency by phase, the store, and the browser farm.",
              ["collector", "browser"])
    b.row("Throughput")
    finished = "webenv_collector_episodes_finished_total"
    b.stat("Episodes/s", f"sum(rate({finished}[{RATE}]))", unit="short")
    b.stat("Steps/s", f"sum(rate(webenv_collector_steps_total[{RATE}]))", unit="short")
    b.stat("Pass rate (1h)",
           f'sum(increase({finished}{{outcome="passed"}}[1h])) / sum(increase({finished}{{outcome=~"passed|failed"}}[1h]))',
           unit="percentunit", description="Passed / (passed + failed); errored and cancelled episodes left out.")
    b.stat("Episodes in flight", "sum(webenv_collector_episodes_in_flight)")
    b.stat("Queue depth", "max(webenv_collector_queue_depth)", description="Episodes waiting in the Redis stream.")
    b.stat("Spooled rows", "sum(webenv_collector_spool_rows)",
           thresholds=[(None, "green"), (1, "orange"), (100000, "red")])
    b.graph("Episodes/s by outcome", [(f"sum by (outcome) (rate({finished}[{RATE}]))", "{{outcome}}")], stack=True)
    b.graph("Steps/s and episode starts/s",
            [(f"sum(rate(webenv_collector_steps_total[{RATE}]))", "steps/s"),
             (f"sum(rate(webenv_collector_episodes_started_total[{RATE}]))", "episodes started/s"),
             (f"sum(rate(webenv_collector_episode_retries_total[{RATE}]))", "retries/s")])
    b.graph("Pass rate",
            [(f'sum(rate({finished}{{outcome="passed"}}[15m])) / sum(rate({finished}{{outcome=~"passed|failed"}}[15m]))',
              "pass rate (15 min)"),
             (f'sum(rate({finished}{{outcome="errored"}}[15m])) / sum(rate({finished}[15m]))', "error rate (15 min)")],
            unit="percentunit", max_value=1)
    b.graph("Episode wall time", quantiles("webenv_collector_episode_seconds", "", "job", (0.5, 0.95)), unit="s")

    b.row("Per-step latency by phase")
    phase = "webenv_collector_step_phase_seconds"
    b.graph("Mean time per step by phase (stacked)",
            [(f"sum by (phase) (rate({phase}_sum[{RATE}])) / ignoring(phase) group_left sum(rate(webenv_collector_steps_total[{RATE}]))",
              "{{phase}}")], unit="s", stack=True,
            description="Seconds spent in each phase per step taken: queue, environment, policy, judge, store.")
    b.graph("p95 by phase", quantiles(phase, "", "phase", (0.95,)), unit="s")
    b.graph("p50 by phase", quantiles(phase, "", "phase", (0.5,)), unit="s")
    b.graph("Farm step phases (p95)", quantiles("webenv_browser_step_seconds", "", "operation", (0.95,)), unit="s",
            description="The farm's view of a step: queue, action, settle, observe, total.")

    b.row("Store")
    b.graph("Store lag (episode end to durable rows)",
            quantiles("webenv_collector_store_lag_seconds", "", "job", (0.5, 0.95)), unit="s")
    b.graph("Spooled rows by collector", [("sum by (instance) (webenv_collector_spool_rows)", "{{instance}}")],
            description="Rows waiting on disk while ClickHouse is unreachable; drains by itself.")
    b.graph("Rows per insert",
            [(f"sum(rate(webenv_collector_store_batch_rows_sum[{RATE}])) / sum(rate(webenv_collector_store_batch_rows_count[{RATE}]))",
              "mean rows/insert"),
             (f"sum(rate(webenv_collector_store_batch_rows_count[{RATE}]))", "inserts/s")])
    b.graph("Queue depth and work in flight",
            [("max(webenv_collector_queue_depth)", "queued episodes"),
             ("sum(webenv_collector_episodes_in_flight)", "episodes in flight"),
             ("sum(webenv_collector_runs_active)", "runs active")])

    b.row("Browser farm")
    b.graph("Sessions and pool", [
        ("sum by (instance) (webenv_browser_sessions_active)", "sessions {{instance}}"),
        ("sum by (instance) (webenv_browser_contexts_pooled)", "warm contexts {{instance}}"),
        ("sum by (instance) (webenv_browser_contexts_live)", "live contexts {{instance}} (leak: above sessions + warm + primed)"),
        ("sum by (instance) (webenv_browser_browsers)", "browsers {{instance}}"),
    ])
    b.graph("Queue waits p95 by queue", quantiles("webenv_browser_queue_wait_seconds", "", "queue", (0.95,)), unit="s")
    b.graph("OpenSession latency", quantiles("webenv_browser_open_seconds", "", "job", (0.5, 0.95)), unit="s")
    b.graph("Observation time p95 by format", quantiles("webenv_browser_observe_seconds", "", "format", (0.95,)), unit="s")
    b.graph("Actions/s and failures", [
        (f"sum by (kind) (rate(webenv_browser_actions_total[{RATE}]))", "{{kind}}"),
        (f"sum by (kind) (rate(webenv_browser_action_errors_total[{RATE}]))", "failed {{kind}}"),
    ])
    b.graph("Restarts, timeouts, blocked requests", [
        (f"sum by (reason) (increase(webenv_browser_browser_restarts_total[{RATE}]))", "browser restarts ({{reason}})"),
        (f"sum(increase(webenv_browser_step_timeouts_total[{RATE}]))", "step timeouts"),
        (f"sum(increase(webenv_browser_blocked_requests_total[{RATE}]))", "requests blocked by the URL guard"),
        (f"sum by (state) (increase(webenv_browser_sessions_closed_total[{RATE}]))", "sessions ended ({{state}})"),
    ])
    return b


def models() -> Board:
    b = Board("webenv-models", "webenv / Policy, world model, judge, sites",
              "Inside the model services (batching, tokens, fallbacks), the judge and the synthetic web.",
              ["policy", "worldmodel", "judge", "sites"])
    b.row("Policy")
    b.graph("Acts/s by policy", [(f"sum by (policy) (rate(webenv_policy_acts_total[{RATE}]))", "{{policy}}")])
    b.graph("Act latency by policy", quantiles("webenv_policy_act_seconds", "", "policy", (0.5, 0.95)), unit="s")
    b.graph("Batching", [
        (f"sum(rate(webenv_policy_batch_size_sum[{RATE}])) / sum(rate(webenv_policy_batch_size_count[{RATE}]))", "mean batch size"),
        (f"histogram_quantile(0.95, sum by (le) (rate(webenv_policy_queue_seconds_bucket[{RATE}])))", "p95 queue wait (s)"),
        (f"histogram_quantile(0.95, sum by (le) (rate(webenv_policy_inference_seconds_bucket[{RATE}])))", "p95 generate call (s)"),
    ])
    b.graph("Tokens/s and parse failures", [
        (f"sum(rate(webenv_policy_prompt_tokens_total[{RATE}]))", "prompt tokens/s"),
        (f"sum(rate(webenv_policy_completion_tokens_total[{RATE}]))", "completion tokens/s"),
        (f"sum(rate(webenv_policy_parse_failures_total[{RATE}]))", "parse failures/s"),
        (f"sum by (reason) (rate(webenv_policy_stream_errors_total[{RATE}]))", "stream errors/s {{reason}}"),
    ])

    b.row("World model")
    b.graph("Predictions/s by source (rule, edit, recall, compose, keep) and fallbacks", [
        (f"sum by (source) (rate(webenv_worldmodel_predictions_total[{RATE}]))", "{{source}}"),
        (f"sum(rate(webenv_worldmodel_fallbacks_total[{RATE}]))", "fallbacks"),
    ])
    b.graph("Prediction latency", [
        *quantiles("webenv_worldmodel_predict_seconds", "", "job", (0.5, 0.95)),
        *quantiles("webenv_worldmodel_generate_seconds", "", "job", (0.95,)),
    ], unit="s")
    b.graph("Generated tokens/s", [(f"sum(rate(webenv_worldmodel_generated_tokens_total[{RATE}]))", "tokens/s")])
    b.graph("Simulated environment", [
        ("sum(webenv_worldmodel_simulated_sessions_open)", "open sessions"),
        (f"sum(rate(webenv_worldmodel_simulated_steps_total[{RATE}]))", "steps/s"),
        (f"sum(rate(webenv_worldmodel_simulated_sessions_total[{RATE}]))", "sessions opened/s"),
        (f"histogram_quantile(0.95, sum by (le) (rate(webenv_worldmodel_simulated_step_seconds_bucket[{RATE}])))", "p95 step (s)"),
    ])

    b.row("Judge")
    b.graph("Evaluations/s by outcome",
            [(f"sum by (outcome) (rate(webenv_judge_evaluations_total[{RATE}]))", "{{outcome}}")], stack=True)
    b.graph("Evaluation latency", quantiles("webenv_judge_evaluation_seconds", "", "job", (0.5, 0.95)), unit="s")
    b.graph("Facts/s by kind and outcome",
            [(f"sum by (kind, outcome) (rate(webenv_judge_facts_total[{RATE}]))", "{{kind}} {{outcome}}")])
    b.graph("Criterion time p95 by kind", quantiles("webenv_judge_criterion_seconds", "", "kind", (0.95,)), unit="s")
    b.graph("LLM calls by result", [
        (f"sum by (backend, result) (rate(webenv_judge_llm_calls_total[{RATE}]))", "{{backend}} {{result}}"),
    ])
    b.graph("LLM call latency and cache hit ratio", [
        *quantiles("webenv_judge_llm_call_seconds", "", "backend", (0.95,)),
        (f'sum(rate(webenv_judge_cache_lookups_total{{result="hit"}}[{RATE}])) / sum(rate(webenv_judge_cache_lookups_total[{RATE}]))',
         "cache hit ratio"),
    ])

    b.row("Sites (synthetic web)")
    b.graph("HTTP requests/s by family and code",
            [(f"sum by (family, code) (rate(webenv_sites_http_requests_total[{RATE}]))", "{{family}} {{code}}")])
    b.graph("HTTP latency", quantiles("webenv_sites_http_request_seconds", "", "job", (0.5, 0.95)), unit="s")
    b.graph("Transactions and form errors/s", [
        (f"sum by (family) (rate(webenv_sites_transactions_total[{RATE}]))", "accepted {{family}}"),
        (f"sum by (family) (rate(webenv_sites_form_errors_total[{RATE}]))", "rejected {{family}}"),
    ])
    b.graph("Site-state operations/s", [(f"sum by (op) (rate(webenv_sites_state_ops_total[{RATE}]))", "{{op}}")])
    return b


def training() -> Board:
    b = Board("webenv-training", "webenv / Training",
              "The trainer's jobs, throughput and checkpoints; the data it reads and the policy loading the results.",
              ["trainer", "policy"])
    jobs = "webenv_trainer_jobs_total"
    b.row("Jobs")
    b.stat("Jobs running", "sum(webenv_trainer_jobs_running)", description="Jobs loading data or training now.")
    b.stat("Steps/s", f"sum(rate(webenv_trainer_steps_total[{RATE}]))", description="Optimiser steps per second.")
    b.stat("Examples/s", "sum(webenv_trainer_examples_per_second)",
           description="Set by the running job (the last job's value stays until the next one reports).")
    b.stat("Tokens/s", "sum(webenv_trainer_tokens_per_second)", description="Causal-LM jobs only.")
    b.stat("Checkpoints (24h)", "sum(increase(webenv_trainer_checkpoints_total[24h]))",
           description="Versions published to the checkpoint folder the policy service reads.")
    # Counts since the trainer started, not increase(): an outcome's series is born at 1 by its first job, and
    # increase() over a series' first sample is 0, so a lone failure would never show.
    b.stat("Failed jobs", f'sum({jobs}{{outcome="failed"}}) or vector(0)',
           thresholds=[(None, "green"), (1, "red")],
           description="Since the trainer started. See the WebenvTrainerJobsFailing alert.")
    b.graph("Jobs by outcome (since the trainer started)", [(f"sum by (outcome) ({jobs})", "{{outcome}}")],
            description="accepted when StartJob takes a job; succeeded, failed or stopped when it ends.")
    b.graph("Jobs running", [("sum by (instance) (webenv_trainer_jobs_running)", "{{instance}}")])

    b.row("Throughput")
    b.graph("Optimiser steps/s", [(f"sum by (instance) (rate(webenv_trainer_steps_total[{RATE}]))", "{{instance}}")])
    b.graph("Examples/s and tokens/s", [
        ("sum by (instance) (webenv_trainer_examples_per_second)", "examples/s {{instance}}"),
        ("sum by (instance) (webenv_trainer_tokens_per_second)", "tokens/s {{instance}}"),
    ], description="Gauges the running job sets as it trains.")
    b.graph("Episodes read/s", [(f"sum(rate(webenv_trainer_episodes_read_total[{RATE}]))", "episodes/s")],
            description="Stored episodes read from the collector (ReadEpisodes) when a job loads its data.")
    b.graph("ReadEpisodes duration (collector)",
            quantiles("grpc_server_handling_seconds",
                      'app="webenv", job="collector", grpc_method="ReadEpisodes"', "job", (0.5, 0.95)), unit="s",
            description="The whole stream: how long a job's data load takes on the collector's side.")

    b.row("Checkpoints")
    b.graph("Checkpoints published and loaded", [
        (f"sum(increase(webenv_trainer_checkpoints_total[{RATE}]))", "published (trainer)"),
        (f"sum(increase(webenv_policy_checkpoint_loads_total[{RATE}]))", "loaded (policy)"),
    ], description="A loop publishes a version per iteration and the policy service loads it (LoadCheckpoint).")
    b.graph("Trainer RPCs by method and code", [
        (f'sum by (grpc_method, grpc_code) (rate(grpc_server_handled_total{{app="webenv", job="trainer", '
         f'grpc_service!~"grpc[.].*"}}[{RATE}]))', "{{grpc_method}} {{grpc_code}}"),
    ], unit="reqps", description="StartJob, WatchJob (a stream per watcher), GetJob, ListJobs, checkpoints.")
    return b


BOARDS = {"overview.json": overview, "rollouts.json": rollouts, "models.json": models, "training.json": training}


def render() -> dict[str, str]:
    """File name -> JSON text, as committed."""
    return {name: json.dumps(make().to_json(), indent=2, ensure_ascii=False) + "\n" for name, make in BOARDS.items()}


def main(argv: list[str]) -> int:
    check = "--check" in argv
    stale = []
    for name, text in render().items():
        path = OUT_DIR / name
        if check:
            if not path.exists() or path.read_text() != text:
                stale.append(name)
        else:
            OUT_DIR.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
    if stale:
        print(f"stale dashboards (run python {Path(__file__).name}): {', '.join(stale)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

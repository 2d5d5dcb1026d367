"""The policy service's own Prometheus metrics (the generic gRPC ones come from the runtime)."""

from __future__ import annotations

from prometheus_client import Counter, Histogram
from webenv.runtime import LATENCY_BUCKETS

#: Per-act latency on the server, by policy (4 values: low cardinality).
ACT_SECONDS = Histogram("webenv_policy_act_seconds", "Time to choose one action, on the server.", ["policy"],
                        buckets=LATENCY_BUCKETS)
ACTS = Counter("webenv_policy_acts_total", "Actions chosen.", ["policy"])
QUEUE_SECONDS = Histogram("webenv_policy_queue_seconds", "Time an LLM request waited for a batch slot.",
                          buckets=LATENCY_BUCKETS)
INFERENCE_SECONDS = Histogram("webenv_policy_inference_seconds", "Time of one backend generate call.",
                              buckets=LATENCY_BUCKETS)
BATCH_SIZE = Histogram("webenv_policy_batch_size", "Requests per backend batch (in flight, for continuous backends).",
                       buckets=(1, 2, 4, 8, 16, 32, 64, 128, 256))
PROMPT_TOKENS = Counter("webenv_policy_prompt_tokens_total", "Prompt tokens processed (rate() = tokens in per second).")
COMPLETION_TOKENS = Counter("webenv_policy_completion_tokens_total",
                            "Tokens generated (rate() = tokens out per second).")
PARSE_FAILURES = Counter("webenv_policy_parse_failures_total", "Model outputs that did not parse into an action.")
STREAM_ERRORS = Counter("webenv_policy_stream_errors_total", "ActStream items answered with a StreamError.",
                        ["reason"])
CHECKPOINT_LOADS = Counter("webenv_policy_checkpoint_loads_total", "Trained checkpoints loaded (LoadCheckpoint).")


class BatchMetrics:
    """The LLM batcher's measurements as the histograms above (webenv.llm.BatchObserver)."""

    def batch(self, size: int, inference_seconds: float) -> None:
        BATCH_SIZE.observe(size)
        INFERENCE_SECONDS.observe(inference_seconds)

    def queued(self, seconds: float) -> None:
        QUEUE_SECONDS.observe(seconds)

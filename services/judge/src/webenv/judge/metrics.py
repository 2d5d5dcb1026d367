"""The judge's own Prometheus metrics (the generic gRPC ones come from the sdk runtime)."""

from __future__ import annotations

from prometheus_client import Counter, Histogram

_FAST_BUCKETS = (0.00001, 0.00003, 0.0001, 0.0003, 0.001, 0.003, 0.01, 0.03, 0.1, 0.3, 1.0, 3.0, 10.0, 30.0, 120.0)

EVALUATIONS = Counter(
    "webenv_judge_evaluations_total", "Evaluations by outcome (passed, failed, invalid, error).", ["outcome"]
)
EVALUATION_SECONDS = Histogram(
    "webenv_judge_evaluation_seconds", "Time to grade one trajectory.", buckets=_FAST_BUCKETS
)
FACTS = Counter(
    "webenv_judge_facts_total", "Fact results by criterion kind and outcome.", ["kind", "outcome"]
)
CRITERION_SECONDS = Histogram(
    "webenv_judge_criterion_seconds", "Time to judge one fact, by criterion kind.", ["kind"], buckets=_FAST_BUCKETS
)
LLM_CALLS = Counter(
    "webenv_judge_llm_calls_total", "LLM judge calls by backend and result (ok, timeout, unparsable, error).",
    ["backend", "result"],
)
LLM_SECONDS = Histogram(
    "webenv_judge_llm_call_seconds", "Latency of one LLM judge call.", ["backend"], buckets=_FAST_BUCKETS
)
CACHE_LOOKUPS = Counter(
    "webenv_judge_cache_lookups_total", "Verdict cache lookups for LLM-judged facts by result (hit, miss).",
    ["result"],
)

"""Prediction: request -> prompt -> backend completion -> next state, URL and reasoning.

Shared by the Predict RPC, the simulated environment and the evaluation, so all three measure the same
thing. A malformed completion (no URL line, an edit that does not apply) keeps the current state and URL
and sets `fallback`; the simulation goes on instead of failing.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from webenv.worldmodel import metrics
from webenv.worldmodel.backends import Backend
from webenv.worldmodel.dataset import build_prompt, parse_output
from webenv.worldmodel.formats import Format


@dataclass
class Query:
    """One prediction request in service-neutral form."""

    state: str
    url: str
    action_text: str
    format: Format = Format.AXTREE
    history: list[tuple[str, str]] = field(default_factory=list)
    instruction: str = ""
    as_edit: bool = True
    max_new_tokens: int = 0
    temperature: float = 0.0


@dataclass
class Prediction:
    """The predicted next state and how it was obtained."""

    next_state: str
    next_url: str
    edit: str
    reasoning: str
    prompt_tokens: int
    completion_tokens: int
    latency_seconds: float
    fallback: bool
    error: str = ""
    repaired: bool = False


class Predictor:
    """Builds prompts the way training did and parses completions."""

    def __init__(self, backend: Backend, default_max_new_tokens: int = 384, repair: bool = True) -> None:
        self.backend = backend
        self.repair = repair
        self.default_max_new_tokens = default_max_new_tokens

    def predict_many(self, queries: list[Query]) -> list[Prediction]:
        if not queries:
            return []
        window = self.backend.info.history_window
        prompts = [build_prompt(q.instruction, q.history[-window:] if window else [], q.url, q.state, q.action_text,
                                q.format, q.as_edit) for q in queries]
        max_new = max(q.max_new_tokens or self.default_max_new_tokens for q in queries)
        temperature = queries[0].temperature
        t0 = time.perf_counter()
        gens = self.backend.generate(prompts, max_new, temperature)
        total = time.perf_counter() - t0
        out = []
        for q, g in zip(queries, gens, strict=True):
            parsed = parse_output(g.text, q.url, q.state, repair=self.repair)
            out.append(Prediction(parsed.next_state, parsed.next_url, parsed.edit, parsed.reasoning, g.prompt_tokens,
                                  g.completion_tokens, g.seconds, parsed.fallback, parsed.error, parsed.repaired))
            if parsed.repaired:
                metrics.REPAIRED.inc()
            metrics.observe_prediction(g.seconds, g.completion_tokens, parsed.fallback, q.format.value)
        metrics.GENERATE_SECONDS.observe(total)
        return out

    def predict(self, query: Query) -> Prediction:
        return self.predict_many([query])[0]

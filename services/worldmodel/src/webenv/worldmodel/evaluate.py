"""`webenv-worldmodel evaluate`: next-state fidelity on held-out sites, against two baselines.

Single step, on the test split's transitions: exact match, line-level F1 of the a11y tree and URL accuracy
for the model, for "copy the current state" and for a lookup table of transitions seen in training
(falling back to copy on a miss). Multi-step coherence: each held-out recorded episode is replayed
open-loop — the model's own predictions are fed back, the recorded actions applied — and the simulated
state is compared with what the real browser produced, step by step. Latency: a simulated step
(prediction) versus the real browser step recorded by the collector (`<data>.stats.json`).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from webenv.worldmodel.backends import Backend, load_backend
from webenv.worldmodel.dataset import TransitionRecord, read_transitions
from webenv.worldmodel.formats import line_f1
from webenv.worldmodel.predict import Predictor, Query


@dataclass
class Scores:
    """Accumulated single-step scores of one system."""

    f1: list[float] = field(default_factory=list)
    exact: list[bool] = field(default_factory=list)
    url: list[bool] = field(default_factory=list)

    def add(self, state: str, url: str, r: TransitionRecord) -> None:
        self.f1.append(line_f1(state, r.next_state))
        self.exact.append(state == r.next_state)
        self.url.append(url == r.next_url)

    def summary(self) -> dict[str, float]:
        n = max(len(self.f1), 1)
        return {"line_f1": round(sum(self.f1) / n, 4), "exact_match": round(sum(self.exact) / n, 4),
                "url_accuracy": round(sum(self.url) / n, 4), "n": len(self.f1)}


def _episodes(records: list[TransitionRecord]) -> dict[str, list[TransitionRecord]]:
    eps: dict[str, list[TransitionRecord]] = defaultdict(list)
    for r in records:
        eps[r.episode_id].append(r)
    for v in eps.values():
        v.sort(key=lambda r: r.step_index)
    return dict(eps)


def _history(ep: list[TransitionRecord], i: int, window: int) -> list[tuple[str, str]]:
    return [(p.url, p.action_text) for p in ep[max(0, i - window):i]]


def evaluate(records: list[TransitionRecord], backend: Backend | None, limit: int = 300, rollout_episodes: int = 12,
             max_new_tokens: int = 384, rollout_records: list[TransitionRecord] | None = None) -> dict:
    """All scores as a JSON-able dict."""
    train = [r for r in records if r.split == "train"]
    test_eps = _episodes([r for r in records if r.split == "test"])
    table = {(r.url, r.state, r.action_text): (r.next_state, r.next_url) for r in train}
    test = [r for ep in test_eps.values() for r in ep]
    stride = max(1, len(test) // limit) if limit else 1
    sample = test[::stride][:limit] if limit else test
    copy, lookup, model = Scores(), Scores(), Scores()
    kinds: dict[str, dict[str, Scores]] = defaultdict(lambda: {"copy": Scores(), "model": Scores()})
    hits = fallbacks = repaired = 0
    latencies: list[float] = []
    tokens = 0
    predictor = Predictor(backend, max_new_tokens) if backend is not None else None
    window = backend.info.history_window if backend is not None else 3
    for r in sample:
        kind = "same_page" if r.next_url == r.url else "navigation"
        copy.add(r.state, r.url, r)
        kinds[kind]["copy"].add(r.state, r.url, r)
        hit = table.get((r.url, r.state, r.action_text))
        hits += hit is not None
        lookup.add(*(hit or (r.state, r.url)), r)
        if predictor is not None:
            ep = test_eps[r.episode_id]
            p = predictor.predict(Query(r.state, r.url, r.action_text, history=_history(ep, ep.index(r), window),
                                        instruction=r.instruction, as_edit=backend.info.as_edit))
            model.add(p.next_state, p.next_url, r)
            kinds[kind]["model"].add(p.next_state, p.next_url, r)
            fallbacks += p.fallback
            repaired += p.repaired
            latencies.append(p.latency_seconds)
            tokens += p.completion_tokens
    result: dict = {
        "test_transitions": len(test), "evaluated": len(sample), "test_sites": len({r.site for r in test}),
        "train_transitions": len(train),
        "single_step": {"copy_state": copy.summary(), "lookup_table": {**lookup.summary(), "hit_rate": round(hits / max(len(sample), 1), 4)}},
        "by_kind": {k: {s: v.summary() for s, v in d.items() if v.f1} for k, d in kinds.items()},
    }
    if predictor is not None:
        result["single_step"]["model"] = {**model.summary(), "fallback_rate": round(fallbacks / max(len(sample), 1), 4),
                                       "repaired_rate": round(repaired / max(len(sample), 1), 4)}
        result["latency"] = {"predict_p50_s": round(statistics.median(latencies), 4),
                             "predict_mean_s": round(statistics.fmean(latencies), 4),
                             "tokens_per_s": round(tokens / max(sum(latencies), 1e-9), 1)}
        ro_eps = _episodes([r for r in rollout_records if r.split == "test"]) if rollout_records else test_eps
        result["rollout"] = rollout(ro_eps, predictor, rollout_episodes, window, backend.info.as_edit)
    return result


def rollout(test_eps: dict[str, list[TransitionRecord]], predictor: Predictor, episodes: int, window: int,
            as_edit: bool) -> dict:
    """Open-loop replay of recorded episodes: mean line F1 / URL accuracy per step, model vs copy-initial-state."""
    per_step_model: dict[int, list[float]] = defaultdict(list)
    per_step_copy: dict[int, list[float]] = defaultdict(list)
    per_step_url: dict[int, list[bool]] = defaultdict(list)
    t0 = time.perf_counter()
    steps = 0
    for ep in list(test_eps.values())[:episodes]:
        state, url = ep[0].state, ep[0].url
        hist: list[tuple[str, str]] = []
        for i, r in enumerate(ep):
            p = predictor.predict(Query(state, url, r.action_text, history=hist[-window:], instruction=r.instruction,
                                        as_edit=as_edit))
            hist.append((url, r.action_text))
            state, url = p.next_state, p.next_url
            per_step_model[i].append(line_f1(state, r.next_state))
            per_step_copy[i].append(line_f1(ep[0].state, r.next_state))
            per_step_url[i].append(url == r.next_url)
            steps += 1
    return {
        "episodes": min(episodes, len(test_eps)), "steps": steps, "seconds": round(time.perf_counter() - t0, 2),
        "per_step": [{"step": i, "model_line_f1": round(statistics.fmean(per_step_model[i]), 4),
                      "copy_initial_line_f1": round(statistics.fmean(per_step_copy[i]), 4),
                      "model_url_accuracy": round(statistics.fmean(per_step_url[i]), 4)} for i in sorted(per_step_model)],
    }


def to_markdown(res: dict, browser_step_p50: float | None) -> str:
    """A short report of the scores."""
    lines = [f"Held-out: {res['evaluated']} of {res['test_transitions']} transitions on {res['test_sites']} unseen sites; "
             f"{res['train_transitions']} training transitions.", "",
             "| system | line F1 | exact match | URL accuracy |", "| --- | --- | --- | --- |"]
    for name, s in res["single_step"].items():
        lines.append(f"| {name} | {s['line_f1']:.3f} | {s['exact_match']:.3f} | {s['url_accuracy']:.3f} |")
    lines += ["", "| kind | copy F1 | model F1 | n |", "| --- | --- | --- | --- |"]
    for kind, d in res["by_kind"].items():
        if "model" in d:
            lines.append(f"| {kind} | {d['copy']['line_f1']:.3f} | {d['model']['line_f1']:.3f} | {d['copy']['n']} |")
    if "latency" in res:
        lat = res["latency"]
        lines += ["", f"Simulated step (prediction) p50 {lat['predict_p50_s'] * 1000:.0f} ms, mean {lat['predict_mean_s'] * 1000:.0f} ms, "
                  f"{lat['tokens_per_s']:.0f} tokens/s" + (f"; real browser step p50 {browser_step_p50 * 1000:.0f} ms." if browser_step_p50 else ".")]
        ro = res["rollout"]
        lines += ["", f"Open-loop rollouts ({ro['episodes']} recorded episodes):", "",
                  "| step | model F1 | copy-initial F1 | model URL acc |", "| --- | --- | --- | --- |"]
        lines += [f"| {p['step']} | {p['model_line_f1']:.3f} | {p['copy_initial_line_f1']:.3f} | {p['model_url_accuracy']:.3f} |"
                  for p in ro["per_step"]]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="webenv-worldmodel evaluate", description=__doc__.split("\n")[0])
    p.add_argument("--data", nargs="+", required=True, help="transitions JSONL (train and test splits)")
    p.add_argument("--model", default="", help="model directory (empty: baselines only)")
    p.add_argument("--backend", default="transformers", choices=["transformers", "vllm"])
    p.add_argument("--limit", type=int, default=300, help="held-out transitions evaluated (evenly spaced)")
    p.add_argument("--rollout-episodes", type=int, default=12)
    p.add_argument("--rollouts", nargs="*", default=[], help="transitions with long recorded episodes for the rollouts")
    p.add_argument("--out", type=Path, default=None, help="write JSON here (and a .md next to it)")
    p.add_argument("--threads", type=int, default=1, help="torch threads (1 is fastest for tiny models on shared CPUs)")
    a = p.parse_args(argv)
    records = read_transitions(a.data)
    backend = load_backend(a.backend, a.model, threads=a.threads) if a.model else None
    res = evaluate(records, backend, a.limit, a.rollout_episodes,
                   rollout_records=read_transitions(a.rollouts) if a.rollouts else None)
    stats = Path(a.data[0]).with_suffix(".stats.json")
    browser_p50 = json.loads(stats.read_text())["step_seconds_p50"] if stats.exists() else None
    res["browser_step_p50_s"] = browser_p50
    md = to_markdown(res, browser_p50)
    if a.out:
        a.out.parent.mkdir(parents=True, exist_ok=True)
        a.out.write_text(json.dumps(res, indent=2))
        a.out.with_suffix(".md").write_text(md)
    print(md)

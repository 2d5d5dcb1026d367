"""`webenv-worldmodel evaluate`: fidelity on held-out websites only, against copy-state and lookup baselines.

Only transitions of the test split (websites the task catalog holds out, never seen in training, never used as
exemplars) are scored. Each episode is replayed with what a simulated session would know at that step: the
pages its own history loaded (the recorded ones here, teacher-forced), nothing of other episodes.

* **single step**: exact match, line F1 of the a11y tree and URL accuracy, overall and per action kind, for
  - copy-state: the page does not change;
  - lookup: the page cache by URL — a link's href (or navigate's URL, or the back history) looked up among the
    pages this episode has loaded; else copy. The strongest model-free rule with the same knowledge;
  - the world model (with reasoning on and off when the model was trained with reasoning examples);
* **rollouts**: recorded 30-step episodes replayed open loop — the model's own predictions fed back, the
  recorded actions applied — scored per horizon against keep-the-start-state and open-loop lookup;
* **latency** of a prediction (a simulated Step over gRPC is timed by bench.py).
"""

from __future__ import annotations

import statistics
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from webenv.worldmodel.compose import PageMemory, PageView, navigation_target, refresh_chrome
from webenv.worldmodel.dataset import HISTORY, NO_CHANGE, TransitionRecord, episodes
from webenv.worldmodel.formats import line_f1
from webenv.worldmodel.page import action_kind
from webenv.worldmodel.predict import Prediction, Predictor, Query, advance, history_target


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


def _query(r: TransitionRecord, page: PageView, history: list[tuple[str, str]], memory: PageMemory) -> Query:
    return Query(page, r.action_text, history=history, instruction=r.instruction, memory=memory)


def lookup(q: Query) -> PageView:
    """The page-cache baseline: where the action says it goes (link href, navigate URL, history), recalled from
    the pages this episode loaded; anything else keeps the page."""
    kind = action_kind(q.action_text)
    if kind in NO_CHANGE:
        return q.page
    if kind in ("go_back", "go_forward") and q.memory is not None:
        restored = q.memory.back_page() if kind == "go_back" else q.memory.forward_page()
        if restored is not None:
            return restored
    if kind in HISTORY:
        url = history_target(q) if kind != "navigate" else q.action_text[q.action_text.find('"') + 1: q.action_text.rfind('"')]
    else:
        url = navigation_target(q.page, q.action_text) if kind == "click" else ""
    if not url or url == q.page.url:
        return q.page
    seen = q.memory.recall(url) if q.memory is not None else None
    return refresh_chrome(PageView(url, seen.state, seen.links), q.page) if seen is not None else PageView(url, q.page.state, q.page.links)


def _teacher_advance(memory: PageMemory, r: TransitionRecord) -> None:
    """Move an episode's memory as the recorded step did."""
    kind = action_kind(r.action_text)
    if kind == "go_back" and r.next_url != r.url:
        memory.go_back()
    elif kind == "go_forward" and r.next_url != r.url:
        memory.go_forward()
    elif r.next_url != r.url:
        memory.navigated(r.next_page)
    else:
        memory.changed(r.next_page)


def variants(predictor: Predictor, compare_lm: bool) -> dict[str, Predictor]:
    """The systems to score: the served world model, and with `compare_lm` its language model alone (reasoning
    off, and on when it was trained with reasoning examples) — WebWorld's design, measured on the same steps."""
    import copy

    out = {"model": predictor}
    if compare_lm and predictor.llm is not None:
        for reason in (False, True) if predictor.info.reasoning else (False,):
            v = copy.copy(predictor)
            v.mode, v.reason = "lm", reason
            out[f"lm_only{'_reasoning' if reason else ''}"] = v
    return out


async def single_step(test_eps: dict[str, list[TransitionRecord]], models: dict[str, Predictor], limit: int = 0,
                lm_limit: int = 0) -> dict:
    """Scores per system; language-model-only variants (slow on CPU) on the first `lm_limit` transitions."""
    systems = ["copy_state", "lookup", *models]
    total = {s: Scores() for s in systems}
    by_kind: dict[str, dict[str, Scores]] = defaultdict(lambda: {s: Scores() for s in systems})
    by_source: dict[str, Scores] = defaultdict(Scores)
    by_decider: dict[str, Scores] = defaultdict(Scores)
    lm_scores = {s: Scores() for s in systems}  # every system on the language-model variants' steps
    changes: dict[str, list[bool]] = defaultdict(list)
    latencies: list[float] = []
    fallbacks = repaired = 0
    count = 0
    for ep in test_eps.values():
        memory = PageMemory()
        memory.navigated(ep[0].page)
        for i, r in enumerate(ep):
            if limit and count >= limit:
                break
            count += 1
            kind = action_kind(r.action_text)
            history = [(p.url, p.action_text) for p in ep[max(0, i - 3):i]]
            q = _query(r, r.page, history, memory)
            changes[kind].append(r.next_state != r.state)
            looked = lookup(q)
            for name, (state, url) in (("copy_state", (r.state, r.url)), ("lookup", (looked.state, looked.url))):
                total[name].add(state, url, r)
                by_kind[kind][name].add(state, url, r)
            with_lm = not lm_limit or count <= lm_limit
            for name, predictor in models.items():
                if name != "model" and not with_lm:
                    continue
                p = await predictor.predict(_query(r, r.page, history, memory))
                total[name].add(p.next_state, p.next_url, r)
                by_kind[kind][name].add(p.next_state, p.next_url, r)
                if name == "model":
                    by_source[p.source].add(p.next_state, p.next_url, r)
                    by_decider[p.decided_by].add(p.next_state, p.next_url, r)
                    fallbacks += p.fallback
                    repaired += p.repaired
                    if p.source != "rule":
                        latencies.append(p.latency_seconds)
                if with_lm and len(models) > 1:
                    lm_scores[name].add(p.next_state, p.next_url, r)
            if with_lm and len(models) > 1:
                lm_scores["copy_state"].add(r.state, r.url, r)
                lm_scores["lookup"].add(looked.state, looked.url, r)
            _teacher_advance(memory, r)
    out: dict = {
        "transitions": count,
        "overall": {s: v.summary() for s, v in total.items()},
        "by_kind": {k: {"changes": round(statistics.fmean(changes[k]), 4), **{s: v.summary() for s, v in d.items()}}
                    for k, d in sorted(by_kind.items(), key=lambda kv: -len(kv[1]["copy_state"].f1))},
    }
    if len(models) > 1:
        out["language_model_comparison"] = {k: v.summary() for k, v in lm_scores.items() if v.f1}
    if models:
        out["by_source"] = {k: v.summary() for k, v in sorted(by_source.items())}
        out["by_decider"] = {k: v.summary() for k, v in sorted(by_decider.items())}
        out["fallback_rate"] = round(fallbacks / max(count, 1), 4)
        out["repaired_rate"] = round(repaired / max(count, 1), 4)
        if latencies:
            out["latency"] = {"predict_p50_s": round(statistics.median(latencies), 4),
                              "predict_mean_s": round(statistics.fmean(latencies), 4)}
    return out


async def rollouts(test_eps: dict[str, list[TransitionRecord]], predictor: Predictor, steps: int = 30,
             episodes_max: int = 32) -> dict:
    """Open-loop replay of held-out episodes of at least `steps` steps: F1 per horizon, model vs baselines."""
    eps = [ep for ep in test_eps.values() if len(ep) >= steps][:episodes_max]
    per: dict[str, dict[int, list[float]]] = {k: defaultdict(list) for k in ("model", "keep_start", "lookup")}
    url_ok: dict[int, list[bool]] = defaultdict(list)
    t0 = time.perf_counter()
    for ep in eps:
        start = ep[0].page
        runs = {"model": (start, PageMemory(), []), "lookup": (start, PageMemory(), [])}
        for _, mem, _ in runs.values():
            mem.navigated(start)
        for i, r in enumerate(ep[:steps]):
            for name in ("model", "lookup"):
                page, mem, hist = runs[name]
                q = _query(r, page, hist[-3:], mem)
                if name == "model":
                    pred = await predictor.predict(q)
                else:
                    nxt = lookup(q)
                    pred = Prediction(nxt, "lookup", navigated=nxt.url != page.url or action_kind(r.action_text) in HISTORY)
                advance(mem, q, pred)
                hist.append((page.url, r.action_text))
                runs[name] = (pred.page, mem, hist)
                per[name][i].append(line_f1(pred.next_state, r.next_state))
                if name == "model":
                    url_ok[i].append(pred.next_url == r.next_url)
            per["keep_start"][i].append(line_f1(start.state, r.next_state))
    horizons = sorted(per["model"])
    return {
        "episodes": len(eps), "steps": steps, "seconds": round(time.perf_counter() - t0, 1),
        "per_step": [{"step": h + 1, **{f"{k}_line_f1": round(statistics.fmean(per[k][h]), 4) for k in per},
                      "model_url_accuracy": round(statistics.fmean(url_ok[h]), 4)} for h in horizons],
        "mean": {f"{k}_line_f1": round(statistics.fmean(x for h in horizons for x in per[k][h]), 4) for k in per} if horizons else {},
    }


async def evaluate(records: list[TransitionRecord], predictor: Predictor | None, limit: int = 0, rollout_episodes: int = 32,
             rollout_steps: int = 30, compare_lm: bool = False, lm_limit: int = 300) -> dict:
    """All scores as a JSON-able dict."""
    test_eps = episodes(r for r in records if r.split == "test")
    train = [r for r in records if r.split == "train"]
    models = variants(predictor, compare_lm) if predictor is not None else {}
    res: dict = {
        "test_sites": len({r.site for ep in test_eps.values() for r in ep}), "train_sites": len({r.site for r in train}),
        "train_transitions": len(train), "test_transitions": sum(len(ep) for ep in test_eps.values()),
        "single_step": await single_step(test_eps, models, limit, lm_limit),
    }
    if predictor is not None:
        res["rollout"] = await rollouts(test_eps, predictor, rollout_steps, rollout_episodes)
        res["mode"] = predictor.mode
        res["reasoning"] = predictor.reason
    return res


def to_markdown(res: dict) -> str:
    """The tables of an evaluation."""
    ss = res["single_step"]
    lines = [f"Held-out websites only: {ss['transitions']} transitions of {res['test_sites']} websites never seen in "
             f"training ({res['train_transitions']} training transitions on {res['train_sites']} websites).", "",
             "| system | line F1 | exact match | URL accuracy |", "| --- | --- | --- | --- |"]
    for name, s in ss["overall"].items():
        lines.append(f"| {name} | {s['line_f1']:.3f} | {s['exact_match']:.3f} | {s['url_accuracy']:.3f} |")
    systems = list(ss["overall"])
    lines += ["", "By action kind (line F1 / exact match; `changes` = share of steps whose page changed):", "",
              "| kind | n | changes | " + " | ".join(systems) + " |", "| --- | --- | --- | " + " | ".join("---" for _ in systems) + " |"]
    for kind, d in ss["by_kind"].items():
        cells = [f"{d[s]['line_f1']:.3f} / {d[s]['exact_match']:.3f}" for s in systems]
        lines.append(f"| {kind} | {d['copy_state']['n']} | {d['changes']:.2f} | " + " | ".join(cells) + " |")
    if "by_source" in ss:
        lines += ["", "Model steps by where the next page came from:", "", "| source | n | line F1 | exact match | URL accuracy |",
                  "| --- | --- | --- | --- | --- |"]
        for src, s in ss["by_source"].items():
            lines.append(f"| {src} | {s['n']} | {s['line_f1']:.3f} | {s['exact_match']:.3f} | {s['url_accuracy']:.3f} |")
        lines += ["", "Model steps by who decided the action's effect:", "", "| decided by | n | line F1 | exact match | URL accuracy |",
                  "| --- | --- | --- | --- | --- |"]
        for src, s in ss["by_decider"].items():
            lines.append(f"| {src} | {s['n']} | {s['line_f1']:.3f} | {s['exact_match']:.3f} | {s['url_accuracy']:.3f} |")
        lines += ["", f"Language-model fallbacks (malformed output, page kept): {ss['fallback_rate']:.1%}; edits repaired: "
                      f"{ss['repaired_rate']:.1%}."]
        if "latency" in ss:
            lat = ss["latency"]
            lines.append(f"Prediction latency (steps that are not rules): p50 {lat['predict_p50_s'] * 1000:.1f} ms, mean "
                         f"{lat['predict_mean_s'] * 1000:.1f} ms.")
    if "language_model_comparison" in ss:
        cmp_ = ss["language_model_comparison"]
        n = next(iter(cmp_.values()))["n"]
        lines += ["", f"The language model alone (WebWorld's design: it decides every page action), with reasoning injection "
                      f"off/on, on the first {n} of these transitions:", "",
                  "| system | line F1 | exact match | URL accuracy |", "| --- | --- | --- | --- |"]
        for name, s in cmp_.items():
            lines.append(f"| {name} | {s['line_f1']:.3f} | {s['exact_match']:.3f} | {s['url_accuracy']:.3f} |")
    if "rollout" in res:
        ro = res["rollout"]
        lines += ["", f"Open-loop rollouts: {ro['episodes']} held-out episodes of {ro['steps']} steps, the model's own "
                      "predictions fed back (mean line F1 per horizon):", "",
                  "| horizon | model | keep start state | lookup (open loop) | model URL accuracy |", "| --- | --- | --- | --- | --- |"]
        for p in ro["per_step"]:
            lines.append(f"| {p['step']} | {p['model_line_f1']:.3f} | {p['keep_start_line_f1']:.3f} | {p['lookup_line_f1']:.3f} | "
                         f"{p['model_url_accuracy']:.3f} |")
        if ro["mean"]:
            m = ro["mean"]
            lines.append(f"| mean | {m['model_line_f1']:.3f} | {m['keep_start_line_f1']:.3f} | {m['lookup_line_f1']:.3f} | |")
    return "\n".join(lines) + "\n"


def plot_rollouts(res: dict, path: Path) -> None:
    """Line F1 by horizon: the model against keeping the start state (and open-loop lookup), as a PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ro = res["rollout"]
    steps = [p["step"] for p in ro["per_step"]]
    fig, ax = plt.subplots(figsize=(7, 4))
    for key, label in (("model_line_f1", "world model"), ("lookup_line_f1", "lookup (page cache by URL)"),
                       ("keep_start_line_f1", "keep the start state")):
        ax.plot(steps, [p[key] for p in ro["per_step"]], marker="o", markersize=3, label=label)
    ax.set_xlabel("horizon (steps, open loop)")
    ax.set_ylabel("line F1 vs the real browser")
    ax.set_ylim(0, 1)
    ax.set_title(f"{ro['episodes']} held-out episodes on websites never seen in training")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


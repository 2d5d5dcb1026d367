"""`webenv-worldmodel evaluate`: fidelity on held-out websites only, against model-free and ablated baselines.

Only transitions of the test split (websites the task catalog holds out, never seen in training, never used as
exemplars) are scored. Each episode is replayed with what a simulated session would know at that step: the
pages its own history loaded (the recorded ones here, teacher-forced), nothing of other episodes.

The held-out websites come from the same families as the training ones, so that score is in-distribution.
`--hold-out-family F` measures the other case: the family's websites (both splits) are scored and none of them is
indexed (page actions, exemplars, rebuilt in memory from the other families' training websites); the served
language model saw every family, so it is left out there (mode `analogy`).

* **single step**, overall and per action kind, for
  - copy-state: the page does not change;
  - lookup: the page cache by URL — a link's href (or navigate's URL, or the back history) looked up among the
    pages this episode has loaded; else copy. The strongest model-free rule with the same knowledge;
  - rules alone (mode `rules`: page actions keep the page, new documents only recalled);
  - retrieval alone (mode `analogy`: rules, analogy and composition, no language model);
  - the world model (with reasoning on and off when the model was trained with reasoning examples).
  Scores: exact match, URL accuracy, line F1 of the whole a11y tree, and **diff F1** — F1 of the predicted change
  (lines added and removed relative to the current page) against the real one, so the unchanged banner, sidebar
  and footer that whole-page F1 credits count for nothing; `diff_f1_changed` is its mean over the steps whose
  page really changed. Each overall score has a 95% interval: a percentile bootstrap over episodes (steps of one
  episode are not independent), 1,000 resamples.
* **shares**: which part decided each of the world model's predictions (rule, analogy, lm) and where the page
  came from (rule, edit, recall, compose, keep), as counts and shares;
* **rollouts**: recorded 30-step episodes replayed open loop — the model's own predictions fed back, the
  recorded actions applied — scored per horizon against keep-the-start-state and open-loop lookup;
* **latency** of a prediction (a simulated Step over gRPC is timed by bench.py).
"""

from __future__ import annotations

import random
import statistics
import tempfile
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from webenv.worldmodel.compose import PageMemory, PageView, navigation_target, refresh_chrome
from webenv.worldmodel.dataset import HISTORY, NO_CHANGE, TransitionRecord, episodes
from webenv.worldmodel.formats import line_f1
from webenv.worldmodel.page import action_kind, family_of
from webenv.worldmodel.predict import (
    EXEMPLARS_FILE,
    LINE_SURVIVAL_FILE,
    PAGE_ACTIONS_FILE,
    Prediction,
    Predictor,
    Query,
    advance,
    history_target,
    load_exemplars,
    load_line_survival,
    load_page_actions,
    save_exemplars,
    save_line_survival,
    save_page_actions,
)

#: Baselines that are the world model with parts taken away (name -> Predictor mode).
ABLATIONS = {"rules_only": "rules", "retrieval_only": "analogy"}


def _lines(state: str) -> Counter:
    return Counter(line.rstrip() for line in state.split("\n") if line.strip())


def diff_f1(current: str, predicted: str, actual: str) -> float:
    """F1 of the predicted change against the real one: lines added (+) and removed (-) relative to the current
    page, as multisets. 1.0 when neither changes anything; 0.0 when only one of them does."""
    cur = _lines(current)
    pred, real = _lines(predicted), _lines(actual)
    p = Counter({("+", k): v for k, v in (pred - cur).items()}) + Counter({("-", k): v for k, v in (cur - pred).items()})
    t = Counter({("+", k): v for k, v in (real - cur).items()}) + Counter({("-", k): v for k, v in (cur - real).items()})
    if not p and not t:
        return 1.0
    common = sum((p & t).values())
    if common == 0:
        return 0.0
    precision, recall = common / sum(p.values()), common / sum(t.values())
    return 2 * precision * recall / (precision + recall)


def bootstrap_ci(values: list[float], clusters: list[str], resamples: int = 1000, seed: int = 0) -> tuple[float, float]:
    """95% percentile-bootstrap interval of the mean of `values`, resampling whole clusters (episodes)."""
    sums: dict[str, list[float]] = {}
    for v, c in zip(values, clusters, strict=True):
        acc = sums.setdefault(c, [0.0, 0.0])
        acc[0] += v
        acc[1] += 1
    groups = list(sums.values())
    if len(groups) < 2:
        m = sum(values) / max(len(values), 1)
        return m, m
    rng = random.Random(seed)
    means = []
    for _ in range(resamples):
        tot = n = 0.0
        for _ in groups:
            g = groups[rng.randrange(len(groups))]
            tot += g[0]
            n += g[1]
        means.append(tot / n)
    means.sort()
    return means[int(0.025 * resamples)], means[min(resamples - 1, int(0.975 * resamples))]


@dataclass
class Scores:
    """Accumulated single-step scores of one system."""

    f1: list[float] = field(default_factory=list)
    diff: list[float] = field(default_factory=list)
    exact: list[bool] = field(default_factory=list)
    url: list[bool] = field(default_factory=list)
    changed: list[bool] = field(default_factory=list)
    episode: list[str] = field(default_factory=list)

    def add(self, state: str, url: str, r: TransitionRecord) -> None:
        self.f1.append(line_f1(state, r.next_state))
        self.diff.append(diff_f1(r.state, state, r.next_state))
        self.exact.append(state == r.next_state)
        self.url.append(url == r.next_url)
        self.changed.append(r.next_state != r.state)
        self.episode.append(r.episode_id)

    def summary(self, intervals: bool = False) -> dict:
        n = max(len(self.f1), 1)
        changed = [d for d, c in zip(self.diff, self.changed, strict=True) if c]
        f1_changed = [f for f, c in zip(self.f1, self.changed, strict=True) if c]
        out: dict = {"line_f1": round(sum(self.f1) / n, 4), "diff_f1": round(sum(self.diff) / n, 4),
                     "diff_f1_changed": round(sum(changed) / max(len(changed), 1), 4),
                     "line_f1_changed": round(sum(f1_changed) / max(len(f1_changed), 1), 4),
                     "exact_match": round(sum(self.exact) / n, 4), "url_accuracy": round(sum(self.url) / n, 4),
                     "n": len(self.f1), "n_changed": len(changed)}
        if intervals and self.f1:
            for key, vals, eps in (("line_f1", self.f1, self.episode), ("diff_f1", self.diff, self.episode),
                                   ("exact_match", [float(x) for x in self.exact], self.episode),
                                   ("diff_f1_changed", changed,
                                    [e for e, c in zip(self.episode, self.changed, strict=True) if c]),
                                   ("line_f1_changed", f1_changed,
                                    [e for e, c in zip(self.episode, self.changed, strict=True) if c])):
                if vals:
                    lo, hi = bootstrap_ci(vals, eps)
                    out[f"{key}_ci95"] = [round(lo, 4), round(hi, 4)]
        return out


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
    memory.recorded(r.action_text, r.url, r.next_page)


def variants(predictor: Predictor, compare_lm: bool) -> dict[str, Predictor]:
    """The systems to score: the served world model, and with `compare_lm` its language model alone (reasoning
    off, and on when it was trained with reasoning examples) — WebWorld's design, measured on the same steps."""
    import copy

    out = {}
    for name, mode in ABLATIONS.items():
        if mode != predictor.mode:
            v = copy.copy(predictor)
            v.mode = mode
            out[name] = v
    out["model"] = predictor
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
    compare = any(n.startswith("lm_only") for n in models)
    total = {s: Scores() for s in systems}
    by_kind: dict[str, dict[str, Scores]] = defaultdict(lambda: {s: Scores() for s in systems})
    # per site builder and per suite (held-out builders, hand-made websites, MiniWoB++), when the data records them
    by_builder: dict[str, dict[str, Scores]] = defaultdict(lambda: {s: Scores() for s in systems})
    by_suite: dict[str, dict[str, Scores]] = defaultdict(lambda: {s: Scores() for s in systems})
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
            groups = [by_kind[kind]] + ([by_builder[r.builder]] if r.builder else []) + ([by_suite[r.suite]] if r.suite else [])
            for name, (state, url) in (("copy_state", (r.state, r.url)), ("lookup", (looked.state, looked.url))):
                total[name].add(state, url, r)
                for g in groups:
                    g[name].add(state, url, r)
            with_lm = not lm_limit or count <= lm_limit
            for name, predictor in models.items():
                if name.startswith("lm_only") and not with_lm:
                    continue
                p = await predictor.predict(_query(r, r.page, history, memory))
                total[name].add(p.next_state, p.next_url, r)
                for g in groups:
                    g[name].add(p.next_state, p.next_url, r)
                if name == "model":
                    by_source[p.source].add(p.next_state, p.next_url, r)
                    by_decider[p.decided_by].add(p.next_state, p.next_url, r)
                    fallbacks += p.fallback
                    repaired += p.repaired
                    if p.source != "rule":
                        latencies.append(p.latency_seconds)
                if with_lm and compare:
                    lm_scores[name].add(p.next_state, p.next_url, r)
            if with_lm and compare:
                lm_scores["copy_state"].add(r.state, r.url, r)
                lm_scores["lookup"].add(looked.state, looked.url, r)
            _teacher_advance(memory, r)
    out: dict = {
        "transitions": count,
        "overall": {s: v.summary(intervals=True) for s, v in total.items()},
        "by_kind": {k: {"changes": round(statistics.fmean(changes[k]), 4), **{s: v.summary() for s, v in d.items()}}
                    for k, d in sorted(by_kind.items(), key=lambda kv: -len(kv[1]["copy_state"].f1))},
    }
    for key, groups_ in (("by_builder", by_builder), ("by_suite", by_suite)):
        if groups_:
            out[key] = {k: {s: v.summary(intervals=key == "by_suite") for s, v in d.items() if v.f1}
                        for k, d in sorted(groups_.items())}
    if compare:
        out["language_model_comparison"] = {k: v.summary() for k, v in lm_scores.items() if v.f1}
    if models:
        scored = max(sum(len(v.f1) for v in by_decider.values()), 1)
        out["by_source"] = {k: {**v.summary(), "share": round(len(v.f1) / scored, 4)} for k, v in sorted(by_source.items())}
        out["by_decider"] = {k: {**v.summary(), "share": round(len(v.f1) / scored, 4)} for k, v in sorted(by_decider.items())}
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


def hold_out_family(records: list[TransitionRecord], predictor: Predictor | None,
                    family: str) -> tuple[list[TransitionRecord], Predictor | None]:
    """Leave-one-family-out: every website of `family` becomes held out (split "test"), every other family's
    held-out websites are dropped, and the predictor is re-indexed on the remaining training websites alone
    (page actions and exemplars built as training builds them), without its language model (it saw the family)."""
    import copy

    if family not in {family_of(r.site) for r in records}:
        raise ValueError(f"hold-out family {family!r}: no transitions of it in the data")
    out = []
    for r in records:
        if family_of(r.site) == family:
            out.append(r.model_copy(update={"split": "test"}))
        elif r.split == "train":
            out.append(r)
    if predictor is None:
        return out, None
    with tempfile.TemporaryDirectory() as tmp:
        save_exemplars(out, Path(tmp) / EXEMPLARS_FILE)
        save_page_actions(out, Path(tmp) / PAGE_ACTIONS_FILE)
        save_line_survival(out, Path(tmp) / LINE_SURVIVAL_FILE)
        exemplars, page_actions = load_exemplars(Path(tmp) / EXEMPLARS_FILE), load_page_actions(Path(tmp) / PAGE_ACTIONS_FILE)
        survival = load_line_survival(Path(tmp) / LINE_SURVIVAL_FILE)
    v = copy.copy(predictor)
    v.exemplars, v.page_actions, v.survival, v.mode = exemplars, page_actions, survival, "analogy"
    return out, v


async def evaluate(records: list[TransitionRecord], predictor: Predictor | None, limit: int = 0, rollout_episodes: int = 32,
             rollout_steps: int = 30, compare_lm: bool = False, lm_limit: int = 300, held_out_family: str = "",
             split: str = "test") -> dict:
    """All scores as a JSON-able dict; `held_out_family` scores leave-one-family-out (hold_out_family); `split`
    "validation" scores the validation websites (the validation builders') instead of the held-out ones."""
    if held_out_family:
        records, predictor = hold_out_family(records, predictor, held_out_family)
        compare_lm = False
    test_eps = episodes(r for r in records if r.split == split)
    train = [r for r in records if r.split == "train"]
    models = variants(predictor, compare_lm) if predictor is not None else {}
    res: dict = {
        "held_out_family": held_out_family, "split": split,
        "builders": {"train": sorted({r.builder for r in train if r.builder}),
                     "scored": sorted({r.builder for ep in test_eps.values() for r in ep if r.builder})},
        "test_sites": len({r.site for ep in test_eps.values() for r in ep}), "train_sites": len({r.site for r in train}),
        "train_transitions": len(train), "test_transitions": sum(len(ep) for ep in test_eps.values()),
        # families of held-out websites no training website shares (MiniWoB++ pages: bench/worldmodel_miniwob.py)
        "unseen_families": sorted({family_of(r.site) for ep in test_eps.values() for r in ep}
                                  - {family_of(r.site) for r in train}),
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
    fam = res.get("held_out_family")
    unseen = res.get("unseen_families")
    families = f"families never trained on: {', '.join(unseen)}" if unseen else "same families"
    scope = (f"Leave-one-family-out ({fam}): {ss['transitions']} transitions of {res['test_sites']} websites of the "
             f"{fam} family, none indexed; retrieval from {res['train_sites']} websites of the other families "
             f"({res['train_transitions']} transitions), no language model." if fam else
             f"Validation websites only (the validation builders'): {ss['transitions']} transitions of {res['test_sites']} "
             f"websites never trained on ({res['train_transitions']} training transitions on {res['train_sites']} websites)."
             if res.get("split") == "validation" else
             f"Held-out websites only: {ss['transitions']} transitions of {res['test_sites']} websites never seen in "
             f"training ({res['train_transitions']} training transitions on {res['train_sites']} websites; {families}).")

    def ci(s: dict, key: str) -> str:
        if key not in s:  # an evaluation written before the score existed
            return "-"
        lo_hi = s.get(f"{key}_ci95")
        return f"{s[key]:.3f} [{lo_hi[0]:.3f}, {lo_hi[1]:.3f}]" if lo_hi else f"{s[key]:.3f}"

    lines = [scope, "", "95% intervals: bootstrap over episodes. Diff F1 scores the change only (lines added or removed "
                        "relative to the current page); `changed` is its mean over the steps whose page changed.", "",
             "| system | line F1 | line F1, changed | diff F1 | diff F1, changed | exact match | URL accuracy |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    for name, s in ss["overall"].items():
        lines.append(f"| {name} | {ci(s, 'line_f1')} | {ci(s, 'line_f1_changed')} | {ci(s, 'diff_f1')} | {ci(s, 'diff_f1_changed')} | "
                     f"{ci(s, 'exact_match')} | {s['url_accuracy']:.3f} |")
    systems = list(ss["overall"])
    for key, title in (("by_suite", "By suite (the split by site builder: held-out builders, and the outside suites)"),
                       ("by_builder", "By site builder")):
        if key not in ss:
            continue
        lines += ["", f"{title}: line F1 / line F1 on changed steps / diff F1 on changed steps / exact match / URL "
                      "accuracy (n steps, n changed):", "",
                  "| " + key[3:] + " | n | changed | " + " | ".join(systems) + " |",
                  "| --- | --- | --- | " + " | ".join("---" for _ in systems) + " |"]
        for group, d in ss[key].items():
            first = next(iter(d.values()))
            cells = [f"{d[s]['line_f1']:.3f} / {d[s].get('line_f1_changed', 0):.3f} / {d[s]['diff_f1_changed']:.3f} / "
                     f"{d[s]['exact_match']:.3f} / "
                     f"{d[s]['url_accuracy']:.3f}" if s in d else "-" for s in systems]
            lines.append(f"| {group} | {first['n']} | {first['n_changed']} | " + " | ".join(cells) + " |")
    lines += ["", "By action kind (line F1 / exact match; `changes` = share of steps whose page changed):", "",
              "| kind | n | changes | " + " | ".join(systems) + " |", "| --- | --- | --- | " + " | ".join("---" for _ in systems) + " |"]
    for kind, d in ss["by_kind"].items():
        cells = [f"{d[s]['line_f1']:.3f} / {d[s]['exact_match']:.3f}" for s in systems]
        lines.append(f"| {kind} | {d['copy_state']['n']} | {d['changes']:.2f} | " + " | ".join(cells) + " |")
    if "by_source" in ss:
        for title, key, head in (("who decided the action's effect", "by_decider", "decided by"),
                                 ("where the next page came from", "by_source", "source")):
            lines += ["", f"Model steps by {title}:", "",
                      f"| {head} | n | share | line F1 | diff F1 | exact match | URL accuracy |",
                      "| --- | --- | --- | --- | --- | --- | --- |"]
            for src, s in ss[key].items():
                lines.append(f"| {src} | {s['n']} | {s.get('share', 0):.1%} | {s['line_f1']:.3f} | {ci(s, 'diff_f1')} | "
                             f"{s['exact_match']:.3f} | {s['url_accuracy']:.3f} |")
        lines += ["", "Language-model fallbacks (malformed output or URL: page kept, or the clicked link's href): "
                      f"{ss['fallback_rate']:.1%}; edits repaired: {ss['repaired_rate']:.1%}."]
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


"""`webenv-worldmodel card --model DIR`: the model card of a model directory (MODEL_CARD.md).

A served model must say what it learned from, how it was trained and how well it did on websites it never saw,
so every directory `webenv worldmodel build` leaves has one, written from the files next to the weights:
`build.json` (the collection: runs, websites, split, time), `worldmodel.json` (the training config), the
training's `metrics.jsonl` (loss curve) and `eval.json` (held-out fidelity, rollouts).
"""

from __future__ import annotations

import json
from pathlib import Path

from webenv.worldmodel.evaluate import to_markdown

CARD_FILE = "MODEL_CARD.md"


def _read(path: Path) -> dict:
    return json.loads(path.read_text()) if path.exists() else {}


def card(model: Path) -> str:
    meta, build, ev = _read(model / "worldmodel.json"), _read(model / "build.json"), _read(model / "eval.json")
    cfg = meta.get("config", {})
    out = [f"# World model card: `{model}`", ""]
    out += ["## Data", ""]
    if build:
        c = build["collect"]
        plan = c.get("plan", {})
        out.append(f"Collected by `webenv worldmodel build` with the browser farm on the sites service's websites: "
                   f"{c['sites'] - c['test_sites']} training and {c['test_sites']} held-out websites, split as the task "
                   f"catalog splits them (sites count {plan.get('sites_count')}, seed {plan.get('seed')}).")
        out += ["", "| level | policy | episodes | steps | errored | seconds |", "| --- | --- | --- | --- | --- | --- |"]
        for level, r in c["runs"].items():
            out.append(f"| {level} | {r['policy']} | {r['episodes']} | {r['steps']} | {r['errored']} | {r['seconds']} |")
        t = build.get("timings", {})
        if t:
            out += ["", "Build time: " + ", ".join(f"{k.removesuffix('_s')} {v / 60:.1f} min" for k, v in t.items()) + "."]
    else:
        out.append(f"Trained on {', '.join(cfg.get('data', [])) or 'unrecorded data'} (no build record).")
    out += ["", "## Model", ""]
    counts = {name: sum(1 for _ in (model / name).open()) if (model / name).exists() else 0
              for name in ("page_actions.jsonl", "exemplars.jsonl", "start_states.jsonl")}
    dec = ev.get("single_step", {}).get("by_decider", {})

    def share(part: str) -> str:
        return f" — {dec[part]['share']:.1%} of held-out predictions" if part in dec and "share" in dec[part] else ""

    out += ["Three parts decide a step, in this order (shares measured on the held-out websites, eval.json `by_decider`):", "",
            f"1. **rules**{share('rule')}: actions that never change the page (wait, scroll, hover, noop, answer) keep it; "
            "navigate and back/forward follow the session's history;",
            f"2. **retrieval by analogy**{share('analogy')}: a page action is matched, within its site family, against the "
            f"training websites' actions ({counts['page_actions.jsonl']:,} in `page_actions.jsonl`) by hand-set features "
            "(action kind, element role, link target kind, CSS selector, dialog, login); the best match's outcome is "
            "re-bound to this page; new documents are recalled from the session or composed from training exemplars "
            f"({counts['exemplars.jsonl']:,} in `exemplars.jsonl`);",
            f"3. **the language model**{share('lm')}: a tiny Llama (from scratch, byte-level BPE), only for page actions "
            "no training action matches.", "",
            "It is a retrieval system with a language-model fallback, not a language model of the web: the held-out "
            "websites are of the training websites' families. Only training websites' pages are in this directory; "
            f"simulated sessions may open at {counts['start_states.jsonl']:,} recorded start pages of training websites. "
            "See services/worldmodel/README.md."]
    if cfg:
        keys = ("size", "vocab_size", "max_len", "max_lines", "history_window", "batch_size", "lr", "max_steps",
                "max_minutes", "reasoning_fraction", "decision_weight", "seed", "init")
        out += ["", "| setting | value |", "| --- | --- |"] + [f"| {k} | {cfg.get(k)!r} |" for k in keys if k in cfg]
    train = _read(model / "train.json")
    if train:
        out += ["", f"Language model: trained {train['steps']} steps in {train['elapsed_s'] / 60:.1f} min "
                    f"({train['parameters']:,} parameters); held-out loss per target token {train['initial_eval_loss']:.3f} "
                    f"-> {train['eval_loss']:.3f}."]
    out += ["", "## Evaluation (held-out websites only)", ""]
    if ev:
        out.append(to_markdown(ev))
        if (model / "rollouts.png").exists():
            out.append("![line F1 by horizon](rollouts.png)")
    else:
        out.append("Not evaluated: run `python -m webenv.worldmodel evaluate --model DIR --data ... --out DIR/eval.json`.")
    return "\n".join(out) + "\n"


"""World model split by site builder (issue 48): trained on the train builders' websites, scored on the held-out
builders' websites (hashapp, govform), the hand-made websites and MiniWoB++ against copy-state and lookup.

    webenv worldmodel build --preset builders --out .webenv/wm-builders
    python bench/worldmodel_builders.py --build .webenv/wm-builders

Reads the build's evaluation (OUT/model/eval.json: held-out builders and outside suites; eval-validation.json: the
validation builders), its split (OUT/data/sites.json) and timings (build.json), and adds the transfer ablation: the
model's retrieval (no language model) as served, without line survival and the known-paths check (the first
round's copy by default), and without copy-by-default on unseen markup too (the similarity gate, siblings,
every-family edits, links' hrefs), on the validation and the held-out websites. Writes
bench/results/worldmodel-builders.{json,md}.
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import json
import sys
from collections import defaultdict
from pathlib import Path

from webenv.worldmodel.dataset import episodes, read_transitions
from webenv.worldmodel.evaluate import single_step
from webenv.worldmodel.predict import load_world_model

ROOT = Path(__file__).resolve().parent.parent
SYSTEMS = ("copy_state", "lookup", "model")


async def ablation(data: Path, model: Path) -> dict:
    """Retrieval alone (mode analogy) per suite and split: as served (`retrieval`); without line survival and the
    known-paths check on analogy's URLs (`retrieval_copy`: a new document nothing supplies keeps the whole current
    page, as the first round served); and without copy by default on unseen markup too (`retrieval_before`)."""
    records = read_transitions([data])
    on = await load_world_model("transformers", str(model), mode="analogy")
    keep = copy.copy(on)
    keep.survival_threshold, keep.known_paths = 0.0, False
    off = copy.copy(keep)
    off.min_similarity, off.siblings, off.link_default, off.any_family = 0.0, False, False, False
    out = {}
    for split in ("validation", "test"):
        res = await single_step(episodes(r for r in records if r.split == split),
                                {"retrieval_before": off, "retrieval_copy": keep, "retrieval": on})
        out[split] = res["by_suite"]
    return out


async def paired(data: Path, model: Path) -> dict:
    """Per suite, the served model's retrieval (mode analogy: on these steps it scores as the served model) minus
    each baseline, step by step on the same steps: mean difference and 95% bootstrap interval over episodes, for line
    F1 (all steps) and diff F1 (changed steps)."""
    from webenv.worldmodel.compose import PageMemory
    from webenv.worldmodel.evaluate import _query, _teacher_advance, bootstrap_ci, diff_f1, lookup
    from webenv.worldmodel.formats import line_f1

    records = read_transitions([data])
    pred = await load_world_model("transformers", str(model), mode="analogy")
    rows: dict[str, list[tuple]] = defaultdict(list)  # suite -> (episode, changed, {system: (line f1, diff f1)})
    for split in ("validation", "test"):
        for ep in episodes(r for r in records if r.split == split).values():
            memory = PageMemory()
            memory.navigated(ep[0].page)
            for i, r in enumerate(ep):
                history = [(p.url, p.action_text) for p in ep[max(0, i - 3):i]]
                q = _query(r, r.page, history, memory)
                looked = lookup(q)
                m = await pred.predict(_query(r, r.page, history, memory))
                got = {"copy_state": r.state, "lookup": looked.state, "model": m.next_state}
                rows[r.suite].append((r.episode_id, r.next_state != r.state,
                                      {k: (line_f1(v, r.next_state), diff_f1(r.state, v, r.next_state)) for k, v in got.items()}))
                _teacher_advance(memory, r)
    out: dict = {}
    for suite, rs in rows.items():
        out[suite] = {}
        for base in ("copy_state", "lookup"):
            d_line = [x[2]["model"][0] - x[2][base][0] for x in rs]
            ch = [x for x in rs if x[1]]
            d_diff = [x[2]["model"][1] - x[2][base][1] for x in ch]
            lo, hi = bootstrap_ci(d_line, [x[0] for x in rs])
            lo2, hi2 = bootstrap_ci(d_diff, [x[0] for x in ch]) if ch else (0.0, 0.0)
            d_line_ch = [x[2]["model"][0] - x[2][base][0] for x in ch]
            lo3, hi3 = bootstrap_ci(d_line_ch, [x[0] for x in ch]) if ch else (0.0, 0.0)
            out[suite][f"model-{base}"] = {
                "line_f1": [round(sum(d_line) / len(d_line), 4), round(lo, 4), round(hi, 4)],
                "line_f1_changed": [round(sum(d_line_ch) / max(len(d_line_ch), 1), 4), round(lo3, 4), round(hi3, 4)],
                "diff_f1_changed": [round(sum(d_diff) / max(len(d_diff), 1), 4), round(lo2, 4), round(hi2, 4)],
                "n": len(rs), "n_changed": len(ch)}
    return out


def cell(s: dict, key: str) -> str:
    ci = s.get(f"{key}_ci95")
    return f"{s[key]:.3f} [{ci[0]:.3f}, {ci[1]:.3f}]" if ci else f"{s[key]:.3f}"


def suite_table(groups: dict, systems: list[str], intervals: bool) -> list[str]:
    lines = ["| suite | system | n | n changed | line F1 | line F1, changed | diff F1, changed | exact match | URL accuracy |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for g, d in groups.items():
        for s in systems:
            if s not in d:
                continue
            x = d[s]
            f = (lambda k, x=x: cell(x, k)) if intervals else (lambda k, x=x: f"{x[k]:.3f}")
            lines.append(f"| {g} | {s} | {x['n']} | {x['n_changed']} | {f('line_f1')} | {f('line_f1_changed')} | "
                         f"{f('diff_f1_changed')} | {f('exact_match')} | {x['url_accuracy']:.3f} |")
    return lines


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", default=str(ROOT / ".webenv" / "wm-builders"), help="the build's --out folder")
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "worldmodel-builders.json"))
    ap.add_argument("--command", default="webenv worldmodel build --preset builders --out .webenv/wm-builders")
    args = ap.parse_args()
    build = Path(args.build).resolve()
    model = build / "model"
    ev = json.loads((model / "eval.json").read_text())
    val = json.loads((model / "eval-validation.json").read_text())
    sites = json.loads((build / "data" / "sites.json").read_text())
    built = json.loads((model / "build.json").read_text()) if (model / "build.json").exists() else {}
    split: dict[str, dict[str, list[str]]] = defaultdict(lambda: defaultdict(list))
    for host, s in sorted(sites.items()):
        split[s["split"]][s.get("builder", "")].append(host)
    abl = asyncio.run(ablation(build / "data" / "transitions.jsonl", model))
    diffs = asyncio.run(paired(build / "data" / "transitions.jsonl", model))
    res = {"command": [args.command, f"python bench/worldmodel_builders.py --build {args.build}"],
           "split": {k: dict(v) for k, v in split.items()}, "timings": built.get("timings", {}),
           "collect": {k: {kk: r[kk] for kk in ("policy", "episodes", "steps", "errored", "seconds")}
                       for k, r in built.get("collect", {}).get("runs", {}).items()},
           "held_out": {"by_suite": ev["single_step"]["by_suite"], "by_builder": ev["single_step"]["by_builder"],
                        "overall": ev["single_step"]["overall"], "by_decider": ev["single_step"].get("by_decider"),
                        "by_source": ev["single_step"].get("by_source"), "rollout": ev.get("rollout"),
                        "transitions": ev["single_step"]["transitions"], "train_transitions": ev["train_transitions"],
                        "train_sites": ev["train_sites"], "builders": ev.get("builders")},
           "validation": {"by_builder": val["single_step"]["by_builder"], "overall": val["single_step"]["overall"]},
           "transfer_ablation": abl, "paired_differences": diffs}
    out = Path(args.out)
    out.write_text(json.dumps(res, indent=1))
    systems = list(ev["single_step"]["overall"])
    md = ["# World model split by site builder (issue 48)", "",
          "```bash", *res["command"], "```", "",
          f"Trained on {ev['train_sites']} websites of the 9 train builders ({ev['train_transitions']} transitions); "
          "validation: the boardroom and docsite builders' websites; held out: the hashapp and govform builders' "
          "websites, the hand-made websites (handmade.json) and MiniWoB++ pages. No held-out or validation website "
          "is trained on, indexed or an exemplar (tests/test_worldmodel_builders.py).", "",
          "## Held-out builders and outside suites (single step, 95% bootstrap intervals over episodes)", "",
          *suite_table(ev["single_step"]["by_suite"], systems, True), "",
          "## By builder", "", *suite_table(ev["single_step"]["by_builder"], systems, False), "",
          "## Validation builders", "", *suite_table(val["single_step"]["by_builder"], systems, False), "",
          "## Paired differences: the model minus each baseline on the same steps (mean [95% bootstrap over episodes]; "
          "the model's retrieval, mode analogy, which scores as the served model on every step here)", "",
          "| suite | comparison | n | line F1 | n changed | line F1, changed | diff F1, changed |",
          "| --- | --- | --- | --- | --- | --- | --- |",
          *[f"| {sname} | {c} | {v['n']} | {v['line_f1'][0]:+.3f} [{v['line_f1'][1]:+.3f}, {v['line_f1'][2]:+.3f}] | "
            f"{v['n_changed']} | {v['line_f1_changed'][0]:+.3f} [{v['line_f1_changed'][1]:+.3f}, {v['line_f1_changed'][2]:+.3f}] | "
            f"{v['diff_f1_changed'][0]:+.3f} [{v['diff_f1_changed'][1]:+.3f}, {v['diff_f1_changed'][2]:+.3f}] |"
            for sname, cs in sorted(diffs.items()) for c, v in cs.items()], "",
          "## Retrieval alone (no language model): before copy by default, copy by default keeping the whole page, "
          "and as served (line survival, known paths)", "",
          *suite_table({f"{sp}: {g}": d for sp, gs in abl.items() for g, d in gs.items()},
                       ["copy_state", "lookup", "retrieval_before", "retrieval_copy", "retrieval"], False), ""]
    out.with_suffix(".md").write_text("\n".join(md) + "\n")
    print("\n".join(md))
    return 0


if __name__ == "__main__":
    sys.exit(main())

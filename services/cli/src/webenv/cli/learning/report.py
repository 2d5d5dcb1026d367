"""The loop's report: learning.md (tables), learning.json (everything) and learning.png (success by iteration); for
a Dyna run dyna.md and dyna.json."""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

from .records import DIFFS, KINDS


def write_report(result: dict, out_dir: Path, command: str) -> list[Path]:
    """learning.md (tables), learning.json (everything) and learning.png (success by iteration); for a Dyna run
    dyna.md and dyna.json (the arms' table; no plot)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    evals = result["evaluations"]
    dyna = bool(result["config"].get("dyna"))
    stem = "dyna" if dyna else "learning"
    (out_dir / f"{stem}.json").write_text(json.dumps(result, indent=1))
    (out_dir / "learning.partial.json").unlink(missing_ok=True)  # the loop's progress file, now superseded
    title = ("# Dyna: world-model rollouts vs the same budget of real rollouts, success on unseen websites" if dyna
             else "# Learning loop: success on unseen websites, task families and MiniWoB++")
    lines = [title, "", f"Command: `{command}`", "",
             f"Wall time {result['wall_seconds']:.0f} s: " + ", ".join(
                 f"{k} {v:.0f} s ({v / max(result['wall_seconds'], 1e-9):.0%})" for k, v in result["timing"].items()), ""]
    suites = result.get("suites", {})
    if suites:
        lines += ["What \"unseen\" means on each suite's rows:", "", "| suite | unseen |", "| --- | --- |"]
        lines += [f"| {k} | {v} |" for k, v in suites.items()]
        lines.append("")
    cfg = result["config"]
    lines.append(f"Policies other than the oracle are shown the instruction, the observation and their own history, "
                 f"never a task's solution or rubric. Step caps {tuple(cfg['horizons'])} by difficulty, raised to the "
                 f"oracle's length + {cfg.get('oracle_slack', 0)} (each episode records its cap); `oracle` rows are "
                 "the ceiling: the same tasks (same task digest) under the same caps.")
    for added in result.get("added_afterwards", []):
        lines += ["", f"The {added['suite']} rows ({', '.join(added['versions'])}) were run after the loop ended, on its "
                      f"checkpoints, by `{added['command']}`."]
    reach = result.get("answer_reach") or {}
    if reach:
        lines += ["", "Answer reach (what bounds a candidate ranker before any ranking): information tasks whose page, where "
                      "the oracle answered, has a proposed answer candidate the rubric accepts: " + ", ".join(
                          f"{s} {r['one']}/{r['tasks']}" for s, r in reach.items()) + "."]
    sel = result.get("selected") or {}
    if sel:
        figures = ", ".join(f"{k} {v:.1%}" for k, v in sel["suites"].items())
        lines += ["", f"**Selected checkpoint (best on validation, never chosen on test): {sel['ref']}**: {figures}."]
    lines += ["", "| policy | suite | success | 95% CI | episodes | errored | cut at cap | tasks | run |",
              "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for e in evals:
        lo, hi = e["ci95"]
        name = f"{e['version']} (ceiling)" if e["version"] == "oracle" else e["version"]
        lines.append(f"| {name} | {e['split']} | {e['rate']:.1%} | [{lo:.1%}, {hi:.1%}] | {e['episodes']} | "
                     f"{e.get('errored', 0)} | {e.get('truncated', 0)} | `{e.get('tasks', '')}` | `{e['run_id']}` |")
    for suite in [s for s in dict.fromkeys(e["split"] for e in evals) if s not in ("train", "miniwob")]:
        lines += ["", f"By task kind and difficulty ({suite}; the oracle row is the ceiling):", "",
                  "| policy | " + " | ".join(list(KINDS.values()) + list(DIFFS.values())) + " |",
                  "| --- |" + " --- |" * (len(KINDS) + len(DIFFS))]
        for e in evals:
            if e["split"] != suite:
                continue
            cells = []
            for table, keys in ((e["by_kind"], KINDS.values()), (e["by_difficulty"], DIFFS.values())):
                for k in keys:
                    p, n = table.get(k, [0, 0])
                    cells.append(f"{p}/{n}" + (f" ({p / n:.0%})" if n else ""))
            lines.append(f"| {e['version']} | " + " | ".join(cells) + " |")
    lines += builder_tables(evals)
    iters = result.get("iterations") or []
    if iters:
        mode = ("overlapped: version k is evaluated while iteration k+1 collects with it" if cfg.get("overlap")
                else "sequential: collect, train, then evaluate")
        lines += ["", f"Wall time per RL iteration ({mode}; phases are the sum of its collection, training and "
                      "evaluation times, which is about what the sequential loop spends on the same episodes):", "",
                  "| iteration | collected with | evaluated meanwhile | wall s | phases s |",
                  "| --- | --- | --- | --- | --- |"]
        lines += [f"| {i['iteration']} | {i['collected_with']} | {i['evaluated_during_collection'] or '-'} | "
                  f"{i['wall_seconds']:.0f} | {i['phase_seconds']:.0f} |" for i in iters]
    if result.get("collections"):
        lines += ["", "The arms' training collections (the BC policy's rollouts, judged where they ran: the farm's by the "
                      "judge on the real site, the world model's by the judge against the simulated pages and site state):",
                  "", "| arm | ran in | episodes | passed | " + " | ".join(KINDS.values()) + " | steps | browser steps | wall s |",
                  "| --- |" + " --- |" * (6 + len(KINDS))]
        for c in result["collections"]:
            kinds = " | ".join(f"{p}/{n}" for p, n in (c["by_kind"].get(k, [0, 0]) for k in KINDS.values()))
            lines.append(f"| {c['arm']} | {c['env']} | {c['episodes']} | {c['passed']} | {kinds} | {c['steps']} | "
                         f"{c['browser_steps']} | {c['seconds']:.0f} |")
        for c in result["collections"]:
            if c["failures"]:
                lines += ["", f"Why the {c['arm']} arm's failed rollouts failed (first failing fact, most common):", "",
                          "| episodes | reason |", "| --- | --- |"]
                lines += [f"| {n} | {reason.replace('|', '/')} |" for reason, n in c["failures"]]
    lines += ["", "Checkpoints:", "", "| ref | parent | from | episodes | examples | steps | loss | held-out examples acc | ex/s |",
              "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for c in result["checkpoints"]:
        lines.append(f"| {c['ref']} | {c['parent'] or '-'} | {c['label']} | {c['episodes']} | {c['examples']} | "
                     f"{c['steps']} | {c['loss']} | {c['validation_accuracy']:.1%} | {c['examples_per_second']} |")
    (out_dir / f"{stem}.md").write_text("\n".join(lines) + "\n")
    paths = [out_dir / f"{stem}.md", out_dir / f"{stem}.json"]
    if dyna:
        return paths
    try:
        paths.append(plot(result, out_dir / "learning.png"))
    except ImportError:  # matplotlib is a dependency of webenv-cli; a stripped install still gets the tables
        pass
    return paths


def by_builder(e: dict) -> dict[str, list[int]]:
    """An evaluation's synthetic episodes by site builder: {builder: [passed, episodes]} (its "builder/kind" cells
    summed over kinds)."""
    out: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for key, (p, n) in (e.get("by_builder") or {}).items():
        cell = out[key.partition("/")[0]]
        cell[0], cell[1] = cell[0] + p, cell[1] + n
    return dict(out)


def builder_tables(evals: list[dict]) -> list[str]:
    """Per suite whose websites have builders: each policy's success by site builder (the oracle row: the ceiling)."""
    lines: list[str] = []
    for suite in dict.fromkeys(e["split"] for e in evals):
        rows = [(e["version"], by_builder(e)) for e in evals if e["split"] == suite and e.get("by_builder")]
        builders = sorted({b for _, cells in rows for b in cells})
        if not builders:
            continue
        lines += ["", f"By site builder ({suite}; the oracle row is the ceiling):", "",
                  "| policy | " + " | ".join(builders) + " |", "| --- |" + " --- |" * len(builders)]
        for version, cells in rows:
            shown = [cells.get(b, [0, 0]) for b in builders]
            lines.append(f"| {version} | " + " | ".join(f"{p}/{n}" + (f" ({p / n:.0%})" if n else "") for p, n in shown)
                         + " |")
    return lines


def plot(result: dict, path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    series: dict[str, list[tuple[int, float, float, float]]] = defaultdict(list)
    baselines = {}
    for e in result["evaluations"]:
        v = e["version"]
        lo, hi = e["ci95"]
        if e["split"] not in ("train", "validation", "test"):
            continue
        if "@" not in v:
            if e["split"] == "test":
                baselines[v] = e["rate"]
            continue
        if v.split("@")[0].endswith("-ref"):
            baselines["BC, larger demo budget"] = e["rate"]
            continue
        series[e["split"]].append((int(v.split("@")[1]) - 1, e["rate"], lo, hi))
    fig, ax = plt.subplots(figsize=(7, 4.2), dpi=120)
    for split, pts in sorted(series.items()):
        pts.sort()
        xs = [p[0] for p in pts]
        ax.plot(xs, [p[1] for p in pts], marker="o", label=f"{split} websites")
        ax.fill_between(xs, [p[2] for p in pts], [p[3] for p in pts], alpha=0.15)
    for i, (name, rate) in enumerate(sorted(baselines.items())):
        ax.axhline(rate, linestyle="--", linewidth=1, color=f"C{i + 2}", label=name)
    ax.set_xlabel("RL iteration (0 = BC warm start)")
    ax.set_ylabel("success rate")
    ax.set_ylim(0, 1)
    ax.set_title("webenv learning loop: success by iteration (95% CI)")
    ax.legend(loc="best", fontsize=8)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path

"""The learning benchmark across seeds: the RL checkpoint against its own BC warm start, paired on the same tasks.

Each seed is one `webenv train` run (its folder holds learning.json, whose evaluations record each task's outcome).
Within a seed, the BC checkpoint and the selected RL checkpoint (chosen on validation, never on test) ran the same
seeded tasks of every suite, so the comparison is paired per task: a task both solve or both fail says nothing about
the gain, which is why the paired interval is narrower than two independent Wilson intervals. Across seeds the
task-level differences are pooled (each seed a stratum with its own websites and tasks) and the seed-level gains
are reported beside, with a t interval over seeds.

    python bench/learning_seeds.py bench/results/learning/seed1 bench/results/learning/seed2 ...
        --out bench/results/learning/README.md

With ``--ablation`` the runs are the arms of one seed (`make learn-ablation`: the same budget, another learning
signal or option each) and the report is one row per arm, labelled by its algorithm and options:

    python bench/learning_seeds.py --ablation bench/results/learning/seed1 bench/results/learning/arms/* \
        --out bench/results/learning/ablation.md

With ``--versus`` two runs of the same seeds are compared with each other (another model, proposer or recipe; the
positional runs are A, the ``--versus`` runs B, seed by seed in the same order): per suite, B's BC warm start
against A's and B's selected checkpoint against A's, paired on the tasks both ran (the same seed draws the same
tasks):

    python bench/learning_seeds.py bench/results/learning/fbc-kl-i5-v150/seed1 \
        --versus bench/results/learning/fbc-kl-i5-v150-encoder/seed1 --out bench/results/learning/encoder-vs-scorer.md

The statistics: per task d = RL pass rate - BC pass rate on that task (one episode per task in the committed
runs, so d is -1, 0 or 1); gain = mean d with a 95% normal interval from the paired standard error; the exact
two-sided sign (McNemar) test on the tasks where d != 0.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from pathlib import Path

from webenv.cli.learning.options import changed

#: Suites in report order; the family and builders suites are matched by prefix.
ORDER = ("test", "validation", "family", "builders", "miniwob", "handmade")
#: Student t quantiles (two-sided 95%) by degrees of freedom, for the interval over seeds.
T95 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262}
GOAL = 0.15  # issue 22: the RL policy >= 15 points above its own BC warm start on test-split websites


def sign_test(wins: int, losses: int) -> float:
    """Exact two-sided sign test (McNemar's exact test on the discordant tasks)."""
    n = wins + losses
    if n == 0:
        return 1.0
    k = min(wins, losses)
    tail = sum(math.comb(n, i) for i in range(k + 1)) / 2 ** n
    return min(1.0, 2 * tail)


def paired(bc: dict[str, list[int]], rl: dict[str, list[int]]) -> dict:
    """Per-task differences on the tasks both versions ran."""
    common = sorted(set(bc) & set(rl))
    d = [rl[t][0] / rl[t][1] - bc[t][0] / bc[t][1] for t in common]
    return {"tasks": len(common), "d": d}


def summarise(d: list[float]) -> dict:
    n = len(d)
    if n == 0:
        return {"n": 0, "gain": 0.0, "ci95": [0.0, 0.0], "wins": 0, "losses": 0, "p": 1.0}
    mean = sum(d) / n
    se = statistics.stdev(d) / math.sqrt(n) if n > 1 else 0.0
    wins, losses = sum(x > 0 for x in d), sum(x < 0 for x in d)
    return {"n": n, "gain": mean, "ci95": [mean - 1.96 * se, mean + 1.96 * se], "wins": wins, "losses": losses,
            "p": sign_test(wins, losses)}


def suite_key(split: str) -> str:
    return split.partition(":")[0]


def suite_order(split: str) -> tuple[int, str]:
    """Report order: ORDER's suites first, then any other, by name."""
    key = suite_key(split)
    return (ORDER.index(key) if key in ORDER else 9, split)


def pooled_rate(evals: list[dict]) -> float:
    """Episodes passed over episodes run, pooled over evaluations (one per seed)."""
    return sum(e["passed"] for e in evals) / max(1, sum(e["episodes"] for e in evals))


#: The loop options that name an arm beside its algorithm, when a run set them away from the loop's defaults table
#: (webenv.cli.learning.options: the reported recipe).
ARM_OPTIONS = ("kl_coef", "step_normalize", "kl_reference", "temperature")


def seed_rows(result: dict) -> dict:
    """One seed: per suite, BC vs the selected checkpoint (paired), and the baselines' and oracle's rates."""
    bc = next((c["ref"] for c in result["checkpoints"] if c["label"] == "bc"), "")
    sel = result.get("selected", {}).get("ref", "")
    evals = result["evaluations"]
    cfg = result["config"]
    arm = cfg.get("algorithm", "") + "".join(f", {k} {v}" for k, v in changed(cfg, ARM_OPTIONS).items())
    last = result["checkpoints"][-1]["ref"] if result["checkpoints"] else ""
    out = {"seed": cfg["seed"], "arm": arm, "bc": bc, "selected": sel, "last": last,
           "wall_seconds": result["wall_seconds"], "suites": {}}
    for e in evals:
        row = out["suites"].setdefault(e["split"], {})
        role = "bc" if e["version"] == bc else "rl" if e["version"] == sel else e["version"]
        row[role] = {"rate": e["rate"], "passed": e["passed"], "episodes": e["episodes"], "ci95": e["ci95"],
                     "by_kind": e.get("by_kind", {}), "by_difficulty": e.get("by_difficulty", {}),
                     "by_builder": e.get("by_builder", {}),
                     "outcomes": e.get("outcomes", {})}
    for row in out["suites"].values():
        if sel == bc and "bc" in row:  # validation kept the warm start: RL is BC, a gain of 0 by definition
            row["rl"] = row["bc"]
        if "bc" in row and "rl" in row and row["bc"]["outcomes"] and row["rl"]["outcomes"]:
            row["paired"] = paired(row["bc"]["outcomes"], row["rl"]["outcomes"])
    if "paired" not in out["suites"].get("test", {}):
        raise SystemExit(f"seed {out['seed']}: no paired test-split evaluation of BC ({bc or 'none'}) and the selected "
                         f"checkpoint ({sel or 'none'}) with per-task outcomes (a run from before they were recorded?)")
    return out


def pct(x: float) -> str:
    return f"{100 * x:.1f}%"


def pts(x: float) -> str:
    return f"{100 * x:+.1f}"


def report(seeds: list[dict], commands: list[str], validity: dict | None = None) -> tuple[str, dict]:
    suites = sorted({s for r in seeds for s in r["suites"]}, key=suite_order)
    lines = ["# Learning benchmark across seeds: the RL checkpoint vs its own BC warm start (paired)", "",
             "Generated by `python bench/learning_seeds.py` from each seed's learning.json. The RL checkpoint of a "
             "seed is the one its loop selected on validation; BC is the same seed's warm start. Both ran the same "
             "seeded tasks of every suite, so the gain is paired per task (95% interval from the paired standard "
             "error; p: exact two-sided sign test on the tasks where the two differ).", ""]
    summary: dict = {"seeds": [r["seed"] for r in seeds], "suites": {}}
    lines += ["## Gain by suite", "",
              "| suite | seeds | BC | RL | gain (points) | 95% interval | tasks RL-only / BC-only | p | random | oracle |",
              "|---|---|---|---|---|---|---|---|---|---|"]
    for suite in suites:
        rows = [r["suites"][suite] for r in seeds if suite in r["suites"] and "paired" in r["suites"][suite]]
        if not rows:
            continue
        pooled = summarise([x for row in rows for x in row["paired"]["d"]])
        bc_rate, rl_rate = pooled_rate([r["bc"] for r in rows]), pooled_rate([r["rl"] for r in rows])

        def rate_of(name: str, suite: str = suite) -> str:
            got = [r["suites"][suite][name] for r in seeds if name in r["suites"].get(suite, {})]
            if not got:
                return "-"
            return pct(pooled_rate(got))

        lo, hi = pooled["ci95"]
        lines.append(f"| {suite} | {len(rows)} | {pct(bc_rate)} | {pct(rl_rate)} | {pts(pooled['gain'])} | "
                     f"[{pts(lo)}, {pts(hi)}] | {pooled['wins']} / {pooled['losses']} | {pooled['p']:.2g} | "
                     f"{rate_of('random')} | {rate_of('oracle')} |")
        summary["suites"][suite] = {"bc": bc_rate, "rl": rl_rate, **{k: v for k, v in pooled.items()}}
    lines += ["", "## Per seed (test split)", "",
              "| seed | BC | RL (selected) | gain | 95% interval (paired) | p | wall time |", "|---|---|---|---|---|---|---|"]
    gains = []
    for r in seeds:
        row = r["suites"].get("test", {})
        if "paired" not in row:
            continue
        s = summarise(row["paired"]["d"])
        gains.append(s["gain"])
        lines.append(f"| {r['seed']} | {r['bc']} {pct(row['bc']['rate'])} | {r['selected']} {pct(row['rl']['rate'])} | "
                     f"{pts(s['gain'])} | [{pts(s['ci95'][0])}, {pts(s['ci95'][1])}] | {s['p']:.2g} | "
                     f"{r['wall_seconds'] / 60:.0f} min |")
    if len(gains) > 1:
        m, sd = statistics.mean(gains), statistics.stdev(gains)
        half = T95.get(len(gains) - 1, 1.96) * sd / math.sqrt(len(gains))
        spread = (f"[{pts(m - half)}, {pts(m + half)}]" if sd > 0 else
                  f"(all {len(gains)} seeds gave the same gain, so this interval has no width; read the pooled "
                  "paired interval above)")
        lines += ["", f"Over seeds (t interval, n = {len(gains)}): gain {pts(m)} points {spread}."]
        summary["over_seeds"] = {"n": len(gains), "gain": m, "ci95": [m - half, m + half]}
    test = summary["suites"].get("test")
    if test:
        met = test["gain"] >= GOAL and test["ci95"][0] > 0 and len(gains) >= 3
        lines += ["", f"Goal (issue 22: >= {GOAL * 100:.0f} points on test-split websites over 3 seeds): "
                      + ("met." if met else f"not met: pooled gain {pts(test['gain'])} points over {len(gains)} seed(s).")]
        summary["goal_met"] = met
    lines += ["", "## Transactions and hard tasks (test split, all seeds)", "",
              "| version | transaction | hard |", "|---|---|---|"]
    for role in ("bc", "rl", "oracle", "random"):
        kinds = [r["suites"]["test"][role] for r in seeds if role in r["suites"].get("test", {})]
        if not kinds:
            continue
        t = [sum(k["by_kind"].get("transaction", [0, 0])[i] for k in kinds) for i in (0, 1)]
        h = [sum(k["by_difficulty"].get("hard", [0, 0])[i] for k in kinds) for i in (0, 1)]
        lines.append(f"| {role} | {t[0]}/{t[1]} | {h[0]}/{h[1]} |")
    builders = next((sp for sp in summary["suites"] if suite_key(sp) == "builders"), "")
    if builders:
        got = summary["suites"][builders]
        met = got["gain"] >= GOAL and got["ci95"][0] > 0 and len(gains) >= 3
        lines += ["", f"Goal (issue 48: >= {GOAL * 100:.0f} points on the held-out builders' websites over 3 seeds): "
                      + ("met." if met else f"not met: pooled gain {pts(got['gain'])} points "
                                            f"[{pts(got['ci95'][0])}, {pts(got['ci95'][1])}] over {len(gains)} seed(s).")]
        summary["builders_goal_met"] = met
    lines += by_builder_and_kind(seeds, summary, validity)
    lines += by_task_kind(seeds, summary)
    lines += ["", "## Commands", ""] + [f"- `{c}`" for c in commands]
    return "\n".join(lines) + "\n", summary


#: The roles of the builder table's columns, in order.
BUILDER_ROLES = ("bc", "rl", "oracle", "random")


def validity_of(paths: list[Path]) -> dict:
    """Per (builder, kind), from `webenv validate` JSONL files (``.gz`` too): the tasks validated, how many the
    oracle passed (of those it applies to) and how many failed any check, and the highest floor (the best score of
    doing nothing, the empty answer, "done" and the instruction echoed): every task of the catalog, not only the
    seeded episodes above, so a builder's row says whether its tasks can be trusted."""
    from webenv.cli.validation import read_jsonl

    reports, _ = read_jsonl(paths)
    out: dict[tuple[str, str], dict] = {}
    for r in reports:
        if not r.builder:
            continue
        row = out.setdefault((r.builder, r.kind), {"tasks": 0, "oracle": [0, 0], "failed": 0, "errored": 0,
                                                   "floor": 0.0})
        row["tasks"] += 1
        row["failed"] += r.status == "failed"
        row["errored"] += r.status == "errored"
        oracle = r.checks.get("oracle")
        if oracle is not None and oracle.ok is not None:
            row["oracle"][0] += bool(oracle.ok)
            row["oracle"][1] += 1
        row["floor"] = max(row["floor"], r.floor)
    return {"paths": [str(p) for p in paths], "tasks": len(reports), "rows": out}


def by_builder_and_kind(seeds: list[dict], summary: dict, validity: dict | None = None) -> list[str]:
    """Success by site builder and kind of task (information, navigation, transaction), pooled over the seeds and the
    suites whose websites have builders (validation, test, the held-out family and builders): BC, RL (the selected
    checkpoint), the oracle (the ceiling; its validity) and random (the floor) on the same tasks; with ``validity``
    (``validity_of``), the whole catalog's validation of that builder and kind beside them."""
    table: dict[tuple[str, str], dict[str, list[int]]] = {}
    suites: dict[str, set[str]] = {}
    for r in seeds:
        for split, row in r["suites"].items():
            if suite_key(split) in ("train", "miniwob", "handmade"):
                continue
            for role in BUILDER_ROLES:
                for key, (passed, n) in row.get(role, {}).get("by_builder", {}).items():
                    builder, _, kind = key.partition("/")
                    got = table.setdefault((builder, kind), {}).setdefault(role, [0, 0])
                    got[0], got[1] = got[0] + passed, got[1] + n
                    suites.setdefault(builder, set()).add(suite_key(split))
    if not table:
        return []
    lines = ["", "## By site builder and kind of task (all seeds)", "",
             "Episodes of the validation, test, held-out family and held-out builders suites, pooled over seeds, by "
             "the builder of the task's website; the oracle is the ceiling (every task it runs is valid when it is "
             "100%), random the floor. The suites each builder's rows come from say what is unseen about it."]
    head = "| builder | suites | kind | BC | RL | oracle | random |"
    if validity:
        lines += ["", f"Validity: `webenv validate --catalog` over every task of the catalog of that builder and kind "
                      f"({validity['tasks']:,} tasks read from {', '.join(f'`{p}`' for p in validity['paths'])}): "
                      "tasks validated, the oracle's passes, tasks failing any check (a non-answer that passes fails "
                      "`floor`), and the floor: the best score of doing nothing, an empty answer, \"done\" or the "
                      "instruction echoed, as a share of the rubric's fact groups (a task passes at 1). Added by "
                      "`python bench/learning_seeds.py <runs> --validity <validate JSONL>`."]
        head += " catalog tasks | catalog oracle | catalog failed | catalog floor |"
    lines += ["", head, "|" + "---|" * (head.count("|") - 1)]

    def cell(got: list[int] | None) -> str:
        return f"{got[0]}/{got[1]} ({got[0] / got[1]:.0%})" if got and got[1] else "-"

    for builder, kind in sorted(table):
        row = table[(builder, kind)]
        line = (f"| {builder} | {', '.join(sorted(suites[builder]))} | {kind} | "
                + " | ".join(cell(row.get(role)) for role in BUILDER_ROLES) + " |")
        if validity:
            v = validity["rows"].get((builder, kind))
            line += (f" {v['tasks']} | {cell(v['oracle'])} | {v['failed']} | {v['floor']:.2f} |" if v
                     else " - | - | - | - |")
        lines.append(line)
    summary["by_builder_and_kind"] = {f"{b}/{k}": v for (b, k), v in table.items()}
    if validity:
        summary["validity"] = {f"{b}/{k}": v for (b, k), v in validity["rows"].items()}
    return lines


def task_kind(task_id: str) -> str:
    """A task's kind: the last part of its id, the synthetic generator's task template (``synthetic/bank-0003/info-7``
    is ``info-7``, the same question on every bank website)."""
    return task_id.rsplit("/", 1)[-1]


def by_task_kind(seeds: list[dict], summary: dict) -> list[str]:
    """BC and RL success per kind of task on validation and test, pooled over the seeds: where the gain comes from
    (issue 22's finding: eight of the 21 kinds stay at 0 while the others gain +25)."""
    table: dict[str, dict[str, list[int]]] = {}
    for r in seeds:
        for split in ("validation", "test"):
            row = r["suites"].get(split, {})
            for role in ("bc", "rl", "oracle"):
                for task, (passed, n) in row.get(role, {}).get("outcomes", {}).items():
                    got = table.setdefault(task_kind(task), {}).setdefault(f"{split} {role}", [0, 0])
                    got[0], got[1] = got[0] + passed, got[1] + n
    if not table:
        return []
    lines = ["", "## By kind of task (all seeds)", "",
             "Tasks of a kind share their template across websites; the oracle runs on the test tasks only.", "",
             "| kind | validation BC | validation RL | test BC | test RL | test oracle |", "|---|---|---|---|---|---|"]

    def cell(got: list[int] | None) -> str:
        return f"{got[0]}/{got[1]}" if got else "-"

    for kind in sorted(table):
        row = table[kind]
        lines.append(f"| {kind} | " + " | ".join(cell(row.get(k)) for k in (
            "validation bc", "validation rl", "test bc", "test rl", "test oracle")) + " |")
    summary["by_task_kind"] = table
    return lines


def ablation(arms: list[dict], commands: list[str]) -> tuple[str, dict]:
    """One row per arm: each arm's selected checkpoint against its own BC warm start, paired per task."""
    suites = [s for s in ("test", "validation") if any(s in a["suites"] for a in arms)]
    suites += sorted({s for a in arms for s in a["suites"] if s.startswith("family")}) + ["miniwob"]
    suites += ["handmade"] if any("handmade" in a["suites"] for a in arms) else []
    lines = ["# Learning-signal ablation: one seed, the same budget per arm", "",
             "Generated by `python bench/learning_seeds.py --ablation` from each arm's learning.json. Every arm starts "
             "from the same BC warm start (same seed, same demonstrations) and collects the same number of episodes "
             "per iteration; its reported checkpoint is the one chosen on validation. Cells: BC -> RL and the paired "
             "gain in points with its 95% interval; the test split's sign-test p beside.", "",
             "| arm | seed | selected | " + " | ".join(suites) + " | test p | transactions (test) | last checkpoint "
             "(test) | wall time |",
             "|---|---|---|" + "---|" * len(suites) + "---|---|---|---|"]
    summary: dict = {"arms": []}
    for a in arms:
        cells, row = [], {"arm": a["arm"], "seed": a["seed"], "selected": a["selected"], "suites": {}}
        for suite in suites:
            r = a["suites"].get(suite, {})
            if "paired" not in r:
                cells.append("-")
                continue
            s = summarise(r["paired"]["d"])
            cells.append(f"{pct(r['bc']['rate'])} -> {pct(r['rl']['rate'])}, {pts(s['gain'])} "
                         f"[{pts(s['ci95'][0])}, {pts(s['ci95'][1])}]")
            row["suites"][suite] = {"bc": r["bc"]["rate"], "rl": r["rl"]["rate"], **s}
        test = a["suites"].get("test", {})
        p = row["suites"].get("test", {}).get("p")
        tx = [test[v]["by_kind"].get("transaction", [0, 0]) for v in ("bc", "rl") if v in test]
        last = test.get("rl" if a["last"] == a["selected"] else "bc" if a["last"] == a["bc"] else a["last"], {})
        lines.append(f"| {a['arm']} | {a['seed']} | {a['selected']} | " + " | ".join(cells)
                     + f" | {'-' if p is None else f'{p:.2g}'} | "
                     + (" -> ".join(f"{t[0]}/{t[1]}" for t in tx) or "-")
                     + f" | {a['last']} {pct(last['rate']) if last else '-'} | {a['wall_seconds'] / 60:.0f} min |")
        summary["arms"].append(row)
    lines += ["", "## Commands", ""] + [f"- `{c}`" for c in commands]
    return "\n".join(lines) + "\n", summary


def versus(a_runs: list[dict], b_runs: list[dict], names: tuple[str, str], commands: list[str]) -> tuple[str, dict]:
    """B against A, seed by seed: BC warm start against BC warm start, selected checkpoint against selected."""
    for a, b in zip(a_runs, b_runs, strict=True):
        if a["seed"] != b["seed"]:
            raise SystemExit(f"--versus pairs runs of the same seed: seed {a['seed']} against seed {b['seed']}")
    suites = sorted({s for r in a_runs + b_runs for s in r["suites"]}, key=suite_order)
    lines = [f"# {names[1]} against {names[0]}: the same seeds, paired on the same tasks", "",
             "Generated by `python bench/learning_seeds.py --versus` from each run's learning.json. Row by row, B's "
             "BC warm start against A's and B's checkpoint chosen on validation against A's, on the tasks both ran "
             "(per task d = B - A; 95% interval from the paired standard error; p: exact two-sided sign test).", "",
             f"A: `{names[0]}`; B: `{names[1]}`; seeds {', '.join(str(r['seed']) for r in a_runs)}.", "",
             "| suite | version | A | B | B - A (points) | 95% interval | tasks B-only / A-only | p |",
             "|---|---|---|---|---|---|---|---|"]
    summary: dict = {"a": names[0], "b": names[1], "seeds": [r["seed"] for r in a_runs], "suites": {}}
    for suite in suites:
        for role in ("bc", "rl"):
            pairs = [(x, y) for a, b in zip(a_runs, b_runs, strict=True)
                     for x, y in [(a["suites"].get(suite, {}).get(role), b["suites"].get(suite, {}).get(role))]
                     if x and y and x["outcomes"] and y["outcomes"]]
            if not pairs:
                continue
            s = summarise([d for x, y in pairs for d in paired(x["outcomes"], y["outcomes"])["d"]])
            rate = [pooled_rate([v[i] for v in pairs]) for i in (0, 1)]
            lines.append(f"| {suite} | {'BC warm start' if role == 'bc' else 'selected'} | {pct(rate[0])} | "
                         f"{pct(rate[1])} | {pts(s['gain'])} | [{pts(s['ci95'][0])}, {pts(s['ci95'][1])}] | "
                         f"{s['wins']} / {s['losses']} | {s['p']:.2g} |")
            summary["suites"].setdefault(suite, {})[role] = {"a": rate[0], "b": rate[1], **s}
    lines += ["", "## Commands", ""] + [f"- `{c}`" for c in commands]
    return "\n".join(lines) + "\n", summary


def load_run(folder: Path) -> tuple[dict, str] | None:
    """A run's learning.json (or learning.partial.json of a run cut off) and the command its learning.md names."""
    path = next((p for p in (folder / "learning.json", folder / "learning.partial.json") if p.exists()), None)
    if path is None:
        return None
    md = folder / "learning.md"
    cmd = next((ln.split("`")[1] for ln in md.read_text().splitlines() if ln.startswith("Command:")), "") if md.exists() else ""
    return seed_rows(json.loads(path.read_text(encoding="utf-8"))), cmd or f"(partial run: {path})"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("runs", nargs="+", type=Path, help="folders holding a seed's learning.json "
                                                            "(or learning.partial.json of a run cut off)")
    parser.add_argument("--out", type=Path, default=Path("bench/results/learning/README.md"))
    parser.add_argument("--ablation", action="store_true", help="the runs are arms of one seed: one row per arm")
    parser.add_argument("--validity", nargs="+", type=Path, default=[],
                        help="`webenv validate` JSONL files (.gz too): the catalog's validity by builder and kind "
                             "beside the builder table")
    parser.add_argument("--versus", nargs="+", type=Path, default=[],
                        help="runs B of the same seeds as the runs A given first, in the same order: B against A")
    args = parser.parse_args(argv)
    if args.validity and (args.ablation or args.versus):
        print("--validity adds the catalog's validity to the seeds' report, not to --ablation or --versus",
              file=sys.stderr)
        return 2
    if args.versus and (args.ablation or len(args.versus) != len(args.runs)):
        print(f"--versus takes one run per run given first ({len(args.runs)}), got {len(args.versus)}"
              + (" (and not with --ablation)" if args.ablation else ""), file=sys.stderr)
        return 2
    seeds, commands = [], []
    for folder in [*args.runs, *args.versus]:
        got = load_run(folder)
        if got is None:
            print(f"{folder}: no learning.json", file=sys.stderr)
            return 2
        seeds.append(got[0])
        commands.append(got[1])
    if args.versus:
        n = len(args.runs)
        names = (str(args.runs[0].parent), str(args.versus[0].parent))
        text, summary = versus(seeds[:n], seeds[n:], names, commands)
    elif args.ablation:
        text, summary = ablation(seeds, commands)
    else:
        text, summary = report(seeds, commands, validity_of(args.validity) if args.validity else None)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text, encoding="utf-8")
    args.out.with_suffix(".json").write_text(json.dumps(summary, indent=1), encoding="utf-8")
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

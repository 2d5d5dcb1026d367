"""What a learning run's RL collections gave filtered BC, read from a copy of its store, by task template.

Why: on the web of builders RL lifted validation +5.3 over its BC warm start (builders-f2 seed 1) while the reports
(learning.json, bench/learning_seeds.py) said nothing of what each RL job learnt from. Read from the store, the
collections passed 40-48% an iteration without rising, five of 21 templates got 13 positives in 223 rollouts, and 28
failed rollouts of the three-record transactions completed a record against 2 that passed (bench/results/learning/
notes.md, "Why RL lifts little on the web of builders"). This prints those figures for any run: per collection and
template, passed rollouts and the subtasks failed rollouts completed (what `--relabel-subtasks` trains on); per
validation evaluation, passes by template and how failures end (answered "done", another answer, the step cap).

It reads the demonstrations, the collections and the validation evaluations only (the runs design may read); test,
held-out builders, family, MiniWoB++ and hand-made runs are never opened. chDB locks a store folder while open:
copy the run's `store/` first and pass the copy.

    cp -r .webenv/train-XXXX/store /tmp/store-copy
    python bench/learning_store.py --store /tmp/store-copy --run bench/results/learning/builders-f2/seed1
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter, defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.learning_handmade import read_run
from bench.learning_seeds import task_kind


def design_runs(runs: dict[str, str]) -> dict[str, str]:
    """Run id -> label of the runs this script may read (demonstrations, collections, validation evaluations)."""
    return {rid: label for label, rid in runs.items()
            if label == "demos" or label.startswith("collect-") or label.endswith("-validation")}


def read_episodes(store: Path, run_ids: list[str]) -> list:
    """Every stored episode of ``run_ids`` with its steps (the collector's own reader over the store copy)."""
    from webenv.collector.read import EpisodeReader
    from webenv.collector.store import Store
    from webenv.v1 import collector_pb2

    reader = EpisodeReader(collector_pb2.ReadEpisodesRequest(run_ids=run_ids))
    reader.with_steps = True  # the last action says how a failure ended
    db = Store(f"chdb://{store}", "webenv")
    return [ep for rows in reader.rows(db) for ep in reader.batch(db, rows)]


def ending(ep) -> str:
    if ep.passed:
        return "passed"
    if ep.truncated:
        return "cap"
    last = ep.trajectory.steps[-1].action_text if ep.trajectory.steps else ""
    return "done" if last.startswith('answer("done")') else "answer" if last.startswith("answer") else "other"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--store", type=Path, required=True, help="a copy of the run's store/ folder")
    ap.add_argument("--run", type=Path, required=True, help="the folder of the run's learning.json")
    args = ap.parse_args(argv)
    result = read_run(args.run)
    if result is None:
        return 2
    from webenv.trainer.algorithms import relabeled
    from webenv.v1 import common_pb2

    labels = design_runs(result["runs"])
    eps = read_episodes(args.store, sorted(labels))
    assert all(ep.split in (common_pb2.SPLIT_TRAIN, common_pb2.SPLIT_VALIDATION) for ep in eps)
    cols = sorted({labels[ep.run_id] for ep in eps if labels[ep.run_id] != "demos"},
                  key=lambda c: (c.endswith("-validation"), c.replace("bc", "0")))
    cell: dict[tuple[str, str], Counter] = defaultdict(Counter)
    for ep in eps:
        c = cell[(task_kind(ep.task.task_id), labels[ep.run_id])]
        c["n"] += 1
        c[ending(ep)] += 1
        if not ep.passed:
            c["sub"] += len(relabeled([ep]))
    kinds = sorted({k for k, _ in cell}, key=lambda k: (k.split("-")[0], int(k.split("-")[-1]) if k[-1].isdigit() else 0))
    print("Per template: demonstrations; each collection's passed/rollouts (+ subtasks its failures completed); each "
          "validation evaluation's passed/tasks.\n")
    print("| template | demos | " + " | ".join(cols) + " |")
    print("|---" * (len(cols) + 2) + "|")
    for k in kinds:
        row = [f"{cell[(k, c)]['passed']}/{cell[(k, c)]['n']}"
               + (f" (+{cell[(k, c)]['sub']})" if c.startswith("collect-") and cell[(k, c)]["sub"] else "")
               for c in cols]
        print(f"| {k} | {cell[(k, 'demos')]['n']} | " + " | ".join(row) + " |")
    print("\nHow validation failures end (done / another answer / step cap / other):")
    for c in cols:
        if c.endswith("-validation"):
            t = sum((cell[(k, c)] for k in kinds), Counter())
            print(f"- {c}: passed {t['passed']}/{t['n']}; failed: done {t['done']}, answer {t['answer']}, "
                  f"cap {t['cap']}, other {t['other']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The hand-made websites' suite for a finished `webenv train` run that did not run it: its BC warm start and its
selected checkpoint, with the oracle (ceiling) and random, zero-shot on the tasks of data/rubric/handmade.json.

`webenv train` runs this suite itself (`--handmade-tasks`, 40 by default). A run from before the suite existed still
has its checkpoints in its data folder: this script starts a local stack on that folder, evaluates those two
checkpoints with the loop's own code (`Loop.handmade_suite`, `Loop.evaluate_handmade`: the same tasks, seed and
step caps as the loop would use), and adds the rows to the run's learning.json and learning.md (the report notes
which rows were added afterwards, and by which command). `bench/learning_seeds.py` then pairs them like any suite.

It also adds the loop's `answer_reach` for the test split and the hand-made suite (`Loop.answer_reach`: on the page
where the oracle answered each information task, is a proposed answer candidate accepted by the rubric?).

    python bench/learning_handmade.py --data-dir .webenv/train-fbc-1 --run bench/results/learning/fbc-kl-i5-v150/seed1
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from dataclasses import asdict, fields
from pathlib import Path

from webenv.cli.learning import HANDMADE_FILE, SUITES, Loop, LoopConfig, write_report
from webenv.cli.stack import Stack
from webenv.v1 import policy_pb2


def config_of(result: dict, tasks: int) -> LoopConfig:
    """The run's LoopConfig (fields the run's version did not have keep their defaults), with ``tasks`` tasks of the
    hand-made test sites (whichever hand-made file the run itself used)."""
    names = {f.name for f in fields(LoopConfig)}
    kw = {k: tuple(v) if isinstance(v, list) else v for k, v in result["config"].items() if k in names}
    return LoopConfig(**(kw | {"handmade_tasks": tasks, "handmade_file": HANDMADE_FILE}))


def run_arguments(doc: str) -> argparse.ArgumentParser:
    """The options of every script here that works on a finished run: its data folder, its report, the catalog size."""
    ap = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data-dir", type=Path, required=True, help="the run's data folder (its checkpoints, its store)")
    ap.add_argument("--run", type=Path, required=True, help="the folder of the run's learning.json")
    ap.add_argument("--sites-count", type=int, default=200)
    return ap


def read_run(run: Path) -> dict | None:
    """The run's learning.json, or None after saying why not."""
    path = run / "learning.json"
    if not path.is_file():
        print(f"{path}: no such file (a finished `webenv train` run's report)", file=sys.stderr)
        return None
    return json.loads(path.read_text(encoding="utf-8"))


def bc_and_selected(result: dict) -> tuple[str, str]:
    """The run's BC warm start and the checkpoint its loop selected on validation ("" where it has none)."""
    bc = next((c["ref"] for c in result["checkpoints"] if c["label"] == "bc"), "")
    return bc, (result.get("selected") or {}).get("ref", "")


def main(argv: list[str] | None = None) -> int:
    ap = run_arguments(__doc__)
    ap.add_argument("--tasks", type=int, default=40, help="hand-made tasks, one episode each (default: all 40)")
    args = ap.parse_args(argv)
    path = args.run / "learning.json"
    result = read_run(args.run)
    if result is None:
        return 2
    if not (args.data_dir / "checkpoints").is_dir():
        print(f"{args.data_dir}: no checkpoints folder (the data folder of that run?)", file=sys.stderr)
        return 2
    if any(e["split"] == "handmade" for e in result["evaluations"]):
        print(f"{path}: already has hand-made rows", file=sys.stderr)
        return 2
    bc, selected = bc_and_selected(result)
    if not bc or not selected:
        print(f"{path}: no BC warm start or selected checkpoint", file=sys.stderr)
        return 2
    cfg = config_of(result, args.tasks)
    md = args.run / "learning.md"
    command = next((ln.split("`")[1] for ln in md.read_text().splitlines() if ln.startswith("Command:")), "") \
        if md.exists() else ""
    stack = Stack(args.data_dir, free_ports=True, sites_count=args.sites_count)
    stack.start(timeout=180, on_ready=lambda n, a: print(f"{n} SERVING at {a}", flush=True))
    try:
        loop = Loop(cfg, collector=stack.address("collector"), trainer=stack.address("trainer"),
                    policy=stack.address("policy"), sites=stack.address("sites"), say=lambda s: print(s, flush=True))
        loop.handmade_ids = loop.handmade_suite(cfg.handmade_tasks)
        if cfg.oracle_ceiling:
            oracle = loop.evaluate_handmade("oracle", "eval-oracle-handmade")
            if "eval-oracle-test" in result["runs"]:
                loop.answer_reach("test", result["runs"]["eval-oracle-test"])
            loop.answer_reach("handmade", oracle.run_id)
            result["answer_reach"] = result.get("answer_reach", {}) | loop.reach
        if "random" in cfg.baselines:
            loop.evaluate_handmade("random", "eval-random-handmade")
        for ref, label in ((bc, "bc"), (selected, "selected")):
            if ref == bc and label == "selected":
                break
            loop.policy.LoadCheckpoint(policy_pb2.LoadCheckpointRequest(ref=ref), timeout=120)
            loop.evaluate_handmade(ref, f"eval-{label}-handmade")
    finally:
        stack.stop()
    result["evaluations"] += [asdict(e) | {"rate": e.rate, "ci95": e.interval()} for e in loop.evals]
    result["runs"] |= loop.runs
    result.setdefault("suites", {})["handmade"] = SUITES["handmade"]
    this = "python bench/learning_handmade.py " + " ".join(shlex.quote(a) for a in (argv or sys.argv[1:]))
    result.setdefault("added_afterwards", []).append({"suite": "handmade", "command": this,
                                                      "versions": ["oracle", "random", bc, selected]})
    path.write_text(json.dumps(result, indent=1), encoding="utf-8")
    write_report(result, args.run, command)
    print(f"{path}: {len(loop.evals)} hand-made evaluations added")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""A finished `webenv train` run's RL iterates averaged into one checkpoint (Polyak / SWA), evaluated like the
checkpoint the loop selected.

The RL iterates of a run are one lineage (each RL job fine-tunes its parent, with the KL term towards the warm start),
so a uniform average of their weights is a model of the same class. This script writes that average as the next
version in the run's data folder (a hashed-scorer checkpoint: every tensor of `scorer.pt` averaged, the rest of
the folder from the last member), starts a local stack on the folder and runs the average with the loop's own code
on the run's validation split and then on its reported suites (test, the held-out family, MiniWoB++, the hand-made
websites: the same seeded tasks and step caps as the loop). OUT gets a learning.json in which the average stands where
the selected checkpoint stood, beside the run's own BC warm start and baselines, so `bench/learning_seeds.py` pairs it
like any run (and `--versus` against the run itself). What it measured: `bench/results/learning/notes.md`.

    python bench/learning_average.py --data-dir .webenv/train-ans-1 \
        --run bench/results/learning/fbc-kl-i5-v150-answers/seed1 --members 4,5,6 --out bench/results/learning/avg/seed1
"""

from __future__ import annotations

import json
import shlex
import shutil
import sys
from dataclasses import asdict
from pathlib import Path

import torch
from webenv.agent import checkpoints
from webenv.cli.learning import Loop, write_report
from webenv.cli.stack import Stack
from webenv.v1 import common_pb2, policy_pb2

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.learning_handmade import config_of, read_run, run_arguments  # a finished run, read as there


def average(root: Path, name: str, members: list[int]) -> str:
    """The uniform average of ``name``'s versions ``members``, published as a new version (or the one an earlier call
    published for the same members); returns its reference."""
    label = "average of " + ",".join(f"{name}@{m}" for m in members)
    for v in checkpoints.versions(root, name):
        if checkpoints.read_meta(checkpoints.folder(root, name, v)).labels.get("average") == label:
            return f"{name}@{v}"
    states = [torch.load(checkpoints.folder(root, name, m) / "scorer.pt", weights_only=True) for m in members]
    mean = {k: (sum(s[k].double() for s in states) / len(states)).to(states[0][k].dtype) for k in states[0]}
    last = checkpoints.folder(root, name, members[-1])
    version = checkpoints.versions(root, name)[-1] + 1
    staging = root / f".staging-{name}-v{version}"
    shutil.rmtree(staging, ignore_errors=True)
    shutil.copytree(last, staging)
    torch.save(mean, staging / "scorer.pt")
    meta = checkpoints.read_meta(last)
    meta.ClearField("path")
    meta.version, meta.ref, meta.parent = version, f"{name}@{version}", f"{name}@{members[-1]}"
    meta.labels["average"] = label
    checkpoints.publish(staging, root, meta)
    return meta.ref


def main(argv: list[str] | None = None) -> int:
    ap = run_arguments(__doc__)
    ap.add_argument("--members", required=True, help="versions to average, e.g. 4,5,6 (RL iterates of the run)")
    ap.add_argument("--out", type=Path, required=True, help="folder for the average's learning.json and learning.md")
    args = ap.parse_args(argv)
    result = read_run(args.run)
    if result is None:
        return 2
    name = result["config"]["name"]
    if result["config"].get("model", "scorer") != "scorer":
        print(f"{args.run}: a {result['config']['model']} run; the average is built for the hashed scorer's weights",
              file=sys.stderr)
        return 2
    rl = {int(c["ref"].split("@")[1]) for c in result["checkpoints"] if c["label"].startswith("rl-")}
    try:
        members = sorted({int(m) for m in args.members.split(",")})
    except ValueError:
        print(f"--members: {args.members!r} is not a comma-separated list of versions", file=sys.stderr)
        return 2
    if len(members) < 2 or not set(members) <= rl:
        print(f"--members: {members} must be two or more of the run's RL iterates {sorted(rl)}", file=sys.stderr)
        return 2
    bc = next(c["ref"] for c in result["checkpoints"] if c["label"] == "bc")
    cfg = config_of(result, result["config"].get("handmade_tasks", 40))
    cfg.train_eval_episodes = 0
    ref = average(args.data_dir / "checkpoints", name, members)
    stack = Stack(args.data_dir, free_ports=True, sites_count=args.sites_count)
    stack.start(timeout=180, on_ready=lambda n, a: print(f"{n} SERVING at {a}", flush=True))
    try:
        loop = Loop(cfg, collector=stack.address("collector"), trainer=stack.address("trainer"),
                    policy=stack.address("policy"), sites=stack.address("sites"), say=lambda s: print(s, flush=True))
        loop.prepare()
        loop.policy.LoadCheckpoint(policy_pb2.LoadCheckpointRequest(ref=ref), timeout=120)
        loop.evaluate(ref, common_pb2.SPLIT_VALIDATION, cfg.validation_episodes, "eval-average-validation")
        loop.evaluate_checkpoint(ref, "average", validation=False)
    finally:
        stack.stop()
    evals = [asdict(e) | {"rate": e.rate, "ci95": e.interval()} for e in loop.evals]
    out = dict(result)
    out["evaluations"] = [e for e in result["evaluations"] if not e["version"].startswith(f"{name}@")
                          or e["version"] == bc] + evals
    last = next(c for c in result["checkpoints"] if c["ref"] == f"{name}@{members[-1]}")
    out["checkpoints"] = [c for c in result["checkpoints"] if c["ref"] == bc] + [
        last | {"ref": ref, "parent": last["ref"], "label": f"average of {members}"}]
    suites = {e["split"]: e["rate"] for e in evals}
    out["selected"] = {"ref": ref, "by": f"the average of {members} (not chosen)",
                       "validation_rate": suites["validation"], "suites": suites}
    out["runs"] = result["runs"] | loop.runs
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "learning.json").write_text(json.dumps(out, indent=1), encoding="utf-8")
    write_report(out, args.out, "python bench/learning_average.py " + " ".join(shlex.quote(a) for a in
                                                                              (argv or sys.argv[1:])))
    print(f"{args.out}: {ref} ({', '.join(f'{k} {v:.1%}' for k, v in suites.items())})")
    return 0


if __name__ == "__main__":
    sys.exit(main())

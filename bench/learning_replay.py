"""Training choices screened on a finished run's own rollouts: its RL jobs trained again, from its BC warm start on the
same growing replay (demonstrations + collections 1..k), with other training options, each result on validation.

A full `webenv train` seed takes 36-40 minutes on this machine, 35% of it collecting and 4% training. A training
option (the KL term's weight and reference, the epochs of an RL job) can be screened on the rollouts a run already
collected in about 3 minutes a variant: the iterates' data stay the run's, so what differs is the training alone. What
this cannot show is the option's effect on what later iterations collect (on-policy feedback); a variant that
screens well still needs the loop's own seeds. The variant `recipe` (the run's own options) is the control: the
trainer is seeded, so it should give the run's own last iterate back.

    python bench/learning_replay.py --data-dir .webenv/train-ans-1 \
        --run bench/results/learning/fbc-kl-i5-v150-answers/seed1 --out bench/results/learning/replay/seed1.json \
        --variant recipe --variant kl-parent:kl_ref=parent --variant no-kl:kl_coef=0
"""

from __future__ import annotations

import json
import sys
from dataclasses import asdict, replace
from pathlib import Path

from webenv.cli.learning import Loop
from webenv.cli.stack import Stack
from webenv.v1 import common_pb2, policy_pb2

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.learning_handmade import config_of, read_run, run_arguments  # a finished run, read as there

OPTIONS = {"kl_coef": float, "kl_ref": str, "rl_epochs": int}


def parse_variant(text: str) -> tuple[str, dict]:
    """`name[:key=value,...]` with keys of OPTIONS (kl_ref: warm, the BC warm start, or parent)."""
    name, _, rest = text.partition(":")
    opts: dict = {}
    for item in filter(None, rest.split(",")):
        key, _, value = item.partition("=")
        if key not in OPTIONS:
            raise ValueError(f"--variant {text!r}: {key!r} is not one of {', '.join(OPTIONS)}")
        try:
            opts[key] = OPTIONS[key](value)
        except ValueError:
            raise ValueError(f"--variant {text!r}: {key} must be a {OPTIONS[key].__name__}, got {value!r}") from None
    if opts.get("kl_ref", "warm") not in ("warm", "parent"):
        raise ValueError(f"--variant {text!r}: kl_ref is warm or parent")
    return name, opts


def main(argv: list[str] | None = None) -> int:
    ap = run_arguments(__doc__)
    ap.add_argument("--variant", action="append", required=True, help="name[:kl_coef=X,kl_ref=warm|parent,rl_epochs=N]")
    ap.add_argument("--out", type=Path, required=True, help="JSON file of every variant's iterates and validation")
    args = ap.parse_args(argv)
    try:
        variants = [parse_variant(v) for v in args.variant]
    except ValueError as exc:
        print(exc, file=sys.stderr)
        return 2
    result = read_run(args.run)
    if result is None:
        return 2
    runs = result["runs"]
    collections = [runs[f"collect-{k}"] for k in range(1, result["config"]["iterations"] + 1)]
    bc = next(c["ref"] for c in result["checkpoints"] if c["label"] == "bc")
    base = config_of(result, 0)
    out = json.loads(args.out.read_text()) if args.out.exists() else {}
    stack = Stack(args.data_dir, free_ports=True, sites_count=args.sites_count)
    stack.start(timeout=180, on_ready=lambda n, a: print(f"{n} SERVING at {a}", flush=True))
    try:
        for name, opts in variants:
            cfg = replace(base, kl_coef=opts.get("kl_coef", base.kl_coef), rl_epochs=opts.get("rl_epochs", base.rl_epochs),
                          kl_reference="parent" if opts.get("kl_ref") == "parent" else "warm-start")
            loop = Loop(cfg, collector=stack.address("collector"), trainer=stack.address("trainer"),
                        policy=stack.address("policy"), sites=stack.address("sites"), say=lambda s: print(s, flush=True))
            loop.prepare()
            loop.warm_ref, cp_ref, data = bc, bc, [runs["demos"]]
            for k, run_id in enumerate(collections, 1):
                data.append(run_id)
                cp_ref = loop.train(f"{name}-rl-{k}", loop.rl_algorithm(), list(data), cp_ref, cfg.rl_epochs).ref
            loop.policy.LoadCheckpoint(policy_pb2.LoadCheckpointRequest(ref=cp_ref), timeout=120)
            ev = loop.evaluate(cp_ref, common_pb2.SPLIT_VALIDATION, cfg.validation_episodes, f"replay-{name}-validation")
            out[name] = {"options": opts, "checkpoints": loop.checkpoints, "validation": asdict(ev) | {"rate": ev.rate}}
            args.out.parent.mkdir(parents=True, exist_ok=True)
            args.out.write_text(json.dumps(out, indent=1), encoding="utf-8")
    finally:
        stack.stop()
    for name, row in out.items():
        v = row["validation"]
        print(f"{name}: validation {v['passed']}/{v['episodes']} ({v['rate']:.1%})")
    return 0


if __name__ == "__main__":
    sys.exit(main())

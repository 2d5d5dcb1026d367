"""A finished run's MiniWoB++ suite measured again on today's farm: random, the BC warm start and the selected
checkpoint, with the run's own seed and tasks, beside the figures the run recorded.

Why: until b10d52e a ``go_back()`` on a session's first page went to the tab's blank first history entry
(``about:blank``): the MiniWoB++ task was gone for the rest of the episode (no reward, never done) and the checkpoint
policy refused the empty page, so the episode counted as errored (seed 3 of builders-f2: random 2, BC 5, RL 14 of
130). The run's own report stays as measured; this script says what the same checkpoints do once the trap is gone.

Each seed: its learning.json (``--run``), the folder of its checkpoints (``--checkpoints``: ``vN`` sub-folders of
the family ``agent``; only the BC warm start's and the selected one's are copied into ``--data-dir``), a local stack
on free ports, the loop's own MiniWoB++ evaluation (`Loop.evaluate_miniwob`: every task the catalog serves, one
episode each, the run's seed and step caps). ``--out`` gets one JSON per seed; ``--report`` pools the JSON files
given to it into a markdown table (paired per task: RL - BC and RL - random, 95% interval from the paired standard
error, as bench/learning_seeds.py).

    python bench/miniwob_recheck.py run --run bench/results/learning/builders-f2/seed3 \\
        --checkpoints /work/f2/.webenv/train-20261207-193620/checkpoints/agent --data-dir /tmp/mw3 \\
        --out bench/results/learning/builders-f2/miniwob-recheck/seed3.json
    python bench/miniwob_recheck.py report bench/results/learning/builders-f2/miniwob-recheck/seed*.json \\
        --out bench/results/learning/builders-f2/miniwob-recheck/README.md
"""

from __future__ import annotations

import argparse
import json
import shlex
import shutil
import sys
from dataclasses import asdict, replace
from pathlib import Path

from learning_handmade import bc_and_selected, config_of, read_run
from learning_seeds import paired, summarise


def run(args: argparse.Namespace) -> int:
    from webenv.cli.learning import Loop
    from webenv.cli.stack import Stack
    from webenv.v1 import policy_pb2

    result = read_run(args.run)
    if result is None:
        return 2
    bc, selected = bc_and_selected(result)
    if not bc or not selected:
        print(f"{args.run}: no BC warm start or selected checkpoint in learning.json", file=sys.stderr)
        return 2
    dest = args.data_dir / "checkpoints" / "agent"
    for ref in dict.fromkeys((bc, selected)):
        src = args.checkpoints / f"v{ref.split('@')[1]}"
        if not src.is_dir():
            print(f"{src}: no such checkpoint folder (--checkpoints: the run's checkpoints/agent)", file=sys.stderr)
            return 2
        if not (dest / src.name).is_dir():
            shutil.copytree(src, dest / src.name)
    # only the MiniWoB++ suite is prepared: no held-out family, builders or hand-made tasks
    cfg = replace(config_of(result, 0), holdout_family="", heldout_builders=(), out_dir=str(args.data_dir / "loop"))
    recorded = {e["version"]: e for e in result["evaluations"] if e["split"] == "miniwob"}
    stack = Stack(args.data_dir, free_ports=True, sites_count=args.sites_count)
    stack.start(("sites", "browser", "policy", "judge", "collector"), timeout=300,
                on_ready=lambda n, a: print(f"{n} SERVING at {a}", flush=True))
    try:
        loop = Loop(cfg, collector=stack.address("collector"), trainer="127.0.0.1:1", policy=stack.address("policy"),
                    sites=stack.address("sites"), say=lambda s: print(s, flush=True))
        loop.prepare()
        rows = {}
        for role, version in (("random", "random"), ("bc", bc), ("rl", selected)):
            if role == "rl" and selected == bc:
                rows["rl"] = rows["bc"]
                continue
            if version != "random":
                loop.policy.LoadCheckpoint(policy_pb2.LoadCheckpointRequest(ref=version), timeout=120)
            ev = loop.evaluate_miniwob(version, f"recheck-{role}-miniwob")
            before = recorded.get(version, {})
            rows[role] = {"version": version, "now": asdict(ev) | {"rate": ev.rate},
                          "recorded": {k: before.get(k) for k in ("passed", "episodes", "errored", "outcomes")}}
    finally:
        stack.stop()
    out = {"seed": cfg.seed, "run": str(args.run), "command": "python bench/miniwob_recheck.py run " +
           " ".join(shlex.quote(a) for a in sys.argv[2:]), "rows": rows}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, indent=1), encoding="utf-8")
    print(f"{args.out}: " + ", ".join(f"{r} {v['now']['passed']}/{v['now']['episodes']} "
                                       f"({v['now']['errored']} errored; recorded {v['recorded']['passed']}, "
                                       f"{v['recorded']['errored']} errored)" for r, v in rows.items()))
    return 0


def report(args: argparse.Namespace) -> int:
    seeds = [json.loads(p.read_text(encoding="utf-8")) for p in args.files]
    lines = ["# MiniWoB++ measured again after the go-back fix (b10d52e)", "",
             "Generated by `python bench/miniwob_recheck.py report` (its docstring says why). Every MiniWoB++ task the "
             "catalog serves, one episode each, the run's own seed; \"recorded\" is the run's report (the farm before "
             "the fix), \"now\" the same checkpoints on today's farm. Errored episodes count as failures.", "",
             "| seed | version | recorded: passed (errored) | now: passed (errored) |", "|---|---|---|---|"]
    pairs: dict[str, list[float]] = {"rl-bc": [], "rl-random": [], "bc-random": []}
    for s in seeds:
        for role in ("random", "bc", "rl"):
            r = s["rows"][role]
            rec, now = r["recorded"], r["now"]
            rec_txt = f"{rec['passed']}/{rec['episodes']} ({rec['errored']})" if rec.get("episodes") else "-"
            lines.append(f"| {s['seed']} | {role} `{r['version']}` | {rec_txt} | "
                         f"{now['passed']}/{now['episodes']} ({now['errored']}) |")
        for key in pairs:
            a, b = key.split("-")
            pairs[key] += paired(s["rows"][b]["now"]["outcomes"], s["rows"][a]["now"]["outcomes"])["d"]
    lines += ["", f"## Paired over {len(seeds)} seed(s), now", "",
              "| comparison | tasks | gain (points) | 95% interval | tasks won / lost | p (sign test) |",
              "|---|---|---|---|---|---|"]
    for key, d in pairs.items():
        g = summarise(d)
        lo, hi = g["ci95"]
        lines.append(f"| {key.replace('-', ' - ')} | {g['n']} | {100 * g['gain']:+.1f} | [{100 * lo:+.1f}, "
                     f"{100 * hi:+.1f}] | {g['wins']} / {g['losses']} | {g['p']:.2g} |")
    lines += ["", "## Commands", ""] + [f"- `{s['command']}`" for s in seeds]
    args.out.write_text("\n".join(lines) + "\n", encoding="utf-8")
    print("\n".join(lines))
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run", help="one seed: random, BC and the selected checkpoint on MiniWoB++ today")
    r.add_argument("--run", type=Path, required=True, help="the folder of the run's learning.json")
    r.add_argument("--checkpoints", type=Path, required=True, help="the run's checkpoints/agent folder (vN inside)")
    r.add_argument("--data-dir", type=Path, required=True, help="a data folder for the local stack")
    r.add_argument("--out", type=Path, required=True, help="the seed's JSON")
    r.add_argument("--sites-count", type=int, default=200)
    p = sub.add_parser("report", help="pool seeds' JSON files into a markdown table")
    p.add_argument("files", nargs="+", type=Path)
    p.add_argument("--out", type=Path, required=True)
    args = ap.parse_args(argv)
    return run(args) if args.cmd == "run" else report(args)


if __name__ == "__main__":
    sys.exit(main())

"""Offline ranking on the oracle's path: a BC ranker trained on stored demonstrations, scored step by step on other
builders' stored oracle episodes (teacher-forced), by builder and kind of task. Minutes, no services.

A learning seed on the web of builders takes about 100 minutes; what bounds BC there (and the RL that starts from
it) can be screened far faster offline: train the ranker on the train builders' oracle episodes exactly as the
trainer's BC job does (webenv.trainer.algorithms.select, train_scorer.split_examples and train, the job's
hyperparameters), then ask, for every step of every held-apart oracle episode, whether the ranker puts the oracle's
action first (`step`, an accepted answer counting at an answer step) and whether it does so on every step of an
episode (`path`: a greedy policy's success on that episode's path, the part of success a ranker decides).

    # episodes: bench/answer_reach.py collect (every kind), train builders from their train websites,
    # validation builders from their validation websites
    python bench/answer_reach.py collect --out .webenv/rank-train --split train --episodes 24 \
        --kinds information,navigation,transaction --builders platform,ledger,...
    python bench/answer_reach.py collect --out .webenv/rank-val --split validation --episodes 24 \
        --kinds information,navigation,transaction --builders boardroom,docsite
    python bench/ranking.py --train .webenv/rank-train --eval .webenv/rank-val [--json out.json]

It refuses eval folders of the held-out builders (hashapp, govform) unless --held-out: design reads validation.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

from webenv.v1 import collector_pb2, common_pb2, trainer_pb2

KIND_NAMES = {common_pb2.TASK_KIND_INFORMATION: "information", common_pb2.TASK_KIND_NAVIGATION: "navigation",
              common_pb2.TASK_KIND_TRANSACTION: "transaction"}


def episodes_of(folder: Path) -> dict[str, list[collector_pb2.StoredEpisode]]:
    """Stored episodes by suite (sub-folder: a builder)."""
    out: dict[str, list[collector_pb2.StoredEpisode]] = {}
    for sub in sorted(p for p in folder.iterdir() if p.is_dir()):
        out[sub.name] = [collector_pb2.StoredEpisode.FromString(f.read_bytes()) for f in sorted(sub.glob("*.pb"))]
    return out


def fit(episodes: list[collector_pb2.StoredEpisode], *, epochs: int, seed: int, features: int = 2):
    """A BC scorer trained as the trainer's BC job trains it; returns its acting wrapper."""
    import torch
    from webenv.trainer import train_scorer
    from webenv.trainer.algorithms import select
    from webenv.trainer.jobs import DEFAULTS
    from webenv.trainer.rankers import RANKERS

    torch.set_num_threads(1)
    kind = RANKERS[trainer_pb2.MODEL_KIND_SCORER]
    lib = kind.library()
    torch.manual_seed(seed)
    model = kind.new("", features)
    scorer = kind.wrap(model)
    selected = select(episodes, trainer_pb2.TRAINING_ALGORITHM_BC, True)  # the loop's filter: drop_repeated
    train_set, _ = train_scorer.split_examples(selected, scorer, 0.1, seed)  # the job's default hold-out
    h = DEFAULTS[trainer_pb2.MODEL_KIND_SCORER]
    with tempfile.TemporaryDirectory() as tmp:
        train_scorer.train(lib, model, train_set, [], epochs=epochs, max_steps=0, batch_size=h["batch_size"],
                           lr=h["learning_rate"], seed=seed, checkpoint_every=0, resume_path=Path(tmp) / "resume.pt",
                           report=lambda r: None, stopped=lambda: False)
    model.eval()
    return scorer, {"examples": len(train_set), "episodes": selected.episodes, "unmapped": selected.unmapped}


def score(scorer, episodes: list[collector_pb2.StoredEpisode]) -> dict[str, dict]:
    """Per kind of task: steps ranked first / steps, episodes ranked first on every step / episodes, and the
    first wrong choices (the oracle's action and the ranker's)."""
    from webenv.agent.steps import episode_steps

    out: dict[str, dict] = defaultdict(lambda: {"steps": 0, "first": 0, "episodes": 0, "path": 0, "unreachable": 0,
                                                "wrong": []})
    for ep in episodes:
        row = out[KIND_NAMES.get(ep.task.kind, "other")]
        row["episodes"] += 1
        ok_path = True
        for st in episode_steps(ep):
            row["steps"] += 1
            if st.target < 0:
                row["unreachable"] += 1
                ok_path = False
                continue
            lp = scorer.log_probs(st.ctx, st.candidates)
            best = max(range(len(lp)), key=lp.__getitem__)
            good = set(st.accepted) | {st.target}
            if best in good:
                row["first"] += 1
            else:
                if ok_path:
                    row["wrong"].append({"task": ep.task.task_id, "instruction": ep.task.instruction, "step": st.index,
                                         "oracle": st.candidates[st.target].text, "chose": st.candidates[best].text,
                                         "url": st.ctx.url})
                ok_path = False
        row["path"] += ok_path
    return dict(out)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--train", required=True, help="folder of stored demonstrations (one sub-folder per builder)")
    p.add_argument("--eval", required=True, action="append", help="folder(s) of stored oracle episodes to score")
    p.add_argument("--epochs", type=int, default=40, help="BC epochs (the loop's bc_epochs)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--features", type=int, choices=(1, 2, 5), default=2, help="the scorer's features (ScorerConfig)")
    p.add_argument("--held-out", action="store_true", help="allow the held-out builders' folders (the final read)")
    p.add_argument("--wrong", type=int, default=0, help="print this many first wrong choices per builder and kind")
    p.add_argument("--json", default="")
    args = p.parse_args(argv)
    from webenv.sites.builders import of_split

    held = set(of_split(common_pb2.SPLIT_TEST))
    train = [ep for eps in episodes_of(Path(args.train)).values() for ep in eps]
    evals: dict[str, list] = {}
    for folder in args.eval:
        for name, eps in episodes_of(Path(folder)).items():
            if name in held and not args.held_out:
                raise SystemExit(f"{name}: a held-out builder is read once, at the end (--held-out)")
            evals[f"{Path(folder).name}/{name}"] = eps
    t0 = time.perf_counter()
    scorer, info = fit(train, epochs=args.epochs, seed=args.seed, features=args.features)
    print(f"trained on {info['episodes']} demonstrations, {info['examples']} steps ({info['unmapped']} not "
          f"expressible) in {time.perf_counter() - t0:.0f} s")
    table = {name: score(scorer, eps) for name, eps in evals.items()}
    print(f"{'suite':<28} {'kind':<12} {'steps first':>12} {'paths':>8} {'unreach':>8}")
    totals: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0, 0])
    for name, kinds in table.items():
        for kind, r in sorted(kinds.items()):
            print(f"{name:<28} {kind:<12} {r['first']:>5}/{r['steps']:<6} {r['path']:>3}/{r['episodes']:<4} "
                  f"{r['unreachable']:>6}")
            t = totals[name.split("/")[0]]
            for i, k in enumerate(("first", "steps", "path", "episodes")):
                t[i] += r[k]
            for w in r["wrong"][: args.wrong]:
                print(f"    {w['task']} step {w['step']}: {w['instruction'][:100]}\n      oracle {w['oracle'][:90]}"
                      f"\n      chose  {w['chose'][:90]}")
    for name, (first, steps, path, eps) in totals.items():
        print(f"{name:<28} {'all':<12} {first:>5}/{steps:<6} {path:>3}/{eps:<4}  ({100 * path / max(eps, 1):.1f}% paths)")
    if args.json:
        Path(args.json).write_text(json.dumps({"train": info, "eval": table}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())

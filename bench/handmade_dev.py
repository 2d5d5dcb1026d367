"""A finished run's checkpoints on the hand-made *development* websites (handmade_dev.json, 24 tasks), task by task,
with where each episode went wrong: the design loop for the hand-made suite that never reads the reported one.

``run`` starts a local stack on a data folder that holds copies of the checkpoints (``<data>/checkpoints/agent/vN``),
evaluates each version with the loop's own code (`Loop.evaluate_handmade`: the run's seed, step caps and concurrency,
one episode per task; the same tasks for every version) and stores each episode (``<out>/<label>/<task>.pb``).
``diagnose`` reads them back offline with this checkout's proposer and the checkpoint's own scorer: success, steps,
how it ended, whether it was ever on the page the oracle ended on (``<out>/oracle-before``), and for an
information task whether a page it saw offered an answer candidate the rubric accepts (the
fact reader's side) and, where one was offered, the rank the scorer gave it (the ranker's side).

    python bench/handmade_dev.py run --data-dir /tmp/hdev --run bench/results/learning/builders-f2/seed1 \\
        --versions agent@1,agent@6 --out /tmp/hdev/episodes
    python bench/handmade_dev.py diagnose --out /tmp/hdev/episodes --checkpoints /tmp/hdev/checkpoints/agent
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from webenv.v1 import collector_pb2, common_pb2

DEV_FILE = "handmade_dev.json"


def run(args: argparse.Namespace) -> int:
    from dataclasses import replace

    from learning_handmade import config_of, read_run
    from webenv.cli.learning import Loop
    from webenv.cli.stack import Stack
    from webenv.v1 import policy_pb2

    result = read_run(args.run)
    if result is None:
        return 2
    cfg = replace(config_of(result, 0), handmade_file=DEV_FILE, out_dir=str(args.data_dir / "loop"))
    stack = Stack(args.data_dir, free_ports=True, sites_count=args.sites_count)
    stack.start(("sites", "browser", "policy", "judge", "collector"), timeout=300,
                on_ready=lambda n, a: print(f"{n} SERVING at {a}", flush=True))
    try:
        loop = Loop(cfg, collector=stack.address("collector"), trainer="127.0.0.1:1", policy=stack.address("policy"),
                    sites=stack.address("sites"), say=lambda s: print(s, flush=True))
        loop.handmade_ids = loop.handmade_suite(args.tasks)
        for version in args.versions.split(","):
            label = version.replace("@", "")
            if version not in ("oracle", "random"):
                loop.policy.LoadCheckpoint(policy_pb2.LoadCheckpointRequest(ref=version), timeout=120)
            loop.evaluate_handmade(version, f"eval-{label}-{args.tag}")
            folder = args.out / f"{label}-{args.tag}"
            folder.mkdir(parents=True, exist_ok=True)
            req = collector_pb2.ReadEpisodesRequest(run_ids=[loop.runs[f"eval-{label}-{args.tag}"]])
            for resp in loop.collector.ReadEpisodes(req, timeout=600):
                ep = resp.episode
                (folder / f"{ep.task.task_id.replace('/', '_')}.pb").write_bytes(ep.SerializeToString())
    finally:
        stack.stop()
    return 0


def _page(url: str) -> str:
    """A URL's host and path, the page an answer or a navigation goal is on (``/`` as ``/index.html``)."""
    page = url.split("//")[-1].split("?")[0].split("#")[0]
    return page + "index.html" if page.endswith("/") else page


def diagnose_episode(ep: collector_pb2.StoredEpisode, scorer, goal: str = "") -> dict:
    """One episode: how it ended, whether it was ever on ``goal`` (the page the oracle ended on), and for information
    tasks the answer side (an accepted answer candidate offered on some page; the best rank the scorer gave it)."""
    from webenv.agent.steps import accepted_answers, episode_steps

    steps = list(episode_steps(ep))
    last = ep.trajectory.steps[-1] if ep.trajectory.steps else None
    final = last.action.WhichOneof("kind") if last else ""
    said = last.action.answer.text if final == "answer" else ""
    row = {"task": ep.task.task_id, "kind": common_pb2.TaskKind.Name(ep.task.kind)[10:].lower(),
           "passed": ep.passed, "steps": len(steps), "truncated": ep.truncated,
           "final": final, "said": said[:120], "urls": [s.url_after.split("//")[-1][:80] for s in ep.trajectory.steps],
           "instruction": ep.task.instruction, "goal": goal,
           "on_goal": bool(goal) and any(_page(s.observation.url) == goal for s in ep.trajectory.steps),
           "ended_on_goal": bool(goal) and _page(ep.trajectory.final_observation.url or
                                                 (last.observation.url if last else "")) == goal}
    if ep.task.kind == common_pb2.TASK_KIND_INFORMATION:
        offered, best = -1, None
        for st in steps:
            ok = accepted_answers(ep.task, st.candidates)
            if not ok:
                continue
            if offered < 0:
                offered = st.index
            lp = scorer.log_probs(st.ctx, st.candidates) if scorer else []
            if lp:
                order = sorted(range(len(lp)), key=lambda i: -lp[i])
                rank = min(order.index(i) for i in ok)
                if best is None or rank < best[1]:
                    answers = sorted((i for i in range(len(lp)) if st.candidates[i].kind == "answer"),
                                     key=lambda i: -lp[i])
                    arank = min(answers.index(i) for i in ok)
                    best = (st.index, rank, arank, st.candidates[order[0]].text[:80],
                            st.candidates[answers[0]].text[:80] if answers else "")
        row |= {"offered_at": offered, "best_rank": best}
    return row


def diagnose(args: argparse.Namespace) -> int:
    from webenv.agent.scorer import Scorer, load

    goals = {}  # task -> the page the oracle's episode ended on
    for f in (args.out / "oracle-before").glob("*.pb"):
        ep = collector_pb2.StoredEpisode.FromString(f.read_bytes())
        goals[ep.task.task_id] = _page(ep.trajectory.final_observation.url or ep.trajectory.steps[-1].observation.url)
    rows = {}
    for folder in sorted(p for p in args.out.iterdir() if p.is_dir()):
        version = folder.name.split("-")[0]
        ck = args.checkpoints / version.replace("agent", "v")
        scorer = Scorer(load(ck)) if ck.is_dir() else None
        eps = [collector_pb2.StoredEpisode.FromString(f.read_bytes()) for f in sorted(folder.glob("*.pb"))]
        rows[folder.name] = [diagnose_episode(ep, scorer, goals.get(ep.task.task_id, "")) for ep in eps]
        ok = sum(r["passed"] for r in rows[folder.name])
        print(f"== {folder.name}: {ok}/{len(rows[folder.name])}")
        for r in rows[folder.name]:
            extra = f" goal={'ended' if r['ended_on_goal'] else 'seen' if r['on_goal'] else 'never'}"
            extra += f" offered@{r['offered_at']} rank={r['best_rank']}" if "offered_at" in r else ""
            print(f"  {'PASS' if r['passed'] else 'fail'} {r['task']:<40} {r['kind'][:4]} steps={r['steps']:>2} "
                  f"{r['final'] + ('/cap' if r['truncated'] else ''):<12} {r['said'][:50]!r}{extra}\n      "
                  + " > ".join(r["urls"]))
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run", help="evaluate versions on handmade_dev and store their episodes")
    r.add_argument("--data-dir", type=Path, required=True, help="a data folder with copies of the checkpoints")
    r.add_argument("--run", type=Path, required=True, help="the folder of the run's learning.json (its config)")
    r.add_argument("--versions", default="agent@1,agent@6")
    r.add_argument("--tasks", type=int, default=24)
    r.add_argument("--tag", default="dev", help="suffix of the stored runs' folders (before / after a fix)")
    r.add_argument("--out", type=Path, required=True)
    r.add_argument("--sites-count", type=int, default=200)
    d = sub.add_parser("diagnose", help="per-task outcome and answer side of stored episodes")
    d.add_argument("--out", type=Path, required=True)
    d.add_argument("--checkpoints", type=Path, required=True, help="folder of vN checkpoint folders")
    d.add_argument("--json", default="")
    args = p.parse_args(argv)
    return {"run": run, "diagnose": diagnose}[args.cmd](args)


if __name__ == "__main__":
    sys.exit(main())

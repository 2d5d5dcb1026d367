"""Answer reach by site builder, offline: what bounds a candidate ranker on information tasks before any ranking.

Of the information tasks the oracle passes, the share whose final page (memory folded over the oracle's pages, as a
policy's would be) offers an answer candidate the rubric accepts (``one``: webenv.agent.steps.accepted_answers, as
the learning loop's ``answer_reach``), one no longer than twice the oracle's answer (or TIGHT_CHARS: ``tight``), or
each expected value in some answer candidate (``each``).

Two steps, so the proposer can be changed and measured again on exactly the same episodes:

    # 1. run the oracle on a local stack (free ports) and store its passed episodes (StoredEpisode, one .pb each)
    python bench/answer_reach.py collect --out .webenv/reach --builders pressroom,wikiwiki --episodes 8
    python bench/answer_reach.py collect --out .webenv/reach --handmade-file handmade_dev.json
    # 2. measure the stored episodes with the proposer of this checkout (no services), optionally saving pages
    python bench/answer_reach.py measure --out .webenv/reach [--pages DIR] [--misses] [--json FILE]

``collect`` refuses the held-out builders (the test-split ones) and the reported hand-made suite (handmade.json)
unless --held-out is given, so a design loop cannot read them by accident. It asks for information tasks only (TaskFilter.kinds) of the named builders (any split unless --split), or
for the information tasks of a hand-made task file (handmade_dev.json: the hand-made sites to design on). Episodes are
stored under ``<out>/<suite>/`` where the suite is the builder or ``handmade:<file stem>``. ``measure`` reports
one / each / tasks per suite and, with --misses, each missed task's instruction, expected values and the answer
candidates offered; --pages writes each final AXTREE (``<suite>-<n>.txt``, instruction and expected values on the
first lines) for unit-test fixtures.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
from pathlib import Path

from webenv.v1 import collector_pb2, common_pb2

#: ``tight``: an accepted candidate at most twice as long as the oracle's answer (or this long): reach that a long
#: report or list of every row on the page does not buy.
TIGHT_CHARS = 80
KINDS = {"information": common_pb2.TASK_KIND_INFORMATION, "navigation": common_pb2.TASK_KIND_NAVIGATION,
         "transaction": common_pb2.TASK_KIND_TRANSACTION}
SPLITS = {"any": common_pb2.SPLIT_UNSPECIFIED, "train": common_pb2.SPLIT_TRAIN,
          "validation": common_pb2.SPLIT_VALIDATION, "test": common_pb2.SPLIT_TEST}


def collect(args: argparse.Namespace) -> None:
    from webenv.cli.learning import HANDMADE_FILE, Loop, LoopConfig
    from webenv.cli.stack import Stack
    from webenv.sites.builders import of_split

    chosen = [b for b in args.builders.split(",") if b]
    held_out = [b for b in chosen if b in of_split(common_pb2.SPLIT_TEST)]
    if held_out and not args.held_out:
        raise SystemExit(f"{', '.join(held_out)}: held-out builders are read once, at the end (--held-out)")
    if args.handmade_file == HANDMADE_FILE and not args.held_out:
        raise SystemExit(f"{HANDMADE_FILE} is the reported hand-made suite, read once, at the end (--held-out)")
    out = Path(args.out)
    data = Path(tempfile.mkdtemp(prefix="reach-stack-"))
    stack = Stack(data, free_ports=True, sites_count=args.sites)
    stack.start(("sites", "browser", "policy", "judge", "collector"), timeout=300)
    try:
        cfg = LoopConfig(miniwob_tasks=0, validation_episodes=0, baselines=(), holdout_family="", heldout_builders=(),
                         handmade_tasks=0, concurrency=args.concurrency, out_dir=str(data / "loop"),
                         handmade_file=args.handmade_file or "handmade_dev.json")
        loop = Loop(cfg, collector=stack.address("collector"), trainer="127.0.0.1:1", policy=stack.address("policy"),
                    sites=stack.address("sites"), say=print)
        jobs: list[tuple[str, dict]] = []
        if args.handmade_file:
            from webenv import paging
            from webenv.v1 import task_pb2
            req = task_pb2.ListTasksRequest(filter=task_pb2.TaskFilter(
                sources=[common_pb2.TASK_SOURCE_RUBRIC_JSON], task_files=[args.handmade_file],
                kinds=[common_pb2.TASK_KIND_INFORMATION]), page_size=1000)
            ids = tuple(sorted(t.task_id for t in paging.iterate(lambda r: loop.sites.ListTasks(r, timeout=60),
                                                                 req, "tasks")))
            jobs.append((f"handmade:{Path(args.handmade_file).stem}",
                         dict(split=common_pb2.SPLIT_UNSPECIFIED, episodes=len(ids), task_ids=ids,
                              source=common_pb2.TASK_SOURCE_RUBRIC_JSON)))
        kinds = tuple(KINDS[k] for k in args.kinds.split(",") if k)
        for b in chosen:
            jobs.append((b, dict(split=SPLITS[args.split], episodes=args.episodes, builders=(b,), families=(),
                                 kinds=kinds)))
        for suite, run_args in jobs:
            run = loop.run(f"reach-{suite.replace(':', '-')}", policy="oracle", seed=args.seed, **run_args)
            folder = out / suite
            folder.mkdir(parents=True, exist_ok=True)
            req = collector_pb2.ReadEpisodesRequest(run_ids=[run.run_id],
                                                    filter=collector_pb2.ExportFilter(passed=True))
            n = 0
            for resp in loop.collector.ReadEpisodes(req, timeout=600):
                ep = resp.episode
                (folder / f"{ep.task.task_id.replace('/', '_')}.pb").write_bytes(ep.SerializeToString())
                n += 1
            print(f"{suite}: {n} passed episodes stored in {folder}")
    finally:
        stack.stop()
        shutil.rmtree(data, ignore_errors=True)  # the stack's store: its passed episodes are under --out


def reach_of(ep: collector_pb2.StoredEpisode) -> dict | None:
    """One passed episode's reach (as Loop.answer_reach), or None when it is no information task with CONTAINS
    answer values."""
    from webenv.agent.steps import accepted_answers, episode_steps, fold

    want = [fold(f.criterion.answer.expected) for g in ep.task.rubric.groups for f in g.facts
            if f.criterion.HasField("answer") and f.criterion.answer.mode == common_pb2.MATCH_MODE_CONTAINS]
    if ep.task.kind != common_pb2.TASK_KIND_INFORMATION or not want:
        return None
    steps = list(episode_steps(ep))
    if not steps:
        return None
    cands = steps[-1].candidates
    answers = [c for c in cands if c.kind == "answer" and c.answer_type != "done"]
    folded = [fold(c.action.answer.text) for c in answers]
    ok = accepted_answers(ep.task, cands) or ()
    oracle = ep.trajectory.steps[-1].action.answer.text if ep.trajectory.steps else ""
    tight = max(2 * len(oracle), TIGHT_CHARS)
    return {"one": bool(ok), "tight": any(len(cands[i].action.answer.text) <= tight for i in ok), "each": all(any(w in a for a in folded) for w in want),
            "want": want, "answers": [(c.answer_type, c.action.answer.text) for c in answers],
            "axtree": steps[-1].request.observation.axtree,
            "instruction": ep.task.instruction, "task_id": ep.task.task_id,
            "oracle_answer": oracle}


def _tally(row: dict, r: dict, count: str, keys: tuple[str, ...], ok: str) -> None:
    """One measured episode into its suite's row: counted, its figures summed, its task id kept when it missed."""
    row[count] += 1
    for k in keys:
        row[k] += r[k]
    if not r[ok]:
        row["missed"].append(r["task_id"])


def _report(table: dict[str, dict], keys: tuple[str, ...], header: str, row, json_path: str) -> dict[str, dict]:
    """The suites' rows and their total printed (``row`` formats one), and written as JSON when asked."""
    total = {k: sum(r[k] for r in table.values()) for k in keys}
    print(f"{'suite':<22} {header}")
    for name, r in [*table.items(), ("all", total)]:
        print(f"{name:<22} {row(r)}")
    if json_path:
        Path(json_path).write_text(json.dumps(table, indent=1))
    return table


def action_reach_of(ep: collector_pb2.StoredEpisode) -> dict | None:
    """One passed navigation or transaction episode's *action reach*: is every step the oracle took among the
    proposer's candidates on its page (webenv.agent.steps.target_index, as BC finds a demonstration's step)? A step
    outside them is one a ranker can neither learn from the demonstration nor take. None for information tasks."""
    from webenv.agent.steps import episode_steps, grounded_text

    if ep.task.kind == common_pb2.TASK_KIND_INFORMATION:
        return None
    steps = list(episode_steps(ep))
    if not steps:
        return None
    misses = []
    for st in steps:
        if st.target >= 0:
            continue
        rec = st.record
        nxt = steps[st.index + 1].request.observation if st.index + 1 < len(steps) else ep.trajectory.final_observation
        misses.append({"step": st.index, "action": grounded_text(rec.action, rec.action_text, rec.target_element_id,
                                                                  nxt.axtree),
                       "element": rec.target_element_id,
                       "candidates": [c.text for c in st.candidates if c.kind != "answer"],
                       "axtree": st.request.observation.axtree})
    return {"steps": len(steps), "reached": len(steps) - len(misses), "all": not misses, "misses": misses,
            "instruction": ep.task.instruction, "task_id": ep.task.task_id}


def measure_actions(args: argparse.Namespace) -> dict:
    """Action reach per suite (folder): episodes whose every step is a candidate, and steps that are."""
    out = Path(args.out)
    table: dict[str, dict] = {}
    for folder in sorted(p for p in out.iterdir() if p.is_dir()):
        if args.only and folder.name not in args.only.split(","):
            continue
        row = {"episodes": 0, "all": 0, "steps": 0, "reached": 0, "missed": []}
        for f in sorted(folder.glob("*.pb")):
            r = action_reach_of(collector_pb2.StoredEpisode.FromString(f.read_bytes()))
            if r is None:
                continue
            _tally(row, r, "episodes", ("all", "steps", "reached"), "all")
            if args.misses:
                for m in r["misses"]:
                    print(f"--- MISS {folder.name} {r['task_id']} step {m['step']}\n  instruction: {r['instruction']}"
                          f"\n  oracle: {m['action']}  (element {m['element']})")
                    for c in m["candidates"][:60]:
                        print(f"    {c[:160]}")
                    if args.pages:
                        print("  page:\n" + "\n".join("    " + ln for ln in m["axtree"].splitlines()[:120]))
        if row["episodes"]:
            table[folder.name] = row
    return _report(table, ("episodes", "all", "steps", "reached"), f"{'episodes all':>13} {'steps reached':>14}",
                   lambda r: f"{r['all']:>5}/{r['episodes']:<7} {r['reached']:>6}/{r['steps']:<7}", args.json)


def measure(args: argparse.Namespace) -> dict:
    out = Path(args.out)
    table: dict[str, dict] = {}
    pages = Path(args.pages) if args.pages else None
    if pages:
        pages.mkdir(parents=True, exist_ok=True)
    for folder in sorted(p for p in out.iterdir() if p.is_dir()):
        if args.only and folder.name not in args.only.split(","):
            continue
        row = {"tasks": 0, "one": 0, "tight": 0, "each": 0, "missed": []}
        for i, f in enumerate(sorted(folder.glob("*.pb"))):
            ep = collector_pb2.StoredEpisode.FromString(f.read_bytes())
            r = reach_of(ep)
            if r is None:
                continue
            _tally(row, r, "tasks", ("one", "each", "tight"), "one")
            if args.misses and not r["one"]:
                print(f"--- MISS {folder.name} {r['task_id']}\n  instruction: {r['instruction']}\n  want: {r['want']}"
                      f"\n  oracle said: {r['oracle_answer']}")
                for kind, text in r["answers"]:
                    print(f"    [{kind}] {text[:160]}")
            if pages:
                head = f"# instruction: {r['instruction']}\n# expected: {json.dumps(r['want'])}\n"
                (pages / f"{folder.name.replace(':', '-')}-{i:02d}.txt").write_text(head + r["axtree"])
        table[folder.name] = row
    return _report(table, ("tasks", "one", "tight", "each"), f"{'one':>5} {'tight':>5} {'each':>5} {'tasks':>5}",
                   lambda r: f"{r['one']:>5} {r['tight']:>5} {r['each']:>5} {r['tasks']:>5}", args.json)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("collect", help="run the oracle on a local stack and store its passed episodes")
    c.add_argument("--out", required=True)
    c.add_argument("--builders", default="", help="comma-separated builders (information tasks of each)")
    c.add_argument("--episodes", type=int, default=8, help="episodes per builder")
    c.add_argument("--split", choices=sorted(SPLITS), default="any")
    c.add_argument("--kinds", default="information",
                   help="comma-separated kinds of task (information, navigation, transaction): measure's action "
                        "reach reads the navigation and transaction episodes")
    c.add_argument("--handmade-file", default="", help="also every information task of this rubric task file")
    c.add_argument("--seed", type=int, default=11)
    c.add_argument("--sites", type=int, default=80, help="websites of the local stack's synthetic web")
    c.add_argument("--concurrency", type=int, default=2)
    c.add_argument("--held-out", action="store_true",
                   help="allow held-out builders (test split) and the reported hand-made suite: for the one final read")
    stored = argparse.ArgumentParser(add_help=False)  # what measure and actions read and write
    stored.add_argument("--out", required=True)
    stored.add_argument("--only", default="", help="comma-separated suites (folders) to measure")
    stored.add_argument("--json", default="")
    m = sub.add_parser("measure", parents=[stored], help="answer reach of stored episodes with this checkout's proposer")
    m.add_argument("--pages", default="", help="write each final AXTREE page here")
    m.add_argument("--misses", action="store_true", help="print each missed task with its answer candidates")
    a = sub.add_parser("actions", parents=[stored], help="action reach of stored navigation and transaction episodes")
    a.add_argument("--misses", action="store_true", help="print each step outside the candidates")
    a.add_argument("--pages", action="store_true", help="with --misses, the page of each missed step")
    args = p.parse_args(argv)
    {"collect": collect, "measure": measure, "actions": measure_actions}[args.cmd](args)


if __name__ == "__main__":
    sys.exit(main())

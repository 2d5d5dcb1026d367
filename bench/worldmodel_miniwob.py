"""World-model fidelity on MiniWoB++ pages, a kind of website it never trained on:
`python bench/worldmodel_miniwob.py --model .webenv/worldmodel/model`.

Starts the collection services (sites, browser farm, policy, judge, collector) on free ports, records MiniWoB++
episodes on the farm (real Chromium) at two of WebWorld's levels, the oracle on every task it solves and the random
policy on the same tasks, exports them as TRANSITIONS (a11y tree and Markdown, as `webenv worldmodel build` does),
joins them with the model's own training transitions (retrieval's data; the MiniWoB++ host `miniwob.web.test` is
the only held-out website), and scores the model against copy-state, lookup, rules alone and retrieval alone with
`python -m webenv.worldmodel evaluate`, writing bench/results/worldmodel-miniwob.{json,md}.

Why it is a separate script: the build's evaluation scores held-out websites of the synthetic families it trained
on (in distribution); leave-one-family-out (`evaluate --hold-out-family`) removes one of those families; this is the
third row of "unseen": pages built by other people, with other markup, layouts and vocabulary.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import sys
import time
from pathlib import Path

from webenv.cli.stack import Stack
from webenv.cli.wmbuild import COLLECTION_SERVICES, export_transitions, worldmodel
from webenv.client import make_sync_channel
from webenv.client.watch import to_end
from webenv.v1 import collector_pb2, collector_pb2_grpc, common_pb2, policy_pb2, policy_pb2_grpc

ROOT = Path(__file__).resolve().parent.parent
HOST = "miniwob.web.test"


def record(stack: Stack, policy: str, task_ids: list[str], repeats: int, horizon: int, seed: int,
           data: Path) -> dict:
    """One run of ``policy`` on the MiniWoB++ tasks, exported as TRANSITIONS (a11y tree, Markdown)."""
    stub = collector_pb2_grpc.CollectorServiceStub(make_sync_channel(stack.address("collector"), timeout=None))
    # the oracle's click-link scripts find MiniWoB's span links in the DOM format; it is not kept
    obs = [common_pb2.OBSERVATION_FORMAT_AXTREE, common_pb2.OBSERVATION_FORMAT_MARKDOWN, common_pb2.OBSERVATION_FORMAT_DOM]
    spec = collector_pb2.RunSpec(
        name=f"worldmodel-miniwob-{policy}", policy=policy, seed=seed, episodes=len(task_ids) * repeats, concurrency=4,
        level=collector_pb2.COLLECTION_LEVEL_TASK_ORIENTED,  # both start from a task's page; random acts at random
        horizons=collector_pb2.Horizons(easy=horizon, medium=horizon, hard=horizon),
        observation_spec=common_pb2.ObservationSpec(formats=obs), keep_formats=obs[:2])
    spec.tasks.sources.append(common_pb2.TASK_SOURCE_MINIWOB)
    spec.tasks.task_ids.extend(task_ids)
    t0 = time.monotonic()
    run = stub.StartRun(collector_pb2.StartRunRequest(spec=spec, request_id=f"wm-miniwob-{policy}-{os.urandom(4).hex()}"),
                        timeout=120).run
    last = to_end(lambda: stub.WatchRun(collector_pb2.WatchRunRequest(run_id=run.run_id)))
    if last is None or last.run.state != collector_pb2.RUN_STATE_SUCCEEDED:
        raise RuntimeError(f"{policy} run {run.run_id} did not succeed: {last.run.error if last else 'no answer'}")
    files = export_transitions(stub, run.run_id, data / "export" / policy)
    c = last.run.counts
    print(f"{policy}: {c.finished} episodes ({c.passed} passed, {c.errored} errored), {c.steps} steps "
          f"in {time.monotonic() - t0:.0f} s", flush=True)
    return {"run_id": run.run_id, "episodes": c.finished, "passed": c.passed, "errored": c.errored, "steps": c.steps,
            "seconds": round(time.monotonic() - t0, 1), "files": files}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default=str(ROOT / ".webenv" / "worldmodel" / "model"), help="a built model directory")
    ap.add_argument("--tasks", type=int, default=0, help="MiniWoB++ tasks the oracle solves, taken in name order "
                                                        "(0: all of them)")
    ap.add_argument("--random-repeats", type=int, default=3, help="random-policy episodes per task")
    ap.add_argument("--horizon", type=int, default=10)
    ap.add_argument("--work", default=str(ROOT / ".webenv" / "worldmodel-miniwob"), help="stack and exports")
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "worldmodel-miniwob.json"))
    args = ap.parse_args()
    model = Path(args.model).resolve()
    train_data = model.parent / "data" / "transitions.jsonl"
    if not (model / "config.json").exists():
        print(f"--model: {model} is not a model directory (build one: webenv worldmodel build --preset quick)", file=sys.stderr)
        return 2
    if not train_data.exists():
        print(f"--model: its training data {train_data} is missing (retrieval indexes it)", file=sys.stderr)
        return 2
    work = Path(args.work).resolve()
    data = work / "data"
    data.mkdir(parents=True, exist_ok=True)
    stack = Stack(work / "stack", free_ports=True)
    try:
        stack.start(COLLECTION_SERVICES)
        listed = policy_pb2_grpc.PolicyServiceStub(make_sync_channel(stack.address("policy"), timeout=None)).ListPolicies(
            policy_pb2.ListPoliciesRequest(), timeout=30).policies
        solved = sorted(t for p in listed if p.name == "oracle" for t in p.solved_task_ids if t.startswith("miniwob/"))
        if len(solved) < args.tasks:
            print(f"--tasks: the oracle solves {len(solved)} MiniWoB++ tasks, fewer than {args.tasks}", file=sys.stderr)
            return 2
        task_ids = solved[:args.tasks or None]
        runs = {"oracle": record(stack, "oracle", task_ids, 1, args.horizon, 1, data),
                "random": record(stack, "random", task_ids, args.random_repeats, args.horizon, 2, data)}
    finally:
        stack.stop()
    # retrieval's data: the model's own training transitions (train split only), beside the MiniWoB++ ones (test)
    train_only = data / "train-transitions.jsonl"
    with train_data.open() as src, train_only.open("w") as dst:
        dst.writelines(line for line in src if json.loads(line).get("split") == "train")
    (data / "sites.json").write_text(json.dumps({HOST: {"family": "miniwob", "split": "test"}}))
    joined = data / "miniwob-transitions.jsonl"
    dataset = ["dataset", "--sites", str(data / "sites.json"), "--out", str(joined)]
    for r in runs.values():
        dataset += ["--export", f"task_oriented:{r['files']['axtree']}:{r['files']['markdown']}"]
    say = functools.partial(print, flush=True)
    worldmodel(dataset, say)
    out = Path(args.out)
    worldmodel(["evaluate", "--data", str(train_only), "--data", str(joined), "--model", str(model),
                "--rollout-episodes", "0", "--out", str(out)], say)
    result = json.loads(out.read_text())
    result["recorded"] = {"tasks": task_ids, "horizon": args.horizon, "runs": runs}
    out.write_text(json.dumps(result, indent=2))
    recorded = ", ".join(f"{name} {r['episodes']} episodes ({r['passed']} passed, {r['errored']} errored), {r['steps']} steps"
                         for name, r in runs.items())
    head = ["# World model on MiniWoB++ pages: a kind of website it never trained on", "",
            f"`python bench/worldmodel_miniwob.py --model {args.model}` (a `webenv worldmodel build --preset quick` model).", "",
            f"Recorded on the farm (real Chromium): the {len(task_ids)} MiniWoB++ tasks the oracle solves, {recorded}; "
            f"step cap {args.horizon}. Retrieval indexes the model's own training transitions (synthetic families "
            "only); every MiniWoB++ transition is held out.", "", ""]
    md = out.with_suffix(".md")
    md.write_text("\n".join(head) + md.read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""`webenv worldmodel build`: collect -> dataset -> train -> evaluate, leaving a model directory the world model serves.

The world model learns from the platform's own data, through the same path as any user's data: the collector
runs episodes on the sites service's websites with the browser farm at WebWorld's three levels (random crawl,
exploration, task-oriented oracle episodes), stores them, and its TRANSITIONS export is the training data. The
websites are picked from the task catalog, train and held-out by the catalog's own split (crawl episodes carry
no task, so their split is taken from the catalog by site, never guessed). The world model's offline commands
(`python -m webenv.worldmodel dataset|train|evaluate|card`) run as subprocesses: services meet only through the
protos and the command line, never by importing each other.
"""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

from webenv import paging
from webenv.cli.stack import Stack
from webenv.client import make_sync_channel
from webenv.client.watch import to_end
from webenv.v1 import collector_pb2, collector_pb2_grpc, common_pb2, task_pb2, task_pb2_grpc

LEVELS = ("random_crawl", "exploration", "task_oriented")
#: The services a collection needs (the trainer and the world model are not among them).
COLLECTION_SERVICES = ("sites", "browser", "policy", "judge", "collector")
#: What each level runs: (policy, start from the sites' home pages or from their tasks).
LEVEL_POLICY = {"random_crawl": "random", "exploration": "explore", "task_oriented": "oracle"}


@dataclass
class BuildPlan:
    """How much to collect and train; the presets are measured on a shared 2-core machine (see the README)."""

    train_sites_per_family: int = 3
    test_sites_per_family: int = 1
    crawl_episodes_per_site: int = 1
    explore_episodes_per_site: int = 1
    task_episodes_per_site: int = 3
    horizon: int = 30
    sites_count: int = 200
    concurrency: int = 6
    train_minutes: float = 5.0
    train_steps: int = 4000
    seed: int = 0
    families: list[str] = field(default_factory=list)  # empty: every family of the catalog
    extra_train_args: list[str] = field(default_factory=list)

    @classmethod
    def preset(cls, name: str) -> BuildPlan:
        if name == "smoke":  # the pipeline end to end in about a minute (tests); the model is not worth serving
            return cls(train_sites_per_family=1, test_sites_per_family=1, task_episodes_per_site=1, horizon=4,
                       concurrency=4, families=["shop"], train_minutes=0.5, train_steps=10,
                       extra_train_args=["--size", "tiny", "--eval-every", "10"])
        if name == "quick":
            return cls(train_sites_per_family=3, test_sites_per_family=1, task_episodes_per_site=2, train_minutes=2.0)
        if name == "standard":  # 48 training websites: measured, 32 left some rollout horizons below keep-start
            return cls(train_sites_per_family=6, test_sites_per_family=2)
        if name == "large":
            return cls(train_sites_per_family=10, test_sites_per_family=3, crawl_episodes_per_site=2,
                       explore_episodes_per_site=2, task_episodes_per_site=4, sites_count=400, train_minutes=20.0,
                       train_steps=12000)
        raise ValueError(f"preset: expected smoke, quick, standard or large, got {name!r}")


Say = Callable[[str], None]


def pick_sites(tasks: task_pb2_grpc.TaskServiceStub, plan: BuildPlan) -> dict[str, dict[str, str]]:
    """host -> {"family", "split"}: the first sites of each family in each split, as the task catalog splits them."""
    want = {common_pb2.SPLIT_TRAIN: plan.train_sites_per_family, common_pb2.SPLIT_TEST: plan.test_sites_per_family}
    out: dict[str, dict[str, str]] = {}
    for split, per_family in want.items():
        by_family: dict[str, set[str]] = {}
        req = task_pb2.ListTasksRequest(filter=task_pb2.TaskFilter(
            sources=[common_pb2.TASK_SOURCE_SYNTHETIC], split=split, families=plan.families), page_size=1000)
        for t in paging.iterate(lambda r: tasks.ListTasks(r, timeout=60), req, "tasks"):
            by_family.setdefault(t.family, set()).add(t.site)
        name = "test" if split == common_pb2.SPLIT_TEST else "train"
        for family, sites in sorted(by_family.items()):
            if len(sites) < per_family:
                raise RuntimeError(f"only {len(sites)} {name} sites of family {family}: raise sites_count")
            for host in sorted(sites)[:per_family]:
                out[host] = {"family": family, "split": name}
    return out


def level_spec(level: str, sites: dict[str, dict[str, str]], plan: BuildPlan) -> collector_pb2.RunSpec:
    """The run of one collection level over the picked sites."""
    hosts = sorted(sites)
    obs = [common_pb2.OBSERVATION_FORMAT_AXTREE, common_pb2.OBSERVATION_FORMAT_MARKDOWN]
    keep = list(obs)
    if level == "task_oriented":
        obs.append(common_pb2.OBSERVATION_FORMAT_HTML)  # the judge's page criteria read HTML; it is not kept
    spec = collector_pb2.RunSpec(
        name=f"worldmodel-{level}", policy=LEVEL_POLICY[level], seed=plan.seed + LEVELS.index(level),
        concurrency=plan.concurrency, level=getattr(collector_pb2, f"COLLECTION_LEVEL_{level.upper()}"),
        horizons=collector_pb2.Horizons(easy=plan.horizon, medium=plan.horizon, hard=plan.horizon),
        observation_spec=common_pb2.ObservationSpec(formats=obs), keep_formats=keep)
    if level == "task_oriented":
        spec.tasks.sources.append(common_pb2.TASK_SOURCE_SYNTHETIC)
        spec.tasks.sites.extend(hosts)
        spec.episodes = plan.task_episodes_per_site * len(hosts)
    else:
        per_site = plan.crawl_episodes_per_site if level == "random_crawl" else plan.explore_episodes_per_site
        spec.start_urls.extend(f"http://{h}/" for h in hosts)
        spec.episodes = per_site * len(hosts)
    return spec


def export_transitions(stub: collector_pb2_grpc.CollectorServiceStub, run_id: str, folder: Path) -> dict[str, str]:
    """A run's TRANSITIONS exports the world model's dataset joins: {"axtree": path, "markdown": path} under folder."""
    files = {}
    for fmt, name in ((common_pb2.OBSERVATION_FORMAT_AXTREE, "axtree"), (common_pb2.OBSERVATION_FORMAT_MARKDOWN, "markdown")):
        r = stub.ExportRun(collector_pb2.ExportRunRequest(
            run_id=run_id, format=collector_pb2.EXPORT_FORMAT_TRANSITIONS, destination=str((folder / name).resolve()),
            transition_format=fmt), timeout=600)
        files[name] = r.paths[0]
    return files


def collect(stack: Stack, plan: BuildPlan, data: Path, say: Say, watch: Callable | None = None) -> dict:
    """Run the three levels on a started stack and export them as TRANSITIONS (a11y tree and Markdown, whose
    links carry the href the a11y tree leaves out). Returns what was collected."""
    data.mkdir(parents=True, exist_ok=True)
    tasks = task_pb2_grpc.TaskServiceStub(make_sync_channel(stack.address("sites")))
    sites = pick_sites(tasks, plan)
    (data / "sites.json").write_text(json.dumps(sites, indent=1, sort_keys=True))
    n_test = sum(1 for s in sites.values() if s["split"] == "test")
    say(f"websites: {len(sites) - n_test} train, {n_test} held-out (the task catalog's split)")
    stub = collector_pb2_grpc.CollectorServiceStub(make_sync_channel(stack.address("collector")))
    runs: dict[str, dict] = {}
    for level in LEVELS:
        spec = level_spec(level, sites, plan)
        t0 = time.monotonic()
        run = stub.StartRun(collector_pb2.StartRunRequest(spec=spec, request_id=f"wm-{level}-{os.urandom(4).hex()}"),
                            timeout=120).run
        if watch is not None:
            last = watch(stub, run.run_id, f"{level:<14}")
        else:
            last = to_end(functools.partial(stub.WatchRun, collector_pb2.WatchRunRequest(run_id=run.run_id)))
        c = last.run.counts
        if last.run.state != collector_pb2.RUN_STATE_SUCCEEDED:
            raise RuntimeError(f"{level} run {run.run_id} ended {collector_pb2.RunState.Name(last.run.state)}: {last.run.error}")
        files = export_transitions(stub, run.run_id, data / "export" / level)
        runs[level] = {"run_id": run.run_id, "policy": spec.policy, "episodes": c.finished, "errored": c.errored,
                       "steps": c.steps, "seconds": round(time.monotonic() - t0, 1), "files": files}
        say(f"{level}: {c.finished} episodes, {c.steps} steps ({c.errored} errored) in {runs[level]['seconds']:.0f}s")
    info = {"plan": asdict(plan), "sites": len(sites), "test_sites": n_test, "runs": runs,
            "seconds": round(sum(r["seconds"] for r in runs.values()), 1)}
    (data / "collect.json").write_text(json.dumps(info, indent=1))
    return info


def worldmodel(args: list[str], say: Say, env: dict[str, str] | None = None) -> None:
    """Run `python -m webenv.worldmodel <args>`, its output shown as it comes; a failure raises naming the step."""
    say("$ python -m webenv.worldmodel " + " ".join(args))
    proc = subprocess.run([sys.executable, "-m", "webenv.worldmodel", *args], env={**os.environ, **(env or {})})
    if proc.returncode != 0:
        raise RuntimeError(f"webenv.worldmodel {args[0]} failed with exit code {proc.returncode}")


def build(out: Path, plan: BuildPlan, say: Say, watch: Callable | None = None, reuse_data: bool = False,
          reasoning_fraction: float = 0.0) -> Path:
    """collect -> dataset -> train -> evaluate -> model card; returns the model directory."""
    out = out.resolve()
    data = out / "data"
    t0 = time.monotonic()
    timings: dict[str, float] = {}
    if not (reuse_data and (data / "collect.json").exists()):
        say("[1/4] collect: starting sites, browser farm, policy, judge and collector")
        stack = Stack(out / "stack", free_ports=True, sites_count=plan.sites_count)
        try:
            stack.start(COLLECTION_SERVICES)
            collect(stack, plan, data, say, watch)
        finally:
            stack.stop()
    else:
        say(f"[1/4] collect: reusing {data}")
    info = json.loads((data / "collect.json").read_text())
    # a reused collection keeps the time it took when it ran (its runs), not the seconds spent reading it
    timings["collect_s"] = round(time.monotonic() - t0, 1) if not reuse_data else \
        info.get("seconds", round(sum(r["seconds"] for r in info["runs"].values()), 1))
    t1 = time.monotonic()
    say("[2/4] dataset: joining the exports, splitting by website as the catalog does")
    args = ["dataset", "--sites", str(data / "sites.json"), "--out", str(data / "transitions.jsonl")]
    for level, run in info["runs"].items():
        args += ["--export", f"{level}:{run['files']['axtree']}:{run['files']['markdown']}"]
    worldmodel(args, say)
    timings["dataset_s"] = round(time.monotonic() - t1, 1)
    t2 = time.monotonic()
    say(f"[3/4] train: at most {plan.train_minutes:g} minutes on this CPU")
    worldmodel(["train", "--data", str(data / "transitions.jsonl"), "--out", str(out), "--max-minutes",
                str(plan.train_minutes), "--max-steps", str(plan.train_steps), "--seed", str(plan.seed),
                "--reasoning-fraction", str(reasoning_fraction), *plan.extra_train_args], say)
    timings["train_s"] = round(time.monotonic() - t2, 1)
    t3 = time.monotonic()
    say("[4/4] evaluate on the held-out websites")
    model = out / "model"
    worldmodel(["evaluate", "--data", str(data / "transitions.jsonl"), "--model", str(model), "--out", str(model / "eval.json"),
                "--rollout-steps", str(min(30, plan.horizon))], say)
    timings["evaluate_s"] = round(time.monotonic() - t3, 1)
    timings["total_s"] = round(sum(timings.values()), 1)
    (model / "build.json").write_text(json.dumps({"collect": info, "timings": timings}, indent=1))
    worldmodel(["card", "--model", str(model)], say)
    return model

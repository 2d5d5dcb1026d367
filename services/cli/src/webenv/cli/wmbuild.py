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
from webenv.v1 import (
    collector_pb2,
    collector_pb2_grpc,
    common_pb2,
    policy_pb2,
    policy_pb2_grpc,
    task_pb2,
    task_pb2_grpc,
)

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
    # The split by site builder (empty train_builders: the catalog's split by website, above). Training websites come
    # from train_builders only (the catalog's train split of them), validation websites from validation_builders,
    # held-out websites from eval_builders; no builder may be in two of them.
    train_builders: list[str] = field(default_factory=list)
    validation_builders: list[str] = field(default_factory=list)
    eval_builders: list[str] = field(default_factory=list)
    sites_per_train_builder: int = 4
    sites_per_eval_builder: int = 4
    #: Outside suites recorded beside the websites and scored as held out: "handmade" (the hand-made websites' tasks,
    #: handmade.json), "miniwob" (the MiniWoB++ tasks the oracle solves); oracle and random policy on each.
    outside: list[str] = field(default_factory=list)
    outside_horizon: int = 10
    outside_random_repeats: int = 2

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
        if name == "builders":  # issue 48: train on the train builders' mixture, hold out whole builders
            return cls(train_builders=list(TRAIN_BUILDERS), validation_builders=list(VALIDATION_BUILDERS),
                       eval_builders=list(HELD_OUT_BUILDERS), sites_per_train_builder=4, sites_per_eval_builder=4,
                       task_episodes_per_site=2, train_minutes=2.0, outside=["handmade", "miniwob"])
        if name == "large":
            return cls(train_sites_per_family=10, test_sites_per_family=3, crawl_episodes_per_site=2,
                       explore_episodes_per_site=2, task_episodes_per_site=4, sites_count=400, train_minutes=20.0,
                       train_steps=12000)
        raise ValueError(f"preset: expected smoke, quick, standard, builders or large, got {name!r}")

    def check_builders(self) -> None:
        """A builder is in at most one of train, validation and eval builders; eval builders need train builders."""
        groups = {"train": self.train_builders, "validation": self.validation_builders, "eval": self.eval_builders}
        if (self.validation_builders or self.eval_builders) and not self.train_builders:
            raise ValueError("validation or eval builders need train builders (--train-builders)")
        seen: dict[str, str] = {}
        for name, builders in groups.items():
            for b in builders:
                if b in seen:
                    raise ValueError(f"builder {b!r} is in both the {seen[b]} and the {name} builders")
                seen[b] = name
        bad = [x for x in self.outside if x not in OUTSIDE_SUITES]
        if bad:
            raise ValueError(f"outside suites: unknown {bad}; known: {', '.join(OUTSIDE_SUITES)}")


Say = Callable[[str], None]

#: The sites service's builders by split (services/sites/.../builders/__init__.py REGISTRY; issue 48), named here as
#: the `builders` preset uses them: services meet through the protos, so the catalog is asked whether they exist.
TRAIN_BUILDERS = ("platform", "ledger", "storefront", "forumware", "wikiwiki", "pressroom", "facetgrid", "classic", "dashboard")
VALIDATION_BUILDERS = ("boardroom", "docsite")
HELD_OUT_BUILDERS = ("hashapp", "govform")
OUTSIDE_SUITES = ("handmade", "miniwob")
HANDMADE_FILE = "handmade.json"
MINIWOB_HOST = "miniwob.web.test"


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


def _round_robin(by_family: dict[str, set[str]], n: int) -> list[str]:
    """n hosts taken one family at a time (each family's hosts in name order), so every family is represented."""
    queues = {f: sorted(h) for f, h in sorted(by_family.items())}
    out: list[str] = []
    while len(out) < n and any(queues.values()):
        for f in list(queues):
            if queues[f] and len(out) < n:
                out.append(queues[f].pop(0))
    return out


def pick_sites_by_builder(tasks: task_pb2_grpc.TaskServiceStub, plan: BuildPlan) -> dict[str, dict[str, str]]:
    """host -> {"family", "split", "builder", "suite", "catalog_split"}: the split by site builder. Training websites
    are train builders' websites the catalog puts in its train split; validation and held-out websites are any
    websites of the validation and eval builders (a builder's website is never in two splits: each site has one
    builder). Websites are taken one family at a time, in host order."""
    out: dict[str, dict[str, str]] = {}
    groups = (("train", "train", plan.train_builders, plan.sites_per_train_builder),
              ("validation", "validation", plan.validation_builders, plan.sites_per_eval_builder),
              ("test", "held_out_builders", plan.eval_builders, plan.sites_per_eval_builder))
    for split, suite, builders, per_builder in groups:
        for builder in builders:
            by_family: dict[str, set[str]] = {}
            catalog_split: dict[str, int] = {}
            req = task_pb2.ListTasksRequest(filter=task_pb2.TaskFilter(
                sources=[common_pb2.TASK_SOURCE_SYNTHETIC], builders=[builder], families=plan.families,
                split=common_pb2.SPLIT_TRAIN if split == "train" else common_pb2.SPLIT_UNSPECIFIED), page_size=1000)
            for t in paging.iterate(lambda r: tasks.ListTasks(r, timeout=60), req, "tasks"):
                if t.builder != builder:  # the filter's; checked, as the split by builder rests on it
                    raise RuntimeError(f"ListTasks(builders=[{builder}]) answered task {t.task_id} of builder {t.builder!r}")
                by_family.setdefault(t.family, set()).add(t.site)
                catalog_split[t.site] = t.split
            hosts = _round_robin(by_family, per_builder)
            if len(hosts) < per_builder:
                raise RuntimeError(f"only {len(hosts)} {split} sites of builder {builder}: raise sites_count")
            for host in hosts:
                out[host] = {"family": next(f for f, h in by_family.items() if host in h), "split": split,
                             "builder": builder, "suite": suite,
                             "catalog_split": common_pb2.Split.Name(catalog_split[host]).removeprefix("SPLIT_").lower()}
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


def outside_specs(stack: Stack, plan: BuildPlan) -> tuple[dict[str, collector_pb2.RunSpec], dict[str, dict[str, str]]]:
    """The runs of the outside suites (oracle and random policy on each suite's tasks) and their hosts' sites
    entries (held out, builder and suite = the suite's name)."""
    tasks = task_pb2_grpc.TaskServiceStub(make_sync_channel(stack.address("sites")))
    specs: dict[str, collector_pb2.RunSpec] = {}
    sites: dict[str, dict[str, str]] = {}
    for suite in plan.outside:
        if suite == "handmade":
            req = task_pb2.ListTasksRequest(filter=task_pb2.TaskFilter(sources=[common_pb2.TASK_SOURCE_RUBRIC_JSON],
                                                                       task_files=[HANDMADE_FILE]), page_size=1000)
            listed = list(paging.iterate(lambda r: tasks.ListTasks(r, timeout=60), req, "tasks"))
            ids = sorted(t.task_id for t in listed)
            hosts = sorted({t.site or t.start_url.split("/")[2] for t in listed})
            source = common_pb2.TASK_SOURCE_RUBRIC_JSON
        else:
            policies = policy_pb2_grpc.PolicyServiceStub(make_sync_channel(stack.address("policy")))
            listed_p = policies.ListPolicies(policy_pb2.ListPoliciesRequest(), timeout=30).policies
            ids = sorted(t for p in listed_p if p.name == "oracle" for t in p.solved_task_ids if t.startswith("miniwob/"))
            hosts = [MINIWOB_HOST]
            source = common_pb2.TASK_SOURCE_MINIWOB
        if not ids:
            raise RuntimeError(f"outside suite {suite}: no tasks")
        for host in hosts:
            sites[host] = {"family": suite, "split": "test", "builder": suite, "suite": suite, "catalog_split": "outside"}
        # the oracle's MiniWoB++ scripts find span links in the DOM format, the judge's page criteria read HTML: not kept
        extra = common_pb2.OBSERVATION_FORMAT_DOM if suite == "miniwob" else common_pb2.OBSERVATION_FORMAT_HTML
        for policy, repeats, seed in (("oracle", 1, 11), ("random", plan.outside_random_repeats, 12)):
            keep = [common_pb2.OBSERVATION_FORMAT_AXTREE, common_pb2.OBSERVATION_FORMAT_MARKDOWN]
            spec = collector_pb2.RunSpec(
                name=f"worldmodel-{suite}-{policy}", policy=policy, seed=plan.seed + seed, episodes=len(ids) * repeats,
                concurrency=min(plan.concurrency, 4), level=collector_pb2.COLLECTION_LEVEL_TASK_ORIENTED,
                horizons=collector_pb2.Horizons(easy=plan.outside_horizon, medium=plan.outside_horizon,
                                                hard=plan.outside_horizon),
                observation_spec=common_pb2.ObservationSpec(formats=[*keep, extra]), keep_formats=keep)
            spec.tasks.sources.append(source)
            spec.tasks.task_ids.extend(ids)
            specs[f"{suite}_{policy}"] = spec
    return specs, sites


def collect(stack: Stack, plan: BuildPlan, data: Path, say: Say, watch: Callable | None = None) -> dict:
    """Run the three levels on a started stack and export them as TRANSITIONS (a11y tree and Markdown, whose
    links carry the href the a11y tree leaves out). Returns what was collected."""
    data.mkdir(parents=True, exist_ok=True)
    tasks = task_pb2_grpc.TaskServiceStub(make_sync_channel(stack.address("sites")))
    plan.check_builders()
    sites = pick_sites_by_builder(tasks, plan) if plan.train_builders else pick_sites(tasks, plan)
    specs = {level: level_spec(level, sites, plan) for level in LEVELS}
    outside, outside_sites = outside_specs(stack, plan) if plan.outside else ({}, {})
    specs.update(outside)
    all_sites = {**sites, **outside_sites}
    (data / "sites.json").write_text(json.dumps(all_sites, indent=1, sort_keys=True))
    n_test = sum(1 for s in sites.values() if s["split"] == "test")
    n_val = sum(1 for s in sites.values() if s["split"] == "validation")
    if plan.train_builders:
        say(f"websites: {len(sites) - n_test - n_val} train ({', '.join(plan.train_builders)}), {n_val} validation "
            f"({', '.join(plan.validation_builders) or '-'}), {n_test} held-out ({', '.join(plan.eval_builders) or '-'}): "
            "the split by site builder" + (f"; outside suites: {', '.join(plan.outside)}" if plan.outside else ""))
    else:
        say(f"websites: {len(sites) - n_test} train, {n_test} held-out (the task catalog's split)")
    stub = collector_pb2_grpc.CollectorServiceStub(make_sync_channel(stack.address("collector")))
    runs: dict[str, dict] = {}
    for level, spec in specs.items():
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
                       "steps": c.steps, "seconds": round(time.monotonic() - t0, 1), "files": files,
                       "level": level if level in LEVELS else "task_oriented"}
        say(f"{level}: {c.finished} episodes, {c.steps} steps ({c.errored} errored) in {runs[level]['seconds']:.0f}s")
    info = {"plan": asdict(plan), "sites": len(sites), "test_sites": n_test, "validation_sites": n_val,
            "outside_sites": len(outside_sites), "runs": runs,
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
        args += ["--export", f"{run.get('level', level)}:{run['files']['axtree']}:{run['files']['markdown']}"]
    worldmodel(args, say)
    timings["dataset_s"] = round(time.monotonic() - t1, 1)
    t2 = time.monotonic()
    say(f"[3/4] train: at most {plan.train_minutes:g} minutes on this CPU")
    worldmodel(["train", "--data", str(data / "transitions.jsonl"), "--out", str(out), "--max-minutes",
                str(plan.train_minutes), "--max-steps", str(plan.train_steps), "--seed", str(plan.seed),
                "--reasoning-fraction", str(reasoning_fraction), *plan.extra_train_args], say)
    timings["train_s"] = round(time.monotonic() - t2, 1)
    t3 = time.monotonic()
    say("[4/4] evaluate on the held-out websites" + (" (and builders), then the validation builders' websites"
                                                     if info.get("validation_sites") else ""))
    model = out / "model"
    worldmodel(["evaluate", "--data", str(data / "transitions.jsonl"), "--model", str(model), "--out", str(model / "eval.json"),
                "--rollout-steps", str(min(30, plan.horizon))], say)
    if info.get("validation_sites"):  # the validation builders' websites: where a change is checked before held-out ones
        worldmodel(["evaluate", "--data", str(data / "transitions.jsonl"), "--model", str(model), "--split", "validation",
                    "--out", str(model / "eval-validation.json"), "--rollout-episodes", "0"], say)
    timings["evaluate_s"] = round(time.monotonic() - t3, 1)
    timings["total_s"] = round(sum(timings.values()), 1)
    (model / "build.json").write_text(json.dumps({"collect": info, "timings": timings}, indent=1))
    worldmodel(["card", "--model", str(model)], say)
    return model

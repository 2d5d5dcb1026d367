"""The learning loop across the services (`webenv train`): every arrow an RPC, every number from the store.

    oracle demos (train sites) -> trainer BC (warm start, v1) -> policy LoadCheckpoint -> evaluate (test sites)
    then N times: collect with the current version (train sites, sampling temperature)
                  -> judge (in the collector) -> trainer, the arm's algorithm (signals.py), from the parent
                  -> LoadCheckpoint -> evaluate (test sites, greedy; train sites, greedy)

Iterations are bounded-staleness off-policy: iteration k collects with version k, and version k+1 is
trained from k on the judged rollouts of every iteration so far plus the demonstrations (filtered BC keeps
the passed ones), so data is at most k versions old; each checkpoint records the versions its data came
from (data_policy_versions). With a few dozen successes per iteration on 2 cores, training on the last
iteration alone forgot more than it learned (measured in the first small runs: 10% -> 6.7% on test sites). Evaluation always uses the same seeded test-split
tasks, so versions are compared on the same tasks; success is read back from the stored episodes
(ReadEpisodes) grouped by policy version, with Wilson 95% intervals. The trainer is reached through
WatchJob, which is retried while the trainer restarts: a job resumes from its last resume state.
"""

from __future__ import annotations

import json
import math
import os
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

import grpc
from webenv.v1 import (
    collector_pb2,
    collector_pb2_grpc,
    common_pb2,
    policy_pb2,
    policy_pb2_grpc,
    trainer_pb2,
    trainer_pb2_grpc,
)

from .signals import ARMS

KINDS = {common_pb2.TASK_KIND_INFORMATION: "information", common_pb2.TASK_KIND_NAVIGATION: "navigation",
         common_pb2.TASK_KIND_TRANSACTION: "transaction"}
DIFFS = {common_pb2.DIFFICULTY_EASY: "easy", common_pb2.DIFFICULTY_MEDIUM: "medium", common_pb2.DIFFICULTY_HARD: "hard"}


@dataclass
class LoopConfig:
    """What `webenv train` runs; defaults are the committed benchmark's."""

    name: str = "agent"
    demo_episodes: int = 60  # oracle demonstrations on train-split tasks: the warm start's budget
    reference_demo_episodes: int = 0  # BC on a larger oracle budget, reported beside (0 = skip)
    iterations: int = 4
    collect_episodes: int = 300  # per iteration, train split, sampled with `temperature`
    eval_episodes: int = 200  # test split, greedy; the same tasks every time
    train_eval_episodes: int = 100  # train split, greedy
    temperature: float = 1.0
    algorithm: str = "filtered_bc"  # an arm of webenv.collector.signals.ARMS: policy_gradient, group, partial, branching
    group_size: int = 4  # k of the group and branching arms (a branching anchor is forked k - 1 times)
    branch_step: int = 2  # steps a branching anchor takes before it is forked
    step_normalize: bool = False  # AsyncWebRL's 1/k step normaliser in the RL jobs
    bc_epochs: int = 40
    rl_epochs: int = 4
    sampling: str = "uniform"
    concurrency: int = 0
    baselines: tuple[str, ...] = ("random", "explore")
    baseline_episodes: int = 100  # test episodes per baseline policy
    horizons: tuple[int, int, int] = (12, 16, 20)  # step caps by difficulty (WebGym's horizon caps)
    seed: int = 1
    out_dir: str = "bench/results"
    # Dyna (`webenv train --dyna`): instead of the RL iterations, one step from the BC checkpoint with the same
    # budget of rollouts collected in the world model at `sim_env` vs in real browsers, on the sites it knows.
    dyna: bool = False
    sim_env: str = ""
    sim_sites: tuple[str, ...] = ()


@dataclass
class Evaluation:
    version: str
    split: str
    run_id: str
    episodes: int
    passed: int
    by_kind: dict[str, list[int]] = field(default_factory=dict)  # kind -> [passed, total]
    by_difficulty: dict[str, list[int]] = field(default_factory=dict)

    @property
    def rate(self) -> float:
        return self.passed / self.episodes if self.episodes else 0.0

    def interval(self) -> tuple[float, float]:
        return wilson(self.passed, self.episodes)


def wilson(k: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """Wilson score 95% interval of a binomial proportion."""
    if n == 0:
        return 0.0, 0.0
    p = k / n
    d = 1 + z * z / n
    c = (p + z * z / (2 * n)) / d
    h = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / d
    return max(0.0, c - h), min(1.0, c + h)


@dataclass
class Timing:
    collect: float = 0.0
    train: float = 0.0
    evaluate: float = 0.0
    demos: float = 0.0


class Loop:
    """Drives the services; `say` receives one line per event for the CLI."""

    def __init__(self, cfg: LoopConfig, *, collector: str, trainer: str, policy: str,
                 say: Callable[[str], None] = print) -> None:
        self.cfg = cfg
        self.say = say
        self.collector = collector_pb2_grpc.CollectorServiceStub(grpc.insecure_channel(collector))
        self.trainer_addr = trainer
        self.trainer = trainer_pb2_grpc.TrainerServiceStub(grpc.insecure_channel(trainer))
        self.policy = policy_pb2_grpc.PolicyServiceStub(grpc.insecure_channel(policy))
        self.timing = Timing()
        self.evals: list[Evaluation] = []
        self.runs: dict[str, str] = {}
        self.checkpoints: list[dict] = []

    # -- collector ------------------------------------------------------------------------------------------------
    def run(self, label: str, *, policy: str, split: int, episodes: int, seed: int, temperature: float = 0.0,
            kinds: tuple[int, ...] = (), env_address: str = "", sites: tuple[str, ...] = (),
            arm: bool = False) -> collector_pb2.Run:
        spec = collector_pb2.RunSpec(
            name=f"{self.cfg.name}/{label}", policy=policy, episodes=episodes, seed=seed, env_address=env_address,
            concurrency=self.cfg.concurrency, level=collector_pb2.COLLECTION_LEVEL_TASK_ORIENTED,
            sampling=collector_pb2.SamplingStrategy.Value(f"SAMPLING_STRATEGY_{self.cfg.sampling.upper().replace('-', '_')}"),
            act_options=policy_pb2.ActOptions(temperature=temperature),
            horizons=collector_pb2.Horizons(easy=self.cfg.horizons[0], medium=self.cfg.horizons[1],
                                            hard=self.cfg.horizons[2]),
        )
        spec.tasks.split = split
        spec.tasks.sources.append(common_pb2.TASK_SOURCE_SYNTHETIC)
        spec.tasks.kinds.extend(kinds)
        spec.tasks.sites.extend(sites)
        # the judge reads HTML (page criteria); the policy and the trainer read the AXTREE, the one format kept
        spec.observation_spec.formats.extend([common_pb2.OBSERVATION_FORMAT_AXTREE, common_pb2.OBSERVATION_FORMAT_HTML])
        spec.keep_formats.append(common_pb2.OBSERVATION_FORMAT_AXTREE)
        if arm:  # an RL iteration's collection, shaped by the algorithm's arm (groups, branching)
            ARMS[self.cfg.algorithm].collect(spec, group_size=self.cfg.group_size, branch_step=self.cfg.branch_step)
        run = self.collector.StartRun(collector_pb2.StartRunRequest(request_id=os.urandom(8).hex(), spec=spec),
                                      timeout=60).run
        t0 = time.monotonic()
        last = run
        for resp in self.collector.WatchRun(collector_pb2.WatchRunRequest(run_id=run.run_id)):
            last = resp.run
        c = last.counts
        self.say(f"  run {label}: {c.passed}/{c.finished} passed, {c.errored} errored, {c.steps} steps "
                 f"in {time.monotonic() - t0:.0f}s ({run.run_id})")
        if last.state == collector_pb2.RUN_STATE_FAILED:
            raise RuntimeError(f"run {label} failed: {last.error}")
        self.runs[label] = run.run_id
        return last

    def evaluate(self, version: str, split: int, episodes: int, label: str) -> Evaluation:
        t0 = time.monotonic()
        seed = self.cfg.seed * 7919 + (1 if split == common_pb2.SPLIT_TEST else 2)
        run = self.run(label, policy=version, split=split, episodes=episodes, seed=seed)
        ev = self.score(run.run_id, version, "test" if split == common_pb2.SPLIT_TEST else "train")
        self.timing.evaluate += time.monotonic() - t0
        self.evals.append(ev)
        lo, hi = ev.interval()
        self.say(f"  {version} on {ev.split} sites: {ev.rate:.1%} [{lo:.1%}, {hi:.1%}] ({ev.passed}/{ev.episodes})")
        return ev

    def score(self, run_id: str, version: str, split: str) -> Evaluation:
        """Success of a run, from the stored episodes (errored episodes count as failures)."""
        ev = Evaluation(version, split, run_id, 0, 0, defaultdict(lambda: [0, 0]), defaultdict(lambda: [0, 0]))
        req = collector_pb2.ReadEpisodesRequest(run_ids=[run_id], filter=collector_pb2.ExportFilter(include_errored=True))
        for resp in self.collector.ReadEpisodes(req, timeout=600):
            ep = resp.episode
            ev.episodes += 1
            ev.passed += int(ep.passed)
            for table, key in ((ev.by_kind, KINDS.get(ep.task.kind, "other")),
                               (ev.by_difficulty, DIFFS.get(ep.task.difficulty, "other"))):
                table[key][0] += int(ep.passed)
                table[key][1] += 1
        ev.by_kind, ev.by_difficulty = dict(ev.by_kind), dict(ev.by_difficulty)
        return ev

    # -- trainer --------------------------------------------------------------------------------------------------
    def train(self, label: str, algorithm: int, run_ids: list[str], parent: str, epochs: int) -> trainer_pb2.Checkpoint:
        t0 = time.monotonic()
        spec = trainer_pb2.JobSpec(
            name=self.cfg.name, algorithm=algorithm, model=trainer_pb2.MODEL_KIND_SCORER, parent=parent,
            # demonstrations the judge failed (a flaky page, not the oracle) are not imitated either
            data=trainer_pb2.TrainingData(run_ids=run_ids, filter=collector_pb2.ExportFilter(drop_repeated=True,
                                                                                             passed=True)),
            hyper=trainer_pb2.Hyperparameters(epochs=epochs, seed=self.cfg.seed, checkpoint_every=20),
            labels={"loop": label},
        )
        if algorithm == self.rl_algorithm() and algorithm != trainer_pb2.TRAINING_ALGORITHM_BC:
            ARMS[self.cfg.algorithm].job(spec, step_normalize=self.cfg.step_normalize)
        job = self.trainer.StartJob(trainer_pb2.StartJobRequest(request_id=os.urandom(8).hex(), spec=spec),
                                    timeout=60).job
        job = self.watch_job(job.job_id)
        if job.state == trainer_pb2.JOB_STATE_FAILED and parent and job.error.startswith("no training examples"):
            # an iteration without signal (every group's rewards equal): no update, the parent goes on collecting
            self.say(f"  {label}: no update ({job.error}); {parent} stays")
            return self.trainer.GetCheckpoint(trainer_pb2.GetCheckpointRequest(ref=parent), timeout=30).checkpoint
        if job.state != trainer_pb2.JOB_STATE_SUCCEEDED:
            raise RuntimeError(f"training job {job.job_id} ended {trainer_pb2.JobState.Name(job.state)}: {job.error}")
        p = job.progress
        self.timing.train += time.monotonic() - t0
        cp = job.checkpoint
        self.say(f"  trained {cp.ref} ({label}): {p.examples} examples from {p.episodes} episodes, {p.step} steps, "
                 f"loss {p.loss:.3f}, val acc {p.validation_accuracy:.1%}, {p.examples_per_second:.0f} ex/s")
        self.checkpoints.append({"ref": cp.ref, "parent": cp.parent, "label": label, "examples": cp.examples,
                                 "episodes": cp.episodes, "steps": cp.steps, "loss": round(cp.loss, 4),
                                 "validation_accuracy": round(p.validation_accuracy, 4),
                                 "examples_per_second": round(p.examples_per_second, 1),
                                 "data_policy_versions": list(cp.data_policy_versions), "resumes": job.resumes})
        loaded = self.policy.LoadCheckpoint(policy_pb2.LoadCheckpointRequest(ref=cp.ref), timeout=120)
        self.say(f"  policy serves {loaded.policy.version} (loaded in {loaded.load_seconds * 1000:.0f} ms)")
        return cp

    def watch_job(self, job_id: str, patience: float = 300.0) -> trainer_pb2.Job:
        """Follow a job to its end, riding out trainer restarts (UNAVAILABLE) for up to ``patience`` seconds."""
        job = None
        down_since = None
        while True:
            try:
                for resp in self.trainer.WatchJob(trainer_pb2.WatchJobRequest(job_id=job_id)):
                    job = resp.job
                    down_since = None
                if job is not None and job.state in (trainer_pb2.JOB_STATE_SUCCEEDED, trainer_pb2.JOB_STATE_FAILED,
                                                     trainer_pb2.JOB_STATE_STOPPED):
                    return job
            except grpc.RpcError as exc:
                if exc.code() not in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.CANCELLED):
                    raise
                down_since = down_since or time.monotonic()
                if time.monotonic() - down_since > patience:
                    raise
                self.say(f"  trainer unavailable ({exc.code().name}); waiting for it to come back")
                time.sleep(2.0)

    # -- the loop -------------------------------------------------------------------------------------------------
    def warm_start(self) -> tuple[collector_pb2.Run, trainer_pb2.Checkpoint]:
        """Oracle demonstrations on train sites -> BC -> evaluated on the test sites: (demo run, checkpoint)."""
        cfg = self.cfg
        self.say(f"warm start: {cfg.demo_episodes} oracle demonstrations on train sites")
        t0 = time.monotonic()
        demos = self.run("demos", policy="oracle", split=common_pb2.SPLIT_TRAIN, episodes=cfg.demo_episodes,
                         seed=cfg.seed * 31)
        self.timing.demos += time.monotonic() - t0
        cp = self.train("bc", trainer_pb2.TRAINING_ALGORITHM_BC, [demos.run_id], "", cfg.bc_epochs)
        self.evaluate(cp.ref, common_pb2.SPLIT_TEST, cfg.eval_episodes, "eval-bc-test")
        return demos, cp

    def rl_algorithm(self) -> int:
        return ARMS[self.cfg.algorithm].algorithm

    def run_loop(self) -> dict:
        cfg = self.cfg
        if cfg.dyna:
            return self.run_dyna()
        t_start = time.monotonic()
        for base in cfg.baselines:
            self.say(f"baseline {base}")
            self.evaluate(base, common_pb2.SPLIT_TEST, cfg.baseline_episodes, f"eval-{base}-test")
        demos, cp = self.warm_start()
        if cfg.train_eval_episodes:
            self.evaluate(cp.ref, common_pb2.SPLIT_TRAIN, cfg.train_eval_episodes, "eval-bc-train")
        algorithm = self.rl_algorithm()
        data = [demos.run_id]  # the replay set: demonstrations + every iteration's rollouts (judged)
        for it in range(1, cfg.iterations + 1):
            self.say(f"iteration {it}/{cfg.iterations}: collect with {cp.ref}")
            t0 = time.monotonic()
            run = self.run(f"collect-{it}", policy=cp.ref, split=common_pb2.SPLIT_TRAIN, episodes=cfg.collect_episodes,
                           seed=cfg.seed * 1000 + it, temperature=cfg.temperature, arm=True)
            self.timing.collect += time.monotonic() - t0
            data.append(run.run_id)
            cp = self.train(f"rl-{it}", algorithm, list(data), cp.ref, cfg.rl_epochs)
            self.evaluate(cp.ref, common_pb2.SPLIT_TEST, cfg.eval_episodes, f"eval-{it}-test")
            if cfg.train_eval_episodes:
                self.evaluate(cp.ref, common_pb2.SPLIT_TRAIN, cfg.train_eval_episodes, f"eval-{it}-train")
        if cfg.reference_demo_episodes:
            self.say(f"reference: BC on {cfg.reference_demo_episodes} oracle demonstrations")
            ref_name = f"{cfg.name}-ref"
            demos = self.run("reference-demos", policy="oracle", split=common_pb2.SPLIT_TRAIN,
                             episodes=cfg.reference_demo_episodes, seed=cfg.seed * 37)
            saved, self.cfg.name = self.cfg.name, ref_name
            try:
                ref = self.train("reference-bc", trainer_pb2.TRAINING_ALGORITHM_BC, [demos.run_id], "", cfg.bc_epochs)
            finally:
                self.cfg.name = saved
            self.evaluate(ref.ref, common_pb2.SPLIT_TEST, cfg.eval_episodes, "eval-reference-test")
        return self.result(t_start)

    def result(self, t_start: float) -> dict:
        return {"config": asdict(self.cfg), "wall_seconds": round(time.monotonic() - t_start, 1),
                "timing": asdict(self.timing), "runs": self.runs, "checkpoints": self.checkpoints,
                "evaluations": [asdict(e) | {"rate": e.rate, "ci95": e.interval()} for e in self.evals]}

    def run_dyna(self) -> dict:
        """World-model rollouts as training data (Dyna), against the same budget of real ones.

        BC warm start on oracle demonstrations, then two arms from that checkpoint: `collect` episodes with the BC
        policy in real browsers, or in the world model (the collector's run with env_address = the world model),
        both on train-split tasks of the websites the world model has start pages for; each arm trains WebGym's
        filtered BC on demonstrations + its judged rollouts; every checkpoint is evaluated in real browsers on the
        test-split websites (never in the simulator, never on the training websites).
        """
        cfg = self.cfg
        t_start = time.monotonic()
        demos, bc = self.warm_start()
        algorithm = self.rl_algorithm()
        for arm, env in (("real", ""), ("sim", cfg.sim_env)):
            self.say(f"arm {arm}: {cfg.collect_episodes} rollouts with {bc.ref} "
                     f"{'in the world model' if env else 'in real browsers'} on {len(cfg.sim_sites)} websites")
            t0 = time.monotonic()
            run = self.run(f"collect-{arm}", policy=bc.ref, split=common_pb2.SPLIT_TRAIN,
                           episodes=cfg.collect_episodes, seed=cfg.seed * 1000 + 1, temperature=cfg.temperature,
                           env_address=env, sites=cfg.sim_sites, arm=True)
            self.timing.collect += time.monotonic() - t0
            cp = self.train(f"dyna-{arm}", algorithm, [demos.run_id, run.run_id], bc.ref, cfg.rl_epochs)
            self.evaluate(cp.ref, common_pb2.SPLIT_TEST, cfg.eval_episodes, f"eval-{arm}-test")
        return self.result(t_start)


def write_report(result: dict, out_dir: Path, command: str) -> list[Path]:
    """learning.md (tables), learning.json (everything) and learning.png (success by iteration); for a Dyna run
    dyna.md and dyna.json (the arms' table; no plot)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    evals = result["evaluations"]
    dyna = bool(result["config"].get("dyna"))
    stem = "dyna" if dyna else "learning"
    (out_dir / f"{stem}.json").write_text(json.dumps(result, indent=1))
    title = ("# Dyna: world-model rollouts vs the same budget of real rollouts, success on unseen websites" if dyna
             else "# Learning loop: success on unseen (test-split) websites")
    lines = [title, "", f"Command: `{command}`", "",
             f"Wall time {result['wall_seconds']:.0f} s: " + ", ".join(
                 f"{k} {v:.0f} s ({v / max(result['wall_seconds'], 1e-9):.0%})" for k, v in result["timing"].items()), "",
             "| policy | split | success | 95% CI | episodes | run |", "| --- | --- | --- | --- | --- | --- |"]
    for e in evals:
        lo, hi = e["ci95"]
        lines.append(f"| {e['version']} | {e['split']} | {e['rate']:.1%} | [{lo:.1%}, {hi:.1%}] | {e['episodes']} | "
                     f"`{e['run_id']}` |")
    lines += ["", "By task kind and difficulty (test split):", "",
              "| policy | " + " | ".join(list(KINDS.values()) + list(DIFFS.values())) + " |",
              "| --- |" + " --- |" * (len(KINDS) + len(DIFFS))]
    for e in evals:
        if e["split"] != "test":
            continue
        cells = []
        for table, keys in ((e["by_kind"], KINDS.values()), (e["by_difficulty"], DIFFS.values())):
            for k in keys:
                p, n = table.get(k, [0, 0])
                cells.append(f"{p}/{n}" + (f" ({p / n:.0%})" if n else ""))
        lines.append(f"| {e['version']} | " + " | ".join(cells) + " |")
    lines += ["", "Checkpoints:", "", "| ref | parent | from | episodes | examples | steps | loss | val acc | ex/s |",
              "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for c in result["checkpoints"]:
        lines.append(f"| {c['ref']} | {c['parent'] or '-'} | {c['label']} | {c['episodes']} | {c['examples']} | "
                     f"{c['steps']} | {c['loss']} | {c['validation_accuracy']:.1%} | {c['examples_per_second']} |")
    (out_dir / f"{stem}.md").write_text("\n".join(lines) + "\n")
    paths = [out_dir / f"{stem}.md", out_dir / f"{stem}.json"]
    if dyna:
        return paths
    try:
        paths.append(plot(result, out_dir / "learning.png"))
    except ImportError:  # matplotlib is a dependency of the collector; a stripped install still gets the tables
        pass
    return paths


def plot(result: dict, path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    series: dict[str, list[tuple[int, float, float, float]]] = defaultdict(list)
    baselines = {}
    for e in result["evaluations"]:
        v = e["version"]
        lo, hi = e["ci95"]
        if "@" not in v:
            baselines[v] = e["rate"]
            continue
        if v.split("@")[0].endswith("-ref"):
            baselines["BC, larger demo budget"] = e["rate"]
            continue
        series[e["split"]].append((int(v.split("@")[1]) - 1, e["rate"], lo, hi))
    fig, ax = plt.subplots(figsize=(7, 4.2), dpi=120)
    for split, pts in sorted(series.items()):
        pts.sort()
        xs = [p[0] for p in pts]
        ax.plot(xs, [p[1] for p in pts], marker="o", label=f"{split} sites")
        ax.fill_between(xs, [p[2] for p in pts], [p[3] for p in pts], alpha=0.15)
    for i, (name, rate) in enumerate(sorted(baselines.items())):
        ax.axhline(rate, linestyle="--", linewidth=1, color=f"C{i + 2}", label=name)
    ax.set_xlabel("RL iteration (0 = BC warm start)")
    ax.set_ylabel("success rate")
    ax.set_ylim(0, 1)
    ax.set_title("webenv learning loop: success by iteration (95% CI)")
    ax.legend(loc="best", fontsize=8)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path

"""The learning loop across the services (`webenv train`): every arrow an RPC, every number from the store.

    oracle demos (train sites) -> trainer BC (warm start, v1) -> policy LoadCheckpoint -> evaluate
    then N times: collect with the current version (train sites, sampling temperature)
                  -> judge (in the collector) -> trainer, the arm's algorithm (signals.py), from the parent
                  -> LoadCheckpoint -> evaluate (greedy)

Every checkpoint is evaluated on the suites of `SUITES`, each saying what "unseen" means for its row: validation
websites (the one the loop chooses on: the checkpoint reported is the best on validation, never on test), test
websites (new instances of known templates on websites never trained on), with `holdout_family` a site family
never trained on (its sites are left out of every training run and the trainer refuses its episodes,
TrainingData.exclude_families), and MiniWoB++ tasks the oracle solves (zero-shot: the family "miniwob" is
excluded from every training job). Policies are shown only the instruction, the observation and their own
history (`webenv.solutions`); the oracle, which is shown the solution, runs the same test tasks under the same step
caps as the ceiling of each task kind. Caps are at least the oracle's length plus `oracle_slack` (Horizons), so a
task the policy fails is one it could have solved in the steps it had.

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

import hashlib
import json
import math
import os
import random
import re
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from functools import partial
from pathlib import Path

import grpc
from google.protobuf import field_mask_pb2
from webenv import paging
from webenv.client import make_sync_channel
from webenv.client.watch import to_end
from webenv.splits import SPLIT_NAMES
from webenv.v1 import (
    collector_pb2,
    collector_pb2_grpc,
    common_pb2,
    policy_pb2,
    policy_pb2_grpc,
    task_pb2,
    task_pb2_grpc,
    trainer_pb2,
    trainer_pb2_grpc,
)

from .signals import ARMS

#: What "unseen" means on each suite's rows.
SUITES = {
    "train": "seen: the training websites themselves",
    "validation": "websites never trained on, of trained families; every choice (checkpoint) is made here",
    "test": "new instances of known task templates on websites never trained on (reported, never tuned on)",
    "family": "a site family never trained on (leave-one-family-out)",
    "miniwob": "MiniWoB++ tasks, zero-shot (no MiniWoB episode is ever trained on)",
    "handmade": "websites written by hand, unlike the generator's templates (facts in prose, lists, tables), zero-shot",
}
#: The task file of the hand-made suite (the sites service's data/rubric/handmade.json, TaskFilter.task_files).
HANDMADE_FILE = "handmade.json"
#: The family of the MiniWoB++ tasks (the sites service's catalog), excluded from every training job.
MINIWOB_FAMILY = "miniwob"
# A collector restart: its runs' watchers wait this long for it (the restart, then its sweep failing the run it
# left, Engine.fail_orphans: ~30-40 s after its last write), and a run it cut off is started again this often
COLLECTOR_PATIENCE_SECONDS = 180.0
RUN_RESTARTS = 2

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
    algorithm: str = "filtered_bc"  # an arm of webenv.cli.signals.ARMS: policy_gradient, group, partial, branching
    group_size: int = 4  # k of the group and branching arms (a branching anchor is forked k - 1 times)
    branch_step: int = 2  # steps a branching anchor takes before it is forked
    step_normalize: bool = False  # AsyncWebRL's 1/k step normaliser in the RL jobs
    # beta of the RL jobs' KL penalty towards the BC warm start (AlgorithmOptions.kl_coef; 0 = none): seed 1's RL
    # iterations took the held-out family from 26% to 8% with nothing holding the ranking near the warm start's
    kl_coef: float = 0.0
    # what the KL term holds each RL job to: "warm-start" (the BC checkpoint, every iteration) or "parent" (the job's
    # parent, the previous iterate: a trust region that moves with the policy). With the warm start as reference, a
    # step BC ranks confidently wrong keeps about half of BC's mass on its wrong candidate at beta 0.5
    kl_reference: str = "warm-start"
    # every job (BC and RL) trains each answer step towards every answer candidate the rubric accepts
    # (AlgorithmOptions.relabel_answers), not only the one the demonstrator or the policy typed
    relabel_answers: bool = False
    # every job (BC and RL) adds up to this many passages borrowed from the site's other pages to each step as wrong
    # answers (AlgorithmOptions.hard_negatives; 0 = none): the encoder answered hand-made websites' questions on
    # their home page with a passage sharing the site's name with the question
    hard_negatives: int = 0
    # share of each RL collection started along the warm start's demonstrations (RunSpec.starts: a demonstration
    # and a number of its steps replayed, both drawn uniformly; 0 = none): the eight kinds of task no checkpoint
    # solves from the start (bench/results/learning/notes.md), reached from further along, Backplay's way
    demo_starts: float = 0.0
    model: str = "scorer"  # the ranker trained: scorer (hashed features) or encoder (fine-tuned all-MiniLM-L6-v2)
    bc_epochs: int = 40
    rl_epochs: int = 4
    sampling: str = "uniform"
    # Episodes in flight per run. Not the collector's default (16): on 2 cores at 16 (32 with --overlap) a step took
    # ~2 s and 14% of random's test episodes, 83% of a collection, ran past their 60 s episode deadline (errored:
    # the machine's limit, counted as failures); at 4 the same work takes as long and episodes end on their own.
    # With --overlap the two runs in flight (an evaluation, a collection) share it, each half.
    concurrency: int = 4
    baselines: tuple[str, ...] = ("random", "explore")
    baseline_episodes: int = 100  # test episodes per baseline policy
    horizons: tuple[int, int, int] = (12, 16, 20)  # step caps by difficulty (WebGym's horizon caps)
    oracle_slack: int = 4  # no task's cap below its oracle's length + this (Horizons.oracle_slack)
    validation_episodes: int = 100  # validation split, greedy: the checkpoint reported is chosen on these
    holdout_family: str = ""  # a site family never trained on, evaluated as its own suite ("" = none)
    family_episodes: int = 100  # episodes on the held-out family's websites per evaluation
    miniwob_tasks: int = 20  # MiniWoB++ tasks the oracle solves, one episode each per evaluation (0 = skip)
    # MiniWoB's pages give an episode 10 s from the start: 20 sessions opened at once on 2 loaded cores all ran out
    # before their first step (smoke run), so its suite runs a few at a time
    miniwob_concurrency: int = 2
    handmade_tasks: int = 40  # tasks of the hand-made websites' suite, one episode each per evaluation (0 = skip)
    # the suite's task file: the six test sites' (reported), or handmade_dev.json, the four sites that changes to the
    # agent's fact reading are designed on
    handmade_file: str = HANDMADE_FILE
    # Evaluate version k while iteration k+1 collects with the same version k (`--overlap`): no rollout is older
    # than in the sequential loop (the collection uses the version being evaluated), only the wall time changes.
    # Evaluation was 53% of the sequential loop's wall time (bench/results/learning.md before this option).
    overlap: bool = False
    oracle_ceiling: bool = True  # the oracle on every suite's tasks under the same caps
    # Which checkpoints run the reported suites (test, held-out family, MiniWoB++): "every" one, or only the BC warm
    # start and the RL checkpoint "selected" on validation, evaluated on them once the loop has chosen it (every RL
    # checkpoint runs validation either way). With "selected" no test figure of an unchosen checkpoint exists, and
    # a 5-iteration loop runs its checkpoints on 740 evaluation episodes instead of 1,620 (evaluation was 58% of its
    # wall time, bench/results/learning/kl-i5).
    eval_mode: str = "every"
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
    split: str  # the suite: train, validation, test, family:<name>, miniwob
    run_id: str
    episodes: int
    passed: int
    by_kind: dict[str, list[int]] = field(default_factory=dict)  # kind -> [passed, total]
    by_difficulty: dict[str, list[int]] = field(default_factory=dict)
    truncated: int = 0  # episodes cut at their step cap
    errored: int = 0  # episodes the environment or a peer failed (counted as failures)
    tasks: str = ""  # digest of the task ids run: equal digests = the same tasks
    outcomes: dict[str, list[int]] = field(default_factory=dict)  # task id -> [passed, episodes]: paired comparisons

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

    def __init__(self, cfg: LoopConfig, *, collector: str, trainer: str, policy: str, sites: str = "",
                 say: Callable[[str], None] = print) -> None:
        self.cfg = cfg
        self.say = say
        channel = partial(make_sync_channel, timeout=None)  # every call here names its own deadline
        self.collector = collector_pb2_grpc.CollectorServiceStub(channel(collector))
        self.trainer_addr = trainer
        self.trainer = trainer_pb2_grpc.TrainerServiceStub(channel(trainer))
        self.policy = policy_pb2_grpc.PolicyServiceStub(channel(policy))
        self.sites = task_pb2_grpc.TaskServiceStub(channel(sites)) if sites else None
        self.train_families: tuple[str, ...] = ()  # with a held-out family: every other one (set by prepare)
        self.miniwob_ids: tuple[str, ...] = ()  # MiniWoB++ tasks of the zero-shot suite (set by prepare)
        self.handmade_ids: tuple[str, ...] = ()  # tasks of the hand-made websites (set by prepare)
        self.timing = Timing()
        self.evals: list[Evaluation] = []
        self.runs: dict[str, str] = {}
        self.live: set[str] = set()  # runs started and still watched (StopRun'd when the loop is interrupted)
        self.restarted_runs: list[dict] = []  # runs cut off by a collector restart and started again
        self.checkpoints: list[dict] = []
        self.iterations: list[dict] = []  # per RL iteration: wall time, the sum of its phases, what overlapped
        self.collections: list[dict] = []  # a Dyna run's two training collections: passes by kind, steps, failures
        self.t_start = time.monotonic()
        self.sharing = False  # an evaluation and a collection in flight together (--overlap): each gets half
        self.warm_ref = ""  # the BC warm start's checkpoint, once trained
        self.reach: dict[str, dict] = {}  # suite -> answer_reach of the oracle's run on it

    # -- collector ------------------------------------------------------------------------------------------------
    def run(self, label: str, *, policy: str, split: int, episodes: int, seed: int, temperature: float = 0.0,
            kinds: tuple[int, ...] = (), env_address: str = "", sites: tuple[str, ...] = (),
            families: tuple[str, ...] | None = None, task_ids: tuple[str, ...] = (),
            source: int = common_pb2.TASK_SOURCE_MINIWOB, concurrency: int = 0, arm: bool = False,
            history: tuple[str, ...] = (), starts: Sequence[collector_pb2.EpisodeStart] = ()) -> collector_pb2.Run:
        """A run on synthetic tasks of ``split`` (of the trained families unless ``families`` names others), or on
        the ``task_ids`` of ``source`` (MiniWoB++, or the hand-made websites' rubric JSON tasks). Only an RL collection (``arm``) samples tasks by the loop's strategy (a frontier
        reads ``history``, the loop's own training runs); every other run samples uniformly from its seed, so an
        evaluation runs the same tasks for every version (a frontier evaluation would follow each version's
        history and compare versions on different tasks). With ``starts`` the run draws no tasks: one episode per
        start along a stored episode (RunSpec.starts)."""
        sampling = self.cfg.sampling if arm else "uniform"
        spec = collector_pb2.RunSpec(
            name=f"{self.cfg.name}/{label}", policy=policy, episodes=episodes, seed=seed, env_address=env_address,
            concurrency=concurrency or self.shared_concurrency(), level=collector_pb2.COLLECTION_LEVEL_TASK_ORIENTED,
            sampling=collector_pb2.SamplingStrategy.Value(f"SAMPLING_STRATEGY_{sampling.upper().replace('-', '_')}"),
            history_run_ids=list(history),
            act_options=policy_pb2.ActOptions(temperature=temperature),
            horizons=collector_pb2.Horizons(easy=self.cfg.horizons[0], medium=self.cfg.horizons[1],
                                            hard=self.cfg.horizons[2], oracle_slack=self.cfg.oracle_slack),
        )
        if starts:
            spec.starts.extend(starts)
        elif task_ids:
            spec.tasks.sources.append(source)
            spec.tasks.task_ids.extend(task_ids)
        else:
            spec.tasks.split = split
            spec.tasks.sources.append(common_pb2.TASK_SOURCE_SYNTHETIC)
            spec.tasks.families.extend(self.train_families if families is None else families)
        if not starts:
            spec.tasks.kinds.extend(kinds)
            spec.tasks.sites.extend(sites)
        # the judge reads HTML (page criteria); the policy and the trainer read the AXTREE, the one format kept
        spec.observation_spec.formats.extend([common_pb2.OBSERVATION_FORMAT_AXTREE, common_pb2.OBSERVATION_FORMAT_HTML])
        if source == common_pb2.TASK_SOURCE_MINIWOB and task_ids:  # MiniWoB's links are spans the oracle's
            # click-link script finds in the DOM format
            spec.observation_spec.formats.append(common_pb2.OBSERVATION_FORMAT_DOM)
        spec.keep_formats.append(common_pb2.OBSERVATION_FORMAT_AXTREE)
        if arm:  # an RL iteration's collection, shaped by the algorithm's arm (groups, branching)
            ARMS[self.cfg.algorithm].collect(spec, group_size=self.cfg.group_size, branch_step=self.cfg.branch_step)
        t0 = time.monotonic()
        for attempt in range(1 + RUN_RESTARTS):
            run = self.start_run(spec)
            cut: list[str] = []  # the watch broke: the collector restarted (or was unreachable) meanwhile

            def waiting(exc: grpc.RpcError, cut: list[str] = cut) -> None:
                cut.append(exc.code().name)
                self.say(f"  collector unavailable ({exc.code().name}); waiting for it to come back")

            self.live.add(run.run_id)
            try:
                end = to_end(lambda run_id=run.run_id: self.collector.WatchRun(
                    collector_pb2.WatchRunRequest(run_id=run_id)), patience=COLLECTOR_PATIENCE_SECONDS, on_wait=waiting)
            finally:
                self.live.discard(run.run_id)
            last = end.run if end is not None else run
            if cut and last.state != collector_pb2.RUN_STATE_SUCCEEDED and attempt < RUN_RESTARTS:
                # its collector went away mid-run: what it stored stays stored; the run starts again whole, so an
                # evaluation still scores every version on the same tasks
                self.restarted_runs.append({"label": label, "run_id": run.run_id, "finished": last.counts.finished,
                                            "error": last.error})
                self.say(f"  run {label} ({run.run_id}) was cut off by a collector restart after "
                         f"{last.counts.finished} episodes ({last.error or collector_pb2.RunState.Name(last.state)}); starting it again")
                continue
            break
        c = last.counts
        self.say(f"  run {label}: {c.passed}/{c.finished} passed, {c.errored} errored, {c.steps} steps "
                 f"in {time.monotonic() - t0:.0f}s ({run.run_id})")
        if last.state == collector_pb2.RUN_STATE_FAILED:
            raise RuntimeError(f"run {label} failed: {last.error}")
        self.runs[label] = run.run_id
        return last

    def start_run(self, spec: collector_pb2.RunSpec) -> collector_pb2.Run:
        """StartRun, asked again with the same request id (one run however often it is asked) while the collector
        is unavailable, for up to COLLECTOR_PATIENCE_SECONDS: the watch helper's patience over a one-answer call."""
        request = collector_pb2.StartRunRequest(request_id=os.urandom(8).hex(), spec=spec)
        resp = to_end(lambda: (self.collector.StartRun(request, timeout=60),), patience=COLLECTOR_PATIENCE_SECONDS,
                      on_wait=lambda exc: self.say(f"  collector unavailable ({exc.code().name}); asking again"))
        assert resp is not None
        return resp.run

    def shared_concurrency(self) -> int:
        """The loop's concurrency, halved while two runs are in flight (0: the collector's default)."""
        c = self.cfg.concurrency
        return max(1, c // 2) if c and self.sharing else c

    def stop_live(self) -> None:
        """Stop the runs still being watched (an overlapped collection whose evaluation was interrupted), so the
        thread watching them returns and the loop ends at once instead of after the collection."""
        for run_id in list(self.live):
            try:
                self.collector.StopRun(collector_pb2.StopRunRequest(run_id=run_id), timeout=30)
            except grpc.RpcError as exc:
                self.say(f"  could not stop run {run_id}: {exc.code().name}")

    def evaluate(self, version: str, split: int, episodes: int, label: str) -> Evaluation:
        """``version`` on the seeded tasks of a split's websites (the same tasks for every version)."""
        name = SPLIT_NAMES[split]
        seed = self.cfg.seed * 7919 + {common_pb2.SPLIT_TEST: 1, common_pb2.SPLIT_TRAIN: 2}.get(split, split)
        return self._evaluate(version, name, label, dict(split=split, episodes=episodes, seed=seed))

    def evaluate_family(self, version: str, label: str) -> Evaluation:
        """``version`` on the held-out family's websites (every split of it: none was trained on)."""
        seed = self.cfg.seed * 7919 + 4
        return self._evaluate(version, f"family:{self.cfg.holdout_family}", label,
                              dict(split=common_pb2.SPLIT_UNSPECIFIED, episodes=self.cfg.family_episodes, seed=seed,
                                   families=(self.cfg.holdout_family,)))

    def evaluate_miniwob(self, version: str, label: str) -> Evaluation:
        """``version`` zero-shot on the MiniWoB++ suite, one episode per task."""
        return self._evaluate(version, "miniwob", label, dict(split=common_pb2.SPLIT_UNSPECIFIED,
                                                              episodes=len(self.miniwob_ids), seed=self.cfg.seed * 7919 + 5,
                                                              task_ids=self.miniwob_ids,
                                                              concurrency=self.cfg.miniwob_concurrency))

    def evaluate_handmade(self, version: str, label: str) -> Evaluation:
        """``version`` zero-shot on the hand-made websites' tasks, one episode per task (suite ``handmade``, or
        ``handmade:<file stem>`` for another task file than the test sites')."""
        return self._evaluate(version, self.handmade_suite_name, label, dict(split=common_pb2.SPLIT_UNSPECIFIED,
                                                               episodes=len(self.handmade_ids), seed=self.cfg.seed * 7919 + 6,
                                                               task_ids=self.handmade_ids,
                                                               source=common_pb2.TASK_SOURCE_RUBRIC_JSON))

    def _evaluate(self, version: str, suite: str, label: str, run_args: dict) -> Evaluation:
        t0 = time.monotonic()
        run = self.run(label, policy=version, **run_args)
        ev = self.score(run.run_id, version, suite)
        self.timing.evaluate += time.monotonic() - t0
        self.evals.append(ev)
        self.save_progress()
        lo, hi = ev.interval()
        self.say(f"  {version} on {suite}: {ev.rate:.1%} [{lo:.1%}, {hi:.1%}] ({ev.passed}/{ev.episodes})")
        return ev

    def save_progress(self) -> None:
        """Everything measured so far, to OUT/learning.partial.json after each evaluation: a loop of hours that is
        cut off (a session's end, a node drained) still leaves its figures; the finished report replaces it."""
        out = Path(self.cfg.out_dir)
        try:
            out.mkdir(parents=True, exist_ok=True)
            tmp = out / "learning.partial.json.tmp"
            tmp.write_text(json.dumps(self.result(self.t_start), indent=1, default=list), encoding="utf-8")
            tmp.replace(out / "learning.partial.json")
        except OSError as exc:  # a full or read-only disk costs the progress file, never the run
            self.say(f"  progress not saved: {exc}")

    def evaluate_checkpoint(self, version: str, it: str, *, validation: bool = True, reported: bool = True) -> None:
        """A version on every held-out suite (validation first: it is the one the loop chooses on); ``reported``
        False runs validation (and train) only, ``validation`` False every suite but validation."""
        cfg = self.cfg
        if cfg.validation_episodes and validation:
            self.evaluate(version, common_pb2.SPLIT_VALIDATION, cfg.validation_episodes, f"eval-{it}-validation")
        if reported:
            self.evaluate(version, common_pb2.SPLIT_TEST, cfg.eval_episodes, f"eval-{it}-test")
            if cfg.holdout_family:
                self.evaluate_family(version, f"eval-{it}-family")
            if self.miniwob_ids:
                self.evaluate_miniwob(version, f"eval-{it}-miniwob")
            if self.handmade_ids:
                self.evaluate_handmade(version, f"eval-{it}-handmade")
        if cfg.train_eval_episodes:
            self.evaluate(version, common_pb2.SPLIT_TRAIN, cfg.train_eval_episodes, f"eval-{it}-train")

    def prepare(self) -> None:
        """The held-out family's complement, the MiniWoB++ suite (from the oracle's ListPolicies) and the hand-made
        websites' suite, from the catalog."""
        cfg = self.cfg
        if cfg.handmade_tasks:
            self.handmade_ids = self.handmade_suite(cfg.handmade_tasks)
        if cfg.holdout_family:
            if self.sites is None:
                raise RuntimeError("a held-out family needs the task catalog's address (sites)")
            families = self.families()
            if cfg.holdout_family not in families:
                raise ValueError(f"holdout_family: {cfg.holdout_family!r} is not a site family of the catalog; "
                                 f"it has {', '.join(sorted(families))}")
            self.train_families = tuple(sorted(families - {cfg.holdout_family}))
            self.say(f"held-out family {cfg.holdout_family}: training on {', '.join(self.train_families)}")
        if cfg.miniwob_tasks:
            listed = self.policy.ListPolicies(policy_pb2.ListPoliciesRequest(), timeout=30).policies
            oracle = next((p for p in listed if p.name == "oracle"), None)
            solved = sorted(t for t in (oracle.solved_task_ids if oracle else ()) if t.startswith("miniwob/"))
            if len(solved) < cfg.miniwob_tasks:
                raise ValueError(f"miniwob_tasks: the oracle solves {len(solved)} MiniWoB++ tasks, "
                                 f"fewer than {cfg.miniwob_tasks}")
            rng = random.Random(cfg.seed)
            self.miniwob_ids = tuple(sorted(rng.sample(solved, cfg.miniwob_tasks)))

    @property
    def handmade_suite_name(self) -> str:
        f = self.cfg.handmade_file
        return "handmade" if f == HANDMADE_FILE else f"handmade:{Path(f).stem}"

    def handmade_suite(self, n: int) -> tuple[str, ...]:
        """``n`` tasks of the hand-made websites (all of them when ``n`` is their number), drawn by the loop's seed."""
        if self.sites is None:
            raise RuntimeError("the hand-made suite needs the task catalog's address (sites)")
        req = task_pb2.ListTasksRequest(filter=task_pb2.TaskFilter(sources=[common_pb2.TASK_SOURCE_RUBRIC_JSON],
                                                                   task_files=[self.cfg.handmade_file]), page_size=1000)
        ids = sorted(t.task_id for t in paging.iterate(lambda r: self.sites.ListTasks(r, timeout=60), req, "tasks"))
        if len(ids) < n:
            raise ValueError(f"handmade_tasks: the catalog has {len(ids)} hand-made tasks ({self.cfg.handmade_file}), "
                             f"fewer than {n}")
        return tuple(sorted(random.Random(self.cfg.seed).sample(ids, n)))

    def answer_reach(self, suite: str, oracle_run_id: str) -> dict:
        """What bounds a candidate ranker on ``suite`` before any ranking: of the information tasks the oracle passed in
        ``oracle_run_id``, how many have, on the page where it answered (memory folded over its pages, as a policy's
        would be), an answer candidate containing every expected answer value (``one``: choosing among the proposer's
        candidates can pass it), or each value in some candidate (``each``). Kept in ``reach`` for the report."""
        from webenv.agent.steps import accepted_answers, episode_steps, fold

        req = collector_pb2.ReadEpisodesRequest(run_ids=[oracle_run_id], filter=collector_pb2.ExportFilter(passed=True))
        out: dict = {"tasks": 0, "one": 0, "each": 0, "missed": []}
        for resp in self.collector.ReadEpisodes(req, timeout=600):
            ep = resp.episode
            want = [fold(f.criterion.answer.expected) for g in ep.task.rubric.groups for f in g.facts
                    if f.criterion.HasField("answer") and f.criterion.answer.mode == common_pb2.MATCH_MODE_CONTAINS]
            steps = list(episode_steps(ep)) if ep.task.kind == common_pb2.TASK_KIND_INFORMATION and want else []
            if not steps:
                continue
            cands = steps[-1].candidates
            answers = [fold(c.action.answer.text) for c in cands if c.kind == "answer"]
            out["tasks"] += 1
            one = bool(accepted_answers(ep.task, cands))
            out["one"] += one
            out["each"] += all(any(w in a for a in answers) for w in want)
            if not one:
                out["missed"].append(ep.task.task_id)
        self.reach[suite] = out
        self.say(f"  answer reach on {suite}: {out['one']}/{out['tasks']} information tasks have an accepted answer "
                 f"candidate where the oracle answered ({out['each']} each value in some candidate)")
        return out

    def families(self) -> set[str]:
        """The site families of the synthetic catalog."""
        req = task_pb2.ListTasksRequest(filter=task_pb2.TaskFilter(sources=[common_pb2.TASK_SOURCE_SYNTHETIC]),
                                        page_size=1000)
        return {t.family for t in paging.iterate(lambda r: self.sites.ListTasks(r, timeout=60), req, "tasks")}

    def score(self, run_id: str, version: str, split: str, reasons: Counter | None = None) -> Evaluation:
        """Success of a run, from the stored episodes (errored episodes count as failures); ``reasons``, when given,
        counts each failed episode's first failing fact by its reason (values and numbers masked, see ``reason_key``)."""
        ev = Evaluation(version, split, run_id, 0, 0, defaultdict(lambda: [0, 0]), defaultdict(lambda: [0, 0]))
        req = collector_pb2.ReadEpisodesRequest(run_ids=[run_id], filter=collector_pb2.ExportFilter(include_errored=True))
        ids = []
        for resp in self.collector.ReadEpisodes(req, timeout=600):
            ep = resp.episode
            ids.append(ep.task.task_id)
            ev.episodes += 1
            ev.passed += int(ep.passed)
            ev.truncated += int(ep.truncated)
            ev.errored += int(bool(ep.error))
            if reasons is not None and not ep.passed:
                reasons[reason_key(ep)] += 1
            seen = ev.outcomes.setdefault(ep.task.task_id, [0, 0])
            seen[0], seen[1] = seen[0] + int(ep.passed), seen[1] + 1
            for table, key in ((ev.by_kind, KINDS.get(ep.task.kind, "other")),
                               (ev.by_difficulty, DIFFS.get(ep.task.difficulty, "other"))):
                table[key][0] += int(ep.passed)
                table[key][1] += 1
        ev.by_kind, ev.by_difficulty = dict(ev.by_kind), dict(ev.by_difficulty)
        ev.tasks = hashlib.sha256("\n".join(sorted(ids)).encode()).hexdigest()[:12]
        return ev

    # -- trainer --------------------------------------------------------------------------------------------------
    def train(self, label: str, algorithm: int, run_ids: list[str], parent: str, epochs: int) -> trainer_pb2.Checkpoint:
        t0 = time.monotonic()
        spec = trainer_pb2.JobSpec(
            name=self.cfg.name, algorithm=algorithm, parent=parent,
            model=trainer_pb2.ModelKind.Value(f"MODEL_KIND_{self.cfg.model.upper()}"),
            # demonstrations the judge failed (a flaky page, not the oracle) are not imitated either
            data=trainer_pb2.TrainingData(run_ids=run_ids, filter=collector_pb2.ExportFilter(drop_repeated=True,
                                                                                             passed=True),
                                          exclude_families=self.excluded_families()),
            hyper=trainer_pb2.Hyperparameters(epochs=epochs, seed=self.cfg.seed, checkpoint_every=20),
            options=trainer_pb2.AlgorithmOptions(relabel_answers=self.cfg.relabel_answers,
                                                 hard_negatives=self.cfg.hard_negatives),
            labels={"loop": label},
        )
        if algorithm == self.rl_algorithm() and algorithm != trainer_pb2.TRAINING_ALGORITHM_BC:
            # kl_reference "": the trainer holds the job to its parent (AlgorithmOptions.kl_reference)
            ARMS[self.cfg.algorithm].job(spec, step_normalize=self.cfg.step_normalize, kl_coef=self.cfg.kl_coef,
                                         kl_reference=self.warm_ref if self.cfg.kl_reference == "warm-start" else "")
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

    def excluded_families(self) -> list[str]:
        """Families no training job may read: MiniWoB++ (the zero-shot suite) and the held-out family."""
        return [MINIWOB_FAMILY] + ([self.cfg.holdout_family] if self.cfg.holdout_family else [])

    def watch_job(self, job_id: str, patience: float = 300.0) -> trainer_pb2.Job:
        """Follow a job to its end, riding out trainer restarts (UNAVAILABLE) for up to ``patience`` seconds."""
        end = to_end(lambda: self.trainer.WatchJob(trainer_pb2.WatchJobRequest(job_id=job_id)), patience=patience,
                     on_wait=lambda exc: self.say(f"  trainer unavailable ({exc.code().name}); "
                                                  "waiting for it to come back"))
        if end is None:
            raise RuntimeError(f"WatchJob {job_id} ended without the job's state")
        return end.job

    # -- the loop -------------------------------------------------------------------------------------------------
    def collect(self, it: int, version: str, history: tuple[str, ...] = ()) -> list[collector_pb2.Run]:
        """Iteration ``it``'s rollouts with ``version`` on train sites, sampled at the loop's temperature (tasks by
        the loop's strategy; ``history``: the runs a frontier reads, the loop's own collections so far, not the oracle's
        demonstrations): the sampled run, then (``demo_starts``) the run started along the demonstrations."""
        cfg = self.cfg
        t0 = time.monotonic()
        n_starts = round(cfg.collect_episodes * cfg.demo_starts)
        runs = [self.run(f"collect-{it}", policy=version, split=common_pb2.SPLIT_TRAIN,
                         episodes=cfg.collect_episodes - n_starts, seed=cfg.seed * 1000 + it,
                         temperature=cfg.temperature, arm=True, history=history)]
        starts = self.plan_starts(it, n_starts) if n_starts else []
        if starts:
            runs.append(self.run(f"collect-{it}-starts", policy=version, split=common_pb2.SPLIT_TRAIN, episodes=0,
                                 seed=cfg.seed * 1000 + it, temperature=cfg.temperature, starts=starts))
        self.timing.collect += time.monotonic() - t0
        return runs

    def plan_starts(self, it: int, n: int) -> list[collector_pb2.EpisodeStart]:
        """``n`` starts along the warm start's passed demonstrations: a demonstration drawn uniformly, and a number
        of its steps to replay drawn uniformly from 0 to its length - 1 (the policy takes at least the last)."""
        req = collector_pb2.ReadEpisodesRequest(run_ids=[self.demo_run], filter=collector_pb2.ExportFilter(passed=True),
                                                read_mask=field_mask_pb2.FieldMask(paths=["episode_id", "step_count"]))
        demos = sorted((r.episode.episode_id, r.episode.step_count)
                       for r in self.collector.ReadEpisodes(req, timeout=600) if r.episode.step_count > 0)
        if not demos:
            return []
        rng = random.Random(self.cfg.seed * 7919 + it)
        out = []
        for _ in range(n):
            episode_id, count = rng.choice(demos)
            out.append(collector_pb2.EpisodeStart(episode_id=episode_id, steps=rng.randrange(count)))
        return out

    def warm_start(self, evaluate: bool = True) -> tuple[collector_pb2.Run, trainer_pb2.Checkpoint]:
        """Oracle demonstrations on train sites -> BC -> evaluated on every suite: (demo run, checkpoint)."""
        cfg = self.cfg
        self.say(f"warm start: {cfg.demo_episodes} oracle demonstrations on train sites")
        t0 = time.monotonic()
        demos = self.run("demos", policy="oracle", split=common_pb2.SPLIT_TRAIN, episodes=cfg.demo_episodes,
                         seed=cfg.seed * 31)
        self.demo_run = demos.run_id
        self.timing.demos += time.monotonic() - t0
        cp = self.train("bc", trainer_pb2.TRAINING_ALGORITHM_BC, [demos.run_id], "", cfg.bc_epochs)
        self.warm_ref = cp.ref  # the RL jobs' KL reference (cfg.kl_coef)
        if evaluate:
            self.evaluate_checkpoint(cp.ref, "bc")
        return demos, cp

    def rl_algorithm(self) -> int:
        return ARMS[self.cfg.algorithm].algorithm

    def run_loop(self) -> dict:
        cfg = self.cfg
        if cfg.dyna:
            return self.run_dyna()
        t_start = self.t_start = time.monotonic()
        self.prepare()
        self.baselines_and_ceiling()
        demos, cp = self.warm_start(evaluate=not cfg.overlap)
        pending = (cp.ref, "bc") if cfg.overlap else None  # (version, label) evaluated during the next collection
        algorithm = self.rl_algorithm()
        every = cfg.eval_mode == "every"
        data = [demos.run_id]  # the replay set: demonstrations + every iteration's rollouts (judged)
        sampled: list[str] = []  # the collections a frontier reads (not the runs started along demonstrations)
        for it in range(1, cfg.iterations + 1):
            self.say(f"iteration {it}/{cfg.iterations}: collect with {cp.ref}"
                     + (f" while evaluating {pending[0]}" if pending else ""))
            t0, phases = time.monotonic(), sum(asdict(self.timing).values())
            if pending:
                self.sharing = True
                with ThreadPoolExecutor(1) as pool:
                    collecting = pool.submit(self.collect, it, cp.ref, tuple(sampled))
                    try:
                        self.evaluate_checkpoint(*pending, reported=every or pending[1] == "bc")
                        runs = collecting.result()
                    except BaseException:  # Ctrl-C, SIGTERM, a failed run: the collection must not run on alone
                        self.stop_live()
                        raise
                    finally:
                        self.sharing = False
            else:
                runs = self.collect(it, cp.ref, tuple(sampled))
            sampled.append(runs[0].run_id)
            data += [r.run_id for r in runs]
            collected_with = cp.ref
            cp = self.train(f"rl-{it}", algorithm, list(data), cp.ref, cfg.rl_epochs)
            overlapped, pending = (pending[0] if pending else ""), ((cp.ref, str(it)) if cfg.overlap else None)
            if not cfg.overlap:
                self.evaluate_checkpoint(cp.ref, str(it), reported=every)
            self.iterations.append({"iteration": it, "collected_with": collected_with,
                                    "evaluated_during_collection": overlapped,
                                    "wall_seconds": round(time.monotonic() - t0, 1),
                                    "phase_seconds": round(sum(asdict(self.timing).values()) - phases, 1)})
        if pending:
            self.evaluate_checkpoint(*pending, reported=every)
        if not every:
            self.evaluate_selected()
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
            self.evaluate_checkpoint(ref.ref, "reference")
        return self.result(t_start)

    def evaluate_selected(self) -> None:
        """(eval_mode "selected") the RL checkpoint chosen on validation, on the reported suites, once chosen."""
        ref = self.selected().get("ref", "")
        if not ref or ref == self.warm_ref:
            return
        self.say(f"selected on validation: {ref}; evaluating it on the reported suites")
        loaded = self.policy.LoadCheckpoint(policy_pb2.LoadCheckpointRequest(ref=ref), timeout=120)
        self.say(f"  policy serves {loaded.policy.version}")
        self.evaluate_checkpoint(ref, "selected", validation=False)

    def baselines_and_ceiling(self) -> None:
        """The baselines on the test suite, and the oracle (the ceiling) and random on every held-out suite."""
        cfg = self.cfg
        for base in cfg.baselines:
            self.say(f"baseline {base}")
            self.evaluate(base, common_pb2.SPLIT_TEST, cfg.baseline_episodes, f"eval-{base}-test")
        if cfg.oracle_ceiling:
            self.say("ceiling: the oracle on the same tasks under the same step caps")
            self.answer_reach("test", self.evaluate("oracle", common_pb2.SPLIT_TEST, cfg.eval_episodes,
                                                    "eval-oracle-test").run_id)
            if cfg.holdout_family:
                self.evaluate_family("oracle", "eval-oracle-family")
            if self.miniwob_ids:
                self.evaluate_miniwob("oracle", "eval-oracle-miniwob")
            if self.handmade_ids:
                self.answer_reach(self.handmade_suite_name, self.evaluate_handmade("oracle", "eval-oracle-handmade").run_id)
        if cfg.holdout_family and "random" in cfg.baselines:
            self.evaluate_family("random", "eval-random-family")
        if self.miniwob_ids:
            self.evaluate_miniwob("random", "eval-random-miniwob")
        if self.handmade_ids and "random" in cfg.baselines:
            self.evaluate_handmade("random", "eval-random-handmade")

    def selected(self) -> dict:
        """The checkpoint the loop reports: the best on validation (ties: the later), with its test figures."""
        trained = [c["ref"] for c in self.checkpoints if not c["ref"].split("@")[0].endswith("-ref")]
        val = {e.version: e for e in self.evals if e.split == "validation"}
        pool = [r for r in trained if r in val]
        if not pool:
            return {}
        best = max(reversed(pool), key=lambda r: val[r].rate)
        return {"ref": best, "by": "validation", "validation_rate": val[best].rate,
                "suites": {e.split: e.rate for e in self.evals if e.version == best}}

    def result(self, t_start: float) -> dict:
        return {"config": asdict(self.cfg), "wall_seconds": round(time.monotonic() - t_start, 1),
                "timing": asdict(self.timing), "runs": self.runs, "restarted_runs": self.restarted_runs,
                "checkpoints": self.checkpoints, "collections": self.collections,
                "selected": self.selected(), "suites": self.suites(), "iterations": self.iterations,
                "answer_reach": self.reach,
                "evaluations": [asdict(e) | {"rate": e.rate, "ci95": e.interval()} for e in self.evals]}

    def suites(self) -> dict[str, str]:
        """The suites this loop evaluated, each with what "unseen" means on it."""
        out = {}
        for e in self.evals:
            key = e.split.partition(":")[0]
            out[e.split] = SUITES[key] + (f": {e.split.partition(':')[2]}" if key in ("family", "handmade") and
                                          ":" in e.split else "")
        return out

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
            seconds = time.monotonic() - t0
            self.timing.collect += seconds
            reasons: Counter = Counter()
            got = self.score(run.run_id, bc.ref, f"collect:{arm}", reasons)
            self.collections.append({"arm": arm, "env": "world model" if env else "farm", "address": env,
                                     "run_id": run.run_id, "episodes": got.episodes,
                                     "passed": got.passed, "errored": got.errored, "by_kind": got.by_kind,
                                     "steps": run.counts.steps, "browser_steps": 0 if env else run.counts.steps,
                                     "seconds": round(seconds, 1), "failures": reasons.most_common(8)})
            cp = self.train(f"dyna-{arm}", algorithm, [demos.run_id, run.run_id], bc.ref, cfg.rl_epochs)
            self.evaluate(cp.ref, common_pb2.SPLIT_TEST, cfg.eval_episodes, f"eval-{arm}-test")
        return self.result(t_start)


def reason_key(ep: collector_pb2.StoredEpisode) -> str:
    """Why a failed episode failed, as a key that groups alike episodes: the first failing fact's criterion kind and
    reason with quoted values and numbers masked ("answer: answer does not contain '…'"), or the error, or the cap."""
    if ep.error:
        return "errored: " + re.sub(r"\d+", "N", ep.error)[:80]
    for r in ep.verdict.results:
        if r.outcome != common_pb2.FACT_OUTCOME_HOLDS:
            reason = re.sub(r"\d+", "N", re.sub(r"'[^']*'|\"[^\"]*\"", "'…'", r.reason))
            return f"{r.criterion_kind or 'fact'}: {reason[:90]}"
    return "cut at the step cap" if ep.truncated else "no failing fact recorded"


def write_report(result: dict, out_dir: Path, command: str) -> list[Path]:
    """learning.md (tables), learning.json (everything) and learning.png (success by iteration); for a Dyna run
    dyna.md and dyna.json (the arms' table; no plot)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    evals = result["evaluations"]
    dyna = bool(result["config"].get("dyna"))
    stem = "dyna" if dyna else "learning"
    (out_dir / f"{stem}.json").write_text(json.dumps(result, indent=1))
    (out_dir / "learning.partial.json").unlink(missing_ok=True)  # the loop's progress file, now superseded
    title = ("# Dyna: world-model rollouts vs the same budget of real rollouts, success on unseen websites" if dyna
             else "# Learning loop: success on unseen websites, task families and MiniWoB++")
    lines = [title, "", f"Command: `{command}`", "",
             f"Wall time {result['wall_seconds']:.0f} s: " + ", ".join(
                 f"{k} {v:.0f} s ({v / max(result['wall_seconds'], 1e-9):.0%})" for k, v in result["timing"].items()), ""]
    suites = result.get("suites", {})
    if suites:
        lines += ["What \"unseen\" means on each suite's rows:", "", "| suite | unseen |", "| --- | --- |"]
        lines += [f"| {k} | {v} |" for k, v in suites.items()]
        lines.append("")
    cfg = result["config"]
    lines.append(f"Policies other than the oracle are shown the instruction, the observation and their own history, "
                 f"never a task's solution or rubric. Step caps {tuple(cfg['horizons'])} by difficulty, raised to the "
                 f"oracle's length + {cfg.get('oracle_slack', 0)} (each episode records its cap); `oracle` rows are "
                 "the ceiling: the same tasks (same task digest) under the same caps.")
    for added in result.get("added_afterwards", []):
        lines += ["", f"The {added['suite']} rows ({', '.join(added['versions'])}) were run after the loop ended, on its "
                      f"checkpoints, by `{added['command']}`."]
    reach = result.get("answer_reach") or {}
    if reach:
        lines += ["", "Answer reach (what bounds a candidate ranker before any ranking): information tasks whose page, where "
                      "the oracle answered, has a proposed answer candidate the rubric accepts: " + ", ".join(
                          f"{s} {r['one']}/{r['tasks']}" for s, r in reach.items()) + "."]
    sel = result.get("selected") or {}
    if sel:
        figures = ", ".join(f"{k} {v:.1%}" for k, v in sel["suites"].items())
        lines += ["", f"**Selected checkpoint (best on validation, never chosen on test): {sel['ref']}**: {figures}."]
    lines += ["", "| policy | suite | success | 95% CI | episodes | errored | cut at cap | tasks | run |",
              "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for e in evals:
        lo, hi = e["ci95"]
        name = f"{e['version']} (ceiling)" if e["version"] == "oracle" else e["version"]
        lines.append(f"| {name} | {e['split']} | {e['rate']:.1%} | [{lo:.1%}, {hi:.1%}] | {e['episodes']} | "
                     f"{e.get('errored', 0)} | {e.get('truncated', 0)} | `{e.get('tasks', '')}` | `{e['run_id']}` |")
    for suite in [s for s in dict.fromkeys(e["split"] for e in evals) if s not in ("train", "miniwob")]:
        lines += ["", f"By task kind and difficulty ({suite}; the oracle row is the ceiling):", "",
                  "| policy | " + " | ".join(list(KINDS.values()) + list(DIFFS.values())) + " |",
                  "| --- |" + " --- |" * (len(KINDS) + len(DIFFS))]
        for e in evals:
            if e["split"] != suite:
                continue
            cells = []
            for table, keys in ((e["by_kind"], KINDS.values()), (e["by_difficulty"], DIFFS.values())):
                for k in keys:
                    p, n = table.get(k, [0, 0])
                    cells.append(f"{p}/{n}" + (f" ({p / n:.0%})" if n else ""))
            lines.append(f"| {e['version']} | " + " | ".join(cells) + " |")
    iters = result.get("iterations") or []
    if iters:
        mode = ("overlapped: version k is evaluated while iteration k+1 collects with it" if cfg.get("overlap")
                else "sequential: collect, train, then evaluate")
        lines += ["", f"Wall time per RL iteration ({mode}; phases are the sum of its collection, training and "
                      "evaluation times, which is about what the sequential loop spends on the same episodes):", "",
                  "| iteration | collected with | evaluated meanwhile | wall s | phases s |",
                  "| --- | --- | --- | --- | --- |"]
        lines += [f"| {i['iteration']} | {i['collected_with']} | {i['evaluated_during_collection'] or '-'} | "
                  f"{i['wall_seconds']:.0f} | {i['phase_seconds']:.0f} |" for i in iters]
    if result.get("collections"):
        lines += ["", "The arms' training collections (the BC policy's rollouts, judged where they ran: the farm's by the "
                      "judge on the real site, the world model's by the judge against the simulated pages and site state):",
                  "", "| arm | ran in | episodes | passed | " + " | ".join(KINDS.values()) + " | steps | browser steps | wall s |",
                  "| --- |" + " --- |" * (6 + len(KINDS))]
        for c in result["collections"]:
            kinds = " | ".join(f"{p}/{n}" for p, n in (c["by_kind"].get(k, [0, 0]) for k in KINDS.values()))
            lines.append(f"| {c['arm']} | {c['env']} | {c['episodes']} | {c['passed']} | {kinds} | {c['steps']} | "
                         f"{c['browser_steps']} | {c['seconds']:.0f} |")
        for c in result["collections"]:
            if c["failures"]:
                lines += ["", f"Why the {c['arm']} arm's failed rollouts failed (first failing fact, most common):", "",
                          "| episodes | reason |", "| --- | --- |"]
                lines += [f"| {n} | {reason.replace('|', '/')} |" for reason, n in c["failures"]]
    lines += ["", "Checkpoints:", "", "| ref | parent | from | episodes | examples | steps | loss | held-out examples acc | ex/s |",
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
    except ImportError:  # matplotlib is a dependency of webenv-cli; a stripped install still gets the tables
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
        if e["split"] not in ("train", "validation", "test"):
            continue
        if "@" not in v:
            if e["split"] == "test":
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
        ax.plot(xs, [p[1] for p in pts], marker="o", label=f"{split} websites")
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

"""The evaluation suites: a version on validation, test, the held-out family, MiniWoB++ and the hand-made websites,
each on the same seeded tasks for every version; the baselines and the oracle's ceiling; what bounds a ranker."""

from __future__ import annotations

import random
import time
from pathlib import Path

from webenv import paging
from webenv.splits import SPLIT_NAMES
from webenv.v1 import collector_pb2, common_pb2, policy_pb2, task_pb2

from .options import HANDMADE_FILE
from .records import Evaluation


class Suites:
    """The evaluation suites of the loop (a part of :class:`webenv.cli.learning.Loop`)."""

    def evaluate(self, version: str, split: int, episodes: int, label: str, shared: bool = False) -> Evaluation:
        """``version`` on the seeded tasks of a split's websites (the same tasks for every version); ``shared``: a
        collection runs meanwhile (--overlap), each at half the loop's concurrency."""
        name = SPLIT_NAMES[split]
        seed = self.cfg.seed * 7919 + {common_pb2.SPLIT_TEST: 1, common_pb2.SPLIT_TRAIN: 2}.get(split, split)
        return self._evaluate(version, name, label, dict(split=split, episodes=episodes, seed=seed,
                                                         concurrency=self.loop_concurrency(shared)))

    def evaluate_family(self, version: str, label: str, shared: bool = False) -> Evaluation:
        """``version`` on the held-out family's websites (every split of it: none was trained on)."""
        seed = self.cfg.seed * 7919 + 4
        return self._evaluate(version, f"family:{self.cfg.holdout_family}", label,
                              dict(split=common_pb2.SPLIT_UNSPECIFIED, episodes=self.cfg.family_episodes, seed=seed,
                                   families=(self.cfg.holdout_family,), concurrency=self.loop_concurrency(shared)))

    def evaluate_builders(self, version: str, label: str, shared: bool = False) -> Evaluation:
        """``version`` on test-split websites of the held-out builders (never trained on), of the trained families."""
        seed = self.cfg.seed * 7919 + 7
        return self._evaluate(version, "builders:" + ",".join(self.cfg.heldout_builders), label,
                              dict(split=common_pb2.SPLIT_TEST, episodes=self.cfg.builder_episodes, seed=seed,
                                   builders=self.cfg.heldout_builders, concurrency=self.loop_concurrency(shared)))

    def evaluate_miniwob(self, version: str, label: str) -> Evaluation:
        """``version`` zero-shot on the MiniWoB++ suite, one episode per task."""
        return self._evaluate(version, "miniwob", label, dict(split=common_pb2.SPLIT_UNSPECIFIED,
                                                              episodes=len(self.miniwob_ids), seed=self.cfg.seed * 7919 + 5,
                                                              task_ids=self.miniwob_ids,
                                                              concurrency=self.cfg.miniwob_concurrency))

    def evaluate_handmade(self, version: str, label: str, shared: bool = False) -> Evaluation:
        """``version`` zero-shot on the hand-made websites' tasks, one episode per task (suite ``handmade``, or
        ``handmade:<file stem>`` for another task file than the test sites')."""
        return self._evaluate(version, self.handmade_suite_name, label, dict(split=common_pb2.SPLIT_UNSPECIFIED,
                                                               episodes=len(self.handmade_ids), seed=self.cfg.seed * 7919 + 6,
                                                               task_ids=self.handmade_ids,
                                                               source=common_pb2.TASK_SOURCE_RUBRIC_JSON,
                                                               concurrency=self.loop_concurrency(shared)))

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

    def evaluate_checkpoint(self, version: str, it: str, *, validation: bool = True, reported: bool = True,
                            shared: bool = False) -> None:
        """A version on every held-out suite (validation first: it is the one the loop chooses on); ``reported``
        False runs validation (and train) only, ``validation`` False every suite but validation; ``shared``: a
        collection runs meanwhile (--overlap)."""
        cfg = self.cfg
        if cfg.validation_episodes and validation:
            self.evaluate(version, common_pb2.SPLIT_VALIDATION, cfg.validation_episodes, f"eval-{it}-validation", shared)
        if reported:
            self.evaluate(version, common_pb2.SPLIT_TEST, cfg.eval_episodes, f"eval-{it}-test", shared)
            if cfg.holdout_family:
                self.evaluate_family(version, f"eval-{it}-family", shared)
            if cfg.heldout_builders:
                self.evaluate_builders(version, f"eval-{it}-builders", shared)
            if self.miniwob_ids:
                self.evaluate_miniwob(version, f"eval-{it}-miniwob")
            if self.handmade_ids:
                self.evaluate_handmade(version, f"eval-{it}-handmade", shared)
        if cfg.train_eval_episodes:
            self.evaluate(version, common_pb2.SPLIT_TRAIN, cfg.train_eval_episodes, f"eval-{it}-train", shared)

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
        if cfg.heldout_builders:
            self.check_heldout_builders()
        if cfg.miniwob_tasks and cfg.miniwob_suite == "served":
            req = task_pb2.ListTasksRequest(filter=task_pb2.TaskFilter(sources=[common_pb2.TASK_SOURCE_MINIWOB]),
                                            page_size=1000)
            self.miniwob_ids = tuple(sorted(t.task_id for t in paging.iterate(
                lambda r: self.sites.ListTasks(r, timeout=60), req, "tasks")))
            if not self.miniwob_ids:
                raise ValueError("miniwob_suite: the catalog serves no MiniWoB++ task")
            self.say(f"MiniWoB++ suite: every task the catalog serves ({len(self.miniwob_ids)})")
        elif cfg.miniwob_tasks:
            listed = self.policy.ListPolicies(policy_pb2.ListPoliciesRequest(), timeout=30).policies
            oracle = next((p for p in listed if p.name == "oracle"), None)
            solved = sorted(t for t in (oracle.solved_task_ids if oracle else ()) if t.startswith("miniwob/"))
            if len(solved) < cfg.miniwob_tasks:
                raise ValueError(f"miniwob_tasks: the oracle solves {len(solved)} MiniWoB++ tasks, "
                                 f"fewer than {cfg.miniwob_tasks}")
            rng = random.Random(cfg.seed)
            self.miniwob_ids = tuple(sorted(rng.sample(solved, cfg.miniwob_tasks)))

    def check_heldout_builders(self) -> None:
        """The held-out builders exist in the catalog (an unknown name is the catalog's INVALID_ARGUMENT naming
        filter.builders) and have no website a run could train on: none of their tasks is train or validation split."""
        if self.sites is None:
            raise RuntimeError("held-out builders need the task catalog's address (sites)")
        names = list(self.cfg.heldout_builders)
        for split in (common_pb2.SPLIT_TRAIN, common_pb2.SPLIT_VALIDATION):
            found = self.sites.ListTasks(task_pb2.ListTasksRequest(
                filter=task_pb2.TaskFilter(builders=names, split=split), page_size=1), timeout=60).tasks
            if found:
                raise ValueError(f"heldout_builders: {found[0].builder!r} has {SPLIT_NAMES[split]}-split websites "
                                 f"(e.g. {found[0].site}): a held-out builder's websites must all be test split")
        self.say(f"held-out builders {', '.join(names)}: evaluated on their test-split websites, never trained on")

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
            if cfg.heldout_builders:
                self.evaluate_builders("oracle", "eval-oracle-builders")
            if self.miniwob_ids:
                self.evaluate_miniwob("oracle", "eval-oracle-miniwob")
            if self.handmade_ids:
                self.answer_reach(self.handmade_suite_name, self.evaluate_handmade("oracle", "eval-oracle-handmade").run_id)
        if cfg.holdout_family and "random" in cfg.baselines:
            self.evaluate_family("random", "eval-random-family")
        if cfg.heldout_builders and "random" in cfg.baselines:
            self.evaluate_builders("random", "eval-random-builders")
        if self.miniwob_ids:
            self.evaluate_miniwob("random", "eval-random-miniwob")
        if self.handmade_ids and "random" in cfg.baselines:
            self.evaluate_handmade("random", "eval-random-handmade")

    def evaluate_selected(self) -> None:
        """(eval_mode "selected") the RL checkpoint chosen on validation, on the reported suites, once chosen."""
        ref = self.selected().get("ref", "")
        if not ref or ref == self.warm_ref:
            return
        self.say(f"selected on validation: {ref}; evaluating it on the reported suites")
        loaded = self.policy.LoadCheckpoint(policy_pb2.LoadCheckpointRequest(ref=ref), timeout=120)
        self.say(f"  policy serves {loaded.policy.version}")
        self.evaluate_checkpoint(ref, "selected", validation=False)

"""Where the policy's data comes from: the oracle's demonstrations and the BC warm start, each iteration's
collection, the share of it started along the demonstrations (`--demo-starts`), and BC on a larger demonstration
budget as a reference (`--reference-demos`)."""

from __future__ import annotations

import random
import time

from google.protobuf import field_mask_pb2
from webenv.v1 import collector_pb2, common_pb2, trainer_pb2


class Starts:
    """The data of the loop (a part of :class:`webenv.cli.learning.Loop`)."""

    def collect(self, it: int, version: str, history: tuple[str, ...] = (), shared: bool = False) -> list[collector_pb2.Run]:
        """Iteration ``it``'s rollouts with ``version`` on train sites, sampled at the loop's temperature (tasks by
        the loop's strategy; ``history``: the runs a frontier reads, the loop's own collections so far, not the oracle's
        demonstrations): the sampled run, then (``demo_starts``) the run started along the demonstrations; ``shared``: an
        evaluation runs meanwhile (--overlap), each at half the loop's concurrency."""
        cfg = self.cfg
        t0 = time.monotonic()
        n_starts = round(cfg.collect_episodes * cfg.demo_starts)
        runs = [self.run(f"collect-{it}", policy=version, split=common_pb2.SPLIT_TRAIN,
                         episodes=cfg.collect_episodes - n_starts, seed=cfg.seed * 1000 + it,
                         temperature=cfg.temperature, arm=True, history=history,
                         concurrency=self.loop_concurrency(shared))]
        starts = self.plan_starts(it, n_starts) if n_starts else []
        if starts:
            runs.append(self.run(f"collect-{it}-starts", policy=version, split=common_pb2.SPLIT_TRAIN, episodes=0,
                                 seed=cfg.seed * 1000 + it, temperature=cfg.temperature, starts=starts,
                                 concurrency=self.loop_concurrency(shared)))
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

    def reference(self) -> None:
        """(``reference_demo_episodes``) BC on a larger oracle budget, as its own checkpoint family
        (``<name>-ref``), evaluated on every suite beside the loop's: what more demonstrations alone would give."""
        cfg = self.cfg
        self.say(f"reference: BC on {cfg.reference_demo_episodes} oracle demonstrations")
        demos = self.run("reference-demos", policy="oracle", split=common_pb2.SPLIT_TRAIN,
                         episodes=cfg.reference_demo_episodes, seed=cfg.seed * 37)
        ref = self.train("reference-bc", trainer_pb2.TRAINING_ALGORITHM_BC, [demos.run_id], "", cfg.bc_epochs,
                         name=f"{cfg.name}-ref")
        self.evaluate_checkpoint(ref.ref, "reference")

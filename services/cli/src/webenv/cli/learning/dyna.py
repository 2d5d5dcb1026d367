"""Dyna (`webenv train --dyna`): world-model rollouts as training data against the same budget of real ones."""

from __future__ import annotations

import time
from collections import Counter

from webenv.v1 import common_pb2


class Dyna:
    """Dyna (a part of :class:`webenv.cli.learning.Loop`)."""

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

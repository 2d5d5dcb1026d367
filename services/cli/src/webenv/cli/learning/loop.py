"""The loop itself: demonstrations, the BC warm start, then the RL iterations (each evaluated, or evaluated while the
next collects with `--overlap`), the checkpoint chosen on validation, and the result the report is written from."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict
from functools import partial
from pathlib import Path

from webenv.client import make_sync_channel
from webenv.v1 import collector_pb2_grpc, policy_pb2_grpc, task_pb2_grpc, trainer_pb2_grpc

from .dyna import Dyna
from .options import LoopConfig
from .records import SUITES, Evaluation, Timing
from .runs import Runs
from .starts import Starts
from .suites import Suites
from .training import Training


class Loop(Runs, Suites, Training, Starts, Dyna):
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
        self.warm_ref = ""  # the BC warm start's checkpoint, once trained
        self.reach: dict[str, dict] = {}  # suite -> answer_reach of the oracle's run on it

    def run_loop(self) -> dict:
        """The whole loop (or Dyna's two arms), to the result the report is written from."""
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
            if pending:  # an evaluation and a collection in flight together: each at half the concurrency
                with ThreadPoolExecutor(1) as pool:
                    collecting = pool.submit(self.collect, it, cp.ref, tuple(sampled), shared=True)
                    try:
                        self.evaluate_checkpoint(*pending, reported=every or pending[1] == "bc", shared=True)
                        runs = collecting.result()
                    except BaseException:  # Ctrl-C, SIGTERM, a failed run: the collection must not run on alone
                        self.stop_live()
                        raise
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
            self.reference()
        return self.result(t_start)

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
            out[e.split] = SUITES[key] + (f": {e.split.partition(':')[2]}" if key in ("family", "builders", "handmade") and
                                          ":" in e.split else "")
        return out

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

"""The loop's training jobs: one job on the trainer (the arm's algorithm, the KL term), followed to its end through
trainer restarts, and the version loaded by the policy service."""

from __future__ import annotations

import os
import time

from webenv.client.watch import to_end
from webenv.v1 import collector_pb2, policy_pb2, trainer_pb2

from ..signals import ARMS
from .records import MINIWOB_FAMILY


class Training:
    """The trainer side of the loop (a part of :class:`webenv.cli.learning.Loop`)."""

    def train(self, label: str, algorithm: int, run_ids: list[str], parent: str, epochs: int,
              name: str = "") -> trainer_pb2.Checkpoint:
        """A job from ``parent`` ("" = a new model) on ``run_ids``, of the checkpoint family ``name`` (the loop's by
        default), loaded by the policy service once trained."""
        t0 = time.monotonic()
        spec = trainer_pb2.JobSpec(
            name=name or self.cfg.name, algorithm=algorithm, parent=parent,
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
            if self.cfg.relabel_subtasks:  # a failure's satisfied subtasks are examples: read the failures too
                spec.options.relabel_subtasks = True
                spec.data.filter.ClearField("passed")
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

    def rl_algorithm(self) -> int:
        return ARMS[self.cfg.algorithm].algorithm

"""Training jobs: accepted, persisted, run one at a time off the event loop, resumed after a restart.

A job record (the Job message as JSON) is written at every state change to `<data_dir>/jobs/<id>.json`;
a running job also keeps `<id>.resume.pt` (model, optimiser, step). When the trainer starts, every job
that was PENDING, LOADING or TRAINING is queued again and continues from its resume file, so a loop
driven by `webenv train` survives a trainer restart and loses at most `checkpoint_every` steps.
The checkpoint version is reserved when the job is accepted, so a resumed job publishes the version its
caller was told about.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import shutil
import tempfile
import threading
import time
import uuid
from pathlib import Path

from google.protobuf import json_format
from webenv import errors
from webenv.agent import checkpoints
from webenv.idempotency import RequestCache, check_request_id
from webenv.v1 import trainer_pb2

from . import data, metrics
from .config import Settings
from .rankers import RANKERS

log = logging.getLogger("webenv.trainer")
TERMINAL = {trainer_pb2.JOB_STATE_SUCCEEDED, trainer_pb2.JOB_STATE_STOPPED, trainer_pb2.JOB_STATE_FAILED}
_STATE = trainer_pb2.JobState.Name
DEFAULTS = {
    trainer_pb2.MODEL_KIND_SCORER: {"epochs": 3, "batch_size": 32, "learning_rate": 2e-3},
    trainer_pb2.MODEL_KIND_CAUSAL_LM: {"epochs": 1, "batch_size": 8, "learning_rate": 5e-5},
    trainer_pb2.MODEL_KIND_ENCODER: {"epochs": 2, "batch_size": 16, "learning_rate": 1e-3},
}
MAX_HARD_NEGATIVES = 16  # AlgorithmOptions.hard_negatives
_MAX_LABELS = 32
REQUEST_IDS_KEPT = 10_000  # StartJob request ids remembered for retries


def validate_spec(spec: trainer_pb2.JobSpec, root: Path) -> None:
    """INVALID_ARGUMENT naming the first bad field."""
    def bad(field: str, msg: str) -> errors.InvalidArgument:
        return errors.InvalidArgument(f"spec.{field}: {msg}", reason="BAD_JOB_SPEC", metadata={"field": f"spec.{field}"})

    if not checkpoints.NAME.match(spec.name):
        raise bad("name", "required: lower-case letters, digits, '-', '_' (at most 63)")
    if spec.algorithm not in trainer_pb2.TrainingAlgorithm.values() or not spec.algorithm:
        known = ", ".join(n.removeprefix("TRAINING_ALGORITHM_") for n in trainer_pb2.TrainingAlgorithm.keys()[1:])
        raise bad("algorithm", f"required, one of {known} (got {spec.algorithm})")
    o = spec.options
    if o.reward not in trainer_pb2.RewardKind.values():
        raise bad("options.reward", f"unknown reward kind {o.reward}")
    if math.isnan(o.advantage_epsilon) or not 0 <= o.advantage_epsilon <= 1:
        raise bad("options.advantage_epsilon", f"must be within 0..1, got {o.advantage_epsilon}")
    if spec.model not in trainer_pb2.ModelKind.values() or not spec.model:
        raise bad("model", "required: SCORER, ENCODER or CAUSAL_LM")
    if spec.parent:
        checkpoints.parse_ref(spec.parent, "spec.parent")
        checkpoints.resolve(root, spec.parent, "spec.parent")
        if checkpoints.parse_ref(spec.parent)[0] != spec.name:
            raise bad("parent", f"must be a version of '{spec.name}' (a family continues its own line)")
        parent_kind = checkpoints.read_meta(checkpoints.resolve(root, spec.parent, "spec.parent")).model
        if parent_kind != spec.model:
            raise bad("parent", f"holds a {trainer_pb2.ModelKind.Name(parent_kind)} model, not "
                                f"{trainer_pb2.ModelKind.Name(spec.model)}")
    if math.isnan(o.kl_coef) or not 0 <= o.kl_coef <= 10:
        raise bad("options.kl_coef", f"must be within 0..10, got {o.kl_coef}")
    if o.relabel_answers and spec.model not in RANKERS:
        raise bad("options.relabel_answers", "answer relabeling is built for SCORER and ENCODER jobs only")
    if o.hard_negatives > MAX_HARD_NEGATIVES:
        raise bad("options.hard_negatives", f"must be within 0..{MAX_HARD_NEGATIVES}, got {o.hard_negatives}")
    if o.hard_negatives and spec.model not in RANKERS:
        raise bad("options.hard_negatives", "hard negatives are built for SCORER and ENCODER jobs only")
    if o.kl_reference and not o.kl_coef:
        raise bad("options.kl_reference", "is the reference of options.kl_coef, which is 0")
    if o.kl_coef:
        if spec.model not in RANKERS:
            raise bad("options.kl_coef", "a KL penalty is built for SCORER and ENCODER jobs only")
        if not (o.kl_reference or spec.parent):
            raise bad("options.kl_coef", "needs a reference: options.kl_reference or a parent")
        if o.kl_reference:
            name, version = checkpoints.parse_ref(o.kl_reference, "spec.options.kl_reference")
            if name != spec.name or version is None:
                raise bad("options.kl_reference", f"must be a version of '{spec.name}', '{spec.name}@<version>'")
            ref_kind = checkpoints.read_meta(checkpoints.resolve(root, o.kl_reference, "spec.options.kl_reference")).model
            if ref_kind != spec.model:
                raise bad("options.kl_reference", f"holds a {trainer_pb2.ModelKind.Name(ref_kind)} model, not "
                                                  f"{trainer_pb2.ModelKind.Name(spec.model)}")
    if spec.model == trainer_pb2.MODEL_KIND_CAUSAL_LM and not spec.parent:
        if not spec.base_model_path:
            raise bad("base_model_path", "required for a CAUSAL_LM job without a parent (a local Hugging Face folder)")
        if not (Path(spec.base_model_path) / "config.json").is_file():
            raise bad("base_model_path", f"{spec.base_model_path[:200]!r} has no config.json")
    if spec.model == trainer_pb2.MODEL_KIND_ENCODER and spec.base_model_path and not spec.parent and \
            not (Path(spec.base_model_path) / "config.json").is_file():
        raise bad("base_model_path", f"{spec.base_model_path[:200]!r} has no config.json")
    data.validate(spec.data)
    lm = spec.lm
    if spec.model != trainer_pb2.MODEL_KIND_CAUSAL_LM and spec.HasField("lm"):
        raise bad("lm", "language-model options are for MODEL_KIND_CAUSAL_LM jobs only")
    for field, value, lo, hi in (("lora_rank", lm.lora_rank, 0, 1024), ("lora_alpha", lm.lora_alpha, 0, 4096),
                                 ("lora_dropout", lm.lora_dropout, 0, 0.9),
                                 ("gradient_accumulation_steps", lm.gradient_accumulation_steps, 0, 4096),
                                 ("warmup_ratio", lm.warmup_ratio, 0, 0.5), ("clip_ratio", lm.clip_ratio, 0, 10),
                                 ("max_new_tokens", lm.max_new_tokens, 0, 32768)):
        if math.isnan(value) or not lo <= value <= hi:
            raise bad(f"lm.{field}", f"must be within {lo}..{hi}, got {value}")
    for i, module in enumerate(lm.lora_target_modules):
        if not module or len(module) > 128 or not module.replace("_", "").replace(".", "").replace("-", "").isalnum():
            raise bad(f"lm.lora_target_modules[{i}]", f"a module name (letters, digits, '_', '.', '-'), got {module[:80]!r}")
    if lm.lr_scheduler not in ("", "linear", "cosine", "constant"):
        raise bad("lm.lr_scheduler", f"linear, cosine or constant, got {lm.lr_scheduler[:40]!r}")
    h = spec.hyper
    for field, value, lo, hi in (("epochs", h.epochs, 0, 1000), ("max_steps", h.max_steps, 0, 10_000_000),
                                 ("batch_size", h.batch_size, 0, 4096), ("checkpoint_every", h.checkpoint_every, 0, 10**7)):
        if not lo <= value <= hi:
            raise bad(f"hyper.{field}", f"must be within {lo}..{hi}")
    if not 0 <= h.learning_rate <= 1:
        raise bad("hyper.learning_rate", "must be within 0..1")
    if not 0 <= h.validation_fraction < 1:
        raise bad("hyper.validation_fraction", "must be within [0, 1)")
    if len(spec.labels) > _MAX_LABELS or any(len(k) > 64 or len(v) > 256 for k, v in spec.labels.items()):
        raise bad("labels", f"at most {_MAX_LABELS} labels, keys up to 64 and values up to 256 characters")


class JobManager:
    """Owns the jobs of one trainer."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.root = Path(settings.trainer_checkpoint_dir)
        self.dir = Path(settings.trainer_data_dir) / "jobs"
        self.dir.mkdir(parents=True, exist_ok=True)
        self.root.mkdir(parents=True, exist_ok=True)
        self.jobs: dict[str, trainer_pb2.Job] = {}
        self.by_request: RequestCache[str] = RequestCache(REQUEST_IDS_KEPT)  # StartJob request id -> job id
        self.changed: dict[str, asyncio.Condition] = {}
        self.stop_flags: dict[str, threading.Event] = {}
        self.reserved: dict[str, set[int]] = {}
        self.slots = asyncio.Semaphore(settings.trainer_max_running_jobs)
        self.tasks: set[asyncio.Task] = set()
        self.loop: asyncio.AbstractEventLoop | None = None
        self.shutting_down = False

    # -- persistence ----------------------------------------------------------------------------------------------
    def _path(self, job_id: str) -> Path:
        return self.dir / f"{job_id}.json"

    def resume_path(self, job_id: str) -> Path:
        return self.dir / f"{job_id}.resume.pt"

    def lm_resume_dir(self, job_id: str) -> Path:
        """A causal-LM job's resume folder: the HF Trainer's own checkpoints (model, optimiser, scheduler, RNG)."""
        return self.dir / f"{job_id}.resume"

    def _save(self, job: trainer_pb2.Job) -> None:
        tmp = self._path(job.job_id).with_suffix(".tmp")
        tmp.write_text(json_format.MessageToJson(job, indent=None))
        tmp.replace(self._path(job.job_id))

    def load(self) -> list[str]:
        """Read job records; returns the ids of unfinished jobs (to resume)."""
        unfinished = []
        for p in sorted(self.dir.glob("*.json")):
            job = trainer_pb2.Job()
            try:
                json_format.Parse(p.read_text(), job, ignore_unknown_fields=True)
            except (json_format.ParseError, OSError) as exc:
                log.warning("unreadable job record %s: %s", p.name, exc)
                continue
            self.jobs[job.job_id] = job
            self.by_request.put(job.request_id, job.job_id)
            if job.state not in TERMINAL:
                unfinished.append(job.job_id)
                self.reserved.setdefault(job.spec.name, set()).add(job.checkpoint.version)
        return unfinished

    # -- lifecycle ------------------------------------------------------------------------------------------------
    def _next_version(self, name: str) -> int:
        have = checkpoints.versions(self.root, name)
        taken = self.reserved.get(name, set())
        return max([0, *have, *taken]) + 1

    async def start(self) -> None:
        self.loop = asyncio.get_running_loop()
        for job_id in self.load():
            job = self.jobs[job_id]
            job.resumes += 1
            job.state = trainer_pb2.JOB_STATE_PENDING
            self._save(job)
            log.info("resuming job", extra={"job_id": job_id, "step": job.progress.step})
            self._launch(job_id)
        metrics.JOBS_RUNNING.set(0)

    def submit(self, request: trainer_pb2.StartJobRequest) -> trainer_pb2.Job:
        again = self.by_request.get(request.request_id)
        if again in self.jobs:  # a job trimmed since is started again
            return self.jobs[again]
        check_request_id(request.request_id)
        validate_spec(request.spec, self.root)
        spec = trainer_pb2.JobSpec()
        spec.CopyFrom(request.spec)
        for key, value in DEFAULTS[spec.model].items():
            if not getattr(spec.hyper, key):
                setattr(spec.hyper, key, value)
        if spec.hyper.validation_fraction == 0:
            spec.hyper.validation_fraction = 0.1
        job_id = uuid.uuid4().hex[:16]
        version = self._next_version(spec.name)
        self.reserved.setdefault(spec.name, set()).add(version)
        job = trainer_pb2.Job(job_id=job_id, spec=spec, state=trainer_pb2.JOB_STATE_PENDING,
                              request_id=request.request_id)
        job.checkpoint.name, job.checkpoint.version = spec.name, version
        job.checkpoint.ref = f"{spec.name}@{version}"
        job.created_at.GetCurrentTime()
        self.jobs[job_id] = job
        self.by_request.put(request.request_id, job_id)
        self._save(job)
        self._trim()
        metrics.JOBS.labels("accepted").inc()
        self._launch(job_id)
        return job

    def _launch(self, job_id: str) -> None:
        self.stop_flags[job_id] = threading.Event()
        task = asyncio.get_running_loop().create_task(self._run(job_id))
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    def get(self, job_id: str) -> trainer_pb2.Job:
        job = self.jobs.get(job_id)
        if job is None:
            raise errors.NotFound(f"job_id: no job {job_id[:64]!r}", reason="JOB_NOT_FOUND", metadata={"field": "job_id"})
        return job

    async def stop(self, job_id: str) -> trainer_pb2.Job:
        job = self.get(job_id)
        if job.state not in TERMINAL:
            self.stop_flags[job_id].set()
            if job.state == trainer_pb2.JOB_STATE_PENDING:
                await self._set(job, trainer_pb2.JOB_STATE_STOPPED)
        return job

    def condition(self, job_id: str) -> asyncio.Condition:
        return self.changed.setdefault(job_id, asyncio.Condition())

    async def _notify(self, job_id: str) -> None:
        cond = self.condition(job_id)
        async with cond:
            cond.notify_all()

    async def _set(self, job: trainer_pb2.Job, state: int, error: str = "") -> None:
        job.state = state
        if error:
            job.error = error[:2000]
        if state in TERMINAL:
            job.finished_at.GetCurrentTime()
            metrics.JOBS.labels(_STATE(state).removeprefix("JOB_STATE_").lower()).inc()
            self.reserved.get(job.spec.name, set()).discard(job.checkpoint.version)
            with contextlib.suppress(FileNotFoundError):
                self.resume_path(job.job_id).unlink()
            shutil.rmtree(self.lm_resume_dir(job.job_id), ignore_errors=True)
        self._save(job)
        await self._notify(job.job_id)

    def progress(self, job_id: str, **fields) -> None:
        """Called from the training thread."""
        job = self.jobs[job_id]
        for k, v in fields.items():
            setattr(job.progress, k, v)
        if self.loop is not None:
            asyncio.run_coroutine_threadsafe(self._notify(job_id), self.loop)

    def _trim(self) -> None:
        done = sorted((j for j in self.jobs.values() if j.state in TERMINAL), key=lambda j: j.created_at.ToNanoseconds())
        for job in done[: max(0, len(done) - self.settings.trainer_max_jobs_kept)]:
            self.jobs.pop(job.job_id, None)
            with contextlib.suppress(FileNotFoundError):
                self._path(job.job_id).unlink()

    # -- running --------------------------------------------------------------------------------------------------
    async def _run(self, job_id: str) -> None:
        job = self.jobs[job_id]
        stop = self.stop_flags[job_id]
        async with self.slots:
            if job.state in TERMINAL or stop.is_set():
                return
            metrics.JOBS_RUNNING.inc()
            try:
                await self._set(job, trainer_pb2.JOB_STATE_LOADING)
                # filtered BC reads only passed episodes, unless relabeling wants the failures' satisfied subtasks
                passed_only = (job.spec.algorithm == trainer_pb2.TRAINING_ALGORITHM_FILTERED_BC
                               and not job.spec.options.relabel_subtasks)
                flt = job.spec.data
                read_data = trainer_pb2.TrainingData()
                read_data.CopyFrom(flt)
                read_data.filter.drop_repeated = False  # the repetition filter is applied to targets, keeping context
                read_data.filter.include_errored = True  # read to be counted; the algorithms never train on them
                episodes, load_s = await data.read_episodes(
                    self.settings.collector_addr, read_data, passed_only=passed_only,
                    deadline=self.settings.trainer_read_timeout_seconds)
                job.progress.episodes, job.progress.load_seconds = len(episodes), load_s
                if self.shutting_down:
                    return
                if stop.is_set():
                    await self._set(job, trainer_pb2.JOB_STATE_STOPPED)
                    return
                await self._set(job, trainer_pb2.JOB_STATE_TRAINING)
                meta = await asyncio.to_thread(self._train, job, episodes, stop)
                if self.shutting_down:
                    return  # the record stays TRAINING: the next trainer resumes it from its resume file
                if stop.is_set():
                    await self._set(job, trainer_pb2.JOB_STATE_STOPPED)
                    return
                job.checkpoint.CopyFrom(meta)
                metrics.CHECKPOINTS.inc()
                await self._set(job, trainer_pb2.JOB_STATE_SUCCEEDED)
                log.info("job succeeded", extra={"job_id": job_id, "checkpoint": meta.ref})
            except errors.WebenvError as exc:
                await self._set(job, trainer_pb2.JOB_STATE_FAILED, exc.message)
            except data.HeldOutLeak as exc:
                await self._set(job, trainer_pb2.JOB_STATE_FAILED, str(exc))
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # a failed job must not take the trainer down
                log.exception("job %s failed", job_id)
                await self._set(job, trainer_pb2.JOB_STATE_FAILED, f"{type(exc).__name__}: {exc}")
            finally:
                metrics.JOBS_RUNNING.dec()

    def _train(self, job: trainer_pb2.Job, episodes, stop: threading.Event) -> trainer_pb2.Checkpoint:
        """Training proper (runs in a worker thread); returns the published checkpoint."""
        from .algorithms import select

        spec = job.spec
        import torch

        # The scorer's batches are small: one intra-op thread beat two on this 2-core machine under load
        # (25 ms vs ~1 s a step, measured with helpers' tests running); the encoder and a causal LM want every core.
        threads = self.settings.trainer_torch_threads or (1 if spec.model == trainer_pb2.MODEL_KIND_SCORER else 0)
        if threads:
            torch.set_num_threads(threads)
        selected = select(episodes, spec.algorithm, spec.data.filter.drop_repeated, spec.options,
                          sampled_targets=spec.model == trainer_pb2.MODEL_KIND_CAUSAL_LM)
        if spec.data.max_examples and len(selected.steps) > spec.data.max_examples:
            selected.steps = selected.steps[: spec.data.max_examples]
        if not selected.steps:
            raise errors.FailedPrecondition(
                f"no training examples: {len(episodes)} episodes read, {selected.episodes} with non-zero weight, "
                f"{selected.unmapped} steps not expressible as candidates, {selected.repeated} repeated, "
                f"{selected.errored} errored episodes left out, {selected.flat_groups} groups with equal rewards",
                reason="NO_EXAMPLES", metadata={"field": "spec.data"})
        self.progress(job.job_id, examples=len(selected.steps), errored_episodes=selected.errored,
                      relabeled_examples=selected.relabeled, flat_groups=selected.flat_groups)
        staging = Path(tempfile.mkdtemp(prefix=f".{spec.name}-", dir=self.root))
        try:
            if spec.model in RANKERS:
                report = self._train_ranker(job, selected, staging, stop)
            else:
                from .train_lm import train_causal_lm

                report = train_causal_lm(self, job, selected, staging, stop)
            if stop.is_set():
                shutil.rmtree(staging, ignore_errors=True)
                return job.checkpoint
            meta = self._meta(job, selected, report)
            path = checkpoints.publish(staging, self.root, meta)
            meta.path = str(path)
            return meta
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise

    def _train_ranker(self, job, selected, staging: Path, stop: threading.Event):
        """A ranker of the registry (rankers.RANKERS: the hashed scorer or the encoder): one loop
        (train_scorer.train), each kind's model and files."""
        import torch

        from . import train_scorer

        spec = job.spec
        kind = RANKERS[spec.model]
        lib = kind.library()
        if spec.parent:
            model = lib.load(checkpoints.resolve(self.root, spec.parent))
        else:
            torch.manual_seed(spec.hyper.seed)
            model = kind.new(spec.base_model_path or self.settings.encoder_base, self.settings.trainer_scorer_features)
        scorer = kind.wrap(model)
        train_set, valid_set = train_scorer.split_examples(selected, scorer, spec.hyper.validation_fraction,
                                                           spec.hyper.seed, relabel_answers=spec.options.relabel_answers,
                                                           negatives=spec.options.hard_negatives)
        t0 = time.perf_counter()

        def report(r) -> None:
            metrics.TRAIN_STEPS.inc(max(0, r.step - job.progress.step))
            metrics.EXAMPLES_PER_SECOND.set(r.examples_per_second)
            self.progress(job.job_id, step=r.step, total_steps=r.total_steps, epoch=r.epoch, loss=r.loss,
                          examples_per_second=r.examples_per_second, train_seconds=time.perf_counter() - t0,
                          validation_loss=r.validation_loss, validation_accuracy=r.validation_accuracy)

        h, o = spec.hyper, spec.options
        reference = None
        if o.kl_coef:
            reference = lib.load(checkpoints.resolve(self.root, o.kl_reference or spec.parent)).requires_grad_(False)
        final = train_scorer.train(lib, model, train_set, valid_set, epochs=h.epochs, max_steps=h.max_steps,
                                   batch_size=h.batch_size, lr=h.learning_rate, seed=h.seed,
                                   checkpoint_every=h.checkpoint_every, resume_path=self.resume_path(job.job_id),
                                   report=report, stopped=stop.is_set, reference=reference, kl_coef=o.kl_coef)
        lib.save(model, staging)
        return final

    def _meta(self, job: trainer_pb2.Job, selected, report) -> trainer_pb2.Checkpoint:
        spec = job.spec
        parent_steps = 0
        if spec.parent:
            parent_steps = checkpoints.read_meta(checkpoints.resolve(self.root, spec.parent)).total_steps
            parent_ref = checkpoints.read_meta(checkpoints.resolve(self.root, spec.parent)).ref
        else:
            parent_ref = ""
        meta = trainer_pb2.Checkpoint(
            name=spec.name, version=job.checkpoint.version, ref=job.checkpoint.ref, parent=parent_ref,
            algorithm=spec.algorithm, model=spec.model, data_run_ids=list(spec.data.run_ids),
            episodes=selected.episodes, examples=len(selected.steps), steps=report.step,
            total_steps=parent_steps + report.step, config_json=json_format.MessageToJson(spec, indent=None),
            loss=report.loss, validation_loss=report.validation_loss, job_id=job.job_id,
            data_policy_versions=sorted(selected.policy_versions), labels=dict(spec.labels),
        )
        meta.created_at.GetCurrentTime()
        return meta

    async def close(self) -> None:
        """Stop training threads at their next step, keeping unfinished jobs resumable."""
        self.shutting_down = True
        for flag in self.stop_flags.values():
            flag.set()
        for task in list(self.tasks):
            task.cancel()
        for task in list(self.tasks):
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task


def job_sort_key(job: trainer_pb2.Job) -> int:
    return job.created_at.ToNanoseconds()


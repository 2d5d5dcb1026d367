"""One causal-LM job outside the service: the command ``accelerate launch`` runs on several GPUs.

    accelerate launch -m webenv.trainer.lmjob --spec job.json --collector host:50056 --checkpoint-dir /ckpt

A vision-language model's job also needs ``--blob-dir`` (the collector's blob folder: the steps' screenshots).

``--spec`` is a ``JobSpec`` as JSON (the StartJob message). Every process reads the job's episodes from the
collector (ReadEpisodes, train split only, as the service reads them), selects the algorithm's examples and runs
the same ``train_causal_lm`` as the service; the HF Trainer underneath takes its processes, DDP, DeepSpeed or FSDP
from accelerate's environment, and process 0 publishes the checkpoint to ``--checkpoint-dir`` (the folder the
policy service loads from) as the service would. One process (no accelerate) runs it on a CPU or one GPU.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import tempfile
import threading
from pathlib import Path
from types import SimpleNamespace

import typer
from google.protobuf import json_format
from webenv.v1 import trainer_pb2


class StandaloneManager:
    """The slice of the service's JobManager a causal-LM job uses (settings, progress, the resume folder)."""

    def __init__(self, root: Path, work: Path, device: str = "auto", max_lm_tokens: int = 0,
                 gradient_checkpointing: bool = False, blob_dir: str | Path = "") -> None:
        self.root, self.dir = Path(root), Path(work)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.settings = SimpleNamespace(trainer_device=device, trainer_max_lm_tokens=max_lm_tokens,
                                        trainer_gradient_checkpointing=gradient_checkpointing,
                                        trainer_blob_dir=str(blob_dir))
        self.shutting_down = False
        self.log: list[dict] = []

    def lm_resume_dir(self, job_id: str) -> Path:
        return self.dir / f"{job_id}.resume"

    def progress(self, job_id: str, **fields) -> None:
        self.log.append(fields)
        if "step" in fields and int(os.environ.get("RANK", "0")) == 0:
            print(f"step {fields['step']}/{fields.get('total_steps')} loss {fields.get('loss', 0):.4f} "
                  f"tokens/s {fields.get('tokens_per_second', 0):.0f}", flush=True)


app = typer.Typer(add_completion=False, help=__doc__.splitlines()[0])


@app.command()
def main(
    spec_file: Path = typer.Option(..., "--spec", help="JobSpec as JSON"),
    collector: str = typer.Option("localhost:50056", help="CollectorService the episodes are read from."),
    checkpoint_dir: Path = typer.Option(..., help="Folder the checkpoint is published to (the policy's)."),
    version: int = typer.Option(0, help="Version to publish (0 = the family's next)."),
    device: str = typer.Option("auto", help="auto, cpu or cuda."),
    blob_dir: str = typer.Option("", help="The collector's blob folder (screenshots, for a vision-language model)."),
) -> None:
    """Read the job's episodes, train, publish the checkpoint (process 0)."""
    from webenv.agent import checkpoints

    from . import data
    from .algorithms import select
    from .jobs import validate_spec
    from .train_lm import train_causal_lm

    a = SimpleNamespace(spec=spec_file, collector=collector, checkpoint_dir=checkpoint_dir, version=version,
                        device=device)
    spec = json_format.Parse(a.spec.read_text(), trainer_pb2.JobSpec())
    a.checkpoint_dir.mkdir(parents=True, exist_ok=True)
    validate_spec(spec, a.checkpoint_dir)
    episodes, _ = asyncio.run(data.read_episodes(
        a.collector, spec.data, deadline=600,
        passed_only=spec.algorithm == trainer_pb2.TRAINING_ALGORITHM_FILTERED_BC and not spec.options.relabel_subtasks))
    selected = select(episodes, spec.algorithm, spec.data.filter.drop_repeated, spec.options, sampled_targets=True)
    version = a.version or max([0, *checkpoints.versions(a.checkpoint_dir, spec.name)]) + 1
    job = trainer_pb2.Job(job_id=f"{spec.name}-v{version}", spec=spec)
    job.checkpoint.name, job.checkpoint.version, job.checkpoint.ref = spec.name, version, f"{spec.name}@{version}"
    manager = StandaloneManager(a.checkpoint_dir, Path(tempfile.gettempdir()) / "webenv-lmjob", a.device,
                                blob_dir=blob_dir)
    staging = Path(tempfile.mkdtemp(prefix=f".{spec.name}-", dir=a.checkpoint_dir))
    report = train_causal_lm(manager, job, selected, staging, threading.Event())
    if int(os.environ.get("RANK", "0")) == 0:
        meta = trainer_pb2.Checkpoint(name=spec.name, version=version, ref=job.checkpoint.ref, parent=spec.parent,
                                      algorithm=spec.algorithm, model=spec.model, data_run_ids=list(spec.data.run_ids),
                                      episodes=selected.episodes, examples=len(selected.steps), steps=report.step,
                                      total_steps=report.step, loss=report.loss,
                                      config_json=json_format.MessageToJson(spec, indent=None),
                                      data_policy_versions=sorted(selected.policy_versions))
        meta.created_at.GetCurrentTime()
        print(checkpoints.publish(staging, a.checkpoint_dir, meta))
    else:
        shutil.rmtree(staging, ignore_errors=True)


if __name__ == "__main__":
    app()

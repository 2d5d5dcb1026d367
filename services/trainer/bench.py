"""Trainer benchmark: training throughput through the service vs the same training in-process, and the
trained policy's act latency vs the random policy, side by side on one stack.

    python services/trainer/bench.py [--out bench/results] [--demos 40]

1. A local stack on free ports; the oracle collects `--demos` train-split episodes (AXTREE kept).
2. A BC job through TrainerService (data read over ReadEpisodes, one torch thread): examples/s and the job's
   wall time split into reading and optimising.
3. Baselines in this process on the same episodes: the same scorer trained (a) as the service does (sparse
   embeddings, one thread) and (b) the naive way (dense Adam over all embedding rows, torch's default threads),
   so the ratio says what the sparse design buys and what the service costs over the raw loop.
4. The encoder ranker (webenv.agent.encoder) beside it: a BC job through the service (`--encoder-epochs`), and in
   this process its examples/s with the context tower's top 2 layers tuned (the default; first epoch: frozen states
   computed, later epochs: cached), the head only, the top 2 layers tuned for candidates too, and all 6 layers.
5. PolicyService.Act over the demonstrations' observations: both checkpoints vs the random policy (p50, p95).
The learning result itself (success on unseen websites) is `webenv train` (`make learn`): bench/results/learning/README.md.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

from webenv.client import make_sync_channel


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="bench/results")
    ap.add_argument("--demos", type=int, default=40)
    ap.add_argument("--epochs", type=int, default=10)
    ap.add_argument("--encoder-epochs", type=int, default=2)
    ap.add_argument("--encoder-examples", type=int, default=96, help="examples of the in-process encoder variants")
    args = ap.parse_args()

    import torch
    from webenv.agent import encoder as enc
    from webenv.agent import scorer as lib
    from webenv.cli.stack import Stack
    from webenv.trainer import train_scorer
    from webenv.trainer.algorithms import select
    from webenv.v1 import (
        collector_pb2,
        collector_pb2_grpc,
        common_pb2,
        policy_pb2,
        policy_pb2_grpc,
        trainer_pb2,
        trainer_pb2_grpc,
    )

    out: dict = {"demos": args.demos, "epochs": args.epochs}
    with tempfile.TemporaryDirectory() as tmp, Stack(Path(tmp), free_ports=True, sites_count=24) as stack:
        stack.start(timeout=180)
        collector = collector_pb2_grpc.CollectorServiceStub(make_sync_channel(stack.address("collector"), timeout=None))
        trainer = trainer_pb2_grpc.TrainerServiceStub(make_sync_channel(stack.address("trainer"), timeout=None))
        policy = policy_pb2_grpc.PolicyServiceStub(make_sync_channel(stack.address("policy"), timeout=None))
        spec = collector_pb2.RunSpec(policy="oracle", episodes=args.demos, seed=3, concurrency=4)
        spec.tasks.split = common_pb2.SPLIT_TRAIN
        spec.tasks.sources.append(common_pb2.TASK_SOURCE_SYNTHETIC)
        spec.observation_spec.formats.extend([common_pb2.OBSERVATION_FORMAT_AXTREE, common_pb2.OBSERVATION_FORMAT_HTML])
        spec.keep_formats.append(common_pb2.OBSERVATION_FORMAT_AXTREE)
        run = collector.StartRun(collector_pb2.StartRunRequest(spec=spec), timeout=60).run
        for _ in collector.WatchRun(collector_pb2.WatchRunRequest(run_id=run.run_id)):
            pass
        flt = collector_pb2.ExportFilter(passed=True, split=common_pb2.SPLIT_TRAIN)
        episodes = [r.episode for r in collector.ReadEpisodes(
            collector_pb2.ReadEpisodesRequest(run_ids=[run.run_id], filter=flt), timeout=300)]
        out["episodes"] = len(episodes)

        job_spec = trainer_pb2.JobSpec(
            name="bench", algorithm=trainer_pb2.TRAINING_ALGORITHM_BC, model=trainer_pb2.MODEL_KIND_SCORER,
            data=trainer_pb2.TrainingData(run_ids=[run.run_id], filter=collector_pb2.ExportFilter(passed=True)),
            hyper=trainer_pb2.Hyperparameters(epochs=args.epochs, seed=1, validation_fraction=0.0))
        t0 = time.perf_counter()
        job = trainer.StartJob(trainer_pb2.StartJobRequest(spec=job_spec), timeout=30).job
        for resp in trainer.WatchJob(trainer_pb2.WatchJobRequest(job_id=job.job_id)):
            job = resp.job
        p = job.progress
        out["service"] = {"state": trainer_pb2.JobState.Name(job.state), "examples": p.examples, "steps": p.step,
                          "examples_per_second": round(p.examples_per_second, 1), "load_seconds": round(p.load_seconds, 2),
                          "train_seconds": round(p.train_seconds, 2), "wall_seconds": round(time.perf_counter() - t0, 2),
                          "loss": round(p.loss, 4)}

        selected = select(episodes, trainer_pb2.TRAINING_ALGORITHM_BC, drop_repeated=True)
        t = time.perf_counter()
        examples = [lib.Scorer(lib.ScorerModel(lib.ScorerConfig())).example(s.ctx, s.candidates, s.target, w)
                    for s, w, _ in selected.steps]
        out["featurize_steps_per_second"] = round(len(examples) / (time.perf_counter() - t), 1)

        def raw(threads: int, dense: bool) -> dict:
            torch.set_num_threads(threads)
            torch.manual_seed(1)
            model = lib.ScorerModel(lib.ScorerConfig())
            if dense:  # the naive baseline: dense gradients, one Adam over every parameter
                model.cand.sparse = model.ctx.sparse = False
                saved = lib.optimizers
                lib.optimizers = lambda m, lr: [torch.optim.Adam(m.parameters(), lr=lr)]
            try:
                t1 = time.perf_counter()
                r = train_scorer.train(lib, model, examples, [], epochs=args.epochs, max_steps=0, batch_size=32, lr=2e-3,
                                       seed=1, checkpoint_every=0, resume_path=Path(tmp) / "r.pt",
                                       report=lambda _: None, stopped=lambda: False)
            finally:
                if dense:
                    lib.optimizers = saved
            return {"threads": threads, "dense": dense, "examples_per_second": round(r.examples_per_second, 1),
                    "seconds": round(time.perf_counter() - t1, 2), "loss": round(r.loss, 4)}

        out["raw_sparse_1_thread"] = raw(1, False)
        out["raw_dense_default_threads"] = raw(torch.get_num_threads() or 2, True)

        def job(name: str, model: int, epochs: int) -> dict:
            js = trainer_pb2.JobSpec(
                name=name, algorithm=trainer_pb2.TRAINING_ALGORITHM_BC, model=model,
                data=trainer_pb2.TrainingData(run_ids=[run.run_id], filter=collector_pb2.ExportFilter(passed=True)),
                hyper=trainer_pb2.Hyperparameters(epochs=epochs, seed=1, validation_fraction=0.0))
            t0 = time.perf_counter()
            j = trainer.StartJob(trainer_pb2.StartJobRequest(spec=js), timeout=30).job
            for resp in trainer.WatchJob(trainer_pb2.WatchJobRequest(job_id=j.job_id)):
                j = resp.job
            p = j.progress
            return {"state": trainer_pb2.JobState.Name(j.state), "error": j.error, "examples": p.examples,
                    "steps": p.step, "examples_per_second": round(p.examples_per_second, 1),
                    "train_seconds": round(p.train_seconds, 2), "wall_seconds": round(time.perf_counter() - t0, 2),
                    "loss": round(p.loss, 4)}

        out["encoder_service"] = job("benchenc", trainer_pb2.MODEL_KIND_ENCODER, args.encoder_epochs)

        def raw_encoder(tune_layers: int, tune_candidates: bool = False) -> dict:
            torch.set_num_threads(1)
            torch.manual_seed(1)
            model = enc.new(enc.EncoderConfig(tune_layers=tune_layers, tune_candidates=tune_candidates))
            wrap = enc.Encoder(model)
            exs = [wrap.example(st.ctx, st.candidates, st.target, w) for st, w, _ in selected.steps[:args.encoder_examples]]
            rates = []
            for epoch in range(2):
                r = train_scorer.train(enc, model, exs, [], epochs=1, max_steps=0, batch_size=16, lr=1e-3, seed=epoch,
                                       checkpoint_every=0, resume_path=Path(tmp) / f"e{tune_layers}-{epoch}.pt",
                                       report=lambda _: None, stopped=lambda: False)
                rates.append(round(r.examples_per_second, 1))
            return {"tune_layers": tune_layers, "tune_candidates": tune_candidates, "examples": len(exs),
                    "first_epoch": rates[0], "later_epoch": rates[1]}

        out["raw_encoder"] = [raw_encoder(2), raw_encoder(0), raw_encoder(2, True), raw_encoder(6, True)]

        policy.LoadCheckpoint(policy_pb2.LoadCheckpointRequest(ref="bench"), timeout=120)
        policy.LoadCheckpoint(policy_pb2.LoadCheckpointRequest(ref="benchenc"), timeout=300)
        lat: dict[str, list[float]] = {"bench": [], "benchenc": [], "random": []}
        for ep in episodes[:20]:
            for rec in ep.trajectory.steps[:6]:
                for name in lat:
                    req = policy_pb2.ActRequest(episode_id=ep.episode_id, policy=name, task=ep.task,
                                                observation=rec.observation, step_index=rec.step_index, seed=1)
                    t2 = time.perf_counter()
                    policy.Act(req, timeout=30)
                    lat[name].append((time.perf_counter() - t2) * 1000)
        out["act_ms"] = {n: {"p50": round(statistics.median(v), 2), "p95": round(sorted(v)[int(0.95 * (len(v) - 1))], 2),
                             "n": len(v)} for n, v in lat.items()}

    s, r1, rd = out["service"], out["raw_sparse_1_thread"], out["raw_dense_default_threads"]
    lines = [
        "# Trainer", "", "Command: `python services/trainer/bench.py` (part of `make bench`).", "",
        f"Data: {out['episodes']} passed oracle demonstrations, {s['examples']} steps, {args.epochs} epochs of BC.", "",
        "| what | examples/s | seconds | final loss |", "| --- | --- | --- | --- |",
        f"| TrainerService job (read {s['load_seconds']} s + train) | {s['examples_per_second']} | {s['wall_seconds']} | {s['loss']} |",
        f"| raw loop, same model (sparse, 1 thread) | {r1['examples_per_second']} | {r1['seconds']} | {r1['loss']} |",
        f"| naive raw loop (dense Adam, {rd['threads']} threads) | {rd['examples_per_second']} | {rd['seconds']} | {rd['loss']} |",
        "",
        f"Service vs raw loop: {s['examples_per_second'] / max(r1['examples_per_second'], 1e-9):.2f}x; "
        f"sparse vs dense: {r1['examples_per_second'] / max(rd['examples_per_second'], 1e-9):.1f}x. "
        f"Featurisation: {out['featurize_steps_per_second']} steps/s.", "",
        f"Encoder ranker (all-MiniLM-L6-v2, the context tower's top 2 layers tuned): TrainerService job {out['encoder_service']['examples']} "
        f"examples x {args.encoder_epochs} epochs at {out['encoder_service']['examples_per_second']} examples/s "
        f"({out['encoder_service']['wall_seconds']} s, loss {out['encoder_service']['loss']}). In this process, 1 thread:", "",
        "| tuned layers | candidates tuned too | examples | examples/s, first epoch | examples/s, later epochs |",
        "| --- | --- | --- | --- | --- |",
        *[f"| {r['tune_layers']} | {'yes' if r['tune_candidates'] else 'no'} | {r['examples']} | {r['first_epoch']} | "
          f"{r['later_epoch']} |" for r in out["raw_encoder"]],
        "",
        "PolicyService.Act on the demonstrations' observations (ms; `benchenc` is the encoder, its embeddings cached by "
        "text after a first sight):", "",
        "| policy | p50 | p95 | n |", "| --- | --- | --- | --- |",
        *[f"| {n} | {v['p50']} | {v['p95']} | {v['n']} |" for n, v in out["act_ms"].items()],
    ]
    dest = Path(args.out)
    dest.mkdir(parents=True, exist_ok=True)
    (dest / "trainer.json").write_text(json.dumps(out, indent=1))
    (dest / "trainer.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()

"""The trainer's GPU path, run for real on a CUDA machine: causal-LM fine-tuning and serving the checkpoint (a
cross-service check, so it lives in bench/ beside the other scripts that drive several services).

    python bench/gpu_check.py --episodes EPISODES.pb --tokenizer DIR --out DIR [--layers 16 --hidden 1024]

No model weights can be downloaded here, so the base model is a Llama-architecture model initialised at random
with the given size (the tokenizer comes from `webenv-policy build-tiny-model`); what is checked is the code
path and its speed, not a model's quality: the trainer's `train_causal_lm` (the same function a CAUSAL_LM job
runs) on stored oracle episodes in bf16 on CUDA, then the policy service's transformers backend loading the
published folder on CUDA and answering a batch of the `llm` policy's prompts, parsed by the policy's parser.
EPISODES.pb holds length-prefixed `StoredEpisode` messages (`--dump-from COLLECTOR_ADDR RUN_ID` writes one through the collector's ReadEpisodes).
Prints one JSON object with the figures.
"""

from __future__ import annotations

import argparse
import json
import struct
import threading
import time
from pathlib import Path
from types import SimpleNamespace


def read_episodes(path: Path):
    from webenv.v1 import collector_pb2

    data = path.read_bytes()
    out, i = [], 0
    while i < len(data):
        (n,) = struct.unpack_from("<I", data, i)
        ep = collector_pb2.StoredEpisode()
        ep.ParseFromString(data[i + 4:i + 4 + n])
        out.append(ep)
        i += 4 + n
    return out


def dump_from_collector(address: str, run_id: str, path: Path) -> int:
    """The passed episodes of ``run_id``, read as the trainer reads them (CollectorService.ReadEpisodes)."""
    from webenv.client import make_sync_channel
    from webenv.v1 import collector_pb2, collector_pb2_grpc

    req = collector_pb2.ReadEpisodesRequest(run_ids=[run_id], filter=collector_pb2.ExportFilter(passed=True))
    n = 0
    with make_sync_channel(address, timeout=None) as ch, path.open("wb") as f:
        for resp in collector_pb2_grpc.CollectorServiceStub(ch).ReadEpisodes(req, timeout=600):
            b = resp.episode.SerializeToString()
            f.write(struct.pack("<I", len(b)) + b)
            n += 1
    return n


class Manager:
    """The slice of the trainer's JobManager that train_causal_lm uses."""

    def __init__(self, root: Path, device: str, max_tokens: int, checkpointing: bool = False) -> None:
        self.root = root
        self.settings = SimpleNamespace(trainer_device=device, trainer_max_lm_tokens=max_tokens,
                                        trainer_gradient_checkpointing=checkpointing)
        self.last: dict = {}
        self.shutting_down = False

    def lm_resume_dir(self, job_id: str) -> Path:
        return self.root / f"{job_id}.resume"

    def progress(self, job_id: str, **fields) -> None:
        self.last = fields


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--episodes", type=Path)
    ap.add_argument("--tokenizer", type=Path)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--layers", type=int, default=16)
    ap.add_argument("--hidden", type=int, default=1024)
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--max-tokens", type=int, default=2048)
    ap.add_argument("--gradient-checkpointing", action="store_true")
    ap.add_argument("--dump-from", nargs=2, metavar=("COLLECTOR_ADDR", "RUN_ID"))
    a = ap.parse_args()
    if a.dump_from:
        print(dump_from_collector(a.dump_from[0], a.dump_from[1], a.episodes))
        return
    import asyncio

    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM
    from webenv.agent.prompt import build_prompt
    from webenv.llm import GenerationRequest, Message, SamplingParams
    from webenv.llm.transformers_backend import TransformersBackend
    from webenv.policy.parse import parse_output
    from webenv.trainer.algorithms import select
    from webenv.trainer.train_lm import train_causal_lm
    from webenv.v1 import trainer_pb2

    a.out.mkdir(parents=True, exist_ok=True)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    tok = AutoTokenizer.from_pretrained(a.tokenizer, local_files_only=True)
    cfg = LlamaConfig(vocab_size=len(tok), hidden_size=a.hidden, intermediate_size=a.hidden * 4 // 1,
                      num_hidden_layers=a.layers, num_attention_heads=a.hidden // 64,
                      num_key_value_heads=a.hidden // 64, max_position_embeddings=a.max_tokens,
                      bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id,
                      pad_token_id=tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id)
    base = a.out / "base"
    torch.manual_seed(0)
    LlamaForCausalLM(cfg).save_pretrained(base)
    tok.save_pretrained(base)
    params = sum(p.numel() for p in LlamaForCausalLM(cfg).parameters())

    episodes = read_episodes(a.episodes)
    selected = select(episodes, trainer_pb2.TRAINING_ALGORITHM_BC, drop_repeated=True)
    job = trainer_pb2.Job(job_id="gpu-check")
    job.spec.name, job.spec.base_model_path = "gpu", str(base)
    job.spec.algorithm, job.spec.model = trainer_pb2.TRAINING_ALGORITHM_BC, trainer_pb2.MODEL_KIND_CAUSAL_LM
    job.spec.hyper.MergeFrom(trainer_pb2.Hyperparameters(max_steps=a.steps, epochs=1000, batch_size=a.batch,
                                                         learning_rate=3e-4, seed=0))
    mgr = Manager(a.out, device, a.max_tokens, a.gradient_checkpointing)
    staging = a.out / "checkpoint"
    staging.mkdir(exist_ok=True)
    losses = []
    orig = mgr.progress

    def progress(job_id, **fields):
        if "loss" in fields:
            losses.append(fields["loss"])
        orig(job_id, **fields)

    mgr.progress = progress
    if device == "cuda":
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    report = train_causal_lm(mgr, job, selected, staging, threading.Event())
    train_s = time.perf_counter() - t0

    async def serve() -> dict:
        backend = TransformersBackend(staging, device=device)
        t = time.perf_counter()
        await backend.start()
        load_s = time.perf_counter() - t
        steps = [st for st, _, _ in selected.steps[:32]]
        prompts = [build_prompt(st.request, st.ctx.instruction, fmt="axtree", history_window=5, max_chars=3000)
                   for st in steps]
        t = time.perf_counter()
        gens = await backend.generate([GenerationRequest((Message("system", p.system), Message("user", p.user)),
                                                         SamplingParams(max_tokens=48)) for p in prompts])
        gen_s = time.perf_counter() - t
        parsed = [parse_output(g.text) for g in gens]
        await backend.close()
        return {"load_seconds": round(load_s, 2), "batch": len(prompts), "generate_seconds": round(gen_s, 2),
                "completion_tokens": sum(g.completion_tokens for g in gens),
                "parsed_actions": sum(1 for p in parsed if not p.failed)}

    served = asyncio.run(serve())
    out = {
        "device": torch.cuda.get_device_name(0) if device == "cuda" else "cpu", "torch": torch.__version__,
        "parameters": params, "episodes": len(episodes), "examples": len(selected.steps), "steps": report.step,
        "batch_size": a.batch, "gradient_checkpointing": a.gradient_checkpointing, "train_seconds": round(train_s, 1), "tokens_per_second": round(mgr.last.get("tokens_per_second", 0)),
        "examples_per_second": round(report.examples_per_second, 1), "loss_first": losses[0] if losses else None,
        "loss_last": report.loss, "peak_gpu_gib": round(torch.cuda.max_memory_allocated() / 2**30, 1) if device == "cuda" else 0,
        "serving": served,
    }
    print(json.dumps(out))
    (a.out / "gpu_check.json").write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()

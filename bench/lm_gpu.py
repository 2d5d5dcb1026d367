"""One vLLM engine serving a base model and two LoRA adapters: memory and tokens/s (for a lent GPU).

    python bench/lm_gpu.py --out /tmp/lm-gpu [--hidden 1024 --layers 16] [--model /models/Qwen3-0.6B]

Builds a Qwen3-architecture model from a config (random weights; or takes a local Hugging Face folder with
--model) and two LoRA adapters over it with the trainer's own job (TRL + PEFT, services/trainer train_lm.py, on
synthetic stored steps), then starts webenv.llm's vLLM backend once with ``max_loras=2`` and measures:
the engine start, each adapter's load (``load_adapter``, what the policy service's LoadCheckpoint does), GPU
memory after start and after the adapters (torch.cuda.mem_get_info: the engine preallocates
``--gpu-memory-utilization`` of the device, so what matters is that the adapters add almost nothing to it, where a
second engine per version would need a second share), and completion tokens/s of one batch to the base, to each
adapter, and of a mixed batch over all three. Writes lm_gpu.json and prints it. Needs vllm and a CUDA device;
the CPU figures are bench/lm.py's.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.lm import train  # the trainer's job, as bench/lm.py runs it


def build_base(out: Path, hidden: int, layers: int) -> Path:
    from webenv.agent.prompt import SYSTEM_PROMPT
    from webenv.llm.tinymodel import DEFAULT_TEXTS, build_tiny_model

    return build_tiny_model(out, [*DEFAULT_TEXTS, SYSTEM_PROMPT], hidden=hidden, layers=layers,
                            heads=max(1, hidden // 128), arch="qwen3", vocab_size=4096)


def stored_episodes(n: int):
    """Synthetic stored steps whose targets are 24 sampled-looking token ids (what the adapters are trained on)."""
    from webenv.policy.synthetic import random_observation, request
    from webenv.v1 import collector_pb2

    rng = random.Random(0)
    out = []
    for i in range(n):
        r = request(random_observation(rng, n=8), policy="llm", episode_id=f"ep-{i}", seed=i + 1)
        ep = collector_pb2.StoredEpisode(episode_id=r.episode_id, run_id="gpu", passed=True, task=r.task)
        ep.trajectory.steps.add(step_index=0, observation=r.observation,
                                completion_token_ids=[rng.randrange(10, 400) for _ in range(24)])
        out.append(ep)
    return out


async def measure(a, base: Path, adapters: list[Path]) -> dict:
    import torch
    from webenv.agent.prompt import PromptBudget, chat_messages, step_prompt
    from webenv.llm import GenerationRequest, SamplingParams
    from webenv.llm.vllm_backend import VllmBackend
    from webenv.policy.synthetic import random_observation, request

    free0, total = torch.cuda.mem_get_info()
    backend = VllmBackend(base, max_model_len=a.max_model_len, gpu_memory_utilization=a.gpu_memory_utilization,
                          max_num_seqs=a.batch, max_loras=2, max_lora_rank=16, enforce_eager=False)
    t = time.perf_counter()
    await backend.start()
    start_s = time.perf_counter() - t
    free1, _ = torch.cuda.mem_get_info()
    loads = []
    for i, path in enumerate(adapters):
        loads.append(await backend.load_adapter(f"v{i + 1}", path))
    free2, _ = torch.cuda.mem_get_info()
    budget = PromptBudget(context_tokens=a.max_model_len, new_tokens=a.new_tokens)
    rng = random.Random(1)
    prompts = [chat_messages(step_prompt(request(random_observation(rng, n=8), policy="llm", seed=i + 1), budget))
               for i in range(a.batch)]
    params = SamplingParams(max_tokens=a.new_tokens, temperature=1.0, ignore_eos=True, logprobs=True)
    runs = {}
    for label, names in (("base", [""]), ("v1", ["v1"]), ("v2", ["v2"]), ("mixed base+v1+v2", ["", "v1", "v2"])):
        reqs = [GenerationRequest(p, params, adapter=names[i % len(names)]) for i, p in enumerate(prompts)]
        await backend.generate(reqs[:4])  # warm
        t = time.perf_counter()
        res = await backend.generate(reqs)
        dt = time.perf_counter() - t
        tokens = sum(r.completion_tokens for r in res)
        runs[label] = {"requests": len(reqs), "completion_tokens": tokens, "seconds": dt, "tokens_per_second": tokens / dt}
    await backend.close()
    gib = 1 / 2**30
    return {"device": torch.cuda.get_device_name(0), "total_gib": total * gib,
            "engine_start_seconds": start_s, "adapter_load_seconds": loads,
            "engine_memory_gib": (free0 - free1) * gib, "adapters_memory_gib": (free1 - free2) * gib,
            "batches": runs}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--model", type=Path, help="a local Hugging Face folder (default: a Qwen3 built from a config)")
    ap.add_argument("--hidden", type=int, default=1024)
    ap.add_argument("--layers", type=int, default=16)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--new-tokens", type=int, default=128)
    ap.add_argument("--max-model-len", type=int, default=2048)
    ap.add_argument("--gpu-memory-utilization", type=float, default=0.5)
    ap.add_argument("--train-steps", type=int, default=20)
    a = ap.parse_args()
    from webenv.v1 import trainer_pb2

    a.out.mkdir(parents=True, exist_ok=True)
    base = a.model or build_base(a.out / "base", a.hidden, a.layers)
    episodes = stored_episodes(64)
    root = Path(tempfile.mkdtemp(dir=a.out))
    adapters = []
    for seed in (1, 2):
        random.seed(seed)
        info, path = train(root, base, episodes, trainer_pb2.TRAINING_ALGORITHM_FILTERED_BC, 8, a.train_steps, 1e-3,
                           device="cuda")
        adapters.append(path)
        print(f"adapter {seed}: {info['steps']} steps, {info['tokens_per_second']:.0f} training tokens/s")
    result = asyncio.run(measure(a, base, adapters))
    (a.out / "lm_gpu.json").write_text(json.dumps(result, indent=1))
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()

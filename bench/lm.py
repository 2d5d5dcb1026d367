"""Language-model jobs on the CPU with a tiny Qwen3-architecture model: serving, SFT, RL, LoRA load vs a start.

    python bench/lm.py --out bench/results          # writes lm.md and lm.json (a few minutes on 2 cores)

What it measures, all in one process on the parts the services run (webenv.llm's transformers backend, the
trainer's TRL + PEFT job, webenv.agent.prompt's shared budget):
1. serving: the tiny model (built here, random weights) answers memory prompts of synthetic pages, sampled at
   temperature 1 with logprobs: completion tokens/s of one batch; its start (model load) time;
2. the answers become stored steps (token ids, logprobs, version ""), half of the episodes "passed";
3. SFT (FILTERED_BC on the passed rollouts, the model's own tokens as targets) with LoRA and full fine-tuning:
   the loss per step, training tokens/s;
4. one GROUP_RELATIVE policy-gradient step from the base on all rollouts: the importance ratio against the
   stored logprobs (1 when they are the ones the trained model recomputes);
5. LoRA adapter load (TransformersBackend.load_adapter, what LoadCheckpoint does) vs a model start of the same
   base, and vs starting the full fine-tuned checkpoint.
The GPU counterpart (vLLM, one base + two adapters in one engine) is bench/lm_gpu.py.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import tempfile
import threading
import time
from pathlib import Path


def train(root: Path, base: Path, episodes, algorithm: int, rank: int, steps: int, lr: float,
          device: str = "cpu") -> tuple[dict, Path]:
    """One causal-LM job of the trainer (train_causal_lm) on ``episodes``: its figures and its published folder."""
    from webenv.trainer.algorithms import select
    from webenv.trainer.lmjob import StandaloneManager
    from webenv.trainer.train_lm import train_causal_lm
    from webenv.v1 import trainer_pb2

    selected = select(episodes, algorithm, False, trainer_pb2.AlgorithmOptions(), sampled_targets=True)
    spec = trainer_pb2.JobSpec(name="bench", algorithm=algorithm, model=trainer_pb2.MODEL_KIND_CAUSAL_LM,
                               base_model_path=str(base), lm=trainer_pb2.LanguageModelOptions(lora_rank=rank),
                               hyper=trainer_pb2.Hyperparameters(max_steps=steps, epochs=1000, batch_size=4,
                                                                 learning_rate=lr, seed=0))
    manager = StandaloneManager(root, root / "work", device)
    staging = Path(tempfile.mkdtemp(dir=root))
    t0 = time.perf_counter()
    report = train_causal_lm(manager, trainer_pb2.Job(job_id=f"bench-{rank}-{algorithm}", spec=spec), selected,
                             staging, threading.Event())
    wall = time.perf_counter() - t0
    steps_log = [f for f in manager.log if "step" in f]
    out = {"examples": len(selected.steps), "steps": report.step, "wall_seconds": wall,
           "losses": [f["loss"] for f in steps_log], "tokens_per_second": steps_log[-1]["tokens_per_second"],
           "importance_ratio": steps_log[-1].get("importance_ratio"),
           "clipped_fraction": steps_log[-1].get("clipped_fraction")}
    return out, staging


async def main_async(a) -> dict:
    from webenv.agent.prompt import SYSTEM_PROMPT, PromptBudget, chat_messages, step_prompt
    from webenv.llm import GenerationRequest, SamplingParams
    from webenv.llm.tinymodel import DEFAULT_TEXTS, build_tiny_model
    from webenv.llm.transformers_backend import TransformersBackend
    from webenv.policy.synthetic import random_observation, request
    from webenv.v1 import collector_pb2, trainer_pb2

    root = Path(tempfile.mkdtemp(prefix="webenv-lm-bench-"))
    t = time.perf_counter()
    base = build_tiny_model(root / "base", [*DEFAULT_TEXTS, SYSTEM_PROMPT], hidden=a.hidden, layers=a.layers,
                            heads=4, arch="qwen3")
    build_s = time.perf_counter() - t
    backend = TransformersBackend(base, device="cpu")
    t = time.perf_counter()
    await backend.start()
    start_s = time.perf_counter() - t
    budget = PromptBudget(context_tokens=backend.max_context_tokens, new_tokens=a.new_tokens)
    rng = random.Random(0)
    reqs = [request(random_observation(rng, n=8), policy="llm", episode_id=f"ep-{i}", seed=i + 1)
            for i in range(a.prompts)]
    gen = [GenerationRequest(chat_messages(step_prompt(r, budget)),
                             SamplingParams(max_tokens=a.new_tokens, temperature=1.0, seed=i + 1, logprobs=True,
                                            ignore_eos=True)) for i, r in enumerate(reqs)]
    t = time.perf_counter()
    results = await backend.generate(gen)
    serve_s = time.perf_counter() - t
    completion = sum(r.completion_tokens for r in results)
    episodes = []
    for i, (r, res) in enumerate(zip(reqs, results, strict=True)):
        ep = collector_pb2.StoredEpisode(episode_id=r.episode_id, run_id="bench", passed=(i // 4) % 2 == 0,
                                        task=r.task)  # two of the four rollouts of each task pass
        ep.task.task_id = f"t{i % 4}"
        ep.trajectory.steps.add(step_index=0, observation=r.observation, raw_output=res.text,
                                completion_token_ids=res.token_ids, completion_logprobs=res.logprobs or (),
                                prompt_tokens=res.prompt_tokens)
        episodes.append(ep)
    lora, lora_dir = train(root, base, episodes, trainer_pb2.TRAINING_ALGORITHM_FILTERED_BC, 8, a.steps, 5e-3)
    full, full_dir = train(root, base, episodes, trainer_pb2.TRAINING_ALGORITHM_FILTERED_BC, 0, a.steps, 1e-3)
    rl, _ = train(root, base, episodes, trainer_pb2.TRAINING_ALGORITHM_GROUP_RELATIVE, 8, 1, 1e-4)
    loads = []
    for i in range(3):
        t = time.perf_counter()
        await backend.load_adapter(f"a{i}", lora_dir)
        loads.append(time.perf_counter() - t)
    await backend.close()
    starts = {}
    for name, path in (("base", base), ("full fine-tune", full_dir)):
        b = TransformersBackend(path, device="cpu")
        t = time.perf_counter()
        await b.start()
        starts[name] = time.perf_counter() - t
        await b.close()
    params = backend.parameters
    return {"model": {"arch": "qwen3", "hidden": a.hidden, "layers": a.layers, "parameters": params,
                      "build_seconds": build_s},
            "serving": {"prompts": a.prompts, "completion_tokens": completion, "seconds": serve_s,
                        "tokens_per_second": completion / serve_s, "start_seconds": start_s,
                        "prompt_tokens_mean": sum(r.prompt_tokens for r in results) / len(results)},
            "sft_lora": lora, "sft_full": full, "rl_group_relative": rl,
            "adapter_load_seconds": loads, "model_start_seconds": starts}


def report(r: dict, cmd: str) -> str:
    s, lo, fu, rl = r["serving"], r["sft_lora"], r["sft_full"], r["rl_group_relative"]

    def curve(losses):
        return " ".join(f"{x:.2f}" for x in losses)

    return f"""# Language-model jobs on the CPU (tiny Qwen3-architecture model)

Command: `{cmd}` (bench/lm.py). One process, the parts the services run: webenv.llm's transformers backend
serving, the trainer's TRL + PEFT causal-LM job (services/trainer/src/webenv/trainer/train_lm.py), prompts under
webenv.agent.prompt's shared PromptBudget. The model is built here from a config (random weights,
{r['model']['parameters']:,} parameters, hidden {r['model']['hidden']}, {r['model']['layers']} layers, a tokenizer
trained locally): the figures are the machinery's cost, not a model's quality. Measured on the shared 2-core
development machine under other developers' load, so absolute numbers are noisy; ratios are the point.

## Serving (sampling at temperature 1 with logprobs)
{s['prompts']} memory prompts of synthetic pages (mean {s['prompt_tokens_mean']:.0f} prompt tokens), one batch:
{s['completion_tokens']} completion tokens in {s['seconds']:.2f} s = **{s['tokens_per_second']:.0f} tokens/s**.

## SFT on the model's own passed rollouts (FILTERED_BC, the stored token ids as targets)
| | examples | steps (batch 4) | training tokens/s | loss per step |
| --- | --- | --- | --- | --- |
| LoRA r=8 (all-linear), lr 5e-3 | {lo['examples']} | {lo['steps']} | {lo['tokens_per_second']:.0f} | {curve(lo['losses'])} |
| full fine-tune, lr 1e-3 | {fu['examples']} | {fu['steps']} | {fu['tokens_per_second']:.0f} | {curve(fu['losses'])} |

The loss (moving average, TRL's SFT loss on target tokens) falls from {lo['losses'][0]:.2f} to {lo['losses'][-1]:.2f}
with LoRA and from {fu['losses'][0]:.2f} to {fu['losses'][-1]:.2f} fully fine-tuned.

## One policy-gradient step (GROUP_RELATIVE, LoRA, from the base)
{rl['examples']} examples (groups of 4 rollouts by task, half passed), importance ratio pi/pi_behaviour over the
generated tokens = **{rl['importance_ratio']:.4f}** (clipped share {rl['clipped_fraction']:.3f}): the logprobs the
serving backend stored are the ones the trainer recomputes for the same prompt tokens.

## LoRA adapter load vs a model start
| what | seconds |
| --- | --- |
| load a LoRA adapter into the running backend (LoadCheckpoint's work), 3 tries | {", ".join(f"{x:.3f}" for x in r['adapter_load_seconds'])} |
| start the base model (a new backend) | {r['model_start_seconds']['base']:.3f} |
| start the full fine-tuned checkpoint (what a full checkpoint's LoadCheckpoint costs) | {r['model_start_seconds']['full fine-tune']:.3f} |

On a real model the gap widens: an adapter is megabytes, a start loads every weight (and on vLLM builds a new
engine and its KV cache). The vLLM measurement, one base + two adapters in one engine, is bench/lm_gpu.py: ready
for a lent GPU, **not run here** (no GPU was lent to this session).
"""


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, default=Path("bench/results"))
    ap.add_argument("--prompts", type=int, default=16)
    ap.add_argument("--new-tokens", type=int, default=32)
    ap.add_argument("--steps", type=int, default=16)
    ap.add_argument("--hidden", type=int, default=128)
    ap.add_argument("--layers", type=int, default=2)
    a = ap.parse_args()
    import torch

    torch.manual_seed(0)
    r = asyncio.run(main_async(a))
    a.out.mkdir(parents=True, exist_ok=True)
    (a.out / "lm.json").write_text(json.dumps(r, indent=1))
    cmd = "python bench/lm.py --out bench/results"
    (a.out / "lm.md").write_text(report(r, cmd))
    print((a.out / "lm.md").read_text())


if __name__ == "__main__":
    main()

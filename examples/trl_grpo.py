"""GRPO on webenv's catalog tasks with TRL: the model acts through `webenv.compat.trl.WebTaskEnv`'s tools on the real
farm, and the judge's verdict of each rollout is its reward.

    # CPU, a tiny random model (about 12 s a step on a loaded 2-core machine): what tests/test_compat_trl.py runs
    python examples/trl_grpo.py --tiny --max-steps 2
    # GPU: a real tool-calling chat model, generation on vLLM (colocated with training)
    python examples/trl_grpo.py --model Qwen/Qwen3-1.7B --use-vllm --tasks miniwob/click-test,miniwob/click-button \
        --num-generations 8 --batch-size 8 --max-steps 200 --max-completion-length 512 --learning-rate 1e-6

    # several task sources in one run: MiniWoB from the catalog beside a benchmark's own task file
    python examples/trl_grpo.py --tiny --tasks miniwob/click-test --task-file webarena/config_files/test.raw.json

The train dataset is the task catalog (`webenv.compat.hf.catalog_dataset`, one row per task, repeated), with the
tasks of each ``--task-file`` (any format `webenv tasks --task-file` reads: WebArena, WebArena-Verified, WebVoyager,
...; placeholders mapped as docs/benchmarks/README.md says). When the rows come from several task sources or
benchmarks (their ``environment`` column), TRL gets a dict ``environment_factory``, a named factory per source
(`webenv.compat.trl.environment_factories`), and routes each row to its own; TRL makes
one `WebTaskEnv` per rollout (``environment_factory``), calls ``reset(**row)`` (a farm session for the row's task;
its instruction and first page are appended to the prompt), runs the model's tool calls (``click``, ``fill``, ...,
``answer``) against the farm, and scores each rollout with ``get_reward`` (the judge's verdict, 1.0 or 0.0).

``--tiny`` builds a random Llama-style model with TRL's Qwen3 tool-calling chat template (`webenv.llm.tinymodel`,
its tokenizer trained on the tasks' prompts): it exercises the whole loop on a CPU (a farm session per rollout, the
judge grading each, optimizer steps) but writes noise, so its rewards are 0.0 and it calls no tool. Measured: 150
next-token steps teaching it ``click`` calls on the tasks' pages were not enough (its 48-token completions stayed
clipped, no call parsed), so tool calls and passing rollouts need a real model (the GPU line above).
The farm, sites and judge addresses come from ``--browser``/``--sites``/``--judge``, else ``WEBENV_BROWSER_ADDR``
etc., else the running ``webenv up`` (its ``.webenv/stack.json``: ``--free-ports`` included), else the default ports. The last line printed is a JSON summary of the run (steps, mean reward, tool calls).
"""

from __future__ import annotations

import argparse
import inspect
import json
import os
from functools import partial
from pathlib import Path


def build_tiny(out: Path, factory, rows: list[dict]) -> Path:
    """A tiny random model with TRL's Qwen3 tool-calling template, its tokenizer trained on the rows' prompts."""
    from transformers.utils.chat_template_utils import render_jinja_template
    from trl.chat_template_utils import qwen3_chat_template
    from webenv.compat.hf import PROMPT
    from webenv.llm.tinymodel import build_tiny_model

    env = factory()
    pages = [env.reset(task_id=r["task_id"], task_pb=r["task_pb"]) for r in rows]
    env._close()
    # the tools as GRPOTrainer lists them (the class's public functions, by name), so the prompts render the same
    tools = [getattr(env, n) for n, _ in inspect.getmembers(type(env), inspect.isfunction)
             if n not in ("reset", "get_reward") and not n.startswith("_")]
    texts = [render_jinja_template([[{"role": "user", "content": PROMPT + page}]], tools=tools,
                                   chat_template=qwen3_chat_template, add_generation_prompt=True)[0][0]
             for page in pages]
    specials = ["<|im_start|>", "<|im_end|>", "<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>",
                "<think>", "</think>", "<tools>", "</tools>"]
    return build_tiny_model(out, texts, vocab_size=1024, hidden=64, layers=2, heads=2, max_positions=4096,
                            chat_template=qwen3_chat_template, special_tokens=specials, eos_token="<|im_end|>")


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter)
    model = p.add_mutually_exclusive_group(required=True)
    model.add_argument("--model", help="A tool-calling chat model: a Hugging Face id or a folder (Qwen/Qwen3-1.7B).")
    model.add_argument("--tiny", action="store_true", help="Build and train a tiny local model (CPU demo).")
    p.add_argument("--tasks", default="miniwob/click-test", help="Catalog task ids, comma-separated.")
    p.add_argument("--task-file", action="append", default=[], help="A task file whose tasks join the catalog's "
                   "(a benchmark's own: WebArena, WebArena-Verified, WebVoyager, ...); repeatable.")
    p.add_argument("--max-steps", type=int, default=2, help="Optimizer steps.")
    p.add_argument("--num-generations", type=int, default=2, help="Rollouts per prompt (GRPO's group).")
    p.add_argument("--batch-size", type=int, default=2, help="Rollouts per device per step.")
    p.add_argument("--max-completion-length", type=int, default=48, help="Tokens the model writes in a rollout.")
    p.add_argument("--max-tool-calls", type=int, default=2, help="Tool-calling turns per rollout.")
    p.add_argument("--learning-rate", type=float, default=1e-5)
    p.add_argument("--use-vllm", action="store_true", help="Generate with vLLM (colocated; a GPU).")
    p.add_argument("--output-dir", default="grpo-webenv", help="Checkpoints and the tiny model go here.")
    for service in ("browser", "sites", "judge"):  # not given: WEBENV_*_ADDR, the running `webenv up`, the port
        p.add_argument(f"--{service}", help=f"The {service} service's address (default: WEBENV_{service.upper()}_ADDR, "
                                            "else the running `webenv up`'s .webenv/stack.json, else its default port).")
    args = p.parse_args(argv)

    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    from datasets import concatenate_datasets
    from trl import GRPOConfig, GRPOTrainer
    from webenv.client.stack import address
    from webenv.compat.hf import catalog_dataset
    from webenv.compat.trl import WebTaskEnv, environment_factories
    from webenv.taskfiles import load
    from webenv.v1 import task_pb2

    task_ids = [t for t in args.tasks.split(",") if t]
    browser, sites, judge = (address(service, getattr(args, service)) for service in ("browser", "sites", "judge"))
    parts = [catalog_dataset(sites, task_pb2.TaskFilter(task_ids=task_ids))] if task_ids else []
    parts += [catalog_dataset(load(f)) for f in args.task_file]
    if not parts:
        p.error("no tasks: give --tasks or --task-file")
    tasks = concatenate_datasets(parts)
    addresses = {"browser": browser, "sites": sites, "judge": judge}
    names = sorted(set(tasks["environment"]))
    # one source: one factory; several: TRL's dict factory, each row routed by its environment column
    factory = environment_factories(names, **addresses) if len(names) > 1 else partial(WebTaskEnv, **addresses)
    out = Path(args.output_dir)
    model_path = str(build_tiny(out / "tiny-model", partial(WebTaskEnv, **addresses), list(tasks))) if args.tiny \
        else args.model
    rows = args.max_steps * args.batch_size // args.num_generations + 1
    dataset = concatenate_datasets([tasks] * (rows // len(tasks) + 1))
    config = GRPOConfig(
        output_dir=str(out), max_steps=args.max_steps, per_device_train_batch_size=args.batch_size,
        num_generations=args.num_generations, max_completion_length=args.max_completion_length,
        max_tool_calling_iterations=args.max_tool_calls, learning_rate=args.learning_rate, beta=0.0,
        logging_steps=1, save_strategy="no", report_to="none", use_cpu=not args.use_vllm, bf16=args.use_vllm,
        use_vllm=args.use_vllm, vllm_mode="colocate", seed=0,
        chat_template_kwargs={"enable_thinking": False},
    )
    # No reward_funcs: WebTaskEnv.get_reward (the judge's verdict) is the reward TRL reads from each environment.
    trainer = GRPOTrainer(model=model_path, args=config, train_dataset=dataset, environment_factory=factory)
    trainer.train()
    logs = [x for x in trainer.state.log_history if "reward" in x]
    summary = {
        "steps": trainer.state.global_step,
        "rewards": [x["reward"] for x in logs],
        "tool_calls": [x.get("tools/call_frequency", 0.0) for x in logs],
        "tool_failures": [x.get("tools/failure_frequency", 0.0) for x in logs],
    }
    print(json.dumps(summary))
    return summary


if __name__ == "__main__":
    main()

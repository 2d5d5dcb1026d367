"""transformers on CPU (or one GPU): a padded batch per `generate` call, run off the event loop.

Batching requests that arrive close together is the batcher's job; this backend only runs one batch
at a time on a single worker thread (torch already uses every core for one batch, so running two
batches at once would only make both slower).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
from pathlib import Path

from webenv.agent.prompt import Prompt, render

from .base import Generation, GenerationParams


class TransformersBackend:
    name = "transformers"
    continuous = False
    supports_images = False
    supports_constraints = False

    def __init__(self, model_path: Path, *, model_name: str = "", device: str = "auto", threads: int = 0) -> None:
        self.model_path = Path(model_path)
        self.model = model_name or self.model_path.name
        self._device_pref = device
        self._threads = threads
        self._pool = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="hf-generate")
        self._tok = None
        self._lm = None
        self._device = "cpu"

    async def start(self) -> None:
        await asyncio.get_running_loop().run_in_executor(self._pool, self._load)

    def _load(self) -> None:
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        if self._threads:
            torch.set_num_threads(self._threads)
        device = self._device_pref
        if device == "auto":
            device = "cuda" if torch.cuda.is_available() else "cpu"
        self._device = device
        tok = AutoTokenizer.from_pretrained(self.model_path, local_files_only=True)
        tok.padding_side = "left"
        tok.truncation_side = "left"  # an over-long prompt loses its oldest text, never the question at its end
        if tok.pad_token is None:
            tok.pad_token = tok.eos_token
        lm = AutoModelForCausalLM.from_pretrained(self.model_path, local_files_only=True)
        lm.to(device).eval()
        self._tok, self._lm = tok, lm

    async def generate(self, prompts: list[Prompt], params: GenerationParams) -> list[Generation]:
        if self._lm is None:
            raise RuntimeError("TransformersBackend.generate before start()")
        texts = [render(self._tok, p) for p in prompts]
        return await asyncio.get_running_loop().run_in_executor(self._pool, self._generate, texts, params)

    def _generate(self, texts: list[str], params: GenerationParams) -> list[Generation]:
        import torch

        tok, lm = self._tok, self._lm
        limit = getattr(lm.config, "max_position_embeddings", 4096) - params.max_new_tokens
        enc = tok(texts, return_tensors="pt", padding=True, truncation=True, max_length=max(limit, 16),
                  add_special_tokens=False).to(self._device)
        kwargs = dict(max_new_tokens=params.max_new_tokens, pad_token_id=tok.pad_token_id)
        if params.temperature > 0:
            kwargs.update(do_sample=True, temperature=params.temperature, top_k=0)
            if params.seed:
                torch.manual_seed(params.seed)
        else:
            kwargs.update(do_sample=False)
        if params.ignore_eos:
            kwargs["min_new_tokens"] = params.max_new_tokens
        with torch.inference_mode():
            out = lm.generate(**enc, **kwargs)
        new = out[:, enc["input_ids"].shape[1]:]
        stops = {tok.eos_token_id, tok.pad_token_id} - {None}
        result = []
        for row, mask in zip(new.tolist(), enc["attention_mask"].tolist(), strict=True):
            n = len(row)
            if not params.ignore_eos:
                n = next((i for i, t in enumerate(row) if t in stops), len(row))
            finish = "length" if n == len(row) else "stop"
            text = tok.decode(row[:n], skip_special_tokens=True)
            for s in params.stop:
                if s in text:
                    text, finish = text.split(s, 1)[0], "stop"
            result.append(Generation(text=text, prompt_tokens=int(sum(mask)), completion_tokens=n,
                                     finish_reason=finish))
        return result

    async def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
        self._lm = None

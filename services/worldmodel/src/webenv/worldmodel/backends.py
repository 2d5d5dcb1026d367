"""Text-generation backends: transformers on CPU (what tests use) and vLLM on GPU.

Both take prompts and return completions with token counts; the predictor does the rest (prompt
building, parsing, fallbacks). vLLM is imported lazily so the CPU install never needs it.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol


@dataclass
class Generation:
    """One completion."""

    text: str
    prompt_tokens: int
    completion_tokens: int
    seconds: float


@dataclass
class ModelInfo:
    """What GetModelInfo reports."""

    model: str
    backend: str
    formats: list[str]
    parameters: int
    max_context_tokens: int
    history_window: int = 3
    max_lines: int = 24
    reasoning: bool = False


def model_info(path: str, backend: str, parameters: int, max_context_tokens: int) -> ModelInfo:
    """ModelInfo from the worldmodel.json training wrote next to the weights (prompt settings, reasoning)."""
    meta = read_meta(path)
    return ModelInfo(model=path, backend=backend, formats=meta.get("formats", ["axtree"]), parameters=parameters,
                     max_context_tokens=max_context_tokens, history_window=meta.get("history_window", 3),
                     max_lines=meta.get("max_lines", 24), reasoning=bool(meta.get("reasoning_fraction", 0.0)))


class Backend(Protocol):
    """A loaded model that completes prompts."""

    info: ModelInfo

    def generate(self, prompts: list[str], max_new_tokens: int, temperature: float) -> list[Generation]: ...


def read_meta(path: str) -> dict:
    """The worldmodel.json written by training (formats, history window, prompt window), or defaults."""
    meta = Path(path) / "worldmodel.json"
    return json.loads(meta.read_text()) if meta.exists() else {}


class TransformersBackend:
    """CPU (or single-GPU) generation with transformers; one generate at a time (torch is not re-entrant)."""

    def __init__(self, path: str, device: str = "cpu", threads: int = 0, lookup_draft: int = 10,
                 fast: bool = True) -> None:
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        if threads:
            torch.set_num_threads(threads)
        self._torch = torch
        self.tok = AutoTokenizer.from_pretrained(path)
        self.model = AutoModelForCausalLM.from_pretrained(path).to(device).eval()
        self.device = device
        self._lock = threading.Lock()
        self.lookup_draft = lookup_draft  # 0 = plain one-token-per-pass greedy decoding
        from webenv.worldmodel.fastdecode import FastLlama, supported

        max_pos = int(getattr(self.model.config, "max_position_embeddings", 2048))
        self.fast = FastLlama(self.model, max_pos) if device == "cpu" and fast and supported(self.model) else None
        self.info = model_info(path, "transformers", sum(p.numel() for p in self.model.parameters()),
                               int(getattr(self.model.config, "max_position_embeddings", 2048)))

    def generate(self, prompts: list[str], max_new_tokens: int, temperature: float) -> list[Generation]:
        return [self._one(p, max_new_tokens, temperature) for p in prompts]

    def _one(self, prompt: str, max_new_tokens: int, temperature: float) -> Generation:
        torch = self._torch
        ids = [self.tok.bos_token_id, *self.tok(prompt, add_special_tokens=False)["input_ids"]]
        budget = self.info.max_context_tokens - max_new_tokens
        if len(ids) > budget:  # keep the end: the action and the prediction marker matter most
            ids = ids[-max(budget, 1):]
        t0 = time.perf_counter()
        with self._lock, torch.inference_mode():
            new = self._decode(ids, max_new_tokens, temperature)
        return Generation(self.tok.decode(new, skip_special_tokens=False), len(ids), len(new), time.perf_counter() - t0)

    def _step(self, tokens: list[int], all_logits: bool = False):
        """Append tokens to the decoding cache; logits of the last one (or all). Fast path or transformers."""
        if self.fast is not None:
            out = self.fast.forward(tokens, all_logits)
            return out if all_logits else out[-1]
        torch = self._torch
        logits = self.model(input_ids=torch.tensor([tokens], device=self.device), cache=self._cache, use_cache=True).logits[0]
        return logits if all_logits else logits[-1]

    def _crop(self, length: int) -> None:
        if self.fast is not None:
            self.fast.crop(length)
        else:
            self._cache.crop(length)

    def _decode(self, ids: list[int], max_new_tokens: int, temperature: float) -> list[int]:
        """Decode with a KV cache; greedy decoding also drafts from the prompt (see `_greedy_lookup`)."""
        from transformers import DynamicCache

        torch = self._torch
        if self.fast is not None:
            self.fast.reset()
        else:
            self._cache = DynamicCache(config=self.model.config)
        logits = self._step(ids)
        if temperature <= 0 and self.lookup_draft > 0:
            return self._greedy_lookup(ids, int(logits.argmax()), max_new_tokens)
        new: list[int] = []
        eos = self.tok.eos_token_id
        while len(new) < max_new_tokens:
            if temperature > 0:
                nxt = int(torch.multinomial(torch.softmax(logits.float() / temperature, -1), 1))
            else:
                nxt = int(logits.argmax())
            if nxt == eos:
                break
            new.append(nxt)
            logits = self._step([nxt])
        return new

    def _greedy_lookup(self, ids: list[int], first: int, max_new_tokens: int) -> list[int]:
        """Greedy decoding with prompt-lookup drafts: exactly the greedy output, in fewer forward passes.

        Edits copy a lot from the prompt (the line being changed, navigation chrome), so the tokens that followed
        the latest n-gram's previous occurrence are a good guess for what comes next. One forward pass checks
        the whole draft; the longest prefix the model agrees with is kept, plus the model's own next token."""
        eos = self.tok.eos_token_id
        new: list[int] = []
        pending = first  # chosen but not yet fed to the model
        while pending != eos and len(new) < max_new_tokens:
            new.append(pending)
            context = ids + new
            draft = _lookup(context, self.lookup_draft)[: max_new_tokens - len(new)]
            cached = len(context) - 1
            preds = self._step([pending, *draft], all_logits=True).argmax(-1).tolist()
            accepted = 0
            while accepted < len(draft) and draft[accepted] == preds[accepted] and draft[accepted] != eos:
                accepted += 1
            new.extend(draft[:accepted])
            if accepted < len(draft):
                self._crop(cached + 1 + accepted)
            pending = preds[accepted]
        return new[:max_new_tokens]


def _lookup(context: list[int], k: int, max_ngram: int = 3) -> list[int]:
    """Up to k tokens that followed the most recent earlier occurrence of the context's last n-gram."""
    for n in range(max_ngram, 0, -1):
        if len(context) <= n:
            continue
        tail = context[-n:]
        for start in range(len(context) - n - 1, -1, -1):
            if context[start : start + n] == tail:
                return context[start + n : start + n + k]
    return []


class VllmBackend:
    """GPU serving path: vLLM's offline engine over the same model directory (vllm imported lazily).

    Batches all prompts of one call in a single `generate`, which is where vLLM's continuous batching pays off
    (StepStream over many simulated sessions). Prompts go in as token ids with the BOS token training used, so
    both backends see exactly the same sequence."""

    def __init__(self, path: str, gpu_memory_utilization: float = 0.5, max_model_len: int = 0) -> None:
        try:
            from vllm import LLM, SamplingParams
        except ImportError as exc:  # pragma: no cover - depends on the install
            raise RuntimeError("the vllm backend needs the `vllm` package (pip install 'webenv-worldmodel[vllm]')") from exc
        from transformers import AutoConfig, AutoTokenizer

        self._sampling = SamplingParams
        self.tok = AutoTokenizer.from_pretrained(path)
        config = AutoConfig.from_pretrained(path)
        context = max_model_len or int(getattr(config, "max_position_embeddings", 2048))
        self.llm = LLM(model=path, gpu_memory_utilization=gpu_memory_utilization, max_model_len=context)
        self.info = model_info(path, "vllm", 0, context)

    def generate(self, prompts: list[str], max_new_tokens: int, temperature: float) -> list[Generation]:
        params = self._sampling(max_tokens=max_new_tokens, temperature=temperature)
        budget = self.info.max_context_tokens - max_new_tokens
        inputs = []
        for p in prompts:
            ids = [self.tok.bos_token_id, *self.tok(p, add_special_tokens=False)["input_ids"]]
            inputs.append({"prompt_token_ids": ids[-max(budget, 1):]})
        t0 = time.perf_counter()
        outs = self.llm.generate(inputs, params, use_tqdm=False)
        dt = time.perf_counter() - t0
        return [Generation(o.outputs[0].text, len(o.prompt_token_ids), len(o.outputs[0].token_ids), dt) for o in outs]


def load_backend(kind: str, path: str, device: str = "cpu", threads: int = 0) -> Backend:
    """Backend by name: "transformers" or "vllm"."""
    if kind == "transformers":
        return TransformersBackend(path, device=device, threads=threads)
    if kind == "vllm":
        return VllmBackend(path)
    raise ValueError(f"unknown backend {kind!r}: expected transformers or vllm")

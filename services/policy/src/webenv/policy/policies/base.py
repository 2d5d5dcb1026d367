"""What every policy returns, and the interface the servicer calls."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from webenv.v1 import common_pb2, policy_pb2


@dataclass(slots=True)
class Decision:
    """A policy's choice plus what the response reports about how it was made."""

    action: common_pb2.Action
    raw_output: str = ""
    parse_failed: bool = False
    parse_error: str = ""
    memory: str = ""
    prompt_tokens: int = 0
    completion_tokens: int = 0
    #: Generated token ids and their logprobs (LLM policies, where the engine gives them).
    completion_token_ids: tuple[int, ...] = ()
    completion_logprobs: tuple[float, ...] = ()
    model: str = ""
    batch_size: int = 1
    queue_seconds: float = 0.0
    inference_seconds: float = 0.0


class Policy(Protocol):
    """A named way of choosing actions. `act` raises webenv.errors for bad requests."""

    name: str
    description: str
    backend: str
    model: str

    async def act(self, request: policy_pb2.ActRequest) -> Decision: ...

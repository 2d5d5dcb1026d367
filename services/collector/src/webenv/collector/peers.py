"""Channels to the services a collector talks to, one per address, each with its shared streams."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

import grpc
from webenv.client import EnvironmentClient, StepStream, make_channel
from webenv.streams import Multiplexer
from webenv.v1 import (
    judge_pb2_grpc,
    policy_pb2,
    policy_pb2_grpc,
    task_pb2_grpc,
)


@dataclass
class EnvPeer:
    """An EnvironmentService (farm or world model): the sdk's client, which keeps each session's step index by the
    contract's one rule (`webenv.client.environment`), and its shared StepStream."""

    address: str
    channel: grpc.aio.Channel
    client: EnvironmentClient
    steps: StepStream


@dataclass
class PolicyPeer:
    """A PolicyService with its shared ActStream."""

    address: str
    channel: grpc.aio.Channel
    stub: policy_pb2_grpc.PolicyServiceStub
    acts: Multiplexer


@dataclass
class Peers:
    """Lazily opened channels to environments (by address), the policy, the judge and the task catalog."""

    policy_address: str
    judge_address: str
    sites_address: str
    timeout: float = 60.0
    _envs: dict[str, EnvPeer] = field(default_factory=dict)
    _policy: PolicyPeer | None = None
    _judge: judge_pb2_grpc.JudgeServiceStub | None = None
    _tasks: task_pb2_grpc.TaskServiceStub | None = None
    _channels: list[grpc.aio.Channel] = field(default_factory=list)
    _muxes: list[Multiplexer] = field(default_factory=list)

    def _channel(self, address: str) -> grpc.aio.Channel:
        ch = make_channel(address, timeout=self.timeout)
        self._channels.append(ch)
        return ch

    def env(self, address: str) -> EnvPeer:
        """The environment at ``address``."""
        peer = self._envs.get(address)
        if peer is None:
            ch = self._channel(address)
            client = EnvironmentClient(ch)
            steps = client.stream()
            peer = self._envs[address] = EnvPeer(address, ch, client, steps)
        return peer

    def policy(self) -> PolicyPeer:
        """The policy service."""
        if self._policy is None:
            ch = self._channel(self.policy_address)
            stub = policy_pb2_grpc.PolicyServiceStub(ch)
            mux = Multiplexer(
                f"ActStream@{self.policy_address}",
                stub.ActStream,
                lambda tag, req: policy_pb2.ActStreamRequest(tag=tag, request=req),
            )
            self._muxes.append(mux)
            self._policy = PolicyPeer(self.policy_address, ch, stub, mux)
        return self._policy

    def judge(self) -> judge_pb2_grpc.JudgeServiceStub:
        """The judge service."""
        if self._judge is None:
            self._judge = judge_pb2_grpc.JudgeServiceStub(self._channel(self.judge_address))
        return self._judge

    def tasks(self) -> task_pb2_grpc.TaskServiceStub:
        """The task catalog (the sites service)."""
        if self._tasks is None:
            self._tasks = task_pb2_grpc.TaskServiceStub(self._channel(self.sites_address))
        return self._tasks

    async def close(self) -> None:
        """Close streams and channels."""
        for env in self._envs.values():
            await env.steps.aclose()
        for mux in self._muxes:
            await mux.close()
        await asyncio.gather(*(ch.close() for ch in self._channels), return_exceptions=True)
        self._channels.clear()

"""A PolicyService defined for the runtime's tests: it misbehaves on request, so every path can be exercised.

Run as a script it is a complete service (``python echo_service.py``), used by the SIGTERM and bad-config tests.
The ``episode_id`` of an ActRequest selects the behaviour.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import grpc
from webenv import errors
from webenv.runtime import Server, ServiceSettings, run
from webenv.v1 import common_pb2, policy_pb2, policy_pb2_grpc


class EchoSettings(ServiceSettings):
    """Settings of the test service."""

    grpc_port: int = 0
    metrics_port: int = 0
    echo_ready_delay_seconds: float = 0.0


class EchoPolicy(policy_pb2_grpc.PolicyServiceServicer):
    """Answers ``noop()``; ``episode_id`` picks a behaviour: slow:<s>, invalid, echo:<text>, exhausted, boom."""

    async def Act(self, request: policy_pb2.ActRequest, context: grpc.aio.ServicerContext) -> policy_pb2.ActResponse:
        kind, _, arg = request.episode_id.partition(":")
        if kind == "slow":
            await asyncio.sleep(float(arg or 1))
        elif kind == "invalid":
            raise errors.InvalidArgument("observation: is required", reason="MISSING_OBSERVATION",
                                         metadata={"field": "observation"})
        elif kind == "echo":  # an error quoting the caller's input, whatever its size
            raise errors.InvalidArgument(f"episode_id: unknown episode {arg!r}", reason="UNKNOWN_EPISODE",
                                         metadata={"field": "episode_id", "value": arg,
                                                   **{f"k{i}": arg for i in range(20)}})
        elif kind == "boom-echo":
            raise KeyError(arg)
        elif kind == "exhausted":
            raise errors.ResourceExhausted("too many episodes", retry_after_seconds=1.5)
        elif kind == "boom":
            raise RuntimeError("kaboom")
        remaining = context.time_remaining()
        return policy_pb2.ActResponse(
            episode_id=request.episode_id,
            action=common_pb2.Action(noop=common_pb2.NoopAction()),
            action_text="noop()",
            memory="" if remaining is None else f"{remaining:.3f}",
        )

    async def ActStream(
        self, request_iterator: AsyncIterator[policy_pb2.ActStreamRequest], context: grpc.aio.ServicerContext
    ) -> AsyncIterator[policy_pb2.ActStreamResponse]:
        async for item in request_iterator:
            if item.request.episode_id == "invalid":
                err = errors.InvalidArgument("bad item", reason="BAD_ITEM")
                yield policy_pb2.ActStreamResponse(tag=item.tag, error=err.to_stream_error())
            else:
                yield policy_pb2.ActStreamResponse(
                    tag=item.tag, response=policy_pb2.ActResponse(episode_id=item.request.episode_id)
                )

    async def ListPolicies(self, request: policy_pb2.ListPoliciesRequest, context: grpc.aio.ServicerContext
                           ) -> policy_pb2.ListPoliciesResponse:
        return policy_pb2.ListPoliciesResponse(default_policy="echo", policies=[policy_pb2.PolicyInfo(name="echo")])


def build_server(settings: EchoSettings) -> Server:
    server = Server("echo", settings)
    server.add_service(policy_pb2_grpc.add_PolicyServiceServicer_to_server, EchoPolicy(), "webenv.v1.PolicyService")
    return server


async def main(settings: EchoSettings) -> None:
    server = build_server(settings)
    async with server:
        await asyncio.sleep(settings.echo_ready_delay_seconds)
        await server.set_serving()
        print(f"READY {server.port} {server.metrics_port}", flush=True)
        await server.wait_for_termination()


if __name__ == "__main__":
    run(main, EchoSettings, name="echo")

"""PolicyService over gRPC: Act, ActStream (many episodes multiplexed, answered in completion order)
and ListPolicies.

A policy that does not declare ``needs_solution`` is handed the task as ``webenv.solutions.policy_task`` strips
it, whatever the client sent: the collector strips it too, and this is the second wall, so no client (an old
collector, a script calling Act with a catalog task) can hand a trained checkpoint or an LLM the rubric or the
oracle's solution."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator

import grpc
from webenv import errors
from webenv.actions import format_action
from webenv.solutions import policy_task
from webenv.streams import serve_in_completion_order
from webenv.v1 import policy_pb2, policy_pb2_grpc

from . import metrics
from .policies import Decision, Policy
from .policies.checkpoint import CheckpointPolicies

#: Longest episode id and page URL accepted: both become keys of per-episode state kept for thousands of episodes,
#: so a fuzzed 100 KB id or URL per request grew the service from 56 to 316 MB.
MAX_EPISODE_ID_CHARS = 256
MAX_URL_CHARS = 8192


class PolicyServicer(policy_pb2_grpc.PolicyServiceServicer):
    def __init__(self, policies: dict[str, Policy], default: str, *, stream_max_inflight: int = 512,
                 checkpoints: CheckpointPolicies | None = None) -> None:
        if default not in policies:
            raise ValueError(f"default policy {default!r} is not offered; offered: {', '.join(policies)}")
        self.policies = policies
        self.default = default
        self.stream_max_inflight = stream_max_inflight
        self.checkpoints = checkpoints

    def _policy(self, request: policy_pb2.ActRequest) -> Policy:
        name = request.policy or self.default
        policy = self.policies.get(name)
        if policy is None and self.checkpoints is not None:
            policy = self.checkpoints.get(name)
        if policy is None:
            known = ", ".join([*self.policies, *(p.name for p in self.checkpoints.served())] if self.checkpoints
                              else self.policies)
            hint = " (the llm policy needs WEBENV_POLICY_MODEL_PATH or WEBENV_POLICY_OPENAI_URL)" if name == "llm" else ""
            raise errors.InvalidArgument(f"policy '{name}' is unknown; known: {known}{hint}",
                                         reason="UNKNOWN_POLICY", metadata={"field": "policy", "policy": name})
        return policy

    async def act(self, request: policy_pb2.ActRequest) -> policy_pb2.ActResponse:
        """Choose one action (shared by Act and ActStream)."""
        started = time.perf_counter()
        if request.step_index < 0:
            raise errors.InvalidArgument(f"step_index must be >= 0, got {request.step_index}",
                                         reason="BAD_STEP_INDEX", metadata={"field": "step_index"})
        for field, value, limit in (("episode_id", request.episode_id, MAX_EPISODE_ID_CHARS),
                                    ("observation.url", request.observation.url, MAX_URL_CHARS)):
            if len(value) > limit:
                raise errors.InvalidArgument(f"{field}: {len(value)} characters, more than {limit}",
                                             reason="FIELD_TOO_LONG", metadata={"field": field})
        policy = self._policy(request)
        if request.HasField("task") and not getattr(policy, "needs_solution", False):
            request.task.CopyFrom(policy_task(request.task))
        decision: Decision = await policy.act(request)
        total = time.perf_counter() - started
        metrics.ACT_SECONDS.labels(policy.name).observe(total)
        metrics.ACTS.labels(policy.name).inc()
        inference = decision.inference_seconds or (total - decision.queue_seconds)
        try:
            text = format_action(decision.action)
        except ValueError as exc:  # the action was built from the request's own values (ids, boxes) that no text can carry
            raise errors.InvalidArgument(f"observation: the action chosen from it cannot be written: {exc}",
                                         reason="UNWRITABLE_ACTION", metadata={"field": "observation"}) from exc
        return policy_pb2.ActResponse(
            episode_id=request.episode_id, action=decision.action, action_text=text,
            raw_output=decision.raw_output, parse_failed=decision.parse_failed, parse_error=decision.parse_error,
            memory=decision.memory, prompt_tokens=decision.prompt_tokens,
            completion_tokens=decision.completion_tokens, completion_token_ids=decision.completion_token_ids,
            completion_logprobs=decision.completion_logprobs, policy=policy.name, model=decision.model or policy.model,
            batch_size=decision.batch_size, policy_version=getattr(policy, "version", ""),
            timings=policy_pb2.PolicyTimings(queue_seconds=decision.queue_seconds, inference_seconds=inference,
                                             total_seconds=total),
        )

    async def Act(self, request: policy_pb2.ActRequest, context: grpc.aio.ServicerContext) -> policy_pb2.ActResponse:
        return await self.act(request)

    async def ActStream(self, request_iterator: AsyncIterator[policy_pb2.ActStreamRequest],
                        context: grpc.aio.ServicerContext) -> AsyncIterator[policy_pb2.ActStreamResponse]:
        """Each item runs as its own task; answers are yielded as they complete, each matched by tag
        (`webenv.streams`, at most `stream_max_inflight` unanswered)."""

        async def answer(item: policy_pb2.ActStreamRequest) -> policy_pb2.ActResponse:
            if not item.HasField("request"):
                raise errors.InvalidArgument("ActStreamRequest.request is required", reason="MISSING_REQUEST",
                                             metadata={"field": "request"})
            return await self.act(item.request)

        async for response in serve_in_completion_order(
                request_iterator, answer, policy_pb2.ActStreamResponse, max_inflight=self.stream_max_inflight,
                what="policy", on_error=lambda err: metrics.STREAM_ERRORS.labels(err.reason).inc()):
            yield response

    async def ListPolicies(self, request: policy_pb2.ListPoliciesRequest,
                           context: grpc.aio.ServicerContext) -> policy_pb2.ListPoliciesResponse:
        served = list(self.policies.values()) + (self.checkpoints.served() if self.checkpoints else [])
        return policy_pb2.ListPoliciesResponse(policies=[_info(p) for p in served], default_policy=self.default)

    async def LoadCheckpoint(self, request: policy_pb2.LoadCheckpointRequest,
                             context: grpc.aio.ServicerContext) -> policy_pb2.LoadCheckpointResponse:
        if self.checkpoints is None:
            raise errors.FailedPrecondition("this policy server has no checkpoint folder configured",
                                            reason="NO_CHECKPOINT_DIR", metadata={"field": "ref"})
        if not request.ref:
            raise errors.InvalidArgument("ref: required ('<name>' or '<name>@<version>')", reason="BAD_CHECKPOINT_REF",
                                         metadata={"field": "ref"})
        name = request.ref.partition("@")[0]
        if name in self.policies:
            raise errors.InvalidArgument(f"ref: '{name}' is a built-in policy name; name checkpoints otherwise",
                                         reason="BAD_CHECKPOINT_REF", metadata={"field": "ref"})
        policy, seconds = await self.checkpoints.load(request.ref)
        metrics.CHECKPOINT_LOADS.inc()
        return policy_pb2.LoadCheckpointResponse(policy=_info(policy), load_seconds=seconds)


def _info(p: Policy) -> policy_pb2.PolicyInfo:
    return policy_pb2.PolicyInfo(name=p.name, description=p.description, model=p.model, backend=p.backend,
                                 version=getattr(p, "version", ""), checkpoint_path=getattr(p, "checkpoint_path", ""),
                                 needs_solution=getattr(p, "needs_solution", False),
                                 solved_task_ids=getattr(p, "solved_task_ids", ()))

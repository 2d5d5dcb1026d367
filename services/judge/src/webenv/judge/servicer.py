"""JudgeService over gRPC: request validation and error mapping around the engine."""

from __future__ import annotations

import grpc
from webenv import errors
from webenv.judge import metrics
from webenv.judge.engine import Judge
from webenv.judge.rubric import RubricInvalid, validate_rubric
from webenv.v1 import judge_pb2, judge_pb2_grpc


def invalid_rubric(exc: RubricInvalid) -> errors.InvalidArgument:
    """INVALID_ARGUMENT naming the first problem's field and fact (all problems counted in metadata)."""
    first = exc.problems[0]
    more = f" (and {len(exc.problems) - 1} more problems)" if len(exc.problems) > 1 else ""
    metadata = {"fact_id": first.fact_id, "field": first.field, "problems": str(len(exc.problems))}
    if first.construct:
        metadata["construct"] = first.construct
    return errors.InvalidArgument(f"{first.field}: {first.message}{more}", reason=first.reason, metadata=metadata)


class JudgeServicer(judge_pb2_grpc.JudgeServiceServicer):
    """Grades trajectories (Evaluate) and checks rubrics (ValidateRubric)."""

    def __init__(self, judge: Judge, max_regex_chars: int = 512) -> None:
        self.judge = judge
        self.max_regex_chars = max_regex_chars

    async def Evaluate(
        self, request: judge_pb2.EvaluateRequest, context: grpc.aio.ServicerContext
    ) -> judge_pb2.EvaluateResponse:
        if not request.HasField("task") or not request.task.HasField("rubric"):
            metrics.EVALUATIONS.labels("invalid").inc()
            raise errors.InvalidArgument("task.rubric: is required", reason="MISSING_RUBRIC")
        opts = request.options
        if opts.max_keypoints < 0 or opts.llm_timeout_seconds < 0:
            metrics.EVALUATIONS.labels("invalid").inc()
            field = "max_keypoints" if opts.max_keypoints < 0 else "llm_timeout_seconds"
            raise errors.InvalidArgument(f"options.{field}: must not be negative", reason="INVALID_OPTIONS")
        try:
            ev = await self.judge.evaluate(request.task, request.trajectory, opts)
        except RubricInvalid as exc:
            metrics.EVALUATIONS.labels("invalid").inc()
            raise invalid_rubric(exc) from None
        return judge_pb2.EvaluateResponse(verdict=ev.verdict, latency_seconds=ev.latency_seconds, cached=ev.cached)

    async def ValidateRubric(
        self, request: judge_pb2.ValidateRubricRequest, context: grpc.aio.ServicerContext
    ) -> judge_pb2.ValidateRubricResponse:
        problems = validate_rubric(request.rubric, self.max_regex_chars)
        return judge_pb2.ValidateRubricResponse(
            valid=not problems,
            problems=[judge_pb2.RubricProblem(fact_id=p.fact_id, field=p.field, message=p.message) for p in problems],
        )

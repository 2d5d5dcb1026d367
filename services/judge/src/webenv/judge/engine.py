"""The judge engine: compiles rubrics (cached), runs deterministic checkers, delegates LLM-judged
facts to the LLM judge, and assembles the verdict. Used by the gRPC servicer, the benchmark and
the calibration command alike."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from webenv.judge import metrics, simulated
from webenv.judge.context import EvalContext
from webenv.judge.criteria import UNDECIDABLE, Check
from webenv.judge.rubric import CompiledFact, CompiledRubric, RubricCache
from webenv.judge.verdict import answer_supported, assemble
from webenv.v1 import common_pb2, judge_pb2

if TYPE_CHECKING:
    from webenv.judge.llm import LlmJudge

_OUTCOME_NAMES = {v: k.removeprefix("FACT_OUTCOME_").lower() for k, v in common_pb2.FactOutcome.items()}


@dataclass
class Evaluation:
    """A verdict and whether all its LLM-judged facts came from the cache."""

    verdict: common_pb2.Verdict
    cached: bool
    latency_seconds: float


def to_result(cf: CompiledFact, check: Check) -> common_pb2.FactResult:
    """FactResult of a fact's check."""
    return common_pb2.FactResult(
        fact_id=cf.fact.fact_id,
        group_id=cf.group.group_id,
        outcome=check.outcome,
        evidence=common_pb2.Evidence(
            step_index=check.step_index, format=check.fmt, site_state_path=check.path, excerpt=check.excerpt
        ),
        reason=check.reason,
        criterion_kind=cf.kind,
    )


class Judge:
    """Grades trajectories. Thread-compatible for the deterministic path; LLM calls are async."""

    def __init__(self, rubrics: RubricCache | None = None, llm: LlmJudge | None = None) -> None:
        self.rubrics = rubrics or RubricCache()
        self.llm = llm
        self._timers: dict[str, Any] = {}
        self._facts: dict[tuple[str, int], Any] = {}

    def compile(self, rubric: common_pb2.Rubric) -> CompiledRubric:
        """Compiled rubric; raises RubricInvalid."""
        return self.rubrics.get(rubric)

    def _observe(self, kind: str, outcome: int, seconds: float) -> None:
        timer = self._timers.get(kind)
        if timer is None:
            timer = self._timers[kind] = metrics.CRITERION_SECONDS.labels(kind)
        timer.observe(seconds)
        key = (kind, outcome)
        counter = self._facts.get(key)
        if counter is None:
            counter = self._facts[key] = metrics.FACTS.labels(kind, _OUTCOME_NAMES.get(outcome, "unspecified"))
        counter.inc()

    def _deterministic(self, cf: CompiledFact, ctx: EvalContext) -> Check:
        assert cf.checker is not None
        t0 = time.perf_counter()
        check = cf.checker(ctx)
        if ctx.simulated:  # a world model's episode is graded against its own pages (simulated.py)
            check = simulated.grade(cf.kind, cf.fact, ctx, check)
        self._observe(cf.kind, check.outcome, time.perf_counter() - t0)
        return check

    def evaluate_deterministic(
        self, task: common_pb2.Task, trajectory: common_pb2.Trajectory
    ) -> common_pb2.Verdict:
        """Synchronous verdict; LLM-judged facts (if any) are undecidable. Raises RubricInvalid."""
        t0 = time.perf_counter()
        compiled = self.compile(task.rubric)
        ctx = EvalContext(task, trajectory)
        checks = [
            self._deterministic(cf, ctx) if cf.checker is not None
            else Check(UNDECIDABLE, "LLM-judged facts are not allowed in this evaluation")
            for cf in compiled.facts
        ]
        verdict = self._finish(compiled, ctx, checks)
        self._count(verdict, time.perf_counter() - t0)
        return verdict

    async def evaluate(
        self,
        task: common_pb2.Task,
        trajectory: common_pb2.Trajectory,
        options: judge_pb2.JudgeOptions | None = None,
    ) -> Evaluation:
        """Verdict with LLM-judged facts when allowed and a backend is configured. Raises RubricInvalid."""
        t0 = time.perf_counter()
        options = options or judge_pb2.JudgeOptions()
        compiled = self.compile(task.rubric)
        ctx = EvalContext(task, trajectory)
        checks: list[Check | None] = [
            self._deterministic(cf, ctx) if cf.checker is not None else None for cf in compiled.facts
        ]
        llm_facts = [(i, cf) for i, cf in enumerate(compiled.facts) if cf.checker is None]
        cached = False
        if llm_facts:
            if not options.allow_llm:
                for i, _ in llm_facts:
                    checks[i] = Check(UNDECIDABLE, "LLM-judged facts are not allowed (options.allow_llm is false)")
            elif self.llm is None:
                for i, _ in llm_facts:
                    checks[i] = Check(UNDECIDABLE, "no LLM judge backend is configured (WEBENV_JUDGE_LLM_BACKEND)")
            else:
                t_llm = time.perf_counter()
                judged, cached = await self.llm.judge(ctx, compiled, [cf for _, cf in llm_facts], options)
                per_fact = (time.perf_counter() - t_llm) / len(llm_facts)
                for (i, cf), check in zip(llm_facts, judged, strict=True):
                    checks[i] = check
                    self._observe(cf.kind, check.outcome, per_fact)
        verdict = self._finish(compiled, ctx, [c for c in checks if c is not None])
        latency = time.perf_counter() - t0
        self._count(verdict, latency)
        return Evaluation(verdict, cached, latency)

    def _finish(self, compiled: CompiledRubric, ctx: EvalContext, checks: list[Check]) -> common_pb2.Verdict:
        results = [to_result(cf, check) for cf, check in zip(compiled.facts, checks, strict=True)]
        supported, _ = answer_supported(ctx, needs_answer=compiled.has_answer)
        return assemble(
            compiled.rubric,
            results,
            [not cf.group.optional for cf in compiled.facts],
            supported,
            require_support=compiled.has_llm,
        )

    @staticmethod
    def _count(verdict: common_pb2.Verdict, seconds: float) -> None:
        metrics.EVALUATIONS.labels("passed" if verdict.passed else "failed").inc()
        metrics.EVALUATION_SECONDS.observe(seconds)

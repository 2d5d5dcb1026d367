"""JudgeService over a real gRPC channel: Evaluate, ValidateRubric, refusals, metrics."""

from __future__ import annotations

import grpc
import pytest
from webenv import errors
from webenv.judge.examples import fact, shop_episode, task_for
from webenv.runtime import Server
from webenv.v1 import common_pb2 as C
from webenv.v1 import judge_pb2, judge_pb2_grpc


async def test_evaluate_passing_and_failing(stub: judge_pb2_grpc.JudgeServiceStub) -> None:
    ok = shop_episode(success=True, seed=3)
    resp = await stub.Evaluate(judge_pb2.EvaluateRequest(task=task_for(ok), trajectory=ok.trajectory))
    v = resp.verdict
    assert v.passed and v.score == 1.0 and len(v.results) == 10
    assert v.rubric_id == f"buy-{ok.target.sku}" and v.rubric_version == 1 and v.judge_version.startswith("webenv-judge/")
    assert resp.latency_seconds > 0 and not resp.cached
    bad = shop_episode(success=False, seed=3)
    resp = await stub.Evaluate(judge_pb2.EvaluateRequest(task=task_for(bad), trajectory=bad.trajectory))
    assert not resp.verdict.passed and resp.verdict.score == pytest.approx(0.4)
    failed = [r for r in resp.verdict.results if r.outcome == C.FACT_OUTCOME_FAILS]
    assert all(r.reason for r in failed)


MALICIOUS = [
    ("text.__class__", "Attribute"),
    ("__import__('os').system('id')", "Attribute"),
    ("__import__('os')", "Call"),
    ("9**9**9", "Pow"),
    ("'a'*10**9", "Mult"),
    ("(lambda: 1)()", "Lambda"),
    ("[c for c in text]", "ListComp"),
    ("text.split(", "SyntaxError"),
]


@pytest.mark.parametrize(("condition", "construct"), MALICIOUS)
async def test_unsafe_condition_is_invalid_argument(
    stub: judge_pb2_grpc.JudgeServiceStub, condition: str, construct: str
) -> None:
    ok = shop_episode(seed=1, steps=3)
    rubric = C.Rubric(rubric_id="evil", groups=[C.FactGroup(facts=[
        fact("f1", "fine", env_reward=C.EnvRewardCriterion()),
        fact("f3", "bad", page=C.PageCriterion(css_selector=".price", condition=condition)),
    ])])
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await stub.Evaluate(judge_pb2.EvaluateRequest(task=task_for(ok, rubric), trajectory=ok.trajectory))
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    err = errors.from_rpc_error(info.value)
    assert isinstance(err, errors.InvalidArgument)
    assert err.message.startswith("rubric.groups[0].facts[1].criterion.page.condition: ")
    assert err.metadata["fact_id"] == "f3"
    assert err.metadata["construct"] == construct
    assert err.reason in ("UNSAFE_CONDITION", "EXPRESSION_TOO_COSTLY", "INVALID_CONDITION")


async def test_oversized_regex_is_invalid_argument(stub: judge_pb2_grpc.JudgeServiceStub) -> None:
    rubric = C.Rubric(groups=[C.FactGroup(facts=[
        fact("big", "d", url=C.UrlCriterion(mode=C.MATCH_MODE_REGEX, value="(a|b)*" * 100))])])
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await stub.Evaluate(judge_pb2.EvaluateRequest(task=C.Task(rubric=rubric)))
    err = errors.from_rpc_error(info.value)
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert err.reason == "REGEX_TOO_LARGE" and "limit of 512" in err.message
    assert err.metadata["field"] == "rubric.groups[0].facts[0].criterion.url.value"


async def test_missing_rubric_and_bad_options(stub: judge_pb2_grpc.JudgeServiceStub) -> None:
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await stub.Evaluate(judge_pb2.EvaluateRequest())
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "task.rubric" in (info.value.details() or "")
    ok = shop_episode(seed=1, steps=2)
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await stub.Evaluate(judge_pb2.EvaluateRequest(task=task_for(ok), trajectory=ok.trajectory,
                                                      options=judge_pb2.JudgeOptions(llm_timeout_seconds=-1)))
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "options.llm_timeout_seconds" in (info.value.details() or "")


async def test_validate_rubric_lists_every_problem(stub: judge_pb2_grpc.JudgeServiceStub) -> None:
    good = task_for(shop_episode(seed=2, steps=2)).rubric
    resp = await stub.ValidateRubric(judge_pb2.ValidateRubricRequest(rubric=good))
    assert resp.valid and not resp.problems
    bad = C.Rubric(groups=[C.FactGroup(facts=[
        fact("a", "d", page=C.PageCriterion(css_selector="p", condition="text.__class__")),
        fact("b", "d", url=C.UrlCriterion(mode=C.MATCH_MODE_REGEX, value="x" * 600)),
        fact("b", "d", site_state=C.SiteStateCriterion(path="$.x[", value_json="1")),
    ])])
    resp = await stub.ValidateRubric(judge_pb2.ValidateRubricRequest(rubric=bad))
    assert not resp.valid
    by_field = {p.field: p for p in resp.problems}
    assert "attribute access '__class__' is not allowed" in by_field[
        "rubric.groups[0].facts[0].criterion.page.condition"].message
    assert by_field["rubric.groups[0].facts[1].criterion.url.value"].fact_id == "b"
    assert "duplicate fact id" in by_field["rubric.groups[0].facts[2].fact_id"].message
    assert "rubric.groups[0].facts[2].criterion.site_state.path" in by_field
    resp = await stub.ValidateRubric(judge_pb2.ValidateRubricRequest())
    assert not resp.valid and resp.problems[0].message == "rubric has no facts"


async def test_llm_facts_undecidable_without_backend(stub: judge_pb2_grpc.JudgeServiceStub) -> None:
    ep = shop_episode(seed=4, steps=3)
    rubric = C.Rubric(groups=[C.FactGroup(facts=[fact("l", "A receipt is shown", llm=C.LlmCriterion())])])
    for allow, needle in ((False, "allow_llm"), (True, "no LLM judge backend")):
        resp = await stub.Evaluate(judge_pb2.EvaluateRequest(
            task=task_for(ep, rubric), trajectory=ep.trajectory, options=judge_pb2.JudgeOptions(allow_llm=allow)))
        r = resp.verdict.results[0]
        assert r.outcome == C.FACT_OUTCOME_UNDECIDABLE and needle in r.reason
        assert not resp.verdict.passed


async def test_metrics_are_served(stub: judge_pb2_grpc.JudgeServiceStub, judge_server: Server, scrape) -> None:
    ep = shop_episode(seed=5, steps=2)
    await stub.Evaluate(judge_pb2.EvaluateRequest(task=task_for(ep), trajectory=ep.trajectory))
    with pytest.raises(grpc.aio.AioRpcError):
        await stub.Evaluate(judge_pb2.EvaluateRequest(task=C.Task(rubric=C.Rubric())))
    text = scrape(judge_server.metrics_port)
    assert 'webenv_judge_evaluations_total{outcome="passed"}' in text
    assert 'webenv_judge_criterion_seconds_count{kind="site_state"}' in text
    assert 'webenv_judge_facts_total{kind="url",outcome="holds"}' in text
    assert "webenv_judge_evaluation_seconds_bucket" in text
    assert 'webenv_judge_evaluations_total{outcome="invalid"}' in text
    assert "grpc_server_handled_total" in text

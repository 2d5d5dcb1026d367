"""Every deterministic criterion kind, with passing and failing trajectories, through the engine."""

from __future__ import annotations

import json

import pytest
from webenv.judge.engine import Judge
from webenv.judge.examples import fact, shop_episode, task_for
from webenv.judge.rubric import RubricInvalid
from webenv.v1 import common_pb2 as C

HOLDS, FAILS, UNDECIDABLE = C.FACT_OUTCOME_HOLDS, C.FACT_OUTCOME_FAILS, C.FACT_OUTCOME_UNDECIDABLE
JUDGE = Judge()


def judge_one(f: C.Fact, traj: C.Trajectory) -> C.FactResult:
    rubric = C.Rubric(rubric_id="r", version=3, groups=[C.FactGroup(group_id="g", facts=[f])])
    verdict = JUDGE.evaluate_deterministic(C.Task(rubric=rubric), traj)
    assert verdict.rubric_id == "r" and verdict.rubric_version == 3 and verdict.judge_version
    return verdict.results[0]


def traj(**kw: object) -> C.Trajectory:
    return C.Trajectory(**kw)  # type: ignore[arg-type]


def page_traj(*htmls: str, final: str | None = None) -> C.Trajectory:
    t = C.Trajectory()
    for i, h in enumerate(htmls):
        t.steps.add(step_index=i, observation=C.Observation(url=f"https://x.test/{i}", html=h))
    if final is not None:
        t.final_observation.CopyFrom(C.Observation(url="https://x.test/final", html=final))
    return t


# -- url ---------------------------------------------------------------------------------------

U = C.UrlCriterion
URL_TRAJ = traj(
    steps=[C.StepRecord(step_index=0, observation=C.Observation(url="https://shop.test/search?q=lamp")),
           C.StepRecord(step_index=1, observation=C.Observation(url="https://shop.test/products/A1"))],
    final_observation=C.Observation(url="HTTPS://Shop.test:443/cart/?b=2&a=1#top"),
)


@pytest.mark.parametrize(
    ("crit", "outcome"),
    [
        (U(mode=C.MATCH_MODE_EXACT, value="HTTPS://Shop.test:443/cart/?b=2&a=1#top"), HOLDS),
        (U(value="https://shop.test/cart"), FAILS),  # unspecified = exact
        (U(mode=C.MATCH_MODE_CONTAINS, value="/cart"), HOLDS),
        (U(mode=C.MATCH_MODE_CONTAINS, value="/checkout"), FAILS),
        (U(mode=C.MATCH_MODE_NORMALIZED, value="https://shop.test/cart?a=1&b=2"), HOLDS),
        (U(mode=C.MATCH_MODE_NORMALIZED, value="https://shop.test/cart?a=1"), FAILS),
        (U(mode=C.MATCH_MODE_REGEX, value=r"/cart/?\?"), HOLDS),
        (U(mode=C.MATCH_MODE_REGEX, value=r"/products/\w+$"), FAILS),
        (U(mode=C.MATCH_MODE_REGEX, value=r"/products/\w+$", any_step=True), HOLDS),
        (U(mode=C.MATCH_MODE_CONTAINS, value="q=lamp", any_step=True), HOLDS),
        (U(mode=C.MATCH_MODE_CONTAINS, value="q=chair", any_step=True), FAILS),
    ],
)
def test_url(crit: C.UrlCriterion, outcome: int) -> None:
    r = judge_one(fact("u", "url", url=crit), URL_TRAJ)
    assert r.outcome == outcome, r.reason
    assert r.criterion_kind == "url"
    assert r.evidence.excerpt


def test_url_any_step_evidence_names_the_step() -> None:
    r = judge_one(fact("u", "url", url=U(mode=C.MATCH_MODE_CONTAINS, value="q=lamp", any_step=True)), URL_TRAJ)
    assert r.evidence.step_index == 0 and "q=lamp" in r.evidence.excerpt


def test_catastrophic_regex_is_cut_off() -> None:
    t = traj(final_observation=C.Observation(url="https://x.test/" + "x" * 3000), final_answer="a" * 3000 + "!")
    r = judge_one(fact("u", "url", url=U(mode=C.MATCH_MODE_REGEX, value=r"(x+x+)+y")), t)
    assert r.outcome == UNDECIDABLE and "ran past" in r.reason
    r = judge_one(fact("a", "answer", answer=A(mode=C.MATCH_MODE_REGEX, expected=r"^(a|aa)+$")), t)
    assert r.outcome == UNDECIDABLE and "ran past" in r.reason


def test_url_without_any_url_is_undecidable() -> None:
    assert judge_one(fact("u", "url", url=U(value="x")), traj()).outcome == UNDECIDABLE


# -- answer ------------------------------------------------------------------------------------

A = C.AnswerCriterion


@pytest.mark.parametrize(
    ("crit", "answer", "outcome"),
    [
        (A(mode=C.MATCH_MODE_EXACT, expected="42"), " 42 ", HOLDS),
        (A(mode=C.MATCH_MODE_EXACT, expected="42"), "42.0", FAILS),
        (A(mode=C.MATCH_MODE_CONTAINS, expected="blue kettle"), "It is the Blue  Kettle.", HOLDS),
        (A(mode=C.MATCH_MODE_CONTAINS, expected="blue kettle"), "the red kettle", FAILS),
        (A(mode=C.MATCH_MODE_NORMALIZED, expected="Crème Brûlée!"), "creme brulee", HOLDS),
        (A(mode=C.MATCH_MODE_NORMALIZED, expected="Crème Brûlée"), "creme brulee tart", FAILS),
        (A(mode=C.MATCH_MODE_REGEX, expected=r"^A\d{3}$"), "A123", HOLDS),
        (A(mode=C.MATCH_MODE_REGEX, expected=r"^A\d{3}$"), "A12", FAILS),
        (A(mode=C.MATCH_MODE_NUMBER, expected="1234.5"), "$1,234.50", HOLDS),
        (A(mode=C.MATCH_MODE_NUMBER, expected="49.99", tolerance=0.01), "It costs 50.00 dollars", HOLDS),
        (A(mode=C.MATCH_MODE_NUMBER, expected="49.99"), "It costs 50.00 dollars", FAILS),
        (A(mode=C.MATCH_MODE_NUMBER, expected="3"), "3 or 4", FAILS),  # ambiguous
        (A(mode=C.MATCH_MODE_NUMBER, expected="3"), "three", FAILS),
        (A(mode=C.MATCH_MODE_SET, values=["Oak", "Pine", "Birch"]), "birch, oak and pine.", HOLDS),
        (A(mode=C.MATCH_MODE_SET, expected="Oak, Pine, Birch"), "oak and pine", FAILS),
        (A(mode=C.MATCH_MODE_SET, values=["12"]), "120 items", FAILS),  # word boundaries
        (A(mode=C.MATCH_MODE_DATE, expected="2026-03-05"), "March 5, 2026", HOLDS),
        (A(mode=C.MATCH_MODE_DATE, expected="2026-03-05"), "The flight leaves on 5 Mar 2026 at noon", HOLDS),
        (A(mode=C.MATCH_MODE_DATE, expected="2026-03-05"), "2026-03-06", FAILS),
        (A(mode=C.MATCH_MODE_DATE, expected="2026-03-05"), "soon", FAILS),
        (A(mode=C.MATCH_MODE_EXACT, expected="42"), "", FAILS),
    ],
)
def test_answer(crit: C.AnswerCriterion, answer: str, outcome: int) -> None:
    r = judge_one(fact("a", "answer", answer=crit), traj(final_answer=answer))
    assert r.outcome == outcome, r.reason
    assert r.criterion_kind == "answer" and r.reason


# -- page --------------------------------------------------------------------------------------

P = C.PageCriterion
SHOP = '<html><body><h1 class="t">Oak Desk</h1><span class="price">$45.00</span><span class="price">$120.00</span>' \
       '<p id="stock">In Stock &amp; ready</p></body></html>'
OTHER = '<html><body><h1 class="t">Search</h1><p>No results</p></body></html>'


@pytest.mark.parametrize(
    ("crit", "outcome"),
    [
        (P(text="oak desk"), HOLDS),  # final observation by default, case-insensitive
        (P(text="Pine desk"), FAILS),
        (P(css_selector="h1.t", text="Oak"), HOLDS),
        (P(css_selector="h1.t", text="Pine"), FAILS),
        (P(css_selector="#missing"), FAILS),
        (P(css_selector=".price", condition="float(text.strip('$')) < 50"), HOLDS),  # any element qualifies
        (P(css_selector=".price", condition="float(text.strip('$')) < 10"), FAILS),
        (P(css_selector="#stock", condition="'in stock' in text.lower()"), HOLDS),
        (P(css_selector="h1", condition="float(text) > 1"), FAILS),  # evaluation error -> fails with reason
        (P(text="No results", step_index=0), HOLDS),
        (P(text="No results", step_index=-2), HOLDS),
        (P(text="No results"), FAILS),
        (P(text="No results", any_step=True), HOLDS),
        (P(text="Nowhere", any_step=True), FAILS),
        (P(text="x", step_index=7), UNDECIDABLE),
    ],
)
def test_page(crit: C.PageCriterion, outcome: int) -> None:
    r = judge_one(fact("p", "page", page=crit), page_traj(OTHER, final=SHOP))
    assert r.outcome == outcome, r.reason
    assert r.criterion_kind == "page"


def test_page_evidence_names_step_and_format() -> None:
    r = judge_one(fact("p", "page", page=P(text="No results", any_step=True)), page_traj(SHOP, OTHER, final=SHOP))
    assert r.evidence.step_index == 1 and r.evidence.format == C.OBSERVATION_FORMAT_HTML
    r = judge_one(fact("p", "page", page=P(css_selector=".price", condition="float(text.strip('$')) > 100")),
                  page_traj(final=SHOP))
    assert r.evidence.step_index == -1 and "120" in r.evidence.excerpt


def test_page_without_html_uses_text_formats_or_is_undecidable() -> None:
    t = C.Trajectory(final_observation=C.Observation(axtree='[1] heading "Oak Desk"'))
    assert judge_one(fact("p", "d", page=P(text="oak desk")), t).outcome == HOLDS
    r = judge_one(fact("p", "d", page=P(text="oak desk")), t)
    assert r.evidence.format == C.OBSERVATION_FORMAT_AXTREE
    r = judge_one(fact("p", "d", page=P(css_selector="h1")), t)
    assert r.outcome == UNDECIDABLE and "no HTML" in r.reason
    empty = C.Trajectory(final_observation=C.Observation(url="https://x.test/"))
    assert judge_one(fact("p", "d", page=P(text="a")), empty).outcome == UNDECIDABLE


# -- element state -----------------------------------------------------------------------------

E = C.ElementStateCriterion
FORM = '<html><body><input bid="5" id="qty" type="number" value="2"><input bid="6" id="gift" type="checkbox">' \
       '<input id="tos" type="checkbox" checked><button id="go" disabled class="btn big">Go</button>' \
       '<select id="color" data-choice="blue"></select></body></html>'


def form_traj() -> C.Trajectory:
    obs = C.Observation(html=FORM)
    obs.elements.add(element_id="5", value="3")  # live state typed after load: wins over the attribute
    obs.elements.add(element_id="6", checked=True)
    return C.Trajectory(final_observation=obs)


@pytest.mark.parametrize(
    ("crit", "outcome"),
    [
        (E(css_selector="#qty", property="value", op=C.COMPARISON_EQ, value_json="3"), HOLDS),
        (E(css_selector="#qty", property="value", op=C.COMPARISON_GE, value_json="5"), FAILS),
        (E(css_selector="#gift", property="checked", value_json="true"), HOLDS),
        (E(css_selector="#tos", property="checked", value_json="true"), HOLDS),
        (E(css_selector="#go", property="disabled", value_json="false"), FAILS),
        (E(css_selector="#go", property="class", op=C.COMPARISON_CONTAINS, value_json='"big"'), HOLDS),
        (E(css_selector="#color", property="data-choice", op=C.COMPARISON_NE, value_json='"red"'), HOLDS),
        (E(css_selector="#go", property="text", value_json='"Go"'), HOLDS),
        (E(css_selector="#nope", property="value", op=C.COMPARISON_EXISTS), FAILS),
        (E(css_selector="#nope", property="value", op=C.COMPARISON_EXISTS, value_json="false"), HOLDS),
        (E(css_selector="#go", property="visible", value_json="true"), UNDECIDABLE),
    ],
)
def test_element_state(crit: C.ElementStateCriterion, outcome: int) -> None:
    r = judge_one(fact("e", "element", element_state=crit), form_traj())
    assert r.outcome == outcome, r.reason
    assert r.criterion_kind == "element_state"


# -- site state --------------------------------------------------------------------------------

S = C.SiteStateCriterion
STATE = {"orders": [{"id": 1, "status": "cancelled", "items": [{"sku": "A12", "qty": 1}]},
                    {"id": 2, "status": "placed", "items": [{"sku": "A12", "qty": 3}, {"sku": "B7", "qty": 5}]}],
         "cart": {"total": 12.5, "tags": ["gift", "promo"]}, "user": {"vip": True}}


@pytest.mark.parametrize(
    ("crit", "outcome"),
    [
        (S(path='$.orders[-1].items[?(@.sku=="A12")].qty', op=C.COMPARISON_EQ, value_json="3"), HOLDS),
        (S(path='$.orders[-1].items[?(@.sku=="A12")].qty', op=C.COMPARISON_GT, value_json="3"), FAILS),
        (S(path="$.orders[*].status", value_json='"placed"'), HOLDS),  # any match (EQ when unspecified)
        (S(path="$.orders[*].status", op=C.COMPARISON_NE, value_json='"placed"'), FAILS),  # NE: no match equals
        (S(path="$.orders[*].status", op=C.COMPARISON_NE, value_json='"returned"'), HOLDS),
        (S(path="$.cart.total", op=C.COMPARISON_LT, value_json="20"), HOLDS),
        (S(path="$.cart.total", op=C.COMPARISON_LE, value_json="12"), FAILS),
        (S(path="$.cart.tags", op=C.COMPARISON_CONTAINS, value_json='"gift"'), HOLDS),
        (S(path="$.cart.tags", op=C.COMPARISON_CONTAINS, value_json='"sale"'), FAILS),
        (S(path="$.user.vip", value_json="true"), HOLDS),
        (S(path="$.user.vip", value_json="1"), FAILS),  # booleans are not numbers
        (S(path="$.coupon", op=C.COMPARISON_EXISTS), FAILS),
        (S(path="$.coupon", op=C.COMPARISON_EXISTS, value_json="false"), HOLDS),
        (S(path="$.orders[?(@.qty>=3)]", op=C.COMPARISON_EXISTS), FAILS),
        (S(path="$.orders[-1].items[?(@.qty>=3)]", op=C.COMPARISON_EXISTS), HOLDS),
    ],
)
def test_site_state(crit: C.SiteStateCriterion, outcome: int) -> None:
    r = judge_one(fact("s", "state", site_state=crit), traj(site_state_json=json.dumps(STATE)))
    assert r.outcome == outcome, r.reason
    assert r.evidence.site_state_path == crit.path


def test_site_state_path_matching_nothing_fails_with_reason() -> None:
    r = judge_one(fact("s", "d", site_state=S(path="$.nope.x", value_json="1")), traj(site_state_json="{}"))
    assert r.outcome == FAILS and r.reason == "path matched nothing"


def test_site_state_missing_or_broken_is_undecidable() -> None:
    f = fact("s", "d", site_state=S(path="$.a", value_json="1"))
    assert judge_one(f, traj()).outcome == UNDECIDABLE
    r = judge_one(f, traj(site_state_json="{broken"))
    assert r.outcome == UNDECIDABLE and "not valid JSON" in r.reason
    r = judge_one(f, traj(site_state_json="[" * 100_000 + "]" * 100_000))
    assert r.outcome == UNDECIDABLE and "too deeply" in r.reason


# -- env reward, category ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("min_reward", "reward", "outcome"),
    [(0.0, 0.8, HOLDS), (0.0, 0.0, FAILS), (0.0, -1.0, FAILS), (0.9, 0.95, HOLDS), (0.9, 0.5, FAILS)],
)
def test_env_reward(min_reward: float, reward: float, outcome: int) -> None:
    f = fact("r", "reward", env_reward=C.EnvRewardCriterion(min_reward=min_reward))
    assert judge_one(f, traj(env_reward=reward)).outcome == outcome


@pytest.mark.parametrize(("label", "outcome"), [("electronics", HOLDS), ("Home", FAILS), ("", UNDECIDABLE)])
def test_category(label: str, outcome: int) -> None:
    f = fact("c", "category", category=C.CategoryCriterion(category="Electronics"))
    assert judge_one(f, traj(category=label)).outcome == outcome


def test_llm_fact_without_llm_is_undecidable() -> None:
    r = judge_one(fact("l", "The page shows a receipt", llm=C.LlmCriterion()), traj())
    assert r.outcome == UNDECIDABLE and r.criterion_kind == "llm"


# -- verdict semantics -------------------------------------------------------------------------


def test_full_episode_passes_and_failed_episode_scores_partially() -> None:
    ok = shop_episode(success=True)
    v = JUDGE.evaluate_deterministic(task_for(ok), ok.trajectory)
    assert v.passed and v.score == 1.0 and v.answer_supported
    assert [r.fact_id for r in v.results] == [f"f{i}" for i in range(1, 11)]
    assert v.judged_at.seconds > 0
    bad = shop_episode(success=False)
    v = JUDGE.evaluate_deterministic(task_for(bad), bad.trajectory)
    assert not v.passed
    assert 0 < v.score < 1
    holds = {r.fact_id for r in v.results if r.outcome == HOLDS}
    assert holds == {"f1", "f2", "f3", "f4"}
    assert v.score == pytest.approx(4 / 10)


def test_all_required_facts_must_hold_and_optional_groups_only_score() -> None:
    yes = fact("y", "ok", env_reward=C.EnvRewardCriterion())
    no = fact("n", "no", category=C.CategoryCriterion(category="Nope"))
    t = traj(env_reward=1.0, category="Shop")
    rubric = C.Rubric(rubric_id="r", groups=[C.FactGroup(group_id="req", facts=[yes]),
                                             C.FactGroup(group_id="opt", optional=True, facts=[no])])
    v = JUDGE.evaluate_deterministic(C.Task(rubric=rubric), t)
    assert v.passed and v.score == 0.5
    rubric.groups[1].optional = False
    v = JUDGE.evaluate_deterministic(C.Task(rubric=rubric), t)
    assert not v.passed and v.score == 0.5
    assert [r.group_id for r in v.results] == ["req", "opt"]


def test_undecidable_required_fact_fails_the_verdict() -> None:
    rubric = C.Rubric(groups=[C.FactGroup(facts=[fact("c", "d", category=C.CategoryCriterion(category="X"))])])
    v = JUDGE.evaluate_deterministic(C.Task(rubric=rubric), traj())
    assert not v.passed and v.results[0].outcome == UNDECIDABLE


def test_answer_supported_check() -> None:
    ep = shop_episode(success=True)
    ep.trajectory.final_answer = f"{ep.target.name} costs $9999.99"  # number never shown anywhere
    v = JUDGE.evaluate_deterministic(task_for(ep), ep.trajectory)
    assert not v.answer_supported
    ep.trajectory.final_answer = ""
    v = JUDGE.evaluate_deterministic(task_for(ep), ep.trajectory)
    assert not v.answer_supported  # the rubric needs an answer
    rubric = C.Rubric(groups=[C.FactGroup(facts=[fact("r", "d", env_reward=C.EnvRewardCriterion())])])
    assert JUDGE.evaluate_deterministic(C.Task(rubric=rubric), ep.trajectory).answer_supported


@pytest.mark.parametrize(
    ("f", "field", "reason"),
    [
        (fact("x", "d", page=P(css_selector="h1", condition="text.__class__")),
         "rubric.groups[0].facts[0].criterion.page.condition", "UNSAFE_CONDITION"),
        (fact("x", "d", url=U(mode=C.MATCH_MODE_REGEX, value="a" * 513)),
         "rubric.groups[0].facts[0].criterion.url.value", "REGEX_TOO_LARGE"),
        (fact("x", "d", url=U(mode=C.MATCH_MODE_REGEX, value="(")),
         "rubric.groups[0].facts[0].criterion.url.value", "INVALID_REGEX"),
        (fact("x", "d", url=U(mode=C.MATCH_MODE_DATE, value="x")), "rubric.groups[0].facts[0].criterion.url.mode",
         "INVALID_CRITERION"),
        (fact("x", "d", page=P(css_selector="div[[")), "rubric.groups[0].facts[0].criterion.page.css_selector",
         "INVALID_SELECTOR"),
        (fact("x", "d", site_state=S(path="orders", value_json="1")),
         "rubric.groups[0].facts[0].criterion.site_state.path", "INVALID_PATH"),
        (fact("x", "d", site_state=S(path="$.a", value_json="blue")),
         "rubric.groups[0].facts[0].criterion.site_state.value_json", "INVALID_JSON"),
        (fact("x", "d", answer=A(mode=C.MATCH_MODE_NUMBER, expected="many")),
         "rubric.groups[0].facts[0].criterion.answer.expected", "INVALID_CRITERION"),
        (fact("x", "d"), "rubric.groups[0].facts[0].criterion", "MISSING_CRITERION"),
        (fact("x", "", llm=C.LlmCriterion()), "rubric.groups[0].facts[0].description", "MISSING_DESCRIPTION"),
    ],
)
def test_invalid_criteria_are_refused(f: C.Fact, field: str, reason: str) -> None:
    rubric = C.Rubric(groups=[C.FactGroup(facts=[f])])
    with pytest.raises(RubricInvalid) as info:
        JUDGE.evaluate_deterministic(C.Task(rubric=rubric), traj())
    problem = info.value.problems[0]
    assert (problem.field, problem.reason, problem.fact_id) == (field, reason, "x")


def test_duplicate_ids_and_empty_rubric_are_refused() -> None:
    with pytest.raises(RubricInvalid, match="no facts"):
        JUDGE.evaluate_deterministic(C.Task(rubric=C.Rubric()), traj())
    f = fact("x", "d", env_reward=C.EnvRewardCriterion())
    with pytest.raises(RubricInvalid, match="duplicate fact id"):
        JUDGE.evaluate_deterministic(C.Task(rubric=C.Rubric(groups=[C.FactGroup(facts=[f, f])])), traj())

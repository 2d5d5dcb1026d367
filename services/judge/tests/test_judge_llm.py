"""LLM-judged facts end to end: a tiny local model and an OpenAI-compatible HTTP server.

These tests assert plumbing (prompts, parsing, timeouts, caching, metrics), not the tiny model's
judgement.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from webenv.client import make_channel
from webenv.judge.cache import VerdictCache
from webenv.judge.calibrate import agreement, calibrate, format_report
from webenv.judge.context import EvalContext
from webenv.judge.engine import Judge
from webenv.judge.examples import fact, shop_episode, task_for
from webenv.judge.llm import LlmJudge, parse_reply, select_keypoints
from webenv.llm import GenerationRequest, LLMError, SamplingParams
from webenv.llm.openai_backend import OpenAIBackend
from webenv.llm.transformers_backend import TransformersBackend
from webenv.llm.vllm_backend import VllmBackend
from webenv.runtime import Server
from webenv.v1 import common_pb2 as C
from webenv.v1 import judge_pb2, judge_pb2_grpc

HOLDS, FAILS, UNDECIDABLE = C.FACT_OUTCOME_HOLDS, C.FACT_OUTCOME_FAILS, C.FACT_OUTCOME_UNDECIDABLE


# -- a local OpenAI-compatible server ----------------------------------------------------------


@dataclass
class FakeOpenAI:
    """State of the local server: how to answer, and every request body it got."""

    mode: str = "echo"
    requests: list[dict[str, Any]] = field(default_factory=list)
    port: int = 0

    def reply(self, prompt: str) -> str:
        if self.mode == "garbage":
            return "I think it is probably fine."
        fact_line = next((ln for ln in prompt.splitlines() if ln.startswith("FACT: ")), "")
        verdict = "HOLDS" if "receipt" in fact_line or "cart" in fact_line else "FAILS"
        return f"VERDICT: {verdict}\nREASON: echo of {fact_line[6:40]}"


def _handler(state: FakeOpenAI) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            return None

        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            state.requests.append({"path": self.path, **body})
            if state.mode == "slow":
                time.sleep(1.5)
            if state.mode == "error":
                self.send_response(500)
                self.end_headers()
                self.wfile.write(b"boom")
                return
            if self.path.endswith("/chat/completions"):
                text = state.reply(body["messages"][-1]["content"])
                out = {"choices": [{"index": 0, "message": {"role": "assistant", "content": text}}]}
            else:
                out = {"choices": [{"index": 0, "text": state.reply(body["prompt"])}]}
            data = json.dumps(out).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    return Handler


@pytest.fixture(scope="module")
def fake_openai() -> Iterator[FakeOpenAI]:
    state = FakeOpenAI()
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _handler(state))
    state.port = httpd.server_address[1]
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield state
    httpd.shutdown()
    httpd.server_close()


@pytest.fixture(autouse=True)
def _reset(request: pytest.FixtureRequest) -> None:
    if "fake_openai" in request.fixturenames:
        state = request.getfixturevalue("fake_openai")
        state.mode = "echo"
        state.requests.clear()


@pytest.fixture(scope="module")
async def openai_server(
    fake_openai: FakeOpenAI, judge_starter: Any
) -> AsyncIterator[tuple[Server, judge_pb2_grpc.JudgeServiceStub]]:
    backend = OpenAIBackend(f"http://127.0.0.1:{fake_openai.port}/v1", model="judge-test")
    server = await judge_starter(Judge(llm=LlmJudge(backend, VerdictCache(64), timeout_seconds=5)))
    channel = make_channel(f"127.0.0.1:{server.port}", timeout=30)
    yield server, judge_pb2_grpc.JudgeServiceStub(channel)
    await channel.close()
    await server.stop()


def llm_task(ep: Any) -> C.Task:
    rubric = C.Rubric(rubric_id="llm-r", version=2, groups=[
        C.FactGroup(group_id="shop", description="The purchase went through", facts=[
            fact("l1", "The cart page lists the product", llm=C.LlmCriterion(guidance="Look at the cart count.")),
            fact("l2", "A discount code was applied", llm=C.LlmCriterion()),
            fact("d1", "A product page was visited", url=C.UrlCriterion(mode=C.MATCH_MODE_CONTAINS,
                                                                          value="/products/", any_step=True)),
        ]),
    ])
    return task_for(ep, rubric)


def request(ep: Any, **opts: Any) -> judge_pb2.EvaluateRequest:
    return judge_pb2.EvaluateRequest(task=llm_task(ep), trajectory=ep.trajectory,
                                     options=judge_pb2.JudgeOptions(allow_llm=True, **opts))


# -- parsing, keypoints, prompts ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("reply", "expected"),
    [
        ("VERDICT: HOLDS\nREASON: the cart shows it", (HOLDS, "the cart shows it")),
        ("  verdict: fails\nreason: nothing shown", (FAILS, "nothing shown")),
        ("**VERDICT:** HOLDS", (HOLDS, "(no reason given)")),
        ("Sure!\nVERDICT: FAILS\nREASON: no receipt", (FAILS, "no receipt")),
        ("VERDICT: MAYBE\nREASON: x", None),
        ("The fact HOLDS.", None),
        ("", None),
    ],
)
def test_parse_reply(reply: str, expected: tuple[int, str] | None) -> None:
    assert parse_reply(reply) == expected


def test_keypoints_pick_relevant_steps_and_the_final_one() -> None:
    ep = shop_episode(steps=12, seed=7)
    ep.trajectory.steps[4].observation.axtree = '[3] StaticText "Coupon SPRING25 accepted, discount applied"'
    ctx = EvalContext(llm_task(ep), ep.trajectory)
    kps = select_keypoints(ctx, "A discount coupon was applied", k=3, chars=300)
    assert [kp.step_index for kp in kps][-1] == -1  # final observation always, oldest first
    assert 4 in [kp.step_index for kp in kps]
    assert all(len(kp.excerpt) <= 300 for kp in kps)


async def test_prompt_contents(openai_server: Any, fake_openai: FakeOpenAI) -> None:
    _, stub = openai_server
    ep = shop_episode(steps=6, seed=8)
    await stub.Evaluate(request(ep, no_cache=True))
    prompts = {p["messages"][0]["content"].split("FACT: ")[1].split("\n")[0]: p["messages"][0]["content"]
               for p in fake_openai.requests}
    prompt = prompts["The cart page lists the product"]
    assert f"TASK: Find {ep.target.name}" in prompt
    assert "FACT GROUP: The purchase went through" in prompt
    assert "OTHER FACTS IN THE GROUP: A discount code was applied; A product page was visited" in prompt
    assert "GUIDANCE: Look at the cart count." in prompt
    assert f"AGENT'S FINAL ANSWER: {ep.answer}" in prompt
    assert "--- final observation | url: https://shop-0042.web.test/cart" in prompt
    assert prompt.rstrip().endswith("VERDICT: HOLDS or VERDICT: FAILS\nREASON: one short sentence citing the evidence")
    assert "GUIDANCE" not in prompts["A discount code was applied"]
    req = fake_openai.requests[0]
    assert req["model"] == "judge-test" and req["temperature"] == 0.0 and req["max_tokens"] == 48


# -- OpenAI-compatible backend over gRPC -------------------------------------------------------


async def test_openai_backend_verdicts_and_cache(openai_server: Any, fake_openai: FakeOpenAI, scrape: Any) -> None:
    server, stub = openai_server
    ep = shop_episode(steps=5, seed=9)
    first = await stub.Evaluate(request(ep))
    by_id = {r.fact_id: r for r in first.verdict.results}
    assert by_id["l1"].outcome == HOLDS and by_id["l1"].reason.startswith("LLM: echo of")
    assert by_id["l2"].outcome == FAILS and by_id["d1"].outcome == HOLDS
    assert by_id["l1"].criterion_kind == "llm" and by_id["l1"].evidence.excerpt
    assert not first.verdict.passed and first.verdict.score == pytest.approx(2 / 3)
    assert not first.cached and len(fake_openai.requests) == 2
    second = await stub.Evaluate(request(ep))
    assert second.cached and len(fake_openai.requests) == 2  # no new model calls
    assert [r.outcome for r in second.verdict.results] == [r.outcome for r in first.verdict.results]
    third = await stub.Evaluate(request(ep, no_cache=True))
    assert not third.cached and len(fake_openai.requests) == 4
    ep.trajectory.final_observation.title = "changed evidence"  # new evidence -> new key
    fourth = await stub.Evaluate(request(ep))
    assert not fourth.cached and len(fake_openai.requests) == 6
    text = scrape(server.metrics_port)
    assert 'webenv_judge_llm_calls_total{backend="openai",result="ok"}' in text
    assert 'webenv_judge_cache_lookups_total{result="hit"}' in text
    assert 'webenv_judge_criterion_seconds_count{kind="llm"}' in text


@pytest.mark.parametrize(
    ("mode", "needle"),
    [("garbage", "unparsable judge output"), ("error", "HTTP 500"), ("slow", "timed out after 0.3s")],
)
async def test_openai_failures_are_undecidable(openai_server: Any, fake_openai: FakeOpenAI, mode: str,
                                               needle: str) -> None:
    _, stub = openai_server
    fake_openai.mode = mode
    ep = shop_episode(steps=3, seed={"garbage": 20, "error": 21, "slow": 22}[mode])
    resp = await stub.Evaluate(request(ep, llm_timeout_seconds=0.3))
    llm = [r for r in resp.verdict.results if r.criterion_kind == "llm"]
    assert all(r.outcome == UNDECIDABLE and needle in r.reason for r in llm), [r.reason for r in llm]
    assert not resp.verdict.passed and not resp.cached
    fake_openai.mode = "echo"
    again = await stub.Evaluate(request(ep, llm_timeout_seconds=0.3))
    assert not again.cached  # failures are never cached


async def test_openai_completions_endpoint(fake_openai: FakeOpenAI) -> None:
    backend = OpenAIBackend(f"http://127.0.0.1:{fake_openai.port}/v1", api="completions")
    [out] = await backend.generate([GenerationRequest("FACT: the receipt\n", SamplingParams(max_tokens=8),
                                                      timeout_seconds=5)])
    assert out.text.startswith("VERDICT: HOLDS")
    assert fake_openai.requests[-1]["path"] == "/v1/completions" and "model" not in fake_openai.requests[-1]
    await backend.close()


# -- tiny local transformers model -------------------------------------------------------------


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("tiny-judge")
    proc = subprocess.run([sys.executable, "-m", "webenv.judge", "build-tiny-model", "--out", str(out)],
                          capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr
    assert (out / "config.json").exists() and (out / "tokenizer.json").exists()
    return out


@pytest.fixture(scope="module")
async def tiny_servers(
    tiny_model: Path, judge_starter: Any
) -> AsyncIterator[dict[str, judge_pb2_grpc.JudgeServiceStub]]:
    stubs, servers, channels = {}, [], []
    for constrained in (True, False):
        backend = TransformersBackend(str(tiny_model), device="cpu", dtype="float32")
        judge = LlmJudge(backend, VerdictCache(64), constrained=constrained, max_tokens=8, timeout_seconds=60)
        await judge.start()
        server = await judge_starter(Judge(llm=judge))
        channel = make_channel(f"127.0.0.1:{server.port}", timeout=120)
        stubs["constrained" if constrained else "free"] = judge_pb2_grpc.JudgeServiceStub(channel)
        servers.append(server)
        channels.append(channel)
    yield stubs
    for ch in channels:
        await ch.close()
    for s in servers:
        await s.stop()


async def test_tiny_model_constrained_end_to_end_with_cache(tiny_servers: dict[str, Any]) -> None:
    stub = tiny_servers["constrained"]
    ep = shop_episode(steps=4, seed=11)
    first = await stub.Evaluate(request(ep, max_keypoints=2))
    llm = [r for r in first.verdict.results if r.criterion_kind == "llm"]
    assert len(llm) == 2
    assert all(r.outcome in (HOLDS, FAILS) and r.reason.startswith("LLM:") for r in llm)
    assert not first.cached
    second = await stub.Evaluate(request(ep, max_keypoints=2))
    assert second.cached
    assert [r.outcome for r in second.verdict.results] == [r.outcome for r in first.verdict.results]


async def test_tiny_model_free_generation_is_unparsable_and_timeouts_undecidable(
    tiny_servers: dict[str, Any],
) -> None:
    ep = shop_episode(steps=3, seed=12)
    resp = await tiny_servers["free"].Evaluate(request(ep, max_keypoints=1))
    llm = [r for r in resp.verdict.results if r.criterion_kind == "llm"]
    assert all(r.outcome == UNDECIDABLE and "unparsable judge output" in r.reason for r in llm)
    resp = await tiny_servers["constrained"].Evaluate(request(ep, llm_timeout_seconds=0.000001, no_cache=True))
    llm = [r for r in resp.verdict.results if r.criterion_kind == "llm"]
    assert all(r.outcome == UNDECIDABLE and "timed out" in r.reason for r in llm)


# -- calibration -------------------------------------------------------------------------------


def test_agreement_metrics() -> None:
    pairs = [(True, HOLDS)] * 4 + [(True, FAILS)] + [(False, HOLDS)] + [(False, FAILS)] * 3 + [(True, UNDECIDABLE)]
    a = agreement(pairs)
    assert (a.n, a.positives) == (10, 6)
    assert a.accuracy == 0.7 and a.precision == 0.8 and a.recall == pytest.approx(4 / 6, abs=1e-4)
    # kappa = (0.7 - (0.6*0.5 + 0.4*0.5)) / (1 - 0.5) = 0.4
    assert a.kappa == pytest.approx(0.4) and a.undecidable_rate == 0.1
    assert agreement([(True, HOLDS), (False, FAILS)]).kappa == 1.0


async def test_calibrate_reports_per_kind(fake_openai: FakeOpenAI) -> None:
    backend = OpenAIBackend(f"http://127.0.0.1:{fake_openai.port}/v1")
    report = await calibrate(LlmJudge(backend, VerdictCache(0)), n=2, steps=3)
    assert set(report["per_kind"]) == {"url", "page", "category", "answer", "site_state", "element_state",
                                       "env_reward"}
    assert report["overall"]["n"] == 20 and len(fake_openai.requests) == 20
    assert "| overall | 20 |" in format_report(report)
    await backend.close()


async def test_vllm_backend_is_lazy_and_explains_a_missing_package(tiny_model: Path) -> None:
    import importlib.util

    if importlib.util.find_spec("vllm") is not None:
        pytest.skip("vllm is installed here; the GPU path is exercised where a device is lent")
    backend = VllmBackend(str(tiny_model))  # nothing imported yet
    with pytest.raises(LLMError, match="needs the `vllm` package"):
        await backend.start()


def test_calibrate_command_writes_the_report_and_names_a_missing_backend(fake_openai: FakeOpenAI, tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    from typer.testing import CliRunner
    from webenv.judge.__main__ import app

    out = tmp_path / "calibration.json"
    res = CliRunner().invoke(app, ["calibrate", "--base-url", f"http://127.0.0.1:{fake_openai.port}/v1", "--n", "2",
                                   "--steps", "3", "--out", str(out)], prog_name="webenv-judge")
    assert res.exit_code == 0, res.output
    assert "| overall | 20 |" in res.output and json.loads(out.read_text())["overall"]["n"] == 20
    monkeypatch.delenv("WEBENV_JUDGE_LLM_BACKEND", raising=False)
    monkeypatch.chdir(tmp_path)  # no .env file
    res = CliRunner(env={"COLUMNS": "300"}).invoke(app, ["calibrate"], prog_name="webenv-judge")
    assert res.exit_code == 2 and "give --model DIR or --base-url URL" in res.output, res.output

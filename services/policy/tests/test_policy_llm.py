"""The llm policy: memory prompt, parsing, batching, and the transformers and OpenAI-compatible backends."""

from __future__ import annotations

import json
import random
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from webenv.client import make_channel
from webenv.policy.app import PolicyApp
from webenv.policy.config import Settings
from webenv.policy.synthetic import random_observation, request
from webenv.runtime import Server
from webenv.v1 import common_pb2, policy_pb2, policy_pb2_grpc


class ChatServer:
    """A local OpenAI-compatible /chat/completions server that answers in the memory-prompt format.

    It clicks the first element id of the observation; an instruction containing "babble" gets an
    unparsable answer and one containing "explode" a 500. Every request body is kept for assertions.
    """

    def __init__(self) -> None:
        self.bodies: list[dict] = []
        self.headers: list[dict] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # quiet
                pass

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                outer.bodies.append(body)
                outer.headers.append(dict(self.headers))
                content = body["messages"][1]["content"]
                text = content if isinstance(content, str) else content[0]["text"]
                if "explode" in text:
                    self.send_response(500)
                    self.end_headers()
                    return
                if "babble" in text:
                    answer = "I am not sure what to do here."
                else:
                    ids = re.findall(r"^\[(\w+)\]", text.split("Observation", 1)[1], re.M)
                    action = f"click({ids[0]})" if ids else "scroll(0, 400)"
                    answer = (f"Memory: the page has {len(ids)} elements\nProgress: looked around\n"
                              f"Intention: open the first one\nAction: {action}")
                data = json.dumps({"choices": [{"message": {"role": "assistant", "content": answer},
                                                "finish_reason": "stop"}],
                                   "usage": {"prompt_tokens": len(text) // 4, "completion_tokens": 20}}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self) -> ChatServer:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def llm_request(obs, **kw) -> policy_pb2.ActRequest:
    req = request(obs, policy="llm", **kw)
    req.history.add(action_text='fill(4, "laptop")', url="http://shop-0001.web.test/", memory="searched laptops")
    req.history.add(action_text="click(9)", url="http://shop-0001.web.test/search?q=laptop",
                    last_action_error="element 9 is not visible")
    return req


async def test_openai_backend_prompt_and_action(serve_policy, policy_stub):
    """Over a real channel and a real HTTP endpoint: the prompt has instruction, memory, history and page."""
    obs = random_observation(random.Random(3), n=6)
    for el in obs.elements:
        el.visible = True
    obs.screenshot.data, obs.screenshot.codec = b"\x89PNG fake", common_pb2.IMAGE_CODEC_PNG
    with ChatServer() as chat:
        async with serve_policy(policy_openai_url=chat.url, policy_openai_model="m1", policy_vision=True,
                                policy_openai_api_key="sekret") as (server, _), policy_stub(server) as stub:
            resp = await stub.Act(llm_request(obs, step_index=2, seed=4))
            listed = await stub.ListPolicies(policy_pb2.ListPoliciesRequest())
    assert not resp.parse_failed
    assert resp.action_text == f"click({obs.axtree.split(']')[0][1:]})"
    assert resp.memory == "the page has 6 elements"
    assert resp.model == "m1" and resp.policy == "llm" and resp.prompt_tokens > 0 and resp.completion_tokens == 20
    body = chat.bodies[0]
    system, user = body["messages"][0]["content"], body["messages"][1]["content"]
    text = user[0]["text"]
    assert "Action:" in system and "Memory:" in system
    assert "Instruction: Find the cheapest laptop" in text
    assert "Memory: searched laptops" in text
    assert 'fill(4, "laptop")' in text and "element 9 is not visible" in text
    assert obs.axtree.splitlines()[0] in text
    assert user[1]["image_url"]["url"].startswith("data:image/png;base64,")
    assert chat.headers[0]["Authorization"] == "Bearer sekret"
    assert body["model"] == "m1" and body["seed"] == 4
    assert {p.name: p.backend for p in listed.policies}["llm"] == "openai"


async def test_prompt_format_and_history_window(serve_policy, policy_stub):
    obs = random_observation(random.Random(4), n=5)
    obs.markdown = "# Laptops\n- [Laptop X200](/product/1) $499"
    with ChatServer() as chat:
        async with serve_policy(policy_openai_url=chat.url) as (server, _), policy_stub(server) as stub:
            req = llm_request(obs)
            req.options.prompt_format = common_pb2.OBSERVATION_FORMAT_MARKDOWN
            req.options.history_window = 1
            await stub.Act(req)
            bad = llm_request(obs)
            bad.options.prompt_format = common_pb2.OBSERVATION_FORMAT_DOM
            with pytest.raises(grpc.aio.AioRpcError) as info:
                await stub.Act(bad)
            no_instruction = llm_request(obs, instruction="")
            no_instruction.task.instruction = ""
            with pytest.raises(grpc.aio.AioRpcError) as info2:
                await stub.Act(no_instruction)
    text = chat.bodies[0]["messages"][1]["content"]
    assert isinstance(text, str)  # WEBENV_POLICY_VISION is off: no image part
    assert "Observation (markdown):\n# Laptops" in text
    assert "click(9)" in text and 'fill(4, "laptop")' not in text  # window of 1
    assert "Memory: searched laptops" in text  # memory survives the window
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "OBSERVATION_FORMAT_DOM" in info.value.details()
    assert info2.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "instruction" in info2.value.details()


async def test_screenshot_prompt_format(serve_policy, policy_stub, tiny_model):
    """SCREENSHOT as the prompt format: the image is the page (OpenAI backend); refused without images."""
    obs = random_observation(random.Random(4), n=5)
    with ChatServer() as chat:
        async with serve_policy(policy_openai_url=chat.url) as (server, _), policy_stub(server) as stub:
            req = llm_request(obs)
            req.options.prompt_format = common_pb2.OBSERVATION_FORMAT_SCREENSHOT
            with pytest.raises(grpc.aio.AioRpcError) as missing:
                await stub.Act(req)
            req.observation.screenshot.data = b"\xff\xd8jpeg"
            req.observation.screenshot.codec = common_pb2.IMAGE_CODEC_JPEG
            resp = await stub.Act(req)
    user = chat.bodies[0]["messages"][1]["content"]
    assert "attached screenshot" in user[0]["text"] and obs.axtree.splitlines()[0] not in user[0]["text"]
    assert user[1]["image_url"]["url"].startswith("data:image/jpeg;base64,")
    assert resp.action_text == "scroll(0, 400)"  # no ids in a pure screenshot prompt
    assert missing.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "screenshot" in missing.value.details()
    async with serve_policy(policy_model_path=str(tiny_model)) as (server, _), policy_stub(server) as stub:
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await stub.Act(req)
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "transformers" in refused.value.details()


async def test_parse_failure_recorded_and_backend_failure_unavailable(serve_policy, policy_stub, scrape):
    obs = random_observation(random.Random(5), n=4)
    with ChatServer() as chat:
        async with serve_policy(policy_openai_url=chat.url) as (server, _), policy_stub(server) as stub:
            resp = await stub.Act(llm_request(obs, instruction="babble about it"))
            with pytest.raises(grpc.aio.AioRpcError) as info:
                await stub.Act(llm_request(obs, instruction="explode now"))
            metrics = scrape(server.metrics_port)
    assert resp.parse_failed and resp.action.WhichOneof("kind") == "noop" and resp.action_text == "noop()"
    assert resp.raw_output == "I am not sure what to do here." and resp.parse_error
    assert info.value.code() == grpc.StatusCode.UNAVAILABLE and "openai" in info.value.details()
    assert re.search(r"^webenv_policy_parse_failures_total [1-9]", metrics, re.M)


async def test_transformers_backend_tiny_model_batches(serve_policy, policy_stub, tiny_model, scrape):
    """8 episodes on one ActStream: the tiny model answers each, and the backend sees batches > 1."""
    rng = random.Random(6)
    async with serve_policy(policy_model_path=str(tiny_model), policy_max_new_tokens=24,
                            policy_batch_window_ms=100, policy_default="llm") as (server, app), \
            policy_stub(server) as stub:
        listed = await stub.ListPolicies(policy_pb2.ListPoliciesRequest())

        async def items():
            for i in range(8):
                req = request(random_observation(rng, n=6), policy="", episode_id=f"ep{i}", seed=i)
                yield policy_pb2.ActStreamRequest(tag=str(i), request=req)

        answers = [r async for r in stub.ActStream(items())]
        metrics = scrape(server.metrics_port)
    assert {p.name: p.backend for p in listed.policies}["llm"] == "transformers"
    assert sorted(a.tag for a in answers) == [str(i) for i in range(8)]
    responses = [a.response for a in answers]
    assert all(r.policy == "llm" and r.model == tiny_model.name for r in responses)
    assert all(r.prompt_tokens > 50 and 0 < r.completion_tokens <= 24 for r in responses)
    for r in responses:  # an untrained model mostly babbles: then a flagged noop with the raw text kept
        assert r.action_text
        if r.parse_failed:
            assert r.action.WhichOneof("kind") == "noop" and r.parse_error
    assert max(r.batch_size for r in responses) > 1
    assert max(app.batcher.recent_batches) > 1
    assert "webenv_policy_batch_size_bucket" in metrics and "webenv_policy_completion_tokens_total" in metrics


async def test_health_not_serving_until_model_loaded(tiny_model):
    settings = Settings(grpc_port=0, metrics_port=0, host="127.0.0.1", policy_model_path=str(tiny_model),
                        grace_seconds=1)
    app = PolicyApp(settings)
    server = Server("policy", settings)
    server.add_service(policy_pb2_grpc.add_PolicyServiceServicer_to_server, app.servicer, "webenv.v1.PolicyService")
    await server.start()
    channel = make_channel(f"127.0.0.1:{server.port}")
    try:
        health = health_pb2_grpc.HealthStub(channel)
        before = await health.Check(health_pb2.HealthCheckRequest(service="webenv.v1.PolicyService"))
        stub = policy_pb2_grpc.PolicyServiceStub(channel)
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await stub.Act(request(random_observation(random.Random(1), n=3), policy="llm"))
        await app.start()
        await server.set_serving()
        after = await health.Check(health_pb2.HealthCheckRequest(service="webenv.v1.PolicyService"))
    finally:
        await channel.close()
        await server.stop()
        await app.close()
    assert before.status == health_pb2.HealthCheckResponse.NOT_SERVING
    assert info.value.code() == grpc.StatusCode.UNAVAILABLE and "loading" in info.value.details()
    assert after.status == health_pb2.HealthCheckResponse.SERVING


def test_settings_fail_fast(tmp_path):
    with pytest.raises(ValueError, match="WEBENV_POLICY_MODEL_PATH"):
        Settings(policy_backend="transformers")
    with pytest.raises(ValueError, match="config.json"):
        Settings(policy_model_path=str(tmp_path))
    with pytest.raises(ValueError, match="unknown policy"):
        Settings(policy_default="greedy")
    with pytest.raises(ValueError, match="bad mix entry"):
        Settings(policy_random_mix="click=1,teleport=2")


async def test_queue_limit_is_resource_exhausted(serve_policy, policy_stub, tiny_model):
    """Past WEBENV_POLICY_MAX_QUEUE waiting requests an item fails alone with RESOURCE_EXHAUSTED."""
    rng = random.Random(8)
    async with serve_policy(policy_model_path=str(tiny_model), policy_max_new_tokens=8, policy_max_queue=2,
                            policy_batch_window_ms=200) as (server, _), policy_stub(server) as stub:
        async def items():
            for i in range(6):
                yield policy_pb2.ActStreamRequest(
                    tag=str(i), request=request(random_observation(rng, n=4), policy="llm", episode_id=f"q{i}"))

        answers = [a async for a in stub.ActStream(items())]
    kinds = [a.WhichOneof("result") for a in answers]
    assert len(answers) == 6 and "response" in kinds
    errors = [a.error for a in answers if a.WhichOneof("result") == "error"]
    assert errors and all(e.code == grpc.StatusCode.RESOURCE_EXHAUSTED.value[0] for e in errors)
    assert all(e.reason == "POLICY_QUEUE_FULL" and "WEBENV_POLICY_MAX_QUEUE" in e.message for e in errors)


async def test_stream_answers_in_completion_order(serve_policy, policy_stub, tiny_model):
    """A scripted act sent after a model act on the same stream is not held behind it."""
    rng = random.Random(10)
    async with serve_policy(policy_model_path=str(tiny_model), policy_max_new_tokens=48,
                            policy_batch_window_ms=50) as (server, _), policy_stub(server) as stub:
        async def items():
            yield policy_pb2.ActStreamRequest(tag="slow", request=request(random_observation(rng, n=8), policy="llm"))
            yield policy_pb2.ActStreamRequest(tag="fast", request=request(random_observation(rng, n=8),
                                                                          policy="random", seed=1))

        order = [a.tag async for a in stub.ActStream(items())]
    assert order == ["fast", "slow"]


async def test_act_returns_token_ids_and_logprobs_a_forward_pass_reproduces(serve_policy, policy_stub, tiny_model):
    """Batched (padded) decoding on the tiny model: each response's token ids and logprobs are what one forward
    pass of the same model over prompt + completion gives, and prompt_tokens counts the prompt it read."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from webenv.llm import encode

    rng = random.Random(11)
    reqs = [request(random_observation(rng, n=3 + i), policy="llm", episode_id=f"lp{i}", seed=i) for i in range(4)]
    async with serve_policy(policy_model_path=str(tiny_model), policy_max_new_tokens=12,
                            policy_batch_window_ms=100) as (server, app), policy_stub(server) as stub:

        async def items():
            for i, r in enumerate(reqs):
                yield policy_pb2.ActStreamRequest(tag=str(i), request=r)

        answers = {int(a.tag): a.response async for a in stub.ActStream(items())}
        llm = app.policies["llm"]
        prompts = [encode(app.batcher.backend.tokenizer, llm.generation_request(r), 2048 - 12) for r in reqs]
    tok = AutoTokenizer.from_pretrained(tiny_model)
    lm = AutoModelForCausalLM.from_pretrained(tiny_model).eval()
    assert max(r.batch_size for r in answers.values()) > 1  # the padded batch path, not one by one
    for i, resp in answers.items():
        ids = list(resp.completion_token_ids)
        assert resp.prompt_tokens == len(prompts[i]) and len(ids) == resp.completion_tokens > 0
        assert len(resp.completion_logprobs) == len(ids)
        with torch.no_grad():
            logits = lm(torch.tensor([prompts[i] + ids])).logits[0, len(prompts[i]) - 1 : -1]
        expected = torch.log_softmax(logits.float(), -1).gather(1, torch.tensor(ids).unsqueeze(1)).squeeze(1)
        assert torch.allclose(torch.tensor(list(resp.completion_logprobs)), expected, atol=2e-3), i
        assert ids == logits.argmax(-1).tolist()  # greedy decoding: each token was the most likely
        assert tok.decode(ids, skip_special_tokens=True).strip() == resp.raw_output.strip()

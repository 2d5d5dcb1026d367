"""The OpenAI-compatible chat-completions API, driven by the official `openai` client over real HTTP."""

from __future__ import annotations

import base64

import httpx
import openai
import pytest
import torch
from transformers import AutoModelForCausalLM, AutoModelForImageTextToText
from webenv.llm import GenerationRequest, Message, SamplingParams, encode


def client(app) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=f"http://127.0.0.1:{app.http_port}/v1", api_key="none", max_retries=0)


async def test_chat_completions_with_token_ids_and_logprobs(serve_policy, tiny_model):
    async with serve_policy(policy_model_path=str(tiny_model), policy_http_port=0) as (_, app):
        api = client(app)
        models = [m.id async for m in api.models.list()]
        messages = [{"role": "system", "content": "You are a web agent."},
                    {"role": "user", "content": "Observation: [1] link \"home\" Action:"}]
        resp = await api.chat.completions.create(model=tiny_model.name, messages=messages, max_tokens=10,
                                                 temperature=0, logprobs=True)
        tok = app.batcher.backend.tokenizer
        gen = GenerationRequest(tuple(Message(**m) for m in messages), SamplingParams(max_tokens=10))
        expected_prompt = encode(tok, gen, 2048 - 10)
    assert models == [tiny_model.name]
    choice = resp.choices[0]
    ids = choice.model_extra["token_ids"]
    assert resp.model == tiny_model.name and len(ids) == resp.usage.completion_tokens > 0
    assert resp.model_extra["prompt_token_ids"] == expected_prompt == list(expected_prompt)
    assert resp.usage.prompt_tokens == len(expected_prompt)
    assert choice.message.content == tok.decode(ids, skip_special_tokens=True)
    lps = [c.logprob for c in choice.logprobs.content]
    assert len(lps) == len(ids) and "".join(c.token for c in choice.logprobs.content) == tok.decode(ids)
    lm = AutoModelForCausalLM.from_pretrained(tiny_model).eval()
    with torch.no_grad():
        logits = lm(torch.tensor([expected_prompt + ids])).logits[0, len(expected_prompt) - 1 : -1]
    ref = torch.log_softmax(logits, -1).gather(1, torch.tensor(ids).unsqueeze(1)).squeeze(1)
    assert torch.allclose(torch.tensor(lps), ref, atol=2e-3)


HI = [{"role": "user", "content": "hi"}]
#: (what the official client is asked for, the field its 400 names)
BAD = [
    (dict(messages=[]), "messages"),
    (dict(messages=[{"role": "robot", "content": "hi"}]), "messages[0].role"),
    (dict(messages=[{"role": "user", "content": 3}]), "messages[0].content"),
    (dict(messages=HI, max_tokens=0), "max_tokens"),
    (dict(messages=HI, temperature=-1), "temperature"),
    (dict(messages=HI, n=2), "n"),
    (dict(messages=HI, stop=[1]), "stop"),
    (dict(messages=HI, logprobs=True, top_logprobs=3), "top_logprobs"),
]


def data_url(png: bytes) -> str:
    return f"data:image/png;base64,{base64.b64encode(png).decode()}"


def with_image(text: str, url: str) -> list[dict]:
    return [{"role": "user", "content": [{"type": "text", "text": text}, {"type": "image_url", "image_url": {"url": url}}]}]


async def test_chat_completions_with_an_image_on_a_vlm(serve_policy, tiny_vlm, screenshot):
    """A PNG data URL goes to the tiny VLM as image tokens (the Act path's encoding): usage.prompt_tokens counts
    them against the same message without the image, logprobs equal a forward pass with the same pixel values; a
    remote URL, bad base64 and an image outside the last user message are 400 naming the field."""
    from webenv.llm.types import VisionPrompt

    png = screenshot(1)  # 224 x 140: 15 image tokens
    text = "Observation: [1] button \"Buy\" Action:"
    async with serve_policy(policy_model_path=str(tiny_vlm), policy_http_port=0) as (_, app):
        api = client(app)
        shot = await api.chat.completions.create(model=tiny_vlm.name, messages=with_image(text, data_url(png)),
                                                 max_tokens=6, temperature=0, logprobs=True)
        plain = await api.chat.completions.create(model=tiny_vlm.name, messages=[{"role": "user", "content": text}],
                                                  max_tokens=6, temperature=0, logprobs=True)
        refused = {}
        for name, messages in {
            "remote": with_image(text, "https://example.com/shot.png"),
            "base64": with_image(text, "data:image/png;base64,not*base64"),
            "not an image": with_image(text, data_url(b"GIF? no")),
            "earlier": [*with_image(text, data_url(png)), {"role": "assistant", "content": "ok"},
                        {"role": "user", "content": "and now?"}],
        }.items():
            with pytest.raises(openai.BadRequestError) as info:
                await api.chat.completions.create(model=tiny_vlm.name, messages=messages, max_tokens=2)
            refused[name] = info.value.body
        processor = app.batcher.backend.processor
    image_id, start = processor.image_token_id, processor.vision_start_id
    ids = shot.model_extra["prompt_token_ids"]
    assert ids.count(image_id) == 15 and start in ids and image_id not in plain.model_extra["prompt_token_ids"]
    assert shot.usage.prompt_tokens == len(ids) == plain.usage.prompt_tokens + 15 + 2  # + vision start and end
    gen = shot.choices[0].model_extra["token_ids"]
    lps = [c.logprob for c in shot.choices[0].logprobs.content]
    assert len(lps) == len(gen) == shot.usage.completion_tokens > 0 and plain.choices[0].logprobs.content
    lm = AutoModelForImageTextToText.from_pretrained(tiny_vlm).eval()
    inputs = processor.batch([VisionPrompt(ids + gen, [png])], processor.tokenizer.pad_token_id)
    with torch.no_grad():
        logits = lm(**inputs).logits[0, len(ids) - 1 : -1]
    ref = torch.log_softmax(logits.float(), -1).gather(1, torch.tensor(gen).unsqueeze(1)).squeeze(1)
    assert torch.allclose(torch.tensor(lps), ref, atol=2e-3)
    url = "messages[0].content[1].image_url.url"
    assert refused["remote"]["param"] == url and "not fetched" in refused["remote"]["message"]
    assert refused["base64"]["param"] == url and "base64" in refused["base64"]["message"]
    assert refused["not an image"]["param"] == url and "not a image/png image" in refused["not an image"]["message"]
    assert refused["earlier"]["param"] == "messages[0].content[1]" and "last user message" in refused["earlier"]["message"]


async def test_bad_requests_are_400_naming_the_field(serve_policy, tiny_model):
    async with serve_policy(policy_model_path=str(tiny_model), policy_http_port=0) as (_, app):
        api = client(app)
        refused = []
        for kw, param in BAD:
            with pytest.raises(openai.BadRequestError) as info:
                await api.chat.completions.create(model=tiny_model.name, **kw)
            refused.append((info.value.status_code, info.value.body, param))
        url = f"http://127.0.0.1:{app.http_port}/v1/chat/completions"
        async with httpx.AsyncClient() as http:
            no_model = await http.post(url, json={"messages": HI})
            stream = await http.post(url, json={"model": tiny_model.name, "messages": HI, "stream": True})
            unknown = await http.post(url, json={"model": "nope", "messages": HI})
            not_json = await http.post(url, content=b"{")
            png = base64.b64encode(b"\x89PNG\r\n\x1a\n").decode()  # refused for the model before it is opened
            image = await http.post(url, json={"model": tiny_model.name, "messages": with_image("hi", f"data:image/png;base64,{png}")})
        still = await api.chat.completions.create(model=tiny_model.name, messages=HI, max_tokens=3)
    for status, body, param in refused:
        assert status == 400 and body["param"] == param and body["type"] == "invalid_request_error", param
        assert param.split("[")[0] in body["message"]
    assert (no_model.status_code, no_model.json()["error"]["param"]) == (400, "model")
    assert (stream.status_code, stream.json()["error"]["param"]) == (400, "stream")
    assert unknown.status_code == 404 and unknown.json()["error"]["code"] == "model_not_found"
    assert not_json.status_code == 400 and not_json.json()["error"]["param"] == "body"
    # An image to a text-only model: OpenAI's answer (400, its message, param the part's type, code null).
    assert image.status_code == 400 and image.json()["error"]["param"] == "messages[0].content[1].type"
    assert image.json()["error"]["message"].startswith("Invalid content type. image_url is only supported by certain models")
    assert image.json()["error"]["code"] is None
    assert still.choices[0].model_extra["token_ids"]  # the service serves on after bad requests

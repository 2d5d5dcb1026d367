"""An OpenAI-compatible chat-completions API over the policy service's models (HTTP beside gRPC).

``POST /v1/chat/completions`` and ``GET /v1/models``, served by ``webenv.runtime.http.HttpServer`` in the policy's
event loop when ``WEBENV_POLICY_HTTP_PORT`` is set (>= 0). Every model the service holds is a model name: the base
model of the ``llm`` policy (its folder or configured name) and every loaded causal-LM checkpoint (a full model or
a LoRA adapter over the base), by its ref (``name@version``) and by its family name (the version served under it
now). Requests go through the same
``webenv.llm`` batcher as ``Act``, so chat requests and episodes share batches.

Beside the OpenAI shape (``choices[].logprobs.content[]`` with each token's text and logprob when ``logprobs`` is
asked for) every answer carries the token ids RL trainers (AReaL, ART, verl) read from vLLM's server:
``choices[].token_ids`` (generated) and ``prompt_token_ids`` (the rendered prompt as the model read it). A bad
request is HTTP 400 with OpenAI's error body, ``{"error": {"message", "type": "invalid_request_error", "param":
<field>, "code"}}``; an unknown model 404 (``model_not_found``); an overloaded queue 429; a failed backend 503.

Images: OpenAI's image content parts (``{"type": "image_url", "image_url": {"url": "data:image/png;base64,..."}}``)
in the last user message go to a vision-language model (a Qwen2-VL-family folder on the transformers or vLLM
backend) as the ``Act`` path sends its screenshot: ``GenerationRequest.images``, encoded by webenv.llm.vision (the
image placeholders before the message's text, one token per image token, so ``usage.prompt_tokens`` counts them).
Only inline data URLs are served: a remote ``http(s)`` URL is 400 naming ``messages[i].content[j].image_url.url``
(this service fetches nothing); an image in an earlier message is 400 naming the part; an image sent to a text-only
model is 400 as OpenAI answers it (``Invalid content type. image_url is only supported by certain models``, param
the part's ``type``, code null).
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import io
import json
import re
import time
import uuid
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route
from webenv import errors
from webenv.llm import Batcher, GenerationRequest, ImageInput, Message, SamplingParams, Unsupported, encode

#: Largest request body read (bytes): a chat of long observations fits; a runaway client gets 400.
MAX_BODY_BYTES = 4 << 20
ROLES = ("system", "user", "assistant")
#: Image types a data URL may carry (what the image processors open).
IMAGE_MIMES = ("image/png", "image/jpeg", "image/webp", "image/gif")
DATA_URL = re.compile(r"data:(?P<mime>[\w.+-]+/[\w.+-]+);base64,(?P<data>.*)", re.DOTALL)


class BadRequest(Exception):
    def __init__(self, message: str, param: str, status: int = 400, code: str | None = None,
                 kind: str = "invalid_request_error") -> None:
        super().__init__(message)
        self.message, self.param, self.status, self.code, self.kind = message, param, status, code, kind

    def response(self) -> JSONResponse:
        return JSONResponse({"error": {"message": self.message, "type": self.kind, "param": self.param,
                                       "code": self.code}}, status_code=self.status)


def _int(body: dict, key: str, default: int, low: int, high: int) -> int:
    value = body.get(key)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise BadRequest(f"{key}: must be an integer in [{low}, {high}], got {value!r}", key)
    return value


def _float(body: dict, key: str, default: float, low: float, high: float) -> float:
    value = body.get(key)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int | float) or not low <= value <= high:
        raise BadRequest(f"{key}: must be a number in [{low}, {high}], got {value!r}", key)
    return float(value)


def _image(part: dict, where: str) -> ImageInput:
    """The image of an ``image_url`` part: an inline data URL only (nothing is fetched), decoded and opened."""
    field = f"{where}.image_url.url"
    spec = part.get("image_url")
    url = spec.get("url") if isinstance(spec, dict) else None
    if not isinstance(url, str) or not url:
        raise BadRequest(f"{field}: required, a data URL (data:image/png;base64,...)", field)
    if url.lower().startswith(("http://", "https://")):
        raise BadRequest(f"{field}: remote image URLs are not fetched (this service reaches no network); send the "
                         "image inline as a data URL, data:image/png;base64,...", field)
    m = DATA_URL.fullmatch(url)
    if m is None:
        raise BadRequest(f"{field}: not a base64 data URL (data:image/png;base64,...)", field)
    mime = m["mime"].lower()
    if mime not in IMAGE_MIMES:
        raise BadRequest(f"{field}: {mime} is not served (one of {', '.join(IMAGE_MIMES)})", field)
    try:
        data = base64.b64decode(m["data"], validate=True)
    except (binascii.Error, ValueError) as exc:
        raise BadRequest(f"{field}: the data is not base64: {exc}", field) from exc
    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(io.BytesIO(data)) as im:
            im.verify()
    except (UnidentifiedImageError, OSError, ValueError) as exc:
        raise BadRequest(f"{field}: the data is not a {mime} image: {exc}", field) from exc
    return ImageInput(data, mime)


def _messages(body: dict) -> tuple[tuple[Message, ...], list[tuple[str, dict]]]:
    """(messages, the last user message's image parts with where each is: ``messages[i].content[j]``)."""
    raw = body.get("messages")
    if not isinstance(raw, list) or not raw:
        raise BadRequest("messages: must be a non-empty array of {role, content}", "messages")
    last_user = max((i for i, m in enumerate(raw) if isinstance(m, dict) and m.get("role") == "user"), default=-1)
    out, images = [], []
    for i, m in enumerate(raw):
        if not isinstance(m, dict) or m.get("role") not in ROLES:
            raise BadRequest(f"messages[{i}].role: must be one of {', '.join(ROLES)}", f"messages[{i}].role")
        content = m.get("content")
        if isinstance(content, list):  # content parts: text, and images in the last user message
            parts = []
            for j, p in enumerate(content):
                where = f"messages[{i}].content[{j}]"
                kind = p.get("type") if isinstance(p, dict) else None
                if kind == "text" and isinstance(p.get("text"), str):
                    parts.append(p["text"])
                elif kind == "image_url":
                    if i != last_user:
                        raise BadRequest(f"{where}: images are served in the last user message only (they go "
                                         "before its text, as the policy's screenshot does)", where)
                    images.append((where, p))
                else:
                    raise BadRequest(f"{where}: only text and image_url parts are served", where)
            content = "".join(parts)
        if not isinstance(content, str):
            raise BadRequest(f"messages[{i}].content: must be a string or content parts", f"messages[{i}].content")
        out.append(Message(m["role"], content))
    return tuple(out), images


def parse_request(body: Any, max_new_tokens: int) -> tuple[str, GenerationRequest, list[tuple[str, dict]]]:
    """(model, the LLM request without its images, the image parts: ``images(parts)`` decodes them once the model
    is known to take them) of a chat-completions body; BadRequest naming the first bad field."""
    if not isinstance(body, dict):
        raise BadRequest("the body must be a JSON object", "body")
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise BadRequest("model: required (GET /v1/models lists them)", "model")
    messages, image_parts = _messages(body)
    if body.get("stream"):
        raise BadRequest("stream: streaming is not served; send stream=false", "stream")
    if _int(body, "n", 1, 1, 1) != 1:
        raise BadRequest("n: only n=1 is served", "n")
    key = "max_completion_tokens" if body.get("max_completion_tokens") is not None else "max_tokens"
    stop = body.get("stop")
    if stop is None:
        stop = ()
    elif isinstance(stop, str):
        stop = (stop,)
    elif isinstance(stop, list) and len(stop) <= 4 and all(isinstance(s, str) and s for s in stop):
        stop = tuple(stop)
    else:
        raise BadRequest("stop: a string or up to 4 non-empty strings", "stop")
    logprobs = body.get("logprobs", False)
    if not isinstance(logprobs, bool):
        raise BadRequest("logprobs: must be a boolean", "logprobs")
    if _int(body, "top_logprobs", 0, 0, 20):
        raise BadRequest("top_logprobs: alternatives are not served; omit it or send 0", "top_logprobs")
    params = SamplingParams(max_tokens=_int(body, key, max_new_tokens, 1, 32768),
                            temperature=_float(body, "temperature", 0.0, 0.0, 5.0),
                            top_p=_float(body, "top_p", 1.0, 1e-6, 1.0), seed=_int(body, "seed", 0, 0, 2**63 - 1),
                            stop=stop, logprobs=logprobs)
    return model, GenerationRequest(messages, params), image_parts


def images(parts: list[tuple[str, dict]]) -> tuple[ImageInput, ...]:
    """The decoded images of image parts (BadRequest naming the first bad one)."""
    return tuple(_image(p, where) for where, p in parts)


class ChatCompletionsAPI:
    """The ASGI app; ``models()`` says which (batcher, LoRA adapter) serves each model name (read at every
    request, so a checkpoint loaded by ``LoadCheckpoint`` is served at once)."""

    def __init__(self, models, max_new_tokens: int) -> None:
        self.models = models
        self.max_new_tokens = max_new_tokens
        self.app = Starlette(routes=[Route("/v1/chat/completions", self.chat, methods=["POST"]),
                                     Route("/v1/models", self.list_models, methods=["GET"])])

    async def list_models(self, request: Request) -> JSONResponse:
        return JSONResponse({"object": "list", "data": [
            {"id": name, "object": "model", "created": 0, "owned_by": "webenv"} for name in self.models()]})

    async def chat(self, request: Request) -> JSONResponse:
        try:
            raw = await request.body()
            if len(raw) > MAX_BODY_BYTES:
                raise BadRequest(f"the body is {len(raw)} bytes, more than {MAX_BODY_BYTES}", "body")
            try:
                body = json.loads(raw)
            except ValueError as exc:
                raise BadRequest(f"the body is not JSON: {exc}", "body") from exc
            model, gen_request, image_parts = parse_request(body, self.max_new_tokens)
            served = self.models().get(model)
            if served is None:
                raise BadRequest(f"model: {model!r} is not served (GET /v1/models lists them)", "model", 404,
                                 "model_not_found")
            batcher, adapter = served
            if image_parts and not batcher.backend.capabilities.images:  # OpenAI's answer, text-only model
                raise BadRequest(f"Invalid content type. image_url is only supported by certain models: {model!r} "
                                 "is a text-only model (serve a vision-language model for images)",
                                 f"{image_parts[0][0]}.type")
            gen_request = dataclasses.replace(gen_request, adapter=adapter, images=images(image_parts))
            return JSONResponse(await self._complete(model, batcher, gen_request))
        except BadRequest as exc:
            return exc.response()

    async def _complete(self, model: str, batcher: Batcher, gen_request: GenerationRequest) -> dict:
        backend = batcher.backend
        room = backend.max_context_tokens - gen_request.params.max_tokens
        tok = getattr(backend, "tokenizer", None)
        try:  # the prompt as the model reads it (a VLM's with its image tokens): its ids are in the answer
            prompt_ids = (backend.prompt_ids(gen_request, room) if hasattr(backend, "prompt_ids")
                          else encode(tok, gen_request, room) if tok is not None else [])
        except ValueError as exc:  # images that alone exceed the context
            raise BadRequest(f"messages: {exc}", "messages") from exc
        try:
            gen = await batcher.submit(gen_request)
        except Unsupported as exc:
            why = str(exc)
            raise BadRequest(why, "logprobs" if "logprobs" in why else "messages" if "images" in why else "model") from exc
        except errors.ResourceExhausted as exc:
            raise BadRequest(exc.message, "model", 429, "rate_limit_exceeded", "rate_limit_error") from exc
        except Exception as exc:
            raise BadRequest(f"LLM backend '{backend.name}' failed: {exc}", "model", 503, "backend_failed",
                             "server_error") from exc
        choice: dict[str, Any] = {"index": 0, "message": {"role": "assistant", "content": gen.text},
                                  "finish_reason": gen.finish_reason or "stop", "logprobs": None,
                                  "token_ids": list(gen.token_ids)}
        if gen_request.params.logprobs and gen.logprobs is not None:
            content = []
            for tid, lp in zip(gen.token_ids, gen.logprobs, strict=False):
                text = tok.decode([tid]) if tok is not None else ""
                content.append({"token": text, "logprob": lp, "bytes": list(text.encode()), "top_logprobs": []})
            choice["logprobs"] = {"content": content}
        return {"id": f"chatcmpl-{uuid.uuid4().hex}", "object": "chat.completion", "created": int(time.time()),
                "model": model, "choices": [choice], "prompt_token_ids": prompt_ids,
                "usage": {"prompt_tokens": gen.prompt_tokens, "completion_tokens": gen.completion_tokens,
                          "total_tokens": gen.prompt_tokens + gen.completion_tokens}}

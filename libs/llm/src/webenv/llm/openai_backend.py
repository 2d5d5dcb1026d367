"""An OpenAI-compatible HTTP server (`vllm serve`, llama.cpp server, hosted APIs), over httpx.

Requests go out concurrently; the remote server does the batching (``continuous``). ``api="chat"`` posts to
/chat/completions (chat messages as they are; a raw-text prompt as one user turn; images as data-URL parts of the
last user turn, so a vision model behind the endpoint sees them); ``api="completions"`` posts a raw-text prompt to
/completions. Non-default ``ignore_eos`` and ``skip_special_tokens`` go as vLLM's extension fields. An HTTP error,
a non-200 answer or an unexpected body is an LLMError naming the URL; a request past its ``timeout_seconds`` ends
with finish_reason "timeout".
"""

from __future__ import annotations

import asyncio
import base64
import time
from collections.abc import Sequence
from typing import Any

from .types import Capabilities, GenerationRequest, GenerationResult, LLMError, Unsupported, check_supported


class OpenAIBackend:
    name = "openai"
    continuous = True
    capabilities = Capabilities(images=True, logprobs=True)

    def __init__(self, base_url: str, *, model: str = "", api: str = "chat", api_key: str = "",
                 timeout_seconds: float = 120.0) -> None:
        if api not in ("chat", "completions"):
            raise ValueError(f"api: expected chat or completions, got {api!r}")
        self.base_url = base_url.rstrip("/")
        #: Model name sent with every request ("" sends none: the server's only model).
        self.model = model
        self.api = api
        self.max_context_tokens = 0
        self.parameters = 0
        self.timeout_seconds = timeout_seconds
        self._headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._client: Any = None

    def _http(self):
        if self._client is None:
            try:
                import httpx
            except ImportError as exc:
                raise LLMError("the openai backend needs httpx (pip install 'webenv-llm[openai]')") from exc
            self._client = httpx.AsyncClient(headers=self._headers,
                                             timeout=httpx.Timeout(self.timeout_seconds, connect=5.0))
        return self._client

    async def start(self) -> None:
        """Nothing to load; the endpoint is reached on the first request (it may start after us)."""
        self._http()

    async def generate(self, requests: Sequence[GenerationRequest]) -> list[GenerationResult]:
        check_supported(self, requests)
        return list(await asyncio.gather(*(self._one(r) for r in requests)))

    def body(self, r: GenerationRequest) -> tuple[str, dict[str, Any]]:
        """(URL, JSON body) of one request."""
        p = r.params
        body: dict[str, Any] = {"max_tokens": p.max_tokens, "temperature": p.temperature}
        if self.model:
            body["model"] = self.model
        if self.api == "chat":
            url = f"{self.base_url}/chat/completions"
            messages: list[dict[str, Any]] = ([{"role": m.role, "content": m.content} for m in r.prompt]
                                              if r.is_chat else [{"role": "user", "content": r.prompt}])
            if r.images:
                last = max(i for i, m in enumerate(messages) if m["role"] == "user")
                parts: list[dict[str, Any]] = [{"type": "text", "text": messages[last]["content"]}]
                for im in r.images:
                    url_data = f"data:{im.mime or 'image/png'};base64,{base64.b64encode(im.data).decode()}"
                    parts.append({"type": "image_url", "image_url": {"url": url_data}})
                messages[last] = {"role": "user", "content": parts}
            body["messages"] = messages
            if p.logprobs:
                body["logprobs"] = True
        else:
            if r.is_chat or r.images:
                raise Unsupported("chat messages and images need the openai backend's chat api")
            url = f"{self.base_url}/completions"
            body["prompt"] = r.prompt
            if p.logprobs:
                body["logprobs"] = 0
        if p.top_p != 1.0:
            body["top_p"] = p.top_p
        if p.seed:
            body["seed"] = p.seed
        if p.stop:
            body["stop"] = list(p.stop)
        if p.ignore_eos:
            body["ignore_eos"] = True
        if not p.skip_special_tokens:
            body["skip_special_tokens"] = False
        return url, body

    async def _one(self, r: GenerationRequest) -> GenerationResult:
        import httpx

        url, body = self.body(r)
        t0 = time.perf_counter()
        limit = r.timeout_seconds or None
        try:
            async with asyncio.timeout(limit):
                resp = await self._http().post(url, json=body, timeout=limit or httpx.USE_CLIENT_DEFAULT)
        except (TimeoutError, httpx.TimeoutException):
            if limit is None:
                raise LLMError(f"{url} did not answer within {self.timeout_seconds:g}s") from None
            return GenerationResult("", finish_reason="timeout", inference_seconds=time.perf_counter() - t0)
        except httpx.HTTPError as exc:
            raise LLMError(f"HTTP error calling {url}: {exc}") from None
        if resp.status_code != 200:
            raise LLMError(f"{url} answered HTTP {resp.status_code}: {resp.text[:200]}")
        try:
            data = resp.json()
            choice = data["choices"][0]
            text = choice["message"]["content"] if self.api == "chat" else choice["text"]
            usage = data.get("usage") or {}
            logprobs = None
            if r.params.logprobs and choice.get("logprobs"):
                lp = choice["logprobs"]
                logprobs = (tuple(float(t["logprob"]) for t in lp["content"]) if self.api == "chat"
                            else tuple(float(x) for x in lp["token_logprobs"]))
            return GenerationResult(str(text or ""), (), logprobs, int(usage.get("prompt_tokens", 0)),
                                    int(usage.get("completion_tokens", 0)), choice.get("finish_reason") or "",
                                    inference_seconds=time.perf_counter() - t0)
        except (ValueError, KeyError, IndexError, TypeError) as exc:
            raise LLMError(f"unexpected response shape from {url}: {exc!r}") from None

    async def close(self) -> None:
        if self._client is not None:
            await self._client.aclose()
            self._client = None

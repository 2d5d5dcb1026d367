"""An OpenAI-compatible chat-completions endpoint (vLLM serve, llama.cpp server, hosted APIs).

Requests go out concurrently; the remote server does the batching. Screenshots are sent as
data-URL image parts, so a vision model behind the endpoint sees the page.
"""

from __future__ import annotations

import asyncio
import base64

import httpx
from webenv.agent.prompt import Prompt

from .base import Generation, GenerationParams


class OpenAIBackend:
    name = "openai"
    continuous = True
    supports_images = True
    supports_constraints = False

    def __init__(self, base_url: str, *, model_name: str = "", api_key: str = "", timeout_seconds: float = 120.0):
        self.base_url = base_url.rstrip("/")
        self.model = model_name or "default"
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._client = httpx.AsyncClient(base_url=self.base_url, headers=headers, timeout=timeout_seconds)

    async def start(self) -> None:
        """Nothing to load; the endpoint is checked lazily (it may start after us)."""

    async def generate(self, prompts: list[Prompt], params: GenerationParams) -> list[Generation]:
        return list(await asyncio.gather(*(self._one(p, params) for p in prompts)))

    def _body(self, prompt: Prompt, params: GenerationParams) -> dict:
        user: str | list = prompt.user
        if prompt.image:
            url = f"data:{prompt.image_mime or 'image/png'};base64,{base64.b64encode(prompt.image).decode()}"
            user = [{"type": "text", "text": prompt.user}, {"type": "image_url", "image_url": {"url": url}}]
        body = {"model": self.model, "messages": [{"role": "system", "content": prompt.system},
                                                  {"role": "user", "content": user}],
                "max_tokens": params.max_new_tokens, "temperature": params.temperature}
        if params.seed:
            body["seed"] = params.seed
        if params.stop:
            body["stop"] = list(params.stop)
        return body

    async def _one(self, prompt: Prompt, params: GenerationParams) -> Generation:
        resp = await self._client.post("/chat/completions", json=self._body(prompt, params))
        resp.raise_for_status()
        data = resp.json()
        choice = data["choices"][0]
        usage = data.get("usage") or {}
        return Generation(text=choice["message"].get("content") or "",
                          prompt_tokens=int(usage.get("prompt_tokens", 0)),
                          completion_tokens=int(usage.get("completion_tokens", 0)),
                          finish_reason=choice.get("finish_reason") or "")

    async def close(self) -> None:
        await self._client.aclose()

"""Rendering a Prompt to model text with the tokenizer's own chat template (or a plain fallback)."""

from __future__ import annotations

from ..prompt import Prompt


def messages(prompt: Prompt) -> list[dict[str, str]]:
    return [{"role": "system", "content": prompt.system}, {"role": "user", "content": prompt.user}]


def render(tokenizer, prompt: Prompt) -> str:
    """Text to feed a local model: its chat template when it has one."""
    if getattr(tokenizer, "chat_template", None):
        return tokenizer.apply_chat_template(messages(prompt), tokenize=False, add_generation_prompt=True)
    return f"{prompt.system}\n\n{prompt.user}\n\n"

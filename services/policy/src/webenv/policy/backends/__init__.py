"""LLM backends behind one interface: `await backend.generate(prompts, params) -> list[Generation]`."""

from .base import Generation, GenerationParams, LLMBackend
from .factory import make_backend

__all__ = ["Generation", "GenerationParams", "LLMBackend", "make_backend"]

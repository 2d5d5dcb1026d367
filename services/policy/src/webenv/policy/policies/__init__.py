"""The policies the service offers, by name."""

from .base import Decision, Policy
from .crawl import RandomPolicy
from .explore import ExplorePolicy
from .llm import LLMPolicy
from .oracle import OraclePolicy

__all__ = ["Decision", "ExplorePolicy", "LLMPolicy", "OraclePolicy", "Policy", "RandomPolicy"]

"""Adapters from other ecosystems' interfaces to webenv's contract, each in one module.

- `webenv.compat.browsergym`: BrowserGym's high-level action strings -> ``Action`` messages, and BrowserGym's
  observation dict from an ``Observation`` (used by ``WebEnv(api="browsergym")`` and services/openenv).
- `webenv.compat.mcp`: MCP browser tools, a farm session per MCP client (the official ``mcp`` SDK's server;
  ``python -m webenv.compat.mcp``; extra ``webenv-compat[mcp]``).
- `webenv.compat.trl`: ``WebTaskEnv``, an environment for TRL's ``GRPOTrainer(environment_factory=...)``.
"""

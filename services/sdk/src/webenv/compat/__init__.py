"""Adapters from other ecosystems' interfaces to webenv's contract, each in one module.

`webenv.compat.browsergym`: BrowserGym's high-level action strings -> ``Action`` messages, and the BrowserGym
observation dict from an ``Observation`` (used by ``WebEnv(api="browsergym")`` and the other adapters that take
text actions: services/openenv, services/mcp).
"""

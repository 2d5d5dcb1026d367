"""The typed openenv-core client of webenv's OpenEnv server (a WebSocket session per client).

    from webenv.openenv.client import WebEnvClient
    from webenv.openenv.env import WebAction

    with WebEnvClient(base_url="http://127.0.0.1:8000").sync() as env:
        result = env.reset(task_id="miniwob/click-test", seed=0)
        result = env.step(WebAction(action='click(4)'))
        print(result.reward, result.done, result.observation.verdict["passed"])
"""

from __future__ import annotations

from typing import Any

from webenv.openenv.env import WebAction, WebObservation, WebState

from openenv.core import EnvClient
from openenv.core.client_types import StepResult

__all__ = ["WebEnvClient"]


class WebEnvClient(EnvClient[WebAction, WebObservation, WebState]):
    """openenv-core's EnvClient with webenv's Action, Observation and State models."""

    def _step_payload(self, action: WebAction) -> dict[str, Any]:
        return action.model_dump(exclude={"metadata"})

    def _parse_result(self, payload: dict[str, Any]) -> StepResult[WebObservation]:
        obs = WebObservation(**payload.get("observation", {}), done=payload.get("done", False),
                             reward=payload.get("reward"))
        return StepResult(observation=obs, reward=payload.get("reward"), done=payload.get("done", False))

    def _parse_state(self, payload: dict[str, Any]) -> WebState:
        return WebState(**payload)

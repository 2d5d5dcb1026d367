"""`WebEnv`: a Gymnasium environment over EnvironmentService (the browser farm or the world model).

    env = WebEnv("localhost:50051", start_url="http://shop-0001.web.test/", formats=("axtree", "screenshot"))
    obs, info = env.reset(seed=0)
    obs, reward, terminated, truncated, info = env.step('click(12)')
    env.close()

Observations are dicts with one entry per requested format ("axtree", "html", "markdown": text;
"elements", "dom": lists of dicts; "screenshot": the encoded image bytes) plus "url" and
"last_action_error". Actions are text in the sdk's action grammar (`webenv.actions`); text that does
not parse is sent as `noop()` and the parse error is reported in `info["action_error"]` and in
`obs["last_action_error"]`, so a policy's bad output costs a step instead of crashing the rollout.

Gymnasium's API is synchronous; the gRPC client runs on an event loop in a background thread.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine, Iterable
from typing import Any, TypeVar

import gymnasium
from google.protobuf.json_format import MessageToDict
from gymnasium import spaces
from webenv.actions import ActionParseError, parse_action
from webenv.client.environment import EnvironmentClient, observation_spec
from webenv.v1 import common_pb2, environment_pb2

__all__ = ["WebEnv"]

T = TypeVar("T")
_TEXT_CHARS = "".join(chr(c) for c in range(32, 0x3000))


class WebEnv(gymnasium.Env[dict[str, Any], str]):
    """One episode = one session. `reset()` closes the previous session and opens a new one."""

    metadata = {"render_modes": []}

    def __init__(
        self,
        address: str,
        *,
        start_url: str = "",
        task: common_pb2.Task | None = None,
        formats: Iterable[str] = ("axtree",),
        max_steps: int = 0,
        max_text_chars: int = 100_000,
        timeout: float = 60.0,
        labels: dict[str, str] | None = None,
        **screenshot: Any,
    ) -> None:
        if bool(start_url) == (task is not None):
            raise ValueError("give exactly one of start_url or task")
        self.start_url = start_url
        self.task = task
        self.formats = tuple(formats)
        self.spec = observation_spec(self.formats, max_text_chars=max_text_chars, **screenshot)
        self.max_steps = max_steps
        self.labels = dict(labels or {})
        self.timeout = timeout
        text = spaces.Text(max_length=max_text_chars, charset=_TEXT_CHARS)
        obs_spaces: dict[str, spaces.Space[Any]] = {"url": text, "last_action_error": text}
        for f in self.formats:
            obs_spaces[f] = text if f in ("axtree", "html", "markdown") else spaces.Sequence(spaces.Dict({}))
        self.observation_space = spaces.Dict(obs_spaces)
        self.action_space = spaces.Text(max_length=4096, charset=_TEXT_CHARS)
        self.session_id = ""
        self.instruction = ""
        self.steps = 0
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="webenv-gym-loop", daemon=True)
        self._thread.start()
        self.client: EnvironmentClient = self._run(self._make_client(address))

    async def _make_client(self, address: str) -> EnvironmentClient:
        return EnvironmentClient(address, timeout=self.timeout)

    def _run(self, coro: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(self.timeout + 30)

    def _obs(self, obs: common_pb2.Observation, error: str = "") -> dict[str, Any]:
        out: dict[str, Any] = {"url": obs.url, "last_action_error": error or obs.last_action_error}
        for f in self.formats:
            if f == "axtree":
                out[f] = obs.axtree
            elif f == "html":
                out[f] = obs.html
            elif f == "markdown":
                out[f] = obs.markdown
            elif f == "elements":
                out[f] = [MessageToDict(e, preserving_proto_field_name=True) for e in obs.elements]
            elif f == "dom":
                out[f] = [MessageToDict(n, preserving_proto_field_name=True) for n in obs.dom_nodes]
            elif f == "screenshot":
                out[f] = bytes(obs.screenshot.data)
        return out

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None
              ) -> tuple[dict[str, Any], dict[str, Any]]:
        super().reset(seed=seed)
        if self.session_id:
            self._close_session()
        resp: environment_pb2.OpenSessionResponse = self._run(self.client.open(
            start_url=self.start_url, task=self.task, spec=self.spec, seed=seed or 0, labels=self.labels))
        self.session_id = resp.session.session_id
        self.instruction = resp.instruction
        self.steps = 0
        return self._obs(resp.observation), {"instruction": resp.instruction, "session_id": self.session_id,
                                             "open_seconds": resp.open_seconds}

    def step(self, action: str) -> tuple[dict[str, Any], float, bool, bool, dict[str, Any]]:
        if not self.session_id:
            raise RuntimeError("call reset() before step()")
        parse_error = ""
        try:
            act = parse_action(action)
        except ActionParseError as exc:
            parse_error = f"could not parse action: {exc}"
            act = common_pb2.Action(noop=common_pb2.NoopAction())
        resp: environment_pb2.StepResponse = self._run(self.client.step(self.session_id, act))
        self.steps += 1
        truncated = resp.truncated or bool(self.max_steps and self.steps >= self.max_steps and not resp.done)
        info = {"session_id": self.session_id, "step_index": resp.step_index, "raw_reward": resp.raw_reward,
                "reward_reason": resp.reward_reason, "action_error": parse_error,
                "timings": MessageToDict(resp.timings, preserving_proto_field_name=True)}
        return self._obs(resp.observation, parse_error), resp.reward, resp.done, truncated, info

    def _close_session(self) -> environment_pb2.CloseSessionResponse | None:
        sid, self.session_id = self.session_id, ""
        try:
            return self._run(self.client.close(sid, capture_evidence=True))
        except Exception:  # the session may have expired; closing is best effort
            return None

    def close(self) -> None:
        if self._loop.is_closed():
            return
        if self.session_id:
            self._close_session()
        self._run(self.client.aclose())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)
        self._loop.close()
        super().close()

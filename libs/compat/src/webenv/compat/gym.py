"""`WebEnv`: a Gymnasium environment over EnvironmentService (the browser farm or the world model).

    env = WebEnv("localhost:50051", start_url="http://shop-0001.web.test/", formats=("axtree", "screenshot"))
    obs, info = env.reset(seed=0)
    obs, reward, terminated, truncated, info = env.step('click(12)')
    env.close()

    # a catalog task graded by the judge: the episode's last step is rewarded 1.0 when its rubric passes
    env = gymnasium.make("webenv/WebEnv-v0", address="localhost:50051", task=task, judge="localhost:50054")

Observations are dicts with one entry per requested format ("axtree", "html", "markdown": text;
"elements", "dom": lists of dicts; "screenshot": the encoded image bytes) plus "url", "tabs" (the open tabs,
each ``{"title", "url", "active"}``) and "last_action_error". Actions are text in the sdk's action grammar (`webenv.actions`); text that does
not parse is sent as `noop()` and the parse error is reported in `info["action_error"]` and in
`obs["last_action_error"]`, so a policy's bad output costs a step instead of crashing the rollout.

Rewards: without a judge, the environment's own (MiniWoB pages reward themselves; synthetic sites do not).
With ``judge=ADDRESS`` and a task, the episode's end (an answer, the environment's done, or ``max_steps``)
closes the session with its evidence (site state) and asks JudgeService.Evaluate, as the collector does:
reward 1.0 when the rubric passes, else 0.0, and the verdict in ``info["verdict"]``. An infrastructure failure is
never a reward: a step the farm fails raises its typed `webenv.errors.WebenvError`, and grading an episode a failure
cut short (the farm died, its evidence is gone) raises the typed ``EPISODE_INTERRUPTED`` error
(`webenv.client.episode`), so an errored episode is never counted as a failed one.

BrowserGym's interface: with ``api="browsergym"`` actions are BrowserGym's high-level action strings
(``click("12")``, ``fill("12", "text")``, several calls one a line) and observations are BrowserGym's dict
(``axtree_txt``, ``pruned_html``, ``screenshot`` as an array, ``open_pages_urls``, ``chat_messages``, ``goal``...),
both translated by `webenv.compat.browsergym`; an action that cannot be translated, or that the farm refuses as
malformed, is BrowserGym's ``last_action_error`` (``"ValueError: ..."``) and costs a step, as in BrowserGym. Its
default formats are axtree, html, elements and screenshot (what BrowserGym always observes).

`gymnasium.utils.env_checker.check_env` passes: the spaces contain what the pages give (any Unicode text,
element lists, image bytes), and the spec says `nondeterministic=True` (a live page's timing, session ids
and timings in `info` differ between equal episodes). Gymnasium's API is synchronous; the gRPC clients run on
an event loop in a background thread.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Coroutine, Iterable
from typing import Any, TypeVar

import gymnasium
import numpy as np
from google.protobuf.json_format import MessageToDict
from gymnasium import spaces
from gymnasium.envs.registration import EnvSpec
from webenv import errors
from webenv.actions import ActionParseError, parse_action
from webenv.client.channel import make_channel
from webenv.client.environment import EnvironmentClient, observation_spec, open_tabs
from webenv.client.episode import Episode
from webenv.compat import browsergym as bgym
from webenv.v1 import common_pb2, environment_pb2, judge_pb2_grpc

__all__ = ["APIS", "ENV_ID", "Anything", "Bytes", "Image", "Records", "UnicodeText", "WebEnv"]

ENV_ID = "webenv/WebEnv-v0"
#: The interfaces WebEnv speaks: webenv's own (grammar text, webenv observation dict) and BrowserGym's.
APIS = ("webenv", "browsergym")
_DEFAULT_FORMATS = {"webenv": ("axtree",), "browsergym": ("axtree", "html", "elements", "screenshot")}
T = TypeVar("T")
_SAMPLE_CHARS = "".join(chr(c) for c in range(32, 127))


class UnicodeText(spaces.Text):
    """Any string of at most ``max_length`` characters (Gymnasium's Text checks every character against a
    charset; pages hold any Unicode character). Samples draw from printable ASCII."""

    def __init__(self, max_length: int, *, min_length: int = 0, seed: int | None = None) -> None:
        super().__init__(max_length, min_length=min_length, charset=_SAMPLE_CHARS, seed=seed)

    def contains(self, x: Any) -> bool:
        return isinstance(x, str) and self.min_length <= len(x) <= self.max_length

    def __repr__(self) -> str:
        return f"UnicodeText({self.min_length}, {self.max_length})"


class Records(spaces.Space[list[dict[str, Any]]]):
    """A list of JSON-like dicts (interactive elements, DOM nodes: their fields as in the protobuf messages)."""

    def __init__(self, seed: int | None = None) -> None:
        super().__init__(None, None, seed)

    @property
    def is_np_flattenable(self) -> bool:
        return False

    def sample(self, mask: Any = None, probability: Any = None) -> list[dict[str, Any]]:
        return []

    def contains(self, x: Any) -> bool:
        return isinstance(x, list) and all(isinstance(r, dict) for r in x)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Records)

    def __repr__(self) -> str:
        return "Records()"


class Bytes(spaces.Space[bytes]):
    """Encoded bytes (a screenshot as PNG or JPEG, as the observation spec asks)."""

    def __init__(self, seed: int | None = None) -> None:
        super().__init__(None, np.uint8, seed)

    @property
    def is_np_flattenable(self) -> bool:
        return False

    def sample(self, mask: Any = None, probability: Any = None) -> bytes:
        return b""

    def contains(self, x: Any) -> bool:
        return isinstance(x, bytes)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Bytes)

    def __repr__(self) -> str:
        return "Bytes()"


class Anything(spaces.Space[Any]):
    """Values of one Python type (BrowserGym's chat messages, tab lists, element properties)."""

    def __init__(self, kind: type, seed: int | None = None) -> None:
        super().__init__(None, None, seed)
        self.kind = kind

    @property
    def is_np_flattenable(self) -> bool:
        return False

    def sample(self, mask: Any = None, probability: Any = None) -> Any:
        return self.kind()

    def contains(self, x: Any) -> bool:
        return isinstance(x, self.kind)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Anything) and other.kind is self.kind

    def __repr__(self) -> str:
        return f"Anything({self.kind.__name__})"


class Image(spaces.Space[np.ndarray]):
    """An RGB image of any size: an HxWx3 uint8 array (BrowserGym's screenshot)."""

    def __init__(self, seed: int | None = None) -> None:
        super().__init__(None, np.uint8, seed)

    @property
    def is_np_flattenable(self) -> bool:
        return False

    def sample(self, mask: Any = None, probability: Any = None) -> np.ndarray:
        return np.zeros((0, 0, 3), dtype=np.uint8)

    def contains(self, x: Any) -> bool:
        return isinstance(x, np.ndarray) and x.dtype == np.uint8 and x.ndim == 3 and x.shape[2] == 3

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Image)

    def __repr__(self) -> str:
        return "Image()"


def _browsergym_space(text: spaces.Space[Any]) -> spaces.Dict:
    return spaces.Dict({
        "chat_messages": Anything(tuple), "goal": text, "goal_object": Anything(tuple),
        "open_pages_urls": Anything(tuple), "open_pages_titles": Anything(tuple),
        "active_page_index": spaces.Box(0, np.iinfo(np.int64).max, (1,), np.int64), "url": text,
        "screenshot": Image(), "axtree_txt": text, "pruned_html": text, "extra_element_properties": Anything(dict),
        "focused_element_bid": text, "last_action": UnicodeText(bgym.MAX_ACTION_CHARS), "last_action_error": text,
        "elapsed_time": spaces.Box(0, np.inf, (1,), np.float64),
    })


class WebEnv(gymnasium.Env[dict[str, Any], str]):
    """One episode = one session. `reset()` closes the previous session and opens a new one."""

    metadata = {"render_modes": []}

    def __init__(
        self,
        address: str,
        *,
        start_url: str = "",
        task: common_pb2.Task | None = None,
        formats: Iterable[str] | None = None,
        max_steps: int = 0,
        max_text_chars: int = 100_000,
        timeout: float = 60.0,
        labels: dict[str, str] | None = None,
        judge: str = "",
        api: str = "webenv",
        **screenshot: Any,
    ) -> None:
        if api not in APIS:
            raise ValueError(f"api must be one of {', '.join(APIS)}, got {api!r}")
        if bool(start_url) == (task is not None):
            raise ValueError("give exactly one of start_url or task")
        if judge and task is None:
            raise ValueError("judge needs a task (its rubric is what the judge grades)")
        self.start_url = start_url
        self.task = task
        self.api = api
        self.formats = tuple(_DEFAULT_FORMATS[api] if formats is None else formats)
        # The judge's page criteria read HTML: ask for it when judging even if the caller does not want it.
        asked = (*self.formats, "html") if judge and "html" not in self.formats else self.formats
        self.obs_spec = observation_spec(asked, max_text_chars=max_text_chars, **screenshot)
        self.max_steps = max_steps
        self.labels = dict(labels or {})
        self.timeout = timeout
        self.judge_address = judge
        text = UnicodeText(max(max_text_chars, 8192))
        if api == "browsergym":
            self.observation_space = _browsergym_space(text)
            self.action_space = UnicodeText(bgym.MAX_ACTION_CHARS)
        else:
            obs_spaces: dict[str, spaces.Space[Any]] = {"url": text, "tabs": Records(), "last_action_error": text}
            for f in self.formats:
                obs_spaces[f] = (text if f in ("axtree", "html", "markdown") else Bytes() if f == "screenshot"
                                 else Records())
            self.observation_space = spaces.Dict(obs_spaces)
            self.action_space = UnicodeText(4096)
        # How to make this environment again (gymnasium.make, check_env's close check); pages are live.
        self.spec = EnvSpec(ENV_ID, entry_point="webenv.compat.gym:WebEnv", nondeterministic=True, kwargs=dict(
            address=address, start_url=start_url, task=task, formats=self.formats, max_steps=max_steps,
            max_text_chars=max_text_chars, timeout=timeout, labels=labels, judge=judge, api=api, **screenshot))
        self.session_id = ""
        self.instruction = ""
        self.steps = 0
        self._episode: Episode | None = None  # the open session's recorded steps (webenv.client.episode)
        self._chat = bgym.Chat()
        self._start_time = 0.0
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="webenv-gym-loop", daemon=True)
        self._thread.start()
        self.client: EnvironmentClient = self._run(self._make_client(address))
        self._judge: judge_pb2_grpc.JudgeServiceStub | None = self._run(self._make_judge()) if judge else None

    async def _make_client(self, address: str) -> EnvironmentClient:
        return EnvironmentClient(address, timeout=self.timeout)

    async def _make_judge(self) -> judge_pb2_grpc.JudgeServiceStub:
        self._judge_channel = make_channel(self.judge_address, timeout=self.timeout)
        return judge_pb2_grpc.JudgeServiceStub(self._judge_channel)

    def _run(self, coro: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(self.timeout + 30)

    def _obs(self, obs: common_pb2.Observation, error: str = "", action: str = "") -> dict[str, Any]:
        if self.api == "browsergym":
            return bgym.observation_dict(obs, goal=self.instruction, chat=self._chat, last_action=action,
                                         last_action_error=error, start_time=self._start_time)
        out: dict[str, Any] = {"url": obs.url, "tabs": open_tabs(obs), "last_action_error": error or obs.last_action_error}
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
        self._episode = self._run(Episode.open(self.client, self.task, start_url=self.start_url, spec=self.obs_spec,
                                               seed=seed or 0, labels=self.labels))
        resp = self._episode.opened
        self.session_id = resp.session.session_id
        self.instruction = resp.instruction
        self.steps = 0
        self._chat = bgym.Chat.start(resp.instruction)
        self._start_time = time.time()
        return self._obs(resp.observation), {"instruction": resp.instruction, "session_id": self.session_id,
                                             "open_seconds": resp.open_seconds}

    def step(self, action: str) -> tuple[dict[str, Any], float, bool, bool, dict[str, Any]]:
        if not self.session_id:
            raise RuntimeError("call reset() before step()")
        if self.api == "browsergym":
            return self._step_browsergym(action)
        parse_error = ""
        try:
            act = parse_action(action)
        except ActionParseError as exc:
            parse_error = f"could not parse action: {exc}"
            act = common_pb2.Action(noop=common_pb2.NoopAction())
        return self._finish(self._act(act, parse_error), [act], parse_error, action)

    def _step_browsergym(self, action: str) -> tuple[dict[str, Any], float, bool, bool, dict[str, Any]]:
        """BrowserGym's step: the text's calls run in order until one fails or ends the episode; an error is
        ``last_action_error``; when nothing ran, the page is observed with a noop (a step, as in BrowserGym)."""
        self._chat.record(action)
        error = ""
        try:
            acts = bgym.to_actions(action, self._episode.observation if self._episode else None)
        except bgym.BrowserGymActionError as exc:
            error, acts = bgym.action_error_text(exc), []
        resp: environment_pb2.StepResponse | None = None
        done: list[common_pb2.Action] = []
        for act in acts:
            try:
                resp = self._act(act, "")
            except errors.InvalidArgument as exc:  # the farm refused it as malformed (an unknown key...): not done
                error = bgym.action_error_text(exc)
                break
            done.append(act)
            if resp.observation.last_action_error or resp.done:
                error = resp.observation.last_action_error
                break
        if resp is None:
            noop = common_pb2.Action(noop=common_pb2.NoopAction())
            resp = self._act(noop, error)
            done.append(noop)
        return self._finish(resp, done, error, action)

    def _act(self, act: common_pb2.Action, error: str) -> environment_pb2.StepResponse:
        """One step on the farm, recorded for the judge (``error``: why the agent's text became this action)."""
        assert self._episode is not None
        return self._run(self._episode.step(act, error))

    def _finish(self, resp: environment_pb2.StepResponse, acts: list[common_pb2.Action], error: str, action: str
                ) -> tuple[dict[str, Any], float, bool, bool, dict[str, Any]]:
        """The Gymnasium 5-tuple of one agent step (``acts``: what ran on the farm; ``resp``: the last answer)."""
        self.steps += 1
        answered = any(a.WhichOneof("kind") == "answer" for a in acts)
        terminated = bool(resp.done or (answered and self._judge is not None))
        truncated = resp.truncated or bool(self.max_steps and self.steps >= self.max_steps and not terminated)
        info = {"session_id": self.session_id, "step_index": resp.step_index, "raw_reward": resp.raw_reward,
                "reward_reason": resp.reward_reason, "action_error": error,
                "timings": MessageToDict(resp.timings, preserving_proto_field_name=True)}
        reward = float(resp.reward)
        if self._judge is not None and (terminated or truncated):
            verdict = self._grade()
            reward = 1.0 if verdict.passed else 0.0
            info["verdict"] = MessageToDict(verdict, preserving_proto_field_name=True,
                                            always_print_fields_with_no_presence=True)
        return self._obs(resp.observation, error, action), reward, terminated, truncated, info

    def _grade(self) -> common_pb2.Verdict:
        """End the episode: close the session with its evidence and ask the judge for the verdict."""
        assert self._episode is not None and self._judge is not None
        self.session_id = ""
        return self._run(self._episode.grade(self._judge, deadline=self.timeout))

    def _close_session(self) -> None:
        self.session_id = ""
        if self._episode is not None:
            self._run(self._episode.close(capture_evidence=True))  # best effort: it may have expired

    def close(self) -> None:
        if self._loop.is_closed():
            return
        if self.session_id:
            self._close_session()
        self._run(self.client.aclose())
        if self._judge is not None:
            self._run(self._judge_channel.close())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)
        self._loop.close()
        super().close()


if ENV_ID not in gymnasium.registry:
    gymnasium.register(ENV_ID, entry_point="webenv.compat.gym:WebEnv", nondeterministic=True)

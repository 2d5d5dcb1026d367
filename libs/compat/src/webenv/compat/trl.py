"""A TRL environment (``GRPOTrainer(environment_factory=...)``) over the farm, the catalog and the judge.

    from functools import partial
    from webenv.compat.trl import WebTaskEnv

    factory = partial(WebTaskEnv)  # the running `webenv up` (.webenv/stack.json), or browser=, sites=, judge=
    trainer = GRPOTrainer(model=..., train_dataset=Dataset.from_list([{"prompt": [...], "task_id": "miniwob/click-test"}]),
                          environment_factory=factory)

TRL's contract (trl.GRPOTrainer, ``environment_factory``): one instance per rollout, reused across batches;
``reset(**row)`` gets the dataset row and returns text appended to the prompt; every public method is a tool whose
JSON schema comes from its type hints and docstring (``transformers.utils.get_json_schema``); ``get_reward()`` scores
the finished rollout. Here ``reset(task_id=..., seed=...)`` opens a farm session for the catalog task and returns its
instruction and first page; the tools ``click``, ``fill``, ``select``, ``scroll``, ``go_back``, ``goto`` and
``answer`` each act once and return the page after it (its URL, the open tabs, the accessibility tree; or the error,
as text the model reads); ``get_reward`` is the
judge's verdict (1.0 passed, else 0.0) of the episode, ended by ``answer`` or, when the model stopped without
answering, by an empty answer then. An infrastructure failure is never a reward of 0.0: when the farm, the catalog or
the judge fails mid-episode (anything but the farm refusing a malformed action, which the model reads as text), the
tool answers ``The episode was interrupted: <STATUS> <REASON>: ...``, ``error`` holds the typed
`webenv.errors.WebenvError`, and ``get_reward`` returns ``None``: TRL's "no reward" for a rollout, which GRPOTrainer
leaves out of its group's baseline and gives no advantage (an unscorable row), so the failed rollout teaches nothing. Each instance drives `webenv.compat.gym.WebEnv` (its own event-loop thread and
channels), so the farm's limits and network guard hold as on the gRPC path. An instance left open is closed at
interpreter exit by a ``weakref.finalize`` (an atexit hook, run while the loop thread still runs): closing it from
``__del__`` during finalization waited out the loop call's whole timeout (90 s measured) on a frozen daemon thread.

Several task sources in one run: TRL's dict ``environment_factory`` routes each dataset row by its ``environment``
column (`webenv.compat.hf.catalog_dataset` writes it: the task's benchmark or source) to a named factory;
:func:`environment_factories` makes one per source or benchmark, each with its own settings (``{"miniwob":
{"max_steps": 10}, "webarena": {"max_steps": 30}}``), and each instance serves only its own (a row routed to the
wrong one is a ValueError naming ``environment``). TRL pools the instances and reuses them between rollouts; an
instance keeps its `WebEnv` (event-loop thread and channels) from one reset to the next, only the session changes.
A row's ``task_pb`` (the serialized task the dataset carries) is opened as it is, so a task file's tasks (a
benchmark's own file) need not be in the catalog; without it ``task_id`` is read from the catalog.

``examples/trl_grpo.py`` trains with it: GRPO with the judge's verdict as the reward.
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Callable, Mapping
from functools import partial
from typing import Any

import grpc
from webenv import errors
from webenv.actions import format_action, is_element_id
from webenv.client import make_channel, tabs_text
from webenv.client.stack import address
from webenv.compat.gym import WebEnv
from webenv.compat.hf import environment_of
from webenv.v1 import common_pb2 as pb
from webenv.v1 import task_pb2, task_pb2_grpc

__all__ = ["WebTaskEnv", "environment_factories"]


class WebTaskEnv:
    """One rollout's web task: reset opens it, the public methods are the model's tools, get_reward grades it."""

    def __init__(self, browser: str | None = None, sites: str | None = None, judge: str | None = None,
                 *, source: str = "", max_steps: int = 20, max_text_chars: int = 20_000) -> None:
        # an address not given: WEBENV_<SERVICE>_ADDR, else the running `webenv up`'s, else the default port
        self._browser, self._sites, self._judge = address("browser", browser), address("sites", sites), address(
            "judge", judge)
        self._max_steps, self._max_text_chars = max_steps, max_text_chars
        self.source = source  # the task source or benchmark this instance serves ('' any: environment_of)
        self.episodes = 0  # the rollouts this instance served (TRL reuses an instance between rollouts)
        self._holder: list[WebEnv | None] = [None]  # the open episode's env, also seen by the exit-time finalizer
        self._reward: float | None = None
        self.error: errors.WebenvError | None = None  # the infrastructure failure that interrupted the episode
        weakref.finalize(self, _close_holder, self._holder)

    @property
    def _env(self) -> WebEnv | None:
        return self._holder[0]

    def reset(self, task_id: str = "", seed: int = 0, task_pb: bytes | None = None, **row: object) -> str:
        """Open a farm session for the row's task (its ``task_pb``, else the catalog's ``task_id``); the instruction
        and the first page, for the prompt."""
        if task_pb:
            task = pb.Task.FromString(task_pb)
            if task_id and task.task_id != task_id:
                raise ValueError(f"the dataset row's task_pb is task {task.task_id!r}, its task_id {task_id!r}")
        elif task_id:
            task = asyncio.run(_get_task(self._sites, task_id))
        else:
            raise ValueError("the dataset row needs a task_id (a catalog task: `webenv tasks` lists them) or a task_pb")
        if self.source and environment_of(task) != self.source:
            raise ValueError(f"environment: the row's task {task.task_id!r} is a {environment_of(task)!r} task, and "
                             f"this environment serves {self.source!r} tasks (route the row by its environment column)")
        if self._env is None:
            self._holder[0] = WebEnv(self._browser, task=task, judge=self._judge, max_steps=self._max_steps,
                                     max_text_chars=self._max_text_chars)
        else:  # reused: the same channels and loop, the previous session closed by the reset
            self._env.task = task
        self.episodes += 1
        obs, info = self._env.reset(seed=seed)
        self._reward, self.error = None, None
        return f"Task: {info['instruction']}\n\n{self._page(obs)}"

    def _page(self, obs: dict) -> str:
        error = f"Last action failed: {obs['last_action_error']}\n" if obs["last_action_error"] else ""
        return f"{error}URL: {obs['url']}\nTabs:\n{tabs_text(obs['tabs'])}\n{obs['axtree']}"

    def _act(self, action: pb.Action) -> str:
        if self._env is None or self._reward is not None or self.error is not None:
            return "The episode has ended: no more actions."
        try:
            obs, reward, terminated, truncated, _ = self._env.step(format_action(action))
        except errors.InvalidArgument as exc:  # the farm refused the action as malformed: the model's error
            return f"Last action failed: {exc.reason}: {exc.message}"
        except errors.WebenvError as exc:  # the farm or the judge failed: the episode is interrupted, not failed
            self.error = exc
            return f"The episode was interrupted: {exc.code.name} {exc.reason}: {exc.message}"
        if terminated or truncated:
            self._reward = reward
            return f"The episode has ended.\n{self._page(obs)}"
        return self._page(obs)

    @staticmethod
    def _ref(ref: str) -> pb.ElementTarget | str:
        return pb.ElementTarget(element_id=ref) if is_element_id(ref) else f"{ref[:64]!r} is not an element id"

    def click(self, ref: str) -> str:
        """Click an element of the page.

        Args:
            ref: The element's id, the number in brackets before it in the page's tree.
        """
        target = self._ref(ref)
        return target if isinstance(target, str) else self._act(pb.Action(click=pb.ClickAction(target=target)))

    def fill(self, ref: str, text: str) -> str:
        """Replace the text of a field.

        Args:
            ref: The field's id, the number in brackets before it in the page's tree.
            text: The text to write.
        """
        target = self._ref(ref)
        return target if isinstance(target, str) else self._act(pb.Action(fill=pb.FillAction(target=target, text=text)))

    def select(self, ref: str, option: str) -> str:
        """Choose an option of a list box.

        Args:
            ref: The list box's id, the number in brackets before it in the page's tree.
            option: The option's label or value.
        """
        target = self._ref(ref)
        if isinstance(target, str):
            return target
        return self._act(pb.Action(select=pb.SelectAction(target=target, options=[option])))

    def scroll(self, dy: float) -> str:
        """Scroll the page.

        Args:
            dy: Pixels to scroll down (negative: up).
        """
        return self._act(pb.Action(scroll=pb.ScrollAction(dy=dy)))

    def go_back(self) -> str:
        """Go back to the previous page."""
        return self._act(pb.Action(go_back=pb.GoBackAction()))

    def goto(self, url: str) -> str:
        """Open a URL.

        Args:
            url: The address to open.
        """
        return self._act(pb.Action(navigate=pb.NavigateAction(url=url)))

    def answer(self, text: str) -> str:
        """Give the final answer and end the task.

        Args:
            text: The answer (for tasks that ask a question; anything for tasks that only ask for actions).
        """
        return self._act(pb.Action(answer=pb.AnswerAction(text=text)))

    def get_reward(self) -> float | None:
        """The judge's verdict of the episode: 1.0 when the task's rubric passes, else 0.0; None (no reward) when an
        infrastructure failure interrupted it (``error`` says which)."""
        if self._reward is None and self._env is not None and self.error is None:
            self._act(pb.Action(answer=pb.AnswerAction(text="")))
        if self.error is not None:
            return None
        return float(self._reward or 0.0)

    def _close(self) -> None:
        _close_holder(self._holder)


def environment_factories(sources: Mapping[str, Mapping[str, Any]] | list[str] | tuple[str, ...],
                          **common: Any) -> dict[str, Callable[[], WebTaskEnv]]:
    """TRL's dict ``environment_factory``: a named :class:`WebTaskEnv` factory per task source or benchmark (the
    dataset's ``environment`` column, `webenv.compat.hf.environment_of`), with ``common`` keyword arguments
    (addresses, ``max_steps``) and, for a mapping, each source's own on top of them."""
    items = list(sources.items()) if isinstance(sources, Mapping) else [(name, {}) for name in sources]
    if not items or not all(isinstance(name, str) and name for name, _ in items):
        raise ValueError("sources: expected one or more task source or benchmark names (webarena, miniwob, ...)")
    return {name: partial(WebTaskEnv, **{**common, **dict(own), "source": name}) for name, own in items}


async def _get_task(sites: str, task_id: str) -> pb.Task:
    """The catalog task, over the sdk's channel (the deployment's bearer token and TLS, as the farm's calls)."""
    async with make_channel(sites, timeout=60.0) as ch:
        try:
            return (await task_pb2_grpc.TaskServiceStub(ch).GetTask(task_pb2.GetTaskRequest(task_id=task_id))).task
        except grpc.RpcError as exc:
            raise errors.from_rpc_error(exc) from None


def _close_holder(holder: list[WebEnv | None]) -> None:
    env, holder[0] = holder[0], None
    if env is not None:
        env.close()

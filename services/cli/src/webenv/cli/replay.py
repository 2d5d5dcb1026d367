"""Replaying a recorded episode (a trace from ExportRun TRACES) against an environment.

The trace's actions are re-executed in a fresh session of the same task; each step reports whether the URL
after the action matches the recorded one and how much the accessibility tree differs (changed lines of a
line diff). A speed factor replays with the recorded pacing (1 = real time, 2 = twice as fast, 0 = no waits).

Each step's ``action_text`` (the sdk grammar, e.g. ``click(12)``) is what gets executed, so a trace edited by
hand replays the edit; ``action_json`` is used only for a step whose text is empty. Every text is parsed
before the session opens: a bad edit is reported with its line, and nothing runs.
"""

from __future__ import annotations

import asyncio
import difflib
import json
from dataclasses import dataclass, field
from pathlib import Path

import grpc
from google.protobuf import json_format
from webenv import errors
from webenv.actions import ActionParseError, format_action, parse_action
from webenv.client import make_channel
from webenv.v1 import common_pb2, environment_pb2, environment_pb2_grpc


@dataclass
class StepDivergence:
    """How one replayed step compares with the recording."""

    step_index: int
    action_text: str
    expected_url: str
    actual_url: str
    axtree_changed_lines: int
    error: str = ""

    @property
    def url_matches(self) -> bool:
        return self.expected_url == self.actual_url


@dataclass
class ReplayReport:
    """The whole replay."""

    episode_id: str
    steps: list[StepDivergence] = field(default_factory=list)

    @property
    def url_matches(self) -> int:
        return sum(1 for s in self.steps if s.url_matches)

    @property
    def reproduced(self) -> bool:
        """Every step reached the recorded URL."""
        return bool(self.steps) and all(s.url_matches for s in self.steps)

    def to_dict(self) -> dict:
        return {
            "episode_id": self.episode_id,
            "reproduced": self.reproduced,
            "steps": [{**s.__dict__, "url_matches": s.url_matches} for s in self.steps],
        }


def read_trace(path: str | Path) -> tuple[dict, list[dict]]:
    """(header, steps) of a trace file; each step gets ``_line`` (its line in the file) and ``_action``."""
    header: dict = {}
    steps: list[dict] = []
    for n, line in enumerate(Path(path).read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            item = json.loads(line)
        except json.JSONDecodeError as exc:
            raise ValueError(f"{path}:{n}: not JSON: {exc.msg}") from None
        if item.get("kind") == "header":
            header = item
        else:
            item["_line"] = n
            item["_action"] = _action(item, f"{path}:{n}")
            steps.append(item)
    if not header:
        raise ValueError(f"{path}: not a trace (no header line)")
    return header, sorted(steps, key=lambda s: s["step_index"])


def _action(step: dict, where: str) -> common_pb2.Action:
    """The action a trace step replays: its (possibly edited) action_text, else its action_json."""
    text = step.get("action_text", "")
    if text:
        try:
            return parse_action(text)
        except ActionParseError as exc:
            raise ValueError(f"{where}: action_text: {exc}") from None
    try:
        return json_format.Parse(step.get("action_json") or "{}", common_pb2.Action())
    except json_format.ParseError as exc:
        raise ValueError(f"{where}: action_json: {exc}") from None


def axtree_diff(expected: str, actual: str) -> int:
    """Changed lines between two accessibility trees (added + removed)."""
    return sum(
        1
        for line in difflib.unified_diff(expected.splitlines(), actual.splitlines(), lineterm="", n=0)
        if line[:1] in "+-" and not line.startswith(("+++", "---"))
    )


async def replay(path: str | Path, env_address: str, speed: float = 0.0, step_timeout: float = 60.0) -> ReplayReport:
    """Re-execute a trace's actions in a new session at ``env_address``."""
    header, steps = read_trace(path)
    task = common_pb2.Task()
    if header.get("task_pb"):
        task.ParseFromString(bytes.fromhex(header["task_pb"]))
    report = ReplayReport(header["episode_id"])
    async with make_channel(env_address, timeout=step_timeout) as ch:
        env = environment_pb2_grpc.EnvironmentServiceStub(ch)
        req = environment_pb2.OpenSessionRequest(
            seed=int(header.get("seed") or 0),
            labels={"episode_id": header["episode_id"], "replay": "1"},
            observation_spec=common_pb2.ObservationSpec(formats=[common_pb2.OBSERVATION_FORMAT_AXTREE]),
        )
        if task.task_id and task.source != common_pb2.TASK_SOURCE_URL:
            req.task.CopyFrom(task)
        else:
            req.start_url = task.start_url or (steps[0]["url"] if steps else "")
        opened = await env.OpenSession(req)
        sid = opened.session.session_id
        try:
            for i, st in enumerate(steps):
                if speed > 0 and i > 0:
                    await asyncio.sleep((st.get("policy_seconds", 0) + st.get("env_seconds", 0)) / speed)
                action = st["_action"]
                expected_next = steps[i + 1]["axtree"] if i + 1 < len(steps) else header.get("final_axtree", "")
                try:
                    resp = await env.Step(environment_pb2.StepRequest(session_id=sid, action=action, step_index=i))
                    obs = resp.observation
                    report.steps.append(StepDivergence(
                        i, format_action(action), st["url_after"], obs.url,
                        axtree_diff(expected_next, obs.axtree) if expected_next else 0,
                        obs.last_action_error,
                    ))
                except grpc.aio.AioRpcError as exc:
                    err = errors.from_rpc_error(exc)
                    report.steps.append(StepDivergence(i, format_action(action), st["url_after"], "", 0, err.message))
        finally:
            try:
                await env.CloseSession(environment_pb2.CloseSessionRequest(session_id=sid))
            except grpc.aio.AioRpcError:
                pass
    return report

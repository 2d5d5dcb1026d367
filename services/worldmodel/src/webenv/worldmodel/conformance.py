"""Replay conformance: recorded real episodes replayed through the world model, compared field by field.

A recorded episode is a `StoredEpisode` as the collector's store holds it (`CollectorService.ReadEpisodes`: each
`StepRecord` keeps the observation the action was chosen from, the action, and what the farm's StepResponse
said of it — reward, done, target_element_id, last_action_error, the URL after — and the episode whether it was
truncated). `record_oracle` records one in the same shape straight from the browser farm (a task's
`Task.oracle` actions stepped there), with the tabs the store does not keep.

`replay` opens a simulated session on the world model's EnvironmentService (over gRPC) at the episode's start —
the task as run; a start page the model has no state for is taken from the farm (farmstart.py) — steps the
recorded actions with the recorded step indexes and formats, and compares every StepResponse with the recorded
one. Fields compared (`FIELDS`): the contract's (step_index, done, truncated, reward, target_element_id,
last_action_error, formats, tabs, the session's step_count) and the page's content (url, title, axtree), which a
simulator can only predict. `report` counts agree / differ per field with examples; `to_markdown` writes the table.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field

import grpc
from google.protobuf import json_format
from webenv.actions import format_action
from webenv.client import make_channel, make_sync_channel
from webenv.v1 import collector_pb2, collector_pb2_grpc, common_pb2, environment_pb2, environment_pb2_grpc

#: (field, what it is): the contract's fields first, then the page content a simulator predicts.
FIELDS: dict[str, str] = {
    "start": "OpenSession's observation (URL and a11y tree) is the recorded first one",
    "step_index": "StepResponse.step_index echoes the request's",
    "done": "StepResponse.done (answer given / task done)",
    "truncated": "StepResponse.truncated (cut at the step budget)",
    "reward": "StepResponse.reward",
    "target_element_id": "StepResponse.target_element_id (the element the action's target resolved to)",
    "last_action_error": "Observation.last_action_error: empty vs set (the message's words may differ)",
    "formats": "Observation.formats produced, of those asked for",
    "tabs": "Observation.tabs ids and active flag, active_tab_id (recorded from the farm only: the store keeps none)",
    "step_count": "Session.step_count after the episode (GetSession)",
    "url": "Observation.url after the action (page content: predicted)",
    "title": "Observation.title after the action (page content: predicted)",
    "axtree": "Observation.axtree after the action, exactly (page content: predicted)",
}
CONTRACT = ("start", "step_index", "done", "truncated", "reward", "target_element_id", "last_action_error", "formats", "tabs",
            "step_count")
EXAMPLES = 3
TIMEOUT = 120.0


@dataclass
class FieldTally:
    agree: int = 0
    differ: int = 0
    examples: list[dict] = field(default_factory=list)

    def add(self, same: bool, example: dict) -> None:
        if same:
            self.agree += 1
        else:
            self.differ += 1
            if len(self.examples) < EXAMPLES:
                self.examples.append(example)


@dataclass
class Report:
    episodes: int = 0
    steps: int = 0
    task_ids: list[str] = field(default_factory=list)  # of the episodes replayed
    failed: list[dict] = field(default_factory=list)  # episodes the world model could not replay, and why
    fields: dict[str, FieldTally] = field(default_factory=lambda: {f: FieldTally() for f in FIELDS})

    def as_dict(self) -> dict:
        return {"episodes": self.episodes, "steps": self.steps, "task_ids": self.task_ids, "failed": self.failed,
                "fields": {f: asdict(t) for f, t in self.fields.items()}}


# --- recorded episodes ----------------------------------------------------------------------------------------------
def read_collector(address: str, run_ids: list[str], limit: int = 0) -> list[collector_pb2.StoredEpisode]:
    """A collector's stored episodes of these runs, with their steps (`ReadEpisodes`)."""
    with make_sync_channel(address, timeout=None) as ch:
        stub = collector_pb2_grpc.CollectorServiceStub(ch)
        req = collector_pb2.ReadEpisodesRequest(run_ids=run_ids, limit=limit)
        return [r.episode for r in stub.ReadEpisodes(req, timeout=TIMEOUT)]


def read_jsonl(path: str) -> list[collector_pb2.StoredEpisode]:
    """StoredEpisodes saved one JSON object a line (`write_jsonl`, or ReadEpisodes' answers as JSON)."""
    out = []
    with open(path) as fh:
        for n, line in enumerate(fh, start=1):
            if line.strip():
                try:
                    out.append(json_format.Parse(line, collector_pb2.StoredEpisode(), ignore_unknown_fields=True))
                except json_format.ParseError as exc:
                    raise ValueError(f"{path}:{n}: not a StoredEpisode: {exc}") from exc
    return out


def write_jsonl(episodes: Iterable[collector_pb2.StoredEpisode], path: str) -> None:
    with open(path, "w") as fh:
        for ep in episodes:
            fh.write(json_format.MessageToJson(ep, indent=None) + "\n")


async def record(farm: environment_pb2_grpc.EnvironmentServiceStub, task: common_pb2.Task,
                 actions: Iterable[common_pb2.Action], spec: common_pb2.ObservationSpec,
                 seed: int = 0) -> collector_pb2.StoredEpisode:
    """One episode of these actions on the browser farm, as the collector would store it (plus tabs: each step's
    observation is the farm's whole Observation, the one its action was chosen from). As the collector's, the
    episode is cut at the task's max_steps (`truncated`: the farm itself caps no episode)."""
    opened = await farm.OpenSession(environment_pb2.OpenSessionRequest(
        request_id=f"conformance-{uuid.uuid4().hex}", task=task, seed=seed, observation_spec=spec), timeout=TIMEOUT)
    sid = opened.session.session_id
    ep = collector_pb2.StoredEpisode(episode_id=uuid.uuid4().hex, task=task, horizon=task.max_steps,
                                     policy="oracle", step_count=0)
    ep.trajectory.env_kind = common_pb2.ENV_KIND_BROWSER
    obs = opened.observation
    try:
        for i, action in enumerate(actions):
            resp = await farm.Step(environment_pb2.StepRequest(session_id=sid, action=action, step_index=i),
                                   timeout=TIMEOUT)
            ep.trajectory.steps.append(common_pb2.StepRecord(
                step_index=i, observation=obs, action=action, action_text=format_action(action), reward=resp.reward,
                done=resp.done, last_action_error=resp.observation.last_action_error, url_after=resp.observation.url,
                target_element_id=resp.target_element_id))
            obs = resp.observation
            if resp.done or resp.truncated or (task.max_steps and i + 1 >= task.max_steps):
                ep.truncated = not resp.done
                break
    finally:
        await farm.CloseSession(environment_pb2.CloseSessionRequest(session_id=sid), timeout=TIMEOUT)
    ep.trajectory.final_observation.CopyFrom(obs)
    ep.step_count = len(ep.trajectory.steps)
    return ep


async def record_from_catalog(farm_address: str, sites_address: str, n: int, html: bool = True,
                              exclude_families: Iterable[str] = ()) -> list[collector_pb2.StoredEpisode]:
    """Oracle episodes of `n` synthetic tasks of the catalog that have an oracle (none of `exclude_families`; one
    of each website in turn), recorded on the farm (AXTREE, MARKDOWN and, with `html`, HTML asked for and kept)."""
    skip = set(exclude_families)
    from webenv import paging
    from webenv.v1 import task_pb2, task_pb2_grpc

    formats = [common_pb2.OBSERVATION_FORMAT_AXTREE, common_pb2.OBSERVATION_FORMAT_MARKDOWN]
    if html:
        formats.append(common_pb2.OBSERVATION_FORMAT_HTML)
    spec = common_pb2.ObservationSpec(formats=formats)
    with make_sync_channel(sites_address, timeout=None) as ch:
        tasks = task_pb2_grpc.TaskServiceStub(ch)
        req = task_pb2.ListTasksRequest(filter=task_pb2.TaskFilter(sources=[common_pb2.TASK_SOURCE_SYNTHETIC]),
                                        page_size=1000)
        by_site: dict[str, list[common_pb2.Task]] = {}
        for t in paging.iterate(lambda r: tasks.ListTasks(r, timeout=TIMEOUT), req, "tasks"):
            if len(t.oracle) and t.family not in skip:
                by_site.setdefault(t.site, []).append(t)
    # one task of each website in turn (the catalog lists a website's tasks together)
    rounds = max((len(v) for v in by_site.values()), default=0)
    chosen = [ts[i] for i in range(rounds) for ts in by_site.values() if i < len(ts)][:n]
    async with make_channel(farm_address, timeout=None) as ch:
        stub = environment_pb2_grpc.EnvironmentServiceStub(ch)
        return [await record(stub, t, t.oracle, spec) for t in chosen]


# --- replay ---------------------------------------------------------------------------------------------------------
def _formats(obs: common_pb2.Observation) -> list[int]:
    """The formats a recorded observation holds that a step can ask for (a screenshot is kept by key only)."""
    return [f for f in obs.formats if f != common_pb2.OBSERVATION_FORMAT_SCREENSHOT]


def _tabs(obs: common_pb2.Observation) -> list[tuple[str, bool]]:
    """The tabs as the contract fixes them: ids and which is active (their URLs are the page's: `url`)."""
    return [(t.tab_id, t.active) for t in obs.tabs] + [("active_tab_id", obs.active_tab_id)]  # type: ignore[list-item]


def compare_step(rep: Report, ep: collector_pb2.StoredEpisode, i: int, resp: environment_pb2.StepResponse) -> None:
    """Tally one replayed step against the recorded one."""
    steps = ep.trajectory.steps
    rec = steps[i]
    after = steps[i + 1].observation if i + 1 < len(steps) else ep.trajectory.final_observation
    last = i + 1 == len(steps)
    where = {"episode_id": ep.episode_id, "task_id": ep.task.task_id, "step_index": i, "action": rec.action_text}
    obs = resp.observation

    def tally(name: str, recorded: object, simulated: object) -> None:
        rep.fields[name].add(recorded == simulated, {**where, "recorded": _short(recorded), "simulated": _short(simulated)})

    tally("step_index", i, resp.step_index)
    tally("done", rec.done, resp.done)
    tally("truncated", bool(ep.truncated and last), resp.truncated)
    tally("reward", round(rec.reward, 6), round(resp.reward, 6))
    tally("target_element_id", rec.target_element_id, resp.target_element_id)
    rep.fields["last_action_error"].add(bool(rec.last_action_error) == bool(obs.last_action_error),
                                        {**where, "recorded": _short(rec.last_action_error),
                                         "simulated": _short(obs.last_action_error)})
    tally("formats", sorted(_formats(after)), sorted(obs.formats))
    if after.tabs:  # the collector's store keeps no tabs: compared on episodes recorded from the farm
        tally("tabs", _tabs(after), _tabs(obs))
    tally("url", rec.url_after or after.url, obs.url)
    tally("title", after.title, obs.title)
    if after.axtree:
        tally("axtree", after.axtree, obs.axtree)


def _short(v: object) -> object:
    if isinstance(v, str) and len(v) > 160:
        return v[:160] + f"... ({len(v)} chars)"
    return v


async def replay(wm: environment_pb2_grpc.EnvironmentServiceStub, ep: collector_pb2.StoredEpisode, rep: Report) -> None:
    """Replay one recorded episode through the world model's EnvironmentService and tally its steps."""
    steps = ep.trajectory.steps
    if not steps:
        return
    first = steps[0].observation
    task = common_pb2.Task()
    task.CopyFrom(ep.task)
    if ep.horizon:
        task.max_steps = ep.horizon
    spec = common_pb2.ObservationSpec(formats=_formats(first))
    try:
        opened = await wm.OpenSession(environment_pb2.OpenSessionRequest(
            request_id=f"conformance-{uuid.uuid4().hex}", task=task, observation_spec=spec), timeout=TIMEOUT)
    except grpc.aio.AioRpcError as exc:
        rep.failed.append({"episode_id": ep.episode_id, "task_id": ep.task.task_id, "code": exc.code().name,
                           "message": (exc.details() or "")[:300]})
        return
    sid = opened.session.session_id
    rep.episodes += 1
    rep.task_ids.append(ep.task.task_id)
    o = opened.observation
    rep.fields["start"].add((o.url, o.axtree) == (first.url, first.axtree), {
        "episode_id": ep.episode_id, "task_id": ep.task.task_id, "recorded": _short(first.url + "\n" + first.axtree),
        "simulated": _short(o.url + "\n" + o.axtree)})
    try:
        for i, rec in enumerate(steps):
            after = steps[i + 1].observation if i + 1 < len(steps) else ep.trajectory.final_observation
            step_spec = common_pb2.ObservationSpec(formats=_formats(after) or _formats(first))
            try:
                resp = await wm.Step(environment_pb2.StepRequest(session_id=sid, action=rec.action, step_index=i,
                                                                 observation_spec=step_spec), timeout=TIMEOUT)
            except grpc.aio.AioRpcError as exc:  # the simulated episode ended before the recorded one, or refused
                rep.failed.append({"episode_id": ep.episode_id, "task_id": ep.task.task_id, "step_index": i,
                                   "code": exc.code().name, "message": (exc.details() or "")[:300]})
                break
            rep.steps += 1
            compare_step(rep, ep, i, resp)
        got = await wm.GetSession(environment_pb2.GetSessionRequest(session_id=sid), timeout=TIMEOUT)
        rep.fields["step_count"].add(got.session.step_count == len(steps), {
            "episode_id": ep.episode_id, "task_id": ep.task.task_id, "recorded": len(steps),
            "simulated": got.session.step_count})
    finally:
        try:
            await wm.CloseSession(environment_pb2.CloseSessionRequest(session_id=sid), timeout=TIMEOUT)
        except grpc.aio.AioRpcError:
            pass  # an ended episode the service already dropped


async def run(wm_address: str, episodes: list[collector_pb2.StoredEpisode]) -> Report:
    rep = Report()
    async with make_channel(wm_address, timeout=None) as ch:
        wm = environment_pb2_grpc.EnvironmentServiceStub(ch)
        for ep in episodes:
            await replay(wm, ep, rep)
    return rep


# --- the report -----------------------------------------------------------------------------------------------------
def to_markdown(rep: Report, command: str = "", note: str = "") -> str:
    lines = ["# World model replay conformance", ""]
    if command:
        lines += ["Produced by:", "", "```", command, "```", ""]
    if note:
        lines += [note, ""]
    lines += ["Fields of kind *contract* are what the EnvironmentService contract fixes (services/worldmodel/README.md, "
              "One contract, proven by replay, says which the simulation guarantees); *content* is the predicted page "
              "(fidelity: bench/results/worldmodel.md).", ""]
    sites = sorted({t.split("/")[1] for t in rep.task_ids if t.count("/") >= 2})
    lines += [f"{rep.episodes} recorded episodes replayed, {rep.steps} steps; {len(rep.failed)} replays stopped early."
              + (f" Websites: {', '.join(sites)}." if sites else ""),
              "", "| field | kind | agree | differ | agree % | what |", "|---|---|---:|---:|---:|---|"]
    for name, t in rep.fields.items():
        n = t.agree + t.differ
        pct = f"{100 * t.agree / n:.0f}" if n else "-"
        kind = "contract" if name in CONTRACT else "content"
        lines.append(f"| {name} | {kind} | {t.agree} | {t.differ} | {pct} | {FIELDS[name]} |")
    lines += ["", "## Examples of differences", ""]
    for name, t in rep.fields.items():
        for ex in t.examples:
            lines.append(f"- **{name}** `{ex.get('task_id', '')}` step {ex.get('step_index', '-')} "
                         f"`{_short(ex.get('action', ''))}`: recorded `{json.dumps(ex['recorded'])[:200]}`, "
                         f"simulated `{json.dumps(ex['simulated'])[:200]}`")
    if rep.failed:
        lines += ["", "## Replays stopped early", ""]
        lines += [f"- `{f['task_id']}` step {f.get('step_index', 'open')}: {f['code']} {f['message']}" for f in rep.failed]
    return "\n".join(lines) + "\n"

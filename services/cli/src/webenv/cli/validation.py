"""What `webenv validate` checks of a task, on the real farm and judge (OpenEnv RFC 008's bar, issue 50).

Per task, in sessions of its own (each an `webenv.client.episode.Episode`, graded as every adapter grades):

- ``oracle``: the task's reference solution (``Task.oracle``) replayed passes the rubric (the maximum); a task with
  none is not applicable;
- ``floor``: doing nothing, an empty answer, the answer "done" and the instruction echoed as the answer never pass; their best score is the task's floor
  (reported). A random policy (seeded clicks on the page's elements, then an empty answer) is run and reported beside
  it, never failed: MiniWoB++'s one-button pages pass by chance, as they should;
- ``leak``: no observation gives a fact group away (holds an accepted answer of each of its facts: the rubric's
  answer criteria, 4 characters or more) before the agent reaches a page that states it: not the instruction; not the start page (its text, URL or title) when the
  oracle has to move before it answers; not the URL or title of a page the oracle passes before the first page
  whose text shows it. Hidden text is no observation: the farm's text formats (accessibility tree, HTML, markdown,
  DOM, elements) hold only what is rendered, so an answer in a ``display:none`` element is not one the agent sees;
- ``determinism``: the oracle twice (same seed) gives the same verdict and score and the same pages (URL, title and
  accessibility tree with element ids left out, step by step);
- ``egress``: every request of every session stays on the hosts the task allows (its start URL's and site's, and
  the hosts its oracle navigates to): the farm's network trace of the session (CloseSession's ``network_events``,
  where the farm records one), the pages' URLs and tabs, and every absolute URL the page's HTML would load (scripts,
  images, styles, frames, fetches; links the user may follow are not loads). A task that calls another host is
  caught without a packet leaving loopback (the farm's network guard refuses the connection anyway);
- ``isolation``: a session opened beside the oracle's and closed after it has the site state of a fresh session
  (the server-side state of one session never shows another's cart, orders or login).

A check that cannot run because the farm or judge failed makes the task ``errored`` (never ``failed``: an
infrastructure failure says nothing of the task).

A reference solution is ``Task.oracle`` replayed, or, given the policy service (``policy``), its ``oracle``
policy asked step by step for the tasks it scripts (22 MiniWoB++ tasks: the scripts read the page, so they are no
fixed list of actions a task could carry; the determinism of those compares verdict and score, not pages).

The catalog mode (``validate(catalog=True)``, ``webenv validate --catalog``) exists because of what a task costs.
Measured on this 2-core machine (10 synthetic tasks one at a time, the full mode): a task opens 7 sessions (1.0-4.0
s each), takes 17-47 steps (0.25-0.6 s each: the oracle's twice, three answers, six random) and 7 closes with
evidence (0.1-0.4 s), while the judge's 7 verdicts take 0.0-0.3 s in all. Sessions and steps are the cost, the
judge is free; and the judge grades a trajectory alone (its pages, answer, site state and the farm's trace: it
reads nothing live). So, per task, on every task (``CATALOG_EVERY``): the oracle once in its own session (``oracle``;
``leak`` from its pages, ``egress`` from its trace and pages), and one start-state session opened beside it and
closed with its evidence before the oracle's first step, graded as doing nothing and, as one more answer step on
its trajectory each, the empty answer, "done" and the instruction echoed (``floor``: decided on a real start page
and site state, without a session each). On the tasks of a seeded sample (``draw_sample``: N of each source, kind
and builder, and a share of every task; the same draw in every shard), besides (``CATALOG_SAMPLE``): the oracle a
second time (``determinism``), a session opened beside the oracle's and closed after it against the start state
(``isolation``), and the random policy. 2 sessions and the oracle's steps a task instead of 7 sessions and twice
the oracle's steps plus 9: 3.2 times the tasks a minute on the same tasks (bench/results/validate.md).

The start-state session is one per group of tasks with the same start state (``start_key``): a synthetic task's
session is its site's state reset and its start URL loaded with the run's seed, nothing of the task besides (the
farm's ``SyntheticAdapter``), and the 21 tasks of a site share site and start URL. The first task of a group opens
it and closes it with its site state and network trace; every task of the group waits for that close before its
oracle's first step and is graded on it as itself (the judge reads only the trajectory); the run is ordered by
``start_key``, so a group's tasks come together (``START_STATES_KEPT`` latest groups are kept). The sites are
deterministic: two fresh sessions of one site show the same start page and site state, which the sample checks
(``determinism`` compares the oracle's pages from the start page on; ``isolation`` compares a fresh session's site
state with the shared start state). Measured where a catalog-mode task's time went first (84 tasks of 4 whole
sites at ``--concurrency 4``, bench/results/validate.md): 2 opens (2.3-3.5 s each, in parallel), 7.9 oracle steps
(0.8-1.1 s each: action, settle, observe on the farm), 2 closes (0.15-0.34 s), the judge 0.01 s a verdict; 1.9
CPU-s a task, Chromium's most of it. So a synthetic task now opens 1 session (and 1/21 of its site's start state):
half the opens and closes, 1.39 times the tasks a minute on the same tasks at the same concurrency (19% less CPU a
task); what is left is the oracle's own session and steps, the check itself.
"""

from __future__ import annotations

import asyncio
import gzip
import hashlib
import json
import os
import random
import re
import time
from collections import OrderedDict, defaultdict
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

import grpc
from webenv import errors
from webenv.actions import format_action
from webenv.answers import MIN_ANSWER_CHARS, answer_groups, given_away  # noqa: F401 (names of this module)
from webenv.client import EnvironmentClient, observation_spec
from webenv.client.episode import Episode
from webenv.v1 import common_pb2 as pb
from webenv.v1 import judge_pb2_grpc, policy_pb2, policy_pb2_grpc

__all__ = ["CATALOG_EVERY", "CATALOG_SAMPLE", "CHECKS", "Check", "TaskReport", "Validator", "answer_groups",
           "append_jsonl", "draw_sample", "coverage", "given_away", "in_shard", "loaded_hosts", "read_jsonl",
           "start_key", "stratified"]

CHECKS = ("oracle", "floor", "leak", "determinism", "egress", "isolation")
CATALOG_EVERY = ("oracle", "floor", "leak", "egress")  # the catalog mode's checks of every task
CATALOG_SAMPLE = ("determinism", "isolation", "random")  # and of the tasks of its sample only
ORACLE_POLICY = "oracle"  # the policy service's policy that solves the MiniWoB++ tasks it scripts (--policy)
MAX_SCRIPTED_STEPS = 30  # a script that has not answered by then has failed
START_STATES_KEPT = 64  # the catalog mode's latest start-state sessions kept (the run is ordered by start_key)
NON_ANSWERS = ("", "done")  # and the instruction echoed back: the answers that must not pass
_SPEC = observation_spec(("axtree", "html"))
_IDS = re.compile(r"\[[^\]\s]+\]")
_URL = re.compile(r"""(?:https?|wss?):(?:\\?/){2}([A-Za-z0-9.-]+)""")
_LINK_BEFORE = re.compile(r"""<a\b[^<>]*\bhref\s*=\s*["']?$""", re.I)
_REF = re.compile(r"\[([^\]\s]+)\]")


@dataclass
class Check:
    """One property of one task: ``ok`` True (holds), False (violated: ``why``) or None (not applicable: ``why``)."""

    ok: bool | None = None
    why: str = ""


@dataclass
class TaskReport:
    task_id: str
    source: str
    kind: str
    builder: str
    checks: dict[str, Check] = field(default_factory=dict)
    oracle_score: float | None = None
    floor: float = 0.0
    random_passed: bool | None = None
    error: str = ""
    seconds: float = 0.0
    mode: str = "full"  # "full": every check on this task; "catalog": the cheap mode (CATALOG_EVERY, CATALOG_SAMPLE)
    sampled: bool = True  # the catalog mode ran this task's sample checks too (always true in the full mode)
    finished_at: float = 0.0  # unix time the task's checks ended (the JSONL's wall time)

    @classmethod
    def from_dict(cls, d: dict) -> TaskReport:
        """A report as ``as_dict`` wrote it (a JSONL line)."""
        fields = {k: v for k, v in d.items() if k in cls.__dataclass_fields__ and k != "checks"}
        return cls(**fields, checks={name: Check(**c) for name, c in d.get("checks", {}).items()})

    @property
    def status(self) -> str:
        if self.error:
            return "errored"
        return "failed" if any(c.ok is False for c in self.checks.values()) else "passed"

    def failures(self) -> list[str]:
        return [f"{name}: {c.why}" for name, c in self.checks.items() if c.ok is False]

    def as_dict(self) -> dict:
        return {**asdict(self), "status": self.status}


def loaded_hosts(page_html: str) -> set[str]:
    """Hosts of the absolute URLs a page's HTML would load (attributes, styles, scripts), links (``<a href>``) not."""
    hosts = set()
    for m in _URL.finditer(page_html):
        if _LINK_BEFORE.search(page_html[max(0, m.start() - 300):m.start()]):
            continue
        hosts.add(m.group(1).lower().rstrip("."))
    return hosts


def _host(url: str) -> str:
    try:
        return (urlsplit(url).hostname or "").lower()
    except ValueError:
        return ""


def _pages(ep: Episode) -> list[pb.Observation]:
    return [r.observation for r in ep.records] + [ep.observation]


def _signature(obs: pb.Observation) -> tuple[str, str, str]:
    tree = _IDS.sub("[]", obs.axtree)
    return obs.url, obs.title, hashlib.sha1(tree.encode()).hexdigest()[:12]


@dataclass
class _Run:
    episode: Episode
    verdict: pb.Verdict


class Validator:
    """Validates tasks on one farm and judge (both channels shared by every task's sessions)."""

    def __init__(self, env: EnvironmentClient, judge: judge_pb2_grpc.JudgeServiceStub, *, seed: int = 0,
                 random_steps: int = 5, timeout: float = 120.0,
                 policy: policy_pb2_grpc.PolicyServiceStub | None = None, scripted: Iterable[str] = ()) -> None:
        self.env, self.judge, self.seed, self.random_steps, self.timeout = env, judge, seed, random_steps, timeout
        self.policy, self.scripted = policy, frozenset(scripted)  # the policy service's oracle, the tasks it solves
        # the catalog mode's start-state sessions, opened and closed once per start_key (the latest groups only)
        self._starts: OrderedDict[tuple[str, ...], asyncio.Future[Episode]] = OrderedDict()

    def has_oracle(self, task: pb.Task) -> bool:
        """A reference solution: ``Task.oracle``, or the policy service's ``oracle`` policy's script (MiniWoB++)."""
        return len(task.oracle) > 0 or (self.policy is not None and task.task_id in self.scripted)

    async def _open(self, task: pb.Task) -> Episode:
        for attempt in range(8):  # the farm full: wait for sessions of other tasks to close
            try:
                return await Episode.open(self.env, task, spec=_SPEC, seed=self.seed, labels={"adapter": "validate"})
            except errors.ResourceExhausted as exc:
                if attempt == 7:
                    raise
                await asyncio.sleep(exc.retry_after_seconds or 1.0 + attempt)
        raise AssertionError("unreachable")

    async def _grade(self, ep: Episode) -> pb.Verdict:
        return await ep.grade(self.judge, deadline=self.timeout)

    async def _play(self, ep: Episode, actions: Iterable[pb.Action]) -> None:
        for action in actions:
            resp = await ep.step(action)
            if resp.done:
                return

    async def _solve(self, ep: Episode, task: pb.Task) -> None:
        """The reference solution: ``Task.oracle`` replayed, else the policy service's ``oracle`` policy asked step
        by step (its MiniWoB++ scripts read the page, so they are no fixed list of actions)."""
        if len(task.oracle) or self.policy is None:
            await self._play(ep, task.oracle)
            return
        for i in range(MAX_SCRIPTED_STEPS):
            try:
                act = await self.policy.Act(policy_pb2.ActRequest(
                    episode_id=ep.session_id, policy=ORACLE_POLICY, task=task, observation=ep.observation,
                    step_index=i, seed=self.seed, instruction=ep.instruction), timeout=self.timeout)
            except grpc.aio.AioRpcError as exc:
                raise errors.from_rpc_error(exc) from exc
            if (await ep.step(act.action)).done:
                return

    async def _oracle(self, task: pb.Task) -> _Run:
        ep = await self._open(task)
        await self._solve(ep, task)
        return _Run(ep, await self._grade(ep))

    async def _non_answer(self, ep: Episode, text: str | None) -> _Run:
        if text is not None:
            await self._play(ep, [pb.Action(answer=pb.AnswerAction(text=text))])
        return _Run(ep, await self._grade(ep))

    async def _answering(self, task: pb.Task, text: str) -> _Run:
        return await self._non_answer(await self._open(task), text)

    async def _random(self, task: pb.Task) -> _Run:
        rng = random.Random(f"{self.seed}/{task.task_id}")
        ep = await self._open(task)
        for _ in range(self.random_steps):
            refs = _REF.findall(ep.observation.axtree)
            action = (pb.Action(click=pb.ClickAction(target=pb.ElementTarget(element_id=rng.choice(refs))))
                      if refs else pb.Action(scroll=pb.ScrollAction(dy=300)))
            if (await ep.step(action)).done:
                break
        else:
            await self._play(ep, [pb.Action(answer=pb.AnswerAction(text=""))])
        return _Run(ep, await self._grade(ep))

    async def validate(self, task: pb.Task, *, catalog: bool = False, sampled: bool = True) -> TaskReport:
        """The checks of one task (its sessions run concurrently where they do not depend on each other): every
        check in sessions of its own (full), or the catalog mode's (``catalog``: the sample's checks too when
        ``sampled``)."""
        t0 = time.monotonic()
        report = TaskReport(task.task_id, pb.TaskSource.Name(task.source).removeprefix("TASK_SOURCE_").lower(),
                            pb.TaskKind.Name(task.kind).removeprefix("TASK_KIND_").lower(),
                            task.builder, mode="catalog" if catalog else "full", sampled=sampled or not catalog)
        try:
            await (self._catalog_checks(task, report, sampled) if catalog else self._checks(task, report))
        except errors.WebenvError as exc:
            report.error = f"{exc.code.name} {exc.reason}: {exc.message}"[:500]
        report.seconds = round(time.monotonic() - t0, 2)
        report.finished_at = round(time.time(), 2)
        return report

    async def _start_state(self, task: pb.Task) -> Episode:
        """The start-state session of the task's group (``start_key``): opened and closed with its site state and
        network trace once, by the first task of the group to ask; the others wait for it (so it is closed before
        any of them takes a step). A failed one is opened again by the next task that asks."""
        key = start_key(task)
        fut = self._starts.get(key)
        if fut is None or (fut.done() and (fut.cancelled() or fut.exception() is not None)):
            fut = self._starts[key] = asyncio.ensure_future(self._closed_start(task))
            while len(self._starts) > START_STATES_KEPT:
                self._starts.popitem(last=False)
        self._starts.move_to_end(key)
        return await asyncio.shield(fut)

    async def _closed_start(self, task: pb.Task) -> Episode:
        ep = await self._open(task)
        await ep.end()
        return ep

    async def _on_start_state(self, ep: Episode, task: pb.Task, text: str | None) -> _Run:
        """The verdict of ``task`` on the start page and site state ``ep`` was closed with: doing nothing (``text``
        None), or ``text`` answered at once, as one answer step (the trajectory a session answering at once gives
        the judge, which reads only the trajectory: pages, answer, site state), without a session of its own."""
        trajectory = ep.trajectory(task)
        if text is not None:
            action = pb.Action(answer=pb.AnswerAction(text=text))
            trajectory.steps.append(pb.StepRecord(step_index=1, observation=ep.observation, action=action,
                                                  action_text=format_action(action), done=True,
                                                  url_after=ep.observation.url))
            trajectory.final_answer = text
        return _Run(ep, await ep.evaluate(self.judge, trajectory, task=task, deadline=self.timeout))

    async def _catalog_checks(self, task: pb.Task, report: TaskReport, sampled: bool) -> None:
        has_oracle = self.has_oracle(task)
        # the start state (graded as doing nothing, and every non-answer on it: one session per start_key group),
        # the oracle's session and, in the sample, a session beside it, opened together; the start state is closed
        # before the oracle's first step, so its site state is a fresh session's whatever the oracle does
        start, *eps = await asyncio.gather(self._start_state(task), *([self._open(task)] if has_oracle else []),
                                           *([self._open(task)] if has_oracle and sampled else []))
        null, *answered = await asyncio.gather(*(self._on_start_state(start, task, text) for text in (
            None, *NON_ANSWERS, task.instruction)))
        runs = {"do-nothing": null, "empty answer": answered[0], "done": answered[1],
                "the instruction echoed": answered[2]}
        first = second = rand = None
        if has_oracle:
            await self._solve(eps[0], task)
            first = _Run(eps[0], await self._grade(eps[0]))
        if sampled:
            later = await asyncio.gather(*([self._oracle(task)] if has_oracle else []), self._random(task))
            second, rand = (later[0], later[1]) if has_oracle else (None, later[0])
        self._verdicts(task, report, first, runs, rand)
        report.checks["leak"] = _leak(task, _pages(first.episode) if first else [null.episode.opened.observation],
                                        _moves(first))
        report.checks["egress"] = _egress(task, [first, second, null, rand])
        if sampled:
            report.checks["determinism"] = _determinism(first, second, pages=len(task.oracle) > 0)
            report.checks["isolation"] = _isolation(_Run(eps[1], await self._grade(eps[1])), null) if has_oracle \
                else Check(None, "no reference solution changes the site's state")

    def _verdicts(self, task: pb.Task, report: TaskReport, first: _Run | None, runs: dict[str, _Run],
                  rand: _Run | None) -> None:
        """``oracle`` and ``floor`` from the oracle's verdict and the non-answers'; the random policy's, reported."""
        if first is None:
            report.checks["oracle"] = Check(None, "the task has no reference solution")
        else:
            report.oracle_score = first.verdict.score
            report.checks["oracle"] = Check(True) if first.verdict.passed else Check(
                False, f"the oracle's replay fails the rubric (score {first.verdict.score:g}): "
                       f"{_failed_facts(first.verdict)}; {_step_errors(first)}")
            if not first.verdict.passed and (late := _timed_out(first)):
                report.error = f"the oracle's step timed out, so its verdict says nothing of the task: {late}"[:500]
        passing = [name for name, r in runs.items() if r.verdict.passed]
        report.floor = max(r.verdict.score for r in runs.values())
        report.random_passed = rand.verdict.passed if rand else None
        report.checks["floor"] = Check(False, f"{', '.join(passing)} passes the rubric") if passing else Check(True)

    async def _checks(self, task: pb.Task, report: TaskReport) -> None:
        has_oracle = self.has_oracle(task)
        # the oracle and a session beside it that does nothing, opened together (isolation), then the rest
        null_ep = await self._open(task)
        first = await self._oracle(task) if has_oracle else None
        null = await self._non_answer(null_ep, None)
        later = await asyncio.gather(
            *([self._oracle(task)] if has_oracle else []),
            *(self._answering(task, text) for text in (*NON_ANSWERS, task.instruction)),
            self._random(task))
        second = later[0] if has_oracle else None
        empty, done, echo, rand = later[-4:]
        runs = {"do-nothing": null, "empty answer": empty, "done": done, "the instruction echoed": echo}
        self._verdicts(task, report, first, runs, rand)
        report.checks["leak"] = _leak(task, _pages(first.episode) if first else [null.episode.opened.observation],
                                        _moves(first))
        report.checks["determinism"] = _determinism(first, second, pages=len(task.oracle) > 0)
        report.checks["egress"] = _egress(task, [first, second, null, empty, done, echo, rand])
        report.checks["isolation"] = _isolation(null, done) if has_oracle else Check(
            None, "no reference solution changes the site's state")


def _failed_facts(verdict: pb.Verdict) -> str:
    bad = [f"{r.fact_id} ({r.reason[:80]})" if r.reason else r.fact_id for r in verdict.results
           if r.outcome != pb.FACT_OUTCOME_HOLDS]
    return ", ".join(bad[:3]) or "no fact failed, the verdict did"


def _moves(run: _Run | None) -> int:
    return sum(r.action.WhichOneof("kind") != "answer" for r in run.episode.records) if run else 0


def _failed_steps(run: _Run, *, timed_out: bool = False) -> list[str]:
    """The run's steps whose action failed on the farm (``timed_out``: ran out of time, "Timeout 5000ms exceeded")."""
    return [f"step {r.step_index}: {r.last_action_error[:120]}" for r in run.episode.records if r.last_action_error
            and (not timed_out or ("Timeout" in r.last_action_error and "exceeded" in r.last_action_error))]


def _step_errors(run: _Run) -> str:
    return "; ".join(_failed_steps(run)[:2]) or "no step failed"


def _timed_out(run: _Run) -> str:
    """The run's steps whose action ran out of time on the farm ("Timeout 5000ms exceeded"). Measured on the
    whole-catalog run: at load average 40-55 on 2 cores, 16 of 3,323 tasks' oracles failed this way or left a
    transaction's record unsaved, and all 16 passed when run again at load 9; a verdict after a timed-out step is the
    machine's, not the task's, so such a task is errored (typed; `--resume` runs it again), never failed."""
    return "; ".join(_failed_steps(run, timed_out=True)[:2])


def _leak(task: pb.Task, pages: list[pb.Observation], moves: int) -> Check:
    """``pages``: the oracle's, from the start page (only the start page without an oracle); ``moves``: the steps
    the oracle took before answering."""
    groups = answer_groups(task)
    if not groups:
        return Check(None, "no fact group an answer alone decides (with answers of 4 characters or more)")
    if found := given_away(groups, task.instruction):
        return Check(False, f"the instruction states the answer {', '.join(found)!r}")
    start = pages[0]
    for name, text in (("text", start.axtree + start.html), ("URL", start.url), ("title", start.title)):
        if moves and (found := given_away(groups, text)):
            return Check(False, f"the answer {', '.join(found)!r} is in the start page's {name} though the oracle "
                                f"takes {moves} step(s) to reach it ({start.url[:120]})")
    for i, obs in enumerate(pages):
        if given_away(groups, obs.axtree + obs.html):
            break  # a page states it: the agent has reached it
        if found := given_away(groups, f"{obs.url} {obs.title}"):
            return Check(False, f"the answer {', '.join(found)!r} is in the URL or title of the page after oracle "
                                f"step {i}, before a page shows it ({obs.url[:120]})")
    return Check(True)


def _determinism(first: _Run | None, second: _Run | None, *, pages: bool = True) -> Check:
    """The verdict and score twice, and (``pages``: a fixed list of actions, ``Task.oracle``) the same pages; the
    policy service's scripts read the page and MiniWoB++ draws a new episode after each, so theirs are not compared."""
    if first is None or second is None:
        return Check(None, "the task has no reference solution to replay twice")
    a, b = first.verdict, second.verdict
    if (a.passed, round(a.score, 6)) != (b.passed, round(b.score, 6)):
        failing = second if a.passed else first
        return Check(False, f"the oracle twice: passed {a.passed} score {a.score:g}, then passed {b.passed} score "
                            f"{b.score:g} ({_failed_facts(failing.verdict)}; {_step_errors(failing)})")
    if not pages:
        return Check(True)
    pa, pb_ = [_signature(o) for o in _pages(first.episode)], [_signature(o) for o in _pages(second.episode)]
    for i, (x, y) in enumerate(zip(pa, pb_, strict=False)):
        if x != y:
            what = "URL" if x[0] != y[0] else "title" if x[1] != y[1] else "page text"
            return Check(False, f"the oracle twice: the {what} after step {i} differs ({x[0][:100]})")
    if len(pa) != len(pb_):
        return Check(False, f"the oracle twice: {len(pa)} pages, then {len(pb_)}")
    return Check(True)


def _allowed_hosts(task: pb.Task) -> set[str]:
    hosts = {_host(task.start_url), task.site.lower()}
    hosts |= {_host(a.navigate.url) for a in task.oracle if a.WhichOneof("kind") == "navigate"}
    hosts |= {_host(a.new_tab.url) for a in task.oracle if a.WhichOneof("kind") == "new_tab"}
    return {h for h in hosts if h}


def _egress(task: pb.Task, runs: list[_Run | None]) -> Check:
    allowed = _allowed_hosts(task)
    for run in runs:
        if run is None:
            continue
        for event in run.episode.network_events:  # the farm's own trace of the session's requests
            if (host := _host(event.url)) and host not in allowed:
                return Check(False, f"the session requested {event.url[:120]} ({event.resource_type or 'request'}; "
                                    f"the task allows {', '.join(sorted(allowed))})")
        for obs in _pages(run.episode):
            visited = {_host(obs.url)} | {_host(t.url) for t in obs.tabs}
            outside = sorted(h for h in visited | loaded_hosts(obs.html) if h and h not in allowed)
            if outside:
                return Check(False, f"{obs.url[:120]} reaches {', '.join(outside[:3])} (the task allows "
                                    f"{', '.join(sorted(allowed))})")
    return Check(True)


def _isolation(beside: _Run, fresh: _Run) -> Check:
    def state(run: _Run) -> object:
        text = run.episode.evidence
        try:
            return json.loads(text) if text else None
        except ValueError:
            return text

    if state(beside) != state(fresh):
        return Check(False, "a session opened beside the oracle's holds another site state than a fresh one: "
                            f"{beside.episode.evidence[:160]} vs {fresh.episode.evidence[:160]}")
    return Check(True)


def stratified(tasks: list[pb.Task], per_group: int, seed: int) -> list[pb.Task]:
    """At most ``per_group`` tasks of each (source, kind, builder), drawn with ``seed``, in catalog order."""
    groups: dict[tuple, list[int]] = defaultdict(list)
    for i, t in enumerate(tasks):
        groups[(t.source, t.kind, t.builder)].append(i)
    rng = random.Random(seed)
    keep = sorted(i for idx in groups.values() for i in (idx if len(idx) <= per_group else rng.sample(idx, per_group)))
    return [tasks[i] for i in keep]


def _unit(key: str) -> float:
    """A task's fixed draw in [0, 1) (the same in every process, unlike ``hash``)."""
    return int.from_bytes(hashlib.sha1(key.encode()).digest()[:8], "big") / 2**64


def draw_sample(tasks: list[pb.Task], per_group: int, rate: float, seed: int) -> set[str]:
    """The catalog mode's sample: ``per_group`` tasks of each source, kind and builder (``stratified``) and besides
    every task with a draw under ``rate``; over the whole selection, so every shard draws the same sample."""
    ordered = sorted(tasks, key=lambda t: t.task_id)  # the same draw whatever order the catalog lists them in
    ids = {t.task_id for t in stratified(ordered, per_group, seed)} if per_group else set()
    return ids | {t.task_id for t in tasks if _unit(f"{seed}/{t.task_id}") < rate}


def start_key(task: pb.Task) -> tuple[str, ...]:
    """The tasks whose start-state session is one and the same: a synthetic task's session is its site's state
    reset (``ResetSiteState`` of ``task.site``) and its start URL loaded with the validator's seed, nothing of the
    task besides (the farm's ``SyntheticAdapter``), so the tasks of one site and start URL share it; any other task
    (MiniWoB++ episodes, task files, benchmarks with their own setup) has its own."""
    if task.source == pb.TASK_SOURCE_SYNTHETIC:
        return "synthetic", task.site, task.start_url
    return ("task", task.task_id)


def in_shard(task_id: str, shard: tuple[int, int]) -> bool:
    """Whether a task is in shard ``i`` of ``n`` (by its id alone: the same split whatever the catalog's order)."""
    i, n = shard
    return int(hashlib.sha1(task_id.encode()).hexdigest()[:12], 16) % n == i


def append_jsonl(path: Path, report: TaskReport) -> None:
    """One task's report as one line, written whole and flushed: a run killed mid-write leaves at most one
    unterminated line, which ``read_jsonl`` leaves out (and a later append starts on a line of its own)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+b") as f:
        f.seek(0, 2)
        if f.tell():
            f.seek(-1, 2)
            torn = f.read(1) != b"\n"
        else:
            torn = False
        f.write((b"\n" if torn else b"") + json.dumps(report.as_dict(), separators=(",", ":")).encode() + b"\n")
        f.flush()
        os.fsync(f.fileno())


def read_jsonl(paths: Iterable[Path]) -> tuple[list[TaskReport], int]:
    """The reports of one or many JSONL files, gzipped (``.gz``) or not (the last line of a task wins: a resumed run
    re-runs its errored tasks), in first-seen order, and the number of lines left out (torn by a kill, or not a
    report)."""
    found: dict[str, TaskReport] = {}
    torn = 0
    for path in paths:
        opener = gzip.open if str(path).endswith(".gz") else open
        with opener(path, "rt", encoding="utf-8", errors="replace") as f:
            for line in f:
                if not line.endswith("\n") or not line.strip():
                    torn += bool(line.strip())
                    continue
                try:
                    r = TaskReport.from_dict(json.loads(line))
                except (ValueError, TypeError, KeyError):
                    torn += 1
                    continue
                found.pop(r.task_id, None)
                found[r.task_id] = r
    return list(found.values()), torn


def coverage(reports: list[TaskReport]) -> dict[str, dict[str, int]]:
    """Per check (and ``random``): on how many tasks it ran (``ran``: every task not errored whose report has it),
    on how many it applied (``applicable``: ran and decided), and failed."""
    out = {}
    done = [r for r in reports if not r.error]
    for name in (*CHECKS, "random"):
        if name == "random":
            ran = [r for r in done if r.random_passed is not None]
            out[name] = {"ran": len(ran), "applicable": len(ran), "failed": 0}
            continue
        ran = [r.checks[name] for r in done if name in r.checks]
        out[name] = {"ran": len(ran), "applicable": sum(c.ok is not None for c in ran),
                     "failed": sum(c.ok is False for c in ran)}
    return out

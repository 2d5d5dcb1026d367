"""Test-defined peers (sites/TaskService, environment, policy, judge) served over real gRPC, and collectors.

The peers form a tiny deterministic web: page N of a site shows "page N"; clicking `#next` goes to page N+1;
`noop` stays (a repeated state). A task's goal is to reach page `goal` and answer its number; the oracle
does exactly that, the judge checks the final URL and answer. Knobs on the servicers inject environment
failures, slow policies and latency, so the engine's scheduling, retries and store paths are exercised over
real channels without the real services.
"""

from __future__ import annotations

import asyncio
import io
import random
import uuid
from dataclasses import dataclass, field

import grpc
import pytest
from webenv import errors
from webenv.collector.app import Collector
from webenv.collector.config import Settings
from webenv.envcontract import STEP_STREAM_MAX_INFLIGHT
from webenv.streams import serve_in_completion_order
from webenv.v1 import (
    collector_pb2_grpc,
    common_pb2,
    environment_pb2,
    environment_pb2_grpc,
    judge_pb2,
    judge_pb2_grpc,
    policy_pb2,
    policy_pb2_grpc,
    task_pb2,
    task_pb2_grpc,
)

DIFFS = [common_pb2.DIFFICULTY_EASY, common_pb2.DIFFICULTY_MEDIUM, common_pb2.DIFFICULTY_HARD]


def page_url(site: str, n: int) -> str:
    return f"http://{site}/page/{n}"


def page_obs(site: str, n: int) -> common_pb2.Observation:
    return common_pb2.Observation(
        url=page_url(site, n),
        title=f"{site} page {n}",
        axtree=f'[1] RootWebArea "{site} page {n}"\n[2] link "next"',
        html=f"<main><h1>page {n}</h1><a bid='2' id='next'>next</a></main>",
        markdown=f"# page {n}\n[next](2)",
        elements=[common_pb2.Element(element_id="2", tag="a", role="link", name="next", visible=True, clickable=True,
                                     bbox=common_pb2.BoundingBox(x=10, y=20 + n, width=40, height=16))],
        formats=[common_pb2.OBSERVATION_FORMAT_AXTREE],
    )


def page_png(n: int) -> common_pb2.Screenshot:
    """A 320x180 PNG of page ``n`` (its colour by the number: equal pages, equal bytes)."""
    from PIL import Image

    buf = io.BytesIO()
    Image.new("RGB", (320, 180), ((n * 40) % 256, 90, 160)).save(buf, "PNG")
    return common_pb2.Screenshot(data=buf.getvalue(), codec=common_pb2.IMAGE_CODEC_PNG, width=320, height=180)


def click_next() -> common_pb2.Action:
    return common_pb2.Action(click=common_pb2.ClickAction(target=common_pb2.ElementTarget(selector="#next")))


def make_tasks(n_sites: int = 6, per_site: int = 3) -> list[common_pb2.Task]:
    tasks = []
    for s in range(n_sites):
        site = f"shop-{s:04d}.web.test"
        for k in range(per_site):
            diff = DIFFS[k % 3]
            goal = 1 + k
            oracle = [click_next() for _ in range(goal)] + [
                common_pb2.Action(answer=common_pb2.AnswerAction(text=str(goal)))
            ]
            tasks.append(
                common_pb2.Task(
                    task_id=f"synthetic/{site}/nav-{k}",
                    source=common_pb2.TASK_SOURCE_SYNTHETIC,
                    kind=common_pb2.TASK_KIND_NAVIGATION,
                    instruction=f"Go to page {goal} and answer its number",
                    start_url=page_url(site, 0),
                    site=site,
                    family="shop",
                    split=common_pb2.SPLIT_TEST if s % 3 == 2 else common_pb2.SPLIT_TRAIN,
                    difficulty=diff,
                    rubric=common_pb2.Rubric(rubric_id=f"r-{s}-{k}", version=1),
                    oracle=oracle,
                    seed=1000 + s * 10 + k,
                    metadata={"goal": str(goal)},
                    template_id=f"synthetic/shop/nav-{k}",
                )
            )
    return tasks


class Sites(task_pb2_grpc.TaskServiceServicer):
    def __init__(self, tasks: list[common_pb2.Task]) -> None:
        self.tasks = tasks
        self.pages_read = 0  # ListTasks answered (how far a plan read the catalog)

    async def ListTasks(self, request, context):
        self.pages_read += 1
        f = request.filter
        out = [
            t for t in self.tasks
            if (not f.difficulties or t.difficulty in f.difficulties)
            and (not f.split or t.split == f.split)
            and (not f.families or t.family in f.families)
            and (not f.task_ids or t.task_id in f.task_ids)
            and (not f.sources or t.source in f.sources)
        ]  # fmt: skip
        size = request.page_size or 100
        start = int(request.page_token or 0)
        page = out[start : start + size]
        token = str(start + size) if start + size < len(out) else ""
        return task_pb2.ListTasksResponse(tasks=page, next_page_token=token, total_size=len(out))


@dataclass
class _Session:
    site: str
    page: int = 0
    steps: int = 0
    episode_id: str = ""


class Env(environment_pb2_grpc.EnvironmentServiceServicer):
    """The deterministic page-walk environment, with failure and latency knobs."""

    def __init__(self, name: str = "env") -> None:
        self.name = name
        self.sessions: dict[str, _Session] = {}
        self.fail_steps = False  # every step fails with UNAVAILABLE (a dead node)
        self.step_delay = 0.0
        self.opened = 0
        self.closed = 0
        self.steps_taken = 0
        self.forks = 0
        self.refuse_forks = False
        self.missing_selectors: set[str] = set()  # a click on one of these is INVALID_ARGUMENT (no such element)
        self.screenshots = False  # every observation carries a PNG of its page (a colour per page number)

    async def OpenSession(self, request, context):
        sid = uuid.uuid4().hex[:10]
        url = request.task.start_url if request.HasField("task") else request.start_url
        site = url.split("/")[2]
        self.sessions[sid] = _Session(site, episode_id=request.labels.get("episode_id", ""))
        self.opened += 1
        return environment_pb2.OpenSessionResponse(
            session=environment_pb2.Session(
                session_id=sid, state=environment_pb2.SESSION_STATE_OPEN, env_kind=common_pb2.ENV_KIND_BROWSER,
                node=self.name,
            ),
            observation=self._obs(site, 0),
            instruction=request.task.instruction,
        )

    def _obs(self, site: str, n: int) -> common_pb2.Observation:
        obs = page_obs(site, n)
        if self.screenshots:
            obs.screenshot.CopyFrom(page_png(n))
        return obs

    async def _step(self, req: environment_pb2.StepRequest) -> environment_pb2.StepResponse:
        s = self.sessions.get(req.session_id)
        if s is None:
            raise KeyError(req.session_id)
        if self.step_delay:
            await asyncio.sleep(self.step_delay)
        kind = req.action.WhichOneof("kind")
        if kind == "click" and req.action.click.target.selector in self.missing_selectors:
            raise errors.InvalidArgument(f"no element matches {req.action.click.target.selector}")
        if kind == "click":
            s.page += 1
        s.steps += 1
        self.steps_taken += 1
        return environment_pb2.StepResponse(
            session_id=req.session_id,
            step_index=req.step_index,
            observation=self._obs(s.site, s.page),
            done=kind == "answer",
            timings=common_pb2.StepTimings(total_seconds=0.001, queue_seconds=0.0001),
            target_element_id="2" if kind == "click" else "",
        )

    async def Step(self, request, context):
        return await self._step(request)

    async def StepStream(self, request_iterator, context):
        async def answer(item):
            if self.fail_steps:
                raise errors.Unavailable(f"{self.name} is down", reason="NODE_DOWN")
            try:
                return await self._step(item.step)
            except KeyError:
                raise errors.NotFound("no such session", reason="NO_SESSION") from None

        async for response in serve_in_completion_order(request_iterator, answer, environment_pb2.StepStreamResponse,
                                                        max_inflight=STEP_STREAM_MAX_INFLIGHT):
            yield response

    async def ForkSession(self, request, context):
        """Copies of a session at its page (its step count starts again at 0, as the farm's forks do)."""
        parent = self.sessions.get(request.session_id)
        if parent is None:
            await context.abort(grpc.StatusCode.NOT_FOUND, "no such session")
        if self.refuse_forks:
            await context.abort(grpc.StatusCode.FAILED_PRECONDITION, "this page's state cannot be copied")
        self.forks += 1
        out = []
        for _ in range(request.count):
            sid = uuid.uuid4().hex[:10]
            self.sessions[sid] = _Session(parent.site, parent.page, episode_id=parent.episode_id)
            self.opened += 1
            out.append(environment_pb2.OpenSessionResponse(
                session=environment_pb2.Session(session_id=sid, state=environment_pb2.SESSION_STATE_OPEN,
                                                env_kind=common_pb2.ENV_KIND_BROWSER, node=self.name),
                observation=page_obs(parent.site, parent.page)))
        return environment_pb2.ForkSessionResponse(sessions=out)

    async def CloseSession(self, request, context):
        s = self.sessions.pop(request.session_id, None)
        self.closed += 1
        state = f'{{"page": {s.page}}}' if s and request.capture_evidence else ""
        trace = [common_pb2.NetworkEvent(method="GET", url=page_url(s.site, n), status=200, navigation=True)
                 for n in range(s.page + 1)] if s and request.capture_evidence else []  # the pages it walked
        return environment_pb2.CloseSessionResponse(
            session=environment_pb2.Session(session_id=request.session_id, state=environment_pb2.SESSION_STATE_CLOSED),
            site_state_json=state, network_events=trace,
        )


class Policy(policy_pb2_grpc.PolicyServiceServicer):
    """oracle follows task.oracle; random clicks next or does nothing (seeded); knobs add latency."""

    def __init__(self) -> None:
        self.delay = 0.0
        self.slow_tasks: dict[str, float] = {}  # task_id -> seconds per act
        self.delay_fn = None  # (request) -> seconds
        self.requests = 0
        self.seen: dict[str, list[common_pb2.Task]] = {}  # policy -> the task of every request it received

    def choose(self, req: policy_pb2.ActRequest) -> policy_pb2.ActResponse:
        if req.policy == "oracle":
            oracle = req.task.oracle
            action = oracle[req.step_index] if req.step_index < len(oracle) else common_pb2.Action(noop=common_pb2.NoopAction())
        else:
            rng = random.Random(f"{req.seed}|{req.step_index}")  # str seeds are stable across processes
            action = click_next() if rng.random() < 0.5 else common_pb2.Action(noop=common_pb2.NoopAction())
        kind = action.WhichOneof("kind")
        text = {"click": 'click("#next")', "noop": "noop()"}.get(kind, f'answer("{action.answer.text}")')
        return policy_pb2.ActResponse(episode_id=req.episode_id, action=action, action_text=text,
                                      policy=req.policy or "random", policy_version=f"{req.policy or 'random'}@1",
                                      prompt_tokens=40 + req.step_index, completion_token_ids=[5, 6, req.step_index],
                                      completion_logprobs=[-0.5, -1.25, -0.125])

    async def ListPolicies(self, request, context):
        return policy_pb2.ListPoliciesResponse(policies=[
            policy_pb2.PolicyInfo(name="oracle", needs_solution=True, solved_task_ids=["scripted/solvable"]),
            policy_pb2.PolicyInfo(name="random"),
            policy_pb2.PolicyInfo(name="explore"),
        ], default_policy="random")

    async def ActStream(self, request_iterator, context):
        async def answer(item):
            self.requests += 1
            req = item.request
            self.seen.setdefault(req.policy, []).append(req.task)
            d = self.slow_tasks.get(req.task.task_id, self.delay)
            if self.delay_fn is not None:
                d = self.delay_fn(req)
            if d:
                await asyncio.sleep(d)
            return self.choose(req)

        async for response in serve_in_completion_order(request_iterator, answer, policy_pb2.ActStreamResponse,
                                                        max_inflight=512):
            yield response


class Judge(judge_pb2_grpc.JudgeServiceServicer):
    """Passes when the final page is the goal and the answer names it (ground truth of the page walk)."""

    def __init__(self) -> None:
        self.evaluated = 0
        self.options: list[judge_pb2.JudgeOptions] = []

    async def Evaluate(self, request, context):
        self.evaluated += 1
        goal = request.task.metadata.get("goal", "")  # tasks from task files have none: they never pass
        t = request.trajectory
        ok = bool(goal) and t.final_observation.url.endswith(f"/page/{goal}") and t.final_answer == goal
        self.options.append(request.options)
        return judge_pb2.EvaluateResponse(
            verdict=common_pb2.Verdict(
                passed=ok, score=1.0 if ok else 0.0, rubric_id=request.task.rubric.rubric_id,
                rubric_version=request.task.rubric.version, judge_version="test-judge-1", answer_supported=ok,
            )
        )


@dataclass
class World:
    """The test peers and their addresses."""

    tasks: list[common_pb2.Task]
    sites: Sites
    env: Env
    env2: Env
    policy: Policy
    judge: Judge
    addr: dict[str, str] = field(default_factory=dict)
    servers: list[grpc.aio.Server] = field(default_factory=list)


async def _serve(add, servicer) -> tuple[grpc.aio.Server, int]:
    server = grpc.aio.server()
    add(servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    return server, port


async def start_world(tasks: list[common_pb2.Task] | None = None) -> World:
    tasks = tasks or make_tasks()
    w = World(tasks, Sites(tasks), Env("node-a"), Env("node-b"), Policy(), Judge())
    for key, add, svc in (
        ("sites", task_pb2_grpc.add_TaskServiceServicer_to_server, w.sites),
        ("env", environment_pb2_grpc.add_EnvironmentServiceServicer_to_server, w.env),
        ("env2", environment_pb2_grpc.add_EnvironmentServiceServicer_to_server, w.env2),
        ("policy", policy_pb2_grpc.add_PolicyServiceServicer_to_server, w.policy),
        ("judge", judge_pb2_grpc.add_JudgeServiceServicer_to_server, w.judge),
    ):
        server, port = await _serve(add, svc)
        w.servers.append(server)
        w.addr[key] = f"127.0.0.1:{port}"
    return w


@pytest.fixture
async def world():
    w = await start_world()
    yield w
    for s in w.servers:
        await s.stop(0)


@pytest.fixture(scope="session")
def chdb_url(tmp_path_factory) -> str:
    """One chDB data folder for the whole session (chDB opens one path per process); tests use own databases."""
    return f"chdb://{tmp_path_factory.mktemp('chdb')}"


def collector_settings(world: World, tmp_path, chdb_url: str, **over) -> Settings:
    values = dict(
        grpc_port=0, metrics_port=0, host="127.0.0.1", log_json=False,
        data_dir=str(tmp_path / "data"), store_url=chdb_url, store_database=f"t_{uuid.uuid4().hex[:10]}",
        browser_addr=world.addr["env"], policy_addr=world.addr["policy"], judge_addr=world.addr["judge"],
        sites_addr=world.addr["sites"], flush_interval_seconds=0.05, spool_retry_seconds=0.2,
        grace_seconds=0.5,
    )
    values.update(over)
    return Settings(**values)


@pytest.fixture
async def make_collector(world, tmp_path, chdb_url):
    started: list[Collector] = []

    async def make(**over) -> Collector:
        c = await Collector.start(collector_settings(world, tmp_path, chdb_url, **over))
        started.append(c)
        return c

    yield make
    for c in started:  # bounded: a shutdown that hangs fails this test instead of stalling the whole run
        await asyncio.wait_for(c.close(), 60)


@pytest.fixture
async def collector(make_collector):
    return await make_collector()


@pytest.fixture
async def stub(collector):
    ch = grpc.aio.insecure_channel(collector.address)
    yield collector_pb2_grpc.CollectorServiceStub(ch)
    await ch.close()


async def wait_done(stub, run_id: str, limit: float = 60.0):
    """Follow WatchRun to the end; returns the last report."""
    from webenv.v1 import collector_pb2

    last = None
    async with asyncio.timeout(limit):
        async for resp in stub.WatchRun(collector_pb2.WatchRunRequest(run_id=run_id)):
            last = resp
    return last


@pytest.fixture
def watch():
    """``await watch(stub, run_id)`` follows WatchRun to the end and returns the last report."""
    return wait_done

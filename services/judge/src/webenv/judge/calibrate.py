"""`webenv-judge calibrate`: how well does the LLM judge agree with ground truth?

Two sources of ground-truth-gradable examples:
- offline (default): generated shop episodes, below;
- live (`--sites ADDR --browser ADDR`, or WEBENV_SITES_ADDR + WEBENV_BROWSER_ADDR): synthetic tasks from
  the TaskService, each run twice in the browser farm: the oracle solution in full (should pass) and its
  first half without an answer (should fail); the site state is captured at close.

Offline examples are synthetic shop episodes (half successful, half not):
each fact of the ten-fact rubric is graded by its deterministic criterion (the truth), and the same
fact, turned into an LLM criterion (same description, a hint of where to look), is graded by the LLM
judge (the prediction). Agreement is reported per criterion kind and overall: accuracy, precision,
recall (positive = HOLDS), Cohen's kappa, and the share of undecidable answers (counted as FAILS
in the other metrics, since an undecidable fact never passes an episode).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import asdict, dataclass
from typing import Any

from webenv.judge.engine import Judge
from webenv.judge.examples import shop_episode, task_for
from webenv.judge.llm import LlmJudge
from webenv.llm import LLMBackend, make_backend
from webenv.v1 import common_pb2, judge_pb2

HOLDS = common_pb2.FACT_OUTCOME_HOLDS
UNDECIDABLE = common_pb2.FACT_OUTCOME_UNDECIDABLE

_HINTS = {
    "url": "Judge from the URLs of the observations.",
    "answer": "Judge from the agent's final answer.",
    "page": "Judge from the page text of the observations.",
    "element_state": "Judge from the form controls shown on the final page.",
    "site_state": "Judge from what the pages show about the cart and orders.",
    "env_reward": "Judge whether the task was completed.",
    "category": "Judge from the category shown in the navigation.",
}


@dataclass
class Agreement:
    """Agreement of predictions with the truth for one criterion kind."""

    n: int
    accuracy: float
    precision: float
    recall: float
    kappa: float
    undecidable_rate: float
    positives: int


def agreement(pairs: list[tuple[bool, int]]) -> Agreement:
    """Metrics of (truth holds, predicted outcome) pairs; undecidable predictions count as FAILS."""
    n = len(pairs)
    if n == 0:
        return Agreement(0, 0.0, 0.0, 0.0, 0.0, 0.0, 0)
    tp = sum(1 for t, p in pairs if t and p == HOLDS)
    fp = sum(1 for t, p in pairs if not t and p == HOLDS)
    fn = sum(1 for t, p in pairs if t and p != HOLDS)
    tn = n - tp - fp - fn
    acc = (tp + tn) / n
    p_true, p_pred = (tp + fn) / n, (tp + fp) / n
    pe = p_true * p_pred + (1 - p_true) * (1 - p_pred)
    kappa = (acc - pe) / (1 - pe) if pe < 1 else (1.0 if acc == 1 else 0.0)
    return Agreement(
        n=n,
        accuracy=round(acc, 4),
        precision=round(tp / (tp + fp), 4) if tp + fp else 0.0,
        recall=round(tp / (tp + fn), 4) if tp + fn else 0.0,
        kappa=round(kappa, 4) + 0.0,
        undecidable_rate=round(sum(1 for _, p in pairs if p == UNDECIDABLE) / n, 4),
        positives=tp + fn,
    )


def as_llm_rubric(rubric: common_pb2.Rubric) -> tuple[common_pb2.Rubric, dict[str, str]]:
    """The same facts with LLM criteria; returns the rubric and fact id -> original kind."""
    out = common_pb2.Rubric()
    out.CopyFrom(rubric)
    out.rubric_id = f"{rubric.rubric_id}-llm"
    kinds: dict[str, str] = {}
    for group in out.groups:
        for f in group.facts:
            kind = f.criterion.WhichOneof("kind") or "unknown"
            kinds[f.fact_id] = kind
            f.criterion.Clear()
            f.criterion.llm.guidance = _HINTS.get(kind, "")
    return out, kinds


class _Pairs:
    """Collects (truth, prediction) pairs per criterion kind for graded examples."""

    def __init__(self, llm: LlmJudge) -> None:
        self.truth_judge = Judge()
        self.llm_judge = Judge(llm=llm)
        self.pairs: dict[str, list[tuple[bool, int]]] = defaultdict(list)
        self.options = judge_pb2.JudgeOptions(allow_llm=True, no_cache=True)
        self.examples = 0

    async def add(self, task: common_pb2.Task, trajectory: common_pb2.Trajectory) -> None:
        truth = self.truth_judge.evaluate_deterministic(task, trajectory)
        llm_rubric, kinds = as_llm_rubric(task.rubric)
        llm_task = common_pb2.Task()
        llm_task.CopyFrom(task)
        llm_task.rubric.CopyFrom(llm_rubric)
        predicted = (await self.llm_judge.evaluate(llm_task, trajectory, self.options)).verdict
        for t, p in zip(truth.results, predicted.results, strict=True):
            if t.outcome == UNDECIDABLE:
                continue
            self.pairs[kinds[t.fact_id]].append((t.outcome == HOLDS, p.outcome))
        self.examples += 1

    def report(self, model: str, source: str, steps: int) -> dict[str, Any]:
        all_pairs = [x for v in self.pairs.values() for x in v]
        return {
            "model": model,
            "source": source,
            "episodes": self.examples,
            "steps": steps,
            "per_kind": {k: asdict(agreement(v)) for k, v in sorted(self.pairs.items())},
            "overall": asdict(agreement(all_pairs)),
        }


async def calibrate(llm: LlmJudge, n: int = 20, steps: int = 8, seed: int = 0) -> dict[str, Any]:
    """Run the offline calibration over ``n`` generated episodes; returns the report."""
    pairs = _Pairs(llm)
    for i in range(n):
        ep = shop_episode(steps=steps, seed=seed + i, success=i % 2 == 0)
        await pairs.add(task_for(ep), ep.trajectory)
    return pairs.report(llm.model_id, "generated shop episodes", steps)


async def run_oracle(
    env: Any, task: common_pb2.Task, actions: list[common_pb2.Action], spec: common_pb2.ObservationSpec
) -> common_pb2.Trajectory:
    """Run ``actions`` of a task in a fresh farm session; the trajectory with the captured site state."""
    from webenv.v1 import environment_pb2

    opened = await env.OpenSession(environment_pb2.OpenSessionRequest(task=task, observation_spec=spec), timeout=120)
    sid = opened.session.session_id
    traj = common_pb2.Trajectory(episode_id=sid, task_id=task.task_id, env_kind=common_pb2.ENV_KIND_BROWSER,
                                 category=task.category)
    obs = opened.observation
    try:
        for i, action in enumerate(actions):
            resp = await env.Step(environment_pb2.StepRequest(session_id=sid, action=action),
                                  timeout=120)
            traj.steps.add(step_index=i, observation=obs, action=action, done=resp.done, reward=resp.reward,
                           url_after=resp.observation.url, last_action_error=resp.observation.last_action_error)
            obs = resp.observation
            if action.HasField("answer"):
                traj.final_answer = action.answer.text
    finally:
        closed = await env.CloseSession(
            environment_pb2.CloseSessionRequest(session_id=sid, capture_evidence=True), timeout=120)
    traj.final_observation.CopyFrom(obs)
    traj.site_state_json = closed.site_state_json
    traj.env_reward = closed.env_reward
    return traj


async def calibrate_live(llm: LlmJudge, sites_addr: str, browser_addr: str, n: int = 10,
                         seed: int = 0) -> dict[str, Any]:
    """Calibrate on synthetic tasks from a TaskService, run by their oracles in a browser farm."""
    import random

    from webenv.client import make_channel
    from webenv.v1 import environment_pb2_grpc, task_pb2, task_pb2_grpc

    pairs = _Pairs(llm)
    spec = common_pb2.ObservationSpec(formats=[common_pb2.OBSERVATION_FORMAT_HTML, common_pb2.OBSERVATION_FORMAT_AXTREE])
    sites_ch, farm_ch = make_channel(sites_addr, timeout=60), make_channel(browser_addr, timeout=120)
    try:
        tasks_stub = task_pb2_grpc.TaskServiceStub(sites_ch)
        env = environment_pb2_grpc.EnvironmentServiceStub(farm_ch)
        listed = await tasks_stub.ListTasks(task_pb2.ListTasksRequest(
            filter=task_pb2.TaskFilter(sources=[common_pb2.TASK_SOURCE_SYNTHETIC]), page_size=1000))
        candidates = sorted((t for t in listed.tasks if len(t.oracle) > 0), key=lambda t: t.task_id)
        chosen = random.Random(seed).sample(candidates, min(n, len(candidates)))
        steps = 0
        for task in chosen:
            full = await run_oracle(env, task, list(task.oracle), spec)
            half = [a for a in list(task.oracle)[: len(task.oracle) // 2] if not a.HasField("answer")]
            partial = await run_oracle(env, task, half, spec)
            steps = max(steps, len(full.steps))
            await pairs.add(task, full)
            await pairs.add(task, partial)
    finally:
        await sites_ch.close()
        await farm_ch.close()
    return pairs.report(llm.model_id, f"live: TaskService {sites_addr}, farm {browser_addr}", steps)


def format_report(report: dict[str, Any]) -> str:
    """A Markdown table of the report."""
    lines = [
        f"Judge calibration: {report['model']} on {report['episodes']} episodes ({report['source']})",
        "",
        "| kind | n | positives | accuracy | precision | recall | kappa | undecidable |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    rows = [*report["per_kind"].items(), ("overall", report["overall"])]
    for kind, a in rows:
        lines.append(
            f"| {kind} | {a['n']} | {a['positives']} | {a['accuracy']:.3f} | {a['precision']:.3f} | "
            f"{a['recall']:.3f} | {a['kappa']:.3f} | {a['undecidable_rate']:.3f} |"
        )
    return "\n".join(lines)


def backend(model: str = "", *, base_url: str = "", model_name: str = "", api: str = "chat") -> LLMBackend | None:
    """The backend to calibrate: a local model folder, else an OpenAI-compatible server, else the judge's configured
    one (WEBENV_JUDGE_LLM_*); None when none is given."""
    from webenv.judge.config import Settings

    if model:
        return make_backend(Settings.model_construct(judge_llm_backend="transformers", judge_model_path=model)
                            .backend_config())
    if base_url:
        return make_backend(Settings.model_construct(judge_llm_backend="openai", judge_llm_base_url=base_url,
                                                     judge_llm_model=model_name, judge_llm_api=api).backend_config())
    from webenv.judge.llm import make_backend as from_settings
    from webenv.runtime import load_settings

    return from_settings(load_settings(Settings, "webenv-judge calibrate"))

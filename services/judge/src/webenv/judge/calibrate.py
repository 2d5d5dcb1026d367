"""`webenv-judge calibrate`: how well does the LLM judge agree with ground truth?

Ground-truth-gradable examples are built from synthetic shop episodes (half successful, half not):
each fact of the ten-fact rubric is graded by its deterministic criterion (the truth), and the same
fact, turned into an LLM criterion (same description, a hint of where to look), is graded by the LLM
judge (the prediction). Agreement is reported per criterion kind and overall: accuracy, precision,
recall (positive = HOLDS), Cohen's kappa, and the share of undecidable answers (counted as FAILS
in the other metrics, since an undecidable fact never passes an episode).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections import defaultdict
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from webenv.judge.cache import VerdictCache
from webenv.judge.engine import Judge
from webenv.judge.examples import shop_episode, task_for
from webenv.judge.llm import LlmBackend, LlmJudge, OpenAICompatibleBackend, TransformersBackend
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


async def calibrate(llm: LlmJudge, n: int = 20, steps: int = 8, seed: int = 0) -> dict[str, Any]:
    """Run the calibration over ``n`` episodes; returns the report."""
    truth_judge = Judge()
    llm_judge = Judge(llm=llm)
    pairs: dict[str, list[tuple[bool, int]]] = defaultdict(list)
    options = judge_pb2.JudgeOptions(allow_llm=True, no_cache=True)
    for i in range(n):
        ep = shop_episode(steps=steps, seed=seed + i, success=i % 2 == 0)
        task = task_for(ep)
        truth = truth_judge.evaluate_deterministic(task, ep.trajectory)
        llm_rubric, kinds = as_llm_rubric(task.rubric)
        llm_task = common_pb2.Task()
        llm_task.CopyFrom(task)
        llm_task.rubric.CopyFrom(llm_rubric)
        predicted = (await llm_judge.evaluate(llm_task, ep.trajectory, options)).verdict
        for t, p in zip(truth.results, predicted.results, strict=True):
            if t.outcome == UNDECIDABLE:
                continue
            pairs[kinds[t.fact_id]].append((t.outcome == HOLDS, p.outcome))
    all_pairs = [x for v in pairs.values() for x in v]
    return {
        "model": llm.backend.model_id,
        "episodes": n,
        "steps": steps,
        "per_kind": {k: asdict(agreement(v)) for k, v in sorted(pairs.items())},
        "overall": asdict(agreement(all_pairs)),
    }


def format_report(report: dict[str, Any]) -> str:
    """A Markdown table of the report."""
    lines = [
        f"Judge calibration: {report['model']} on {report['episodes']} episodes",
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


def _backend(args: argparse.Namespace) -> LlmBackend:
    if args.model:
        return TransformersBackend(args.model, constrained=not args.free)
    if args.base_url:
        return OpenAICompatibleBackend(args.base_url, args.model_name, args.api)
    from webenv.judge.config import Settings
    from webenv.judge.llm import make_backend

    backend = make_backend(Settings())
    if backend is None:
        raise SystemExit("calibrate: give --model DIR or --base-url URL, or set WEBENV_JUDGE_LLM_BACKEND")
    return backend


def cli(argv: list[str] | None = None) -> None:
    """Entry of `webenv-judge calibrate`."""
    parser = argparse.ArgumentParser(prog="webenv-judge calibrate", description=__doc__.split("\n")[0])
    parser.add_argument("--n", type=int, default=20, help="episodes (half successful)")
    parser.add_argument("--steps", type=int, default=8, help="steps per episode")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--model", default="", help="local model folder (transformers backend)")
    parser.add_argument("--free", action="store_true", help="transformers: free generation, not constrained")
    parser.add_argument("--base-url", default="", help="OpenAI-compatible server, e.g. http://localhost:8000/v1")
    parser.add_argument("--model-name", default="", help="model name for the OpenAI-compatible server")
    parser.add_argument("--api", choices=["chat", "completions"], default="chat")
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds per LLM call")
    parser.add_argument("--out", default="", help="write the JSON report here")
    args = parser.parse_args(argv)
    llm = LlmJudge(_backend(args), VerdictCache(0), timeout_seconds=args.timeout, max_tokens=24)
    report = asyncio.run(calibrate(llm, args.n, args.steps, args.seed))
    if args.out:
        Path(args.out).write_text(json.dumps(report, indent=2))
    print(format_report(report), file=sys.stdout)

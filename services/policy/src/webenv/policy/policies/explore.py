"""`explore`: WebWorld's level-2 autonomous exploration, without a model.

Per episode it remembers the URLs visited, the page kinds seen (URL paths with ids generalised) and the
elements already tried on each page. Each step it:
1. fills the next untouched text field of the page with a plausible value (forms get completed),
   then presses the form's submit-looking button once;
2. otherwise scores every clickable element by novelty (a link to a page kind never seen 4, to an
   unvisited URL 3, an element never tried 2, a tried one 0) and takes the best, ties broken by the
   seeded generator; its objective, reported in `memory`, is the page kind it is heading for;
3. when everything here has been tried, scrolls on if the page has more below, else goes back.
The choice depends only on the seed, the step and the pages seen, so a seeded run is reproducible.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from webenv.agent.observe import Candidate, absolute_url, candidates, clickables, page_kind, select_options
from webenv.v1 import common_pb2, policy_pb2

from ..plausible import plausible_text
from ..state import EpisodeStore
from . import build
from .base import Decision
from .crawl import require_observation, step_rng


@dataclass(slots=True)
class ExploreState:
    """What one episode has seen."""

    visits: Counter = field(default_factory=Counter)        # url -> times seen
    kinds: set[str] = field(default_factory=set)            # page kinds reached
    tried: dict[str, set[str]] = field(default_factory=dict)  # url -> element signatures acted on
    scrolled: Counter = field(default_factory=Counter)      # url -> scrolls done


class ExplorePolicy:
    name = "explore"
    description = ("WebWorld level-2 exploration: prefers unseen page kinds, unvisited URLs and untried elements, "
                   "fills forms with plausible values, seeded and reproducible")
    backend = "none"
    model = ""

    def __init__(self, max_episodes: int = 10000, ttl_seconds: float = 3600.0) -> None:
        self.states: EpisodeStore[ExploreState] = EpisodeStore(ExploreState, max_episodes, ttl_seconds)

    async def act(self, request: policy_pb2.ActRequest) -> Decision:
        obs = require_observation(request, self.name)
        if request.step_index == 0:  # an episode (or a rerun of the same id) starts from nothing
            self.states.forget(request.episode_id)
        state = self.states.get(request.episode_id)
        action, objective = self.choose(obs, state, request)
        tried = state.tried.setdefault(obs.url, set())
        target = build.target_id(action)
        if target is not None:
            for c in candidates(obs):
                if c.element_id == target:
                    tried.add(c.signature)
                    break
        memory = (f"objective: {objective}; visited {len(state.visits)} urls, {len(state.kinds)} page kinds")
        return Decision(action=action, memory=memory)

    def choose(self, obs: common_pb2.Observation, state: ExploreState,
               request: policy_pb2.ActRequest) -> tuple[common_pb2.Action, str]:
        rng = step_rng(request, self.name)
        if obs.url:
            state.visits[obs.url] += 1
            state.kinds.add(page_kind(obs.url))
        cands = candidates(obs)
        tried = state.tried.get(obs.url, set())

        fields = [c for c in cands if c.fillable and c.signature not in tried and not c.value]
        if fields:
            c = fields[0]
            return build.fill(c.element_id, plausible_text(c.label, rng)), f"complete the form field '{c.label}'"
        selects = [c for c in cands if c.selectable and c.signature not in tried]
        if selects:
            c = selects[0]
            opts = select_options(obs, c.element_id)
            action = build.select(c.element_id, rng.choice(opts)) if opts else build.press("ArrowDown", c.element_id)
            return action, f"choose an option of '{c.label}'"
        filled_here = any(c.fillable and c.signature in tried for c in cands)
        if filled_here:
            submit = next((c for c in cands if c.is_submit and c.signature not in tried), None)
            if submit is not None:
                return build.click(submit.element_id), f"submit the form with '{submit.label}'"

        scored: list[tuple[float, float, Candidate, str]] = []
        for c in clickables(cands):
            url = absolute_url(obs.url, c.href) if c.is_link else None
            if url is not None:
                if page_kind(url) not in state.kinds:
                    score, goal = 4.0, f"reach a new page kind {page_kind(url)}"
                elif url not in state.visits:
                    score, goal = 3.0, f"visit {url}"
                elif c.signature not in tried:
                    score, goal = 1.0, f"revisit {url}"
                else:
                    score, goal = 0.0, ""
            else:
                score, goal = (2.0, f"try '{c.label or c.role}'") if c.signature not in tried else (0.0, "")
            if score > 0:
                scored.append((score, rng.random(), c, goal))
        if scored:
            _, _, best, goal = max(scored, key=lambda s: (s[0], s[1]))
            return build.click(best.element_id), goal

        scroll = obs.scroll
        more_below = scroll.scroll_height > scroll.y + scroll.viewport_height + 10 if scroll.scroll_height else \
            state.scrolled[obs.url] < 2
        if more_below and state.scrolled[obs.url] < 8:
            state.scrolled[obs.url] += 1
            return build.scroll(0, 400), "look for unexplored parts further down"
        if request.step_index > 0:
            return build.go_back(), "everything here is explored: go back"
        return build.scroll(0, 400), "nothing to explore on this page yet"

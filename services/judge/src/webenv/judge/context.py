"""Per-evaluation view of a trajectory: observations by position, parsed HTML and texts, cached.

Facts of one rubric often look at the same observation; parsing its HTML once per evaluation (not
once per fact) keeps deterministic verdicts cheap.
"""

from __future__ import annotations

import html as htmllib
import json
from dataclasses import dataclass, field
from typing import Any

from selectolax.lexbor import LexborHTMLParser, LexborNode
from webenv.judge.textnorm import collapse
from webenv.v1 import common_pb2

FMT_HTML = common_pb2.OBSERVATION_FORMAT_HTML
FMT_MARKDOWN = common_pb2.OBSERVATION_FORMAT_MARKDOWN
FMT_AXTREE = common_pb2.OBSERVATION_FORMAT_AXTREE
FMT_ELEMENTS = common_pb2.OBSERVATION_FORMAT_ELEMENTS

_NO_STATE = object()


def node_text(node: LexborNode) -> str:
    """Visible-ish text of an element, whitespace collapsed."""
    return collapse(node.text(deep=True, separator=" "))


@dataclass
class EvalContext:
    """The evidence of one trajectory, with lazily computed derived views."""

    task: common_pb2.Task
    trajectory: common_pb2.Trajectory
    observations: list[common_pb2.Observation] = field(init=False)
    has_final: bool = field(init=False)
    simulated: bool = field(init=False)
    _trees: dict[int, LexborHTMLParser] = field(default_factory=dict, init=False)
    _texts: dict[int, tuple[str, int]] = field(default_factory=dict, init=False)
    _raw_lower: dict[int, str] = field(default_factory=dict, init=False)
    _state: Any = field(default=_NO_STATE, init=False)
    _state_error: str = field(default="", init=False)

    def __post_init__(self) -> None:
        t = self.trajectory
        self.observations = [s.observation for s in t.steps]
        self.has_final = t.HasField("final_observation")
        self.simulated = t.env_kind == common_pb2.ENV_KIND_WORLD_MODEL  # graded against its own pages (simulated.py)
        if self.has_final:
            self.observations.append(t.final_observation)

    # -- positions ---------------------------------------------------------------------------
    def resolve(self, index: int | None) -> int | None:
        """Position in ``observations`` of a criterion's step index (None/-1 = final), or None."""
        n = len(self.observations)
        if n == 0:
            return None
        i = -1 if index is None else index
        pos = i + n if i < 0 else i
        return pos if 0 <= pos < n else None

    def evidence_step(self, pos: int) -> int:
        """Evidence.step_index of a position: -1 for the final observation, else the step index."""
        if self.has_final and pos == len(self.observations) - 1:
            return -1
        return self.trajectory.steps[pos].step_index or pos

    def final_position(self) -> int | None:
        return self.resolve(-1)

    # -- derived views -----------------------------------------------------------------------
    def tree(self, pos: int) -> LexborHTMLParser | None:
        """Parsed HTML of an observation, or None when its HTML was not kept."""
        tree = self._trees.get(pos)
        if tree is None:
            html = self.observations[pos].html
            if not html:
                return None
            tree = LexborHTMLParser(html)
            self._trees[pos] = tree
        return tree

    def page_text(self, pos: int) -> tuple[str, int]:
        """Text of a page and the format it came from (HTML > Markdown > AXTree > elements).

        Returns ("", UNSPECIFIED) when the observation kept no text format.
        """
        cached = self._texts.get(pos)
        if cached is not None:
            return cached
        obs = self.observations[pos]
        result: tuple[str, int]
        tree = self.tree(pos)
        if tree is not None:
            root = tree.body or tree.root
            result = (node_text(root) if root is not None else "", FMT_HTML)
        elif obs.markdown:
            result = (collapse(obs.markdown), FMT_MARKDOWN)
        elif obs.axtree:
            result = (collapse(obs.axtree), FMT_AXTREE)
        elif len(obs.elements):
            result = (collapse(" ".join(f"{e.name} {e.text} {e.value}" for e in obs.elements)), FMT_ELEMENTS)
        else:
            result = ("", common_pb2.OBSERVATION_FORMAT_UNSPECIFIED)
        self._texts[pos] = result
        return result

    def compact_text(self, pos: int) -> tuple[str, int]:
        """The most compact text of a page, for LLM prompts: AXTree > Markdown > HTML text > elements."""
        obs = self.observations[pos]
        if obs.axtree:
            return obs.axtree, FMT_AXTREE
        if obs.markdown:
            return obs.markdown, FMT_MARKDOWN
        return self.page_text(pos)

    def raw_lower(self, pos: int) -> str:
        """Lower-cased text of an observation for value search: URL, title and its compact formats
        (AXTree, Markdown) when kept, else the unescaped HTML (several times larger, so only then)."""
        s = self._raw_lower.get(pos)
        if s is None:
            obs = self.observations[pos]
            parts = [obs.url, obs.title, obs.markdown, obs.axtree]
            if not (obs.markdown or obs.axtree) and obs.html:
                parts.append(htmllib.unescape(obs.html))
            s = "\n".join(p for p in parts if p).lower()
            self._raw_lower[pos] = s
        return s

    def site_state(self) -> tuple[Any, str]:
        """(parsed site state, "") or (None, reason it is unusable)."""
        if self._state is _NO_STATE:
            raw = self.trajectory.site_state_json
            if not raw.strip():
                self._state, self._state_error = None, "no site state was captured for this trajectory"
            else:
                try:
                    self._state = json.loads(raw)
                except json.JSONDecodeError as exc:
                    self._state, self._state_error = None, f"site state is not valid JSON: {exc}"
                except RecursionError:
                    self._state, self._state_error = None, "site state is nested too deeply"
        return self._state, self._state_error

    def final_url(self) -> str:
        """URL at the end: final observation, else the last step's url_after or observation URL."""
        t = self.trajectory
        if self.has_final and t.final_observation.url:
            return t.final_observation.url
        if t.steps:
            last = t.steps[-1]
            return last.url_after or last.observation.url
        return ""

    def all_urls(self) -> list[tuple[int, str]]:
        """Every URL seen, with the evidence step index it belongs to."""
        out: list[tuple[int, str]] = []
        for i, s in enumerate(self.trajectory.steps):
            idx = s.step_index or i
            if s.observation.url:
                out.append((idx, s.observation.url))
            if s.url_after:
                out.append((idx, s.url_after))
        if self.has_final and self.trajectory.final_observation.url:
            out.append((-1, self.trajectory.final_observation.url))
        return out

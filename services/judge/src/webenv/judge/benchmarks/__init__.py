"""Published benchmarks' own evaluators (the ``benchmark`` criterion), graded as their authors grade.

- ``webarena.string_match``: WebArena's StringEvaluator on the final answer: ``clean_answer`` (strip, one pair of
  surrounding quotes, lower case), exact_match, must_include (a one-character reference in a one-item list is
  matched against the answer's tokens), VisualWebArena's must_exclude; ``fuzzy_match: "N/A"`` holds on the answer
  "N/A" (upstream then asks an LLM whether the stated reason matches: undecidable here).
- ``webarena.url_match``: URLEvaluator's "GOLD in PRED": some reference's host+path (trailing ``/`` dropped) equals
  the final URL's, and every reference query parameter has one of its values in the final URL's; VisualWebArena's
  "EXACT": the final URL (``localhost`` read as ``127.0.0.1``, trailing ``/`` dropped) is one of the references.
- ``webarena.program_html``: HTMLContentEvaluator over the pages the episode saw: ``url`` "last" is the final page,
  a URL the newest observation of it, ``func:reddit_get_post_url('__last_url__')`` computed; the locator
  (:mod:`webenv.taskfiles.locators`, parsed by the sdk) is interpreted on that page's HTML (live values from the
  ELEMENTS format when kept); the selection is unescaped and checked with exact_match, must_include
  (`` |OR| `` alternatives) or VisualWebArena's must_exclude.
- ``webarena_verified.agent_response``: AgentResponseEvaluator on the final answer as JSON (a fenced code block is
  unwrapped): task_type and status compared case-folded, retrieved_data (retrieve tasks only) normalised (strings
  case-folded and stripped, ``^...$`` strings as regexes, numbers as floats) and compared as a multiset unless
  ``ordered``.
- ``webarena_verified.network_event``: NetworkEventEvaluator over the episode's network trace (the farm's,
  ``Trajectory.network_events``): a navigate task's GET is the session's last navigation, otherwise the requests of
  the expected method to the expected path (the last one unless ``last_event_only`` is false); it must have the
  expected URL (host, path and query, ``ignored_query_params`` and ``..._patterns`` left out, ``^...$`` regexes,
  alternatives), ``response_status`` (200 by default), ``post_data`` fields (JSON or form; ``$.`` JSONPath keys) and
  ``headers``; ``should_not_exist`` inverts it. Response bodies and cookies are not recorded: such fields are
  undecidable.
- ``assistantbench.answer``: AssistantBench's accuracy: numbers ``max(0, 1 - ln(max/min))``, strings token F1;
  the fact holds at accuracy 1.

The configuration is the benchmark's own JSON; anything the evaluator cannot grade is a CriterionProblem
(INVALID_ARGUMENT naming the field), never ``eval``.

The package's layout is its map: ``webarena`` (string_match, url_match and the shared answer normalisation),
``program_html`` (the HTML content evaluator and its locator interpreter), ``verified`` (WebArena-Verified) and
``assistantbench``; this module holds the table of evaluators and ``compile_benchmark``, the judge's one entry.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from webenv.judge.benchmarks.assistantbench import _assistantbench
from webenv.judge.benchmarks.program_html import _program_html
from webenv.judge.benchmarks.verified import _agent_response, _network_event
from webenv.judge.benchmarks.webarena import _string_match, _url_match
from webenv.judge.criteria import Checker, CriterionProblem
from webenv.v1 import common_pb2

MAX_CONFIG_CHARS = 200_000


EVALUATORS: dict[str, Callable[[dict[str, Any]], Checker]] = {
    "webarena.string_match": _string_match,
    "webarena.url_match": _url_match,
    "webarena.program_html": _program_html,
    "webarena_verified.agent_response": _agent_response,
    "webarena_verified.network_event": _network_event,
    "assistantbench.answer": _assistantbench,
}


def compile_benchmark(c: common_pb2.BenchmarkCriterion) -> Checker:
    """The checker of a benchmark criterion; CriterionProblem names what is wrong."""
    if c.evaluator not in EVALUATORS:
        raise CriterionProblem("evaluator", f"unknown evaluator {c.evaluator[:80]!r} (known: {', '.join(EVALUATORS)})",
                               "UNKNOWN_EVALUATOR")
    if len(c.config_json) > MAX_CONFIG_CHARS:
        raise CriterionProblem("config_json", f"longer than {MAX_CONFIG_CHARS} characters")
    try:
        cfg = json.loads(c.config_json or "{}")
    except (json.JSONDecodeError, RecursionError) as exc:
        raise CriterionProblem("config_json", f"not valid JSON: {exc}", "INVALID_JSON") from None
    if not isinstance(cfg, dict):
        raise CriterionProblem("config_json", "must be a JSON object")
    return EVALUATORS[c.evaluator](cfg)

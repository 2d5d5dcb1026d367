"""WebArena, VisualWebArena and WebArena-Verified task files, in their authors' own format.

WebArena / VisualWebArena config JSON (``config_files/test.raw.json``: a list, or one task per file): ``sites``,
``task_id``, ``start_url`` (placeholders such as ``__SHOPPING__``; several tabs joined by `` |AND| ``),
``storage_state``, ``require_login``, ``require_reset``, ``geolocation``, ``viewport_size``, ``intent``,
``intent_template_id``, and ``eval``: ``eval_types`` (string_match, url_match, program_html, and VWA's
page_image_query), ``reference_answers`` (exact_match, must_include, VWA's must_exclude, fuzzy_match),
``reference_url`` (`` |OR| `` alternatives) with ``url_note`` ("GOLD in PRED", WebArena's default, or VWA's
"EXACT", VWA's default), ``program_html`` (``url``: a URL, ``"last"`` or ``func:...``; ``locator``: JavaScript,
``""`` or ``func:...``; ``required_contents``: exact_match, must_include or VWA's must_exclude), ``string_note``;
VWA's ``image`` (a URL, a placeholder URL or a list of them: the task's input images, kept in metadata).

WebArena-Verified (``assets/dataset/webarena-verified.json``): ``start_urls``, ``eval`` a list of
``AgentResponseEvaluator`` (``results_schema``, ``expected``: task_type, status, retrieved_data; ``ordered``) and
``NetworkEventEvaluator`` (``expected``: url, http_method, response_status, query_params, post_data, headers;
``last_event_only``, ``should_not_exist``, ``ignored_query_params`` ...), ``revision``.

Every task becomes one TASK_SOURCE_BENCHMARK task whose rubric has one fact per evaluator (all required: WebArena
multiplies its evaluators' scores), graded by the judge's ``benchmark`` criterion (or its LLM backend for
fuzzy_match and image queries). Placeholders map to base URLs through :mod:`webenv.taskfiles.placeholders`; a
``func:`` helper or locator the judge cannot read is refused here, before anything runs.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from webenv.envcontract import web_url_problem
from webenv.taskfiles.common import TaskFileError, convert_each, difficulty_of, json_objects
from webenv.taskfiles.locators import LocatorError, parse_func, parse_locator
from webenv.taskfiles.placeholders import SiteMap, UnmappedPlaceholder
from webenv.v1 import common_pb2 as pb

EVAL_TYPES = ("string_match", "url_match", "program_html", "page_image_query")
ANSWER_KEYS = ("exact_match", "must_include", "must_exclude", "fuzzy_match")
HTML_CONTENT_KEYS = ("exact_match", "must_include", "must_exclude")  # VWA adds must_exclude
URL_NOTES = ("GOLD in PRED", "EXACT")
DEFAULT_URL_NOTE = {"webarena": "GOLD in PRED", "visualwebarena": "EXACT"}  # each harness's default
VERIFIED_EVALUATORS = {"AgentResponseEvaluator": "webarena_verified.agent_response",
                       "NetworkEventEvaluator": "webarena_verified.network_event"}


class BenchmarkError(ValueError):
    """A malformed benchmark task; the message names the file, the task and the field."""


class _Loose(BaseModel):
    """Upstream files carry fields we do not read (annotation notes, templates): kept out, never refused."""

    model_config = ConfigDict(extra="allow")


class HtmlTarget(_Loose):
    url: str
    locator: str
    required_contents: dict[str, Any]
    prep_actions: list[str] = Field(default_factory=list)


class WebArenaEval(_Loose):
    eval_types: list[str] = Field(min_length=1)
    reference_answers: dict[str, Any] | None = None
    reference_url: str | None = ""
    url_note: str | None = None
    program_html: list[HtmlTarget] = Field(default_factory=list)
    string_note: str | None = ""
    page_image_query: list[dict[str, Any]] = Field(default_factory=list)


class WebArenaTask(_Loose):
    sites: list[str] = Field(default_factory=list)
    task_id: int | str
    start_url: str
    intent: str = Field(min_length=1)
    intent_template_id: int | str | None = None
    require_login: bool = False
    storage_state: str | None = None
    require_reset: bool = False
    geolocation: Any = None
    viewport_size: Any = None
    image: Any = None
    eval: WebArenaEval


class VerifiedEval(_Loose):
    evaluator: str
    expected: Any = None


class VerifiedTask(_Loose):
    sites: list[str] = Field(default_factory=list)
    task_id: int | str
    intent_template_id: int | str | None = None
    start_urls: list[str] = Field(min_length=1)
    intent: str = Field(min_length=1)
    eval: list[VerifiedEval] = Field(min_length=1)
    revision: int | None = None


def is_webarena(obj: Any) -> bool:
    return isinstance(obj, dict) and "intent" in obj and isinstance(obj.get("eval"), dict)


def is_verified(obj: Any) -> bool:
    return isinstance(obj, dict) and "intent" in obj and isinstance(obj.get("eval"), list) and "start_urls" in obj


def _start(urls: list[str], where: str, name: str) -> tuple[str, list[str]]:
    """The first start URL (the session's) and the rest (further tabs), each checked by the farm's rule."""
    for u in urls:
        problem = web_url_problem(u)
        if problem:
            raise BenchmarkError(f"{where}: {name}: start URL {u[:200]!r} {problem}")
    return urls[0], urls[1:]


def _benchmark_fact(group: pb.FactGroup, fid: str, desc: str, evaluator: str, config: Any) -> None:
    group.facts.add(fact_id=fid, description=desc, criterion=pb.Criterion(
        benchmark=pb.BenchmarkCriterion(evaluator=evaluator, config_json=json.dumps(config, ensure_ascii=False))))


def check_program_html(targets: list[dict[str, Any]], where: str) -> None:
    """Refuses a program_html target whose url or locator the judge cannot read (a ``func:`` outside the registry,
    JavaScript outside the locator grammar, no or two required_contents), naming the task and field."""
    for i, t in enumerate(targets):
        field = f"eval.program_html[{i}]"
        try:
            if t["url"].startswith("func:"):
                parse_func(t["url"], "url")
            if t["locator"].startswith("func:"):
                parse_func(t["locator"], "locator")
            else:
                parse_locator(t["locator"])
        except LocatorError as exc:
            which = "url" if t["url"].startswith("func:") and "url" in str(exc) else "locator"
            raise BenchmarkError(f"{where}: {field}.{which}: {exc}") from None
        keys = [k for k in HTML_CONTENT_KEYS if k in t["required_contents"]]
        if len(keys) != 1:
            raise BenchmarkError(f"{where}: {field}.required_contents: needs exactly one of {', '.join(HTML_CONTENT_KEYS)}")


def _convert_webarena(t: WebArenaTask, raw: dict[str, Any], where: str, path: Path, sites: SiteMap,
                      bench: str) -> pb.Task:
    ev = raw["eval"]
    tid = str(t.task_id)
    task_where = f"{where} (task {tid})"
    try:
        start_urls = [u.strip() for u in sites.substitute(t.start_url, f"{task_where}: start_url").split(" |AND| ")]
        ev = sites.substitute(ev, f"{task_where}: eval")
        image = sites.substitute(t.image, f"{task_where}: image") if t.image else None
    except UnmappedPlaceholder as exc:
        raise BenchmarkError(str(exc)) from None
    start, more = _start(start_urls, task_where, "start_url")
    task_id = f"{bench}/{tid}"
    rubric = pb.Rubric(rubric_id=task_id, version=1)
    group = rubric.groups.add(group_id="eval", description=t.intent)
    unknown = [x for x in t.eval.eval_types if x not in EVAL_TYPES]
    if unknown:
        raise BenchmarkError(f"{task_where}: eval.eval_types: {unknown[0]!r} is not one of {', '.join(EVAL_TYPES)}")
    kind = pb.TASK_KIND_INFORMATION
    for etype in t.eval.eval_types:
        if etype == "string_match":
            answers = ev.get("reference_answers") or {}
            bad = [k for k in answers if k not in ANSWER_KEYS]
            if bad or not answers:
                raise BenchmarkError(f"{task_where}: eval.reference_answers: "
                                     + (f"{bad[0]!r} is not one of {', '.join(ANSWER_KEYS)}" if bad else "required for string_match"))
            det = {k: v for k, v in answers.items() if k != "fuzzy_match" or v == "N/A"}
            if det:
                _benchmark_fact(group, "string_match", f"The answer matches {json.dumps(det, ensure_ascii=False)[:300]}",
                                "webarena.string_match", {"reference_answers": det, "string_note": ev.get("string_note") or ""})
            fuzzy = answers.get("fuzzy_match")
            if fuzzy and fuzzy != "N/A":
                for i, ref in enumerate(fuzzy if isinstance(fuzzy, list) else [fuzzy]):
                    group.facts.add(fact_id=f"fuzzy_match.{i}", description=f"The answer is semantically equivalent to: {ref}",
                                    criterion=pb.Criterion(llm=pb.LlmCriterion(guidance=(
                                        "WebArena fuzzy_match: grade the agent's final answer against the reference answer "
                                        f"for the task's question. Reference answer: {ref}. The answer holds only if it is "
                                        "correct, not partially correct; 'N/A' means not achievable."))))
        elif etype == "url_match":
            kind = pb.TASK_KIND_NAVIGATION if kind == pb.TASK_KIND_INFORMATION else kind
            if not ev.get("reference_url"):
                raise BenchmarkError(f"{task_where}: eval.reference_url: required for url_match")
            note = ev.get("url_note") or DEFAULT_URL_NOTE[bench]
            if note not in URL_NOTES:
                raise BenchmarkError(f"{task_where}: eval.url_note: {note!r} is not a matching rule WebArena or VWA has "
                                     f"({', '.join(map(repr, URL_NOTES))})")
            _benchmark_fact(group, "url_match", f"The final URL matches {ev['reference_url'][:300]}", "webarena.url_match",
                            {"reference_url": ev["reference_url"], "url_note": note})
        elif etype == "program_html":
            kind = pb.TASK_KIND_TRANSACTION
            targets = ev.get("program_html") or []
            if not targets:
                raise BenchmarkError(f"{task_where}: eval.program_html: required for program_html")
            check_program_html(targets, task_where)
            for i, target in enumerate(targets):
                _benchmark_fact(group, f"program_html.{i}", f"Page {target['url'][:200]} shows "
                                f"{json.dumps(target['required_contents'], ensure_ascii=False)[:300]}",
                                "webarena.program_html", {"program_html": [target]})
        else:  # VWA's page_image_query: a question about an image of the page, for the LLM judge
            for i, q in enumerate(ev.get("page_image_query") or []):
                group.facts.add(fact_id=f"page_image_query.{i}", description=f"The page's images answer {json.dumps(q)[:300]}",
                                criterion=pb.Criterion(llm=pb.LlmCriterion(guidance=(
                                    "VisualWebArena page_image_query, judged from the page text the episode saw (not "
                                    f"its pixels): {json.dumps(q, ensure_ascii=False)[:2000]}"))))
    if not any(len(g.facts) for g in rubric.groups):
        raise BenchmarkError(f"{task_where}: eval: no evaluator to grade with")
    host = urlsplit(start).hostname or ""
    meta = {"benchmark": bench, "benchmark_file": str(path), "benchmark_task_id": tid, "sites": ",".join(t.sites),
            "require_login": str(t.require_login).lower(), "require_reset": str(t.require_reset).lower()}
    for key, value in (("storage_state", t.storage_state), ("geolocation", t.geolocation),
                       ("viewport_size", t.viewport_size), ("image", image)):
        if value:
            meta[key] = value if isinstance(value, str) else json.dumps(value)
    if more:
        meta["start_urls"] = json.dumps([start, *more])
    return pb.Task(task_id=task_id, source=pb.TASK_SOURCE_BENCHMARK, kind=kind, instruction=t.intent, start_url=start,
                   site=host, difficulty=difficulty_of(sum(len(g.facts) for g in rubric.groups)), rubric=rubric,
                   template_id=f"{bench}/{t.intent_template_id}" if t.intent_template_id is not None else "",
                   metadata=meta)


def _convert_verified(t: VerifiedTask, raw: dict[str, Any], where: str, path: Path, sites: SiteMap) -> pb.Task:
    tid = str(t.task_id)
    task_where = f"{where} (task {tid})"
    try:
        start_urls = sites.substitute(t.start_urls, f"{task_where}: start_urls")
        evals = sites.substitute(raw["eval"], f"{task_where}: eval")
    except UnmappedPlaceholder as exc:
        raise BenchmarkError(str(exc)) from None
    start, more = _start(start_urls, task_where, "start_urls")
    task_id = f"webarena-verified/{tid}"
    rubric = pb.Rubric(rubric_id=task_id, version=max(1, t.revision or 1))
    group = rubric.groups.add(group_id="eval", description=t.intent)
    kind = pb.TASK_KIND_INFORMATION
    task_type = next((str(e.expected.get("task_type", "")).lower() for e in t.eval
                      if e.evaluator == "AgentResponseEvaluator" and isinstance(e.expected, dict)), "")
    for i, (e, cfg) in enumerate(zip(t.eval, evals, strict=True)):
        if e.evaluator not in VERIFIED_EVALUATORS:
            raise BenchmarkError(f"{task_where}: eval[{i}].evaluator: {e.evaluator!r} is not one of "
                                 f"{', '.join(VERIFIED_EVALUATORS)}")
        if not isinstance(cfg.get("expected"), dict):
            raise BenchmarkError(f"{task_where}: eval[{i}].expected: required (an object)")
        if e.evaluator == "AgentResponseEvaluator":
            task_type = str(cfg["expected"].get("task_type", "")).lower()
            kind = {"navigate": pb.TASK_KIND_NAVIGATION, "mutate": pb.TASK_KIND_TRANSACTION}.get(task_type, kind)
        cfg = {**cfg, "sites": t.sites, "task_type": task_type}  # the evaluators read the task's type, as upstream
        _benchmark_fact(group, f"{e.evaluator}.{i}", f"{e.evaluator}: {json.dumps(cfg['expected'], ensure_ascii=False)[:300]}",
                        VERIFIED_EVALUATORS[e.evaluator], cfg)
    host = urlsplit(start).hostname or ""
    meta = {"benchmark": "webarena-verified", "benchmark_file": str(path), "benchmark_task_id": tid,
            "sites": ",".join(t.sites), "revision": str(t.revision or "")}
    if more:
        meta["start_urls"] = json.dumps([start, *more])
    return pb.Task(task_id=task_id, source=pb.TASK_SOURCE_BENCHMARK, kind=kind, instruction=t.intent, start_url=start,
                   site=host, difficulty=difficulty_of(len(group.facts)), rubric=rubric,
                   template_id=f"webarena-verified/{t.intent_template_id}" if t.intent_template_id is not None else "",
                   metadata=meta)


def convert(obj: Any, where: str, path: Path, sites: SiteMap, bench: str = "webarena") -> pb.Task:
    """The Task of one WebArena / VWA (``bench``: "webarena" or "visualwebarena") or WebArena-Verified object;
    raises BenchmarkError naming the file, task and field."""
    verified = is_verified(obj)
    model = VerifiedTask if verified else WebArenaTask
    try:
        t = model.model_validate(obj)
    except ValidationError as exc:
        e = exc.errors()[0]
        loc = ".".join(str(x) for x in e["loc"]) or "task"
        tid = obj.get("task_id", "?") if isinstance(obj, dict) else "?"
        raise BenchmarkError(f"{where} (task {tid}): {loc}: {e['msg']}") from None
    if verified:
        return _convert_verified(t, obj, where, path, sites)  # type: ignore[arg-type]
    return _convert_webarena(t, obj, where, path, sites, bench)  # type: ignore[arg-type]


def load_file(path: str | Path, sites: SiteMap | None = None) -> list[pb.Task]:
    """Every task of a WebArena, VisualWebArena or WebArena-Verified file; TaskFileError lists every problem.
    VisualWebArena is told by its file name (``visualwebarena`` / ``vwa`` in it) or its tasks' ``image`` field."""
    path = Path(path)
    try:
        sites = sites or SiteMap()
    except ValueError as exc:  # the placeholder file is unreadable
        raise TaskFileError([BenchmarkError(str(exc))]) from None
    objects, problems = json_objects(path, BenchmarkError)
    vwa = any(k in path.name.lower() for k in ("visualwebarena", "vwa")) or any(
        isinstance(o, dict) and "image" in o for _, _, o in objects)
    bench = "visualwebarena" if vwa else "webarena"
    return convert_each(objects, problems, lambda where, _, obj: convert(obj, where, path, sites, bench))

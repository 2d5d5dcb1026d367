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
"""

from __future__ import annotations

import html
import json
import math
import re
import string
from collections import Counter, defaultdict
from collections.abc import Callable
from typing import Any
from urllib.parse import parse_qs, urlparse

from selectolax.lexbor import LexborNode
from webenv.judge.context import FMT_HTML, EvalContext, node_text
from webenv.judge.criteria import (
    FAILS,
    HOLDS,
    UNDECIDABLE,
    Check,
    Checker,
    CriterionProblem,
    excerpt,
    live_element,
)
from webenv.judge.jsonpath import JsonPathError, compile_path
from webenv.taskfiles.locators import Chain, Func, LocatorError, MapJoin, Term, parse_func, parse_locator
from webenv.v1 import common_pb2

MAX_CONFIG_CHARS = 200_000


# -- WebArena ----------------------------------------------------------------------------------


def clean_answer(answer: str) -> str:
    """WebArena's StringEvaluator.clean_answer."""
    answer = answer.strip()
    if answer.startswith("'") and answer.endswith("'"):
        answer = answer[1:-1]
    elif answer.startswith('"') and answer.endswith('"'):
        answer = answer[1:-1]
    return answer.lower()


def _tokens(text: str) -> list[str]:
    """Word tokens (what nltk's word_tokenize gives for WebArena's one-character references)."""
    return re.findall(r"\w+|[^\w\s]", text)


def exact_match(ref: str, pred: str) -> bool:
    return clean_answer(pred) == clean_answer(ref)


def must_include(ref: str, pred: str, tokenize: bool = False) -> bool:
    clean_ref, clean_pred = clean_answer(ref), clean_answer(pred)
    if tokenize and len(clean_ref) == 1 and len(_tokens(clean_ref)) == 1:
        return clean_ref in _tokens(clean_pred)
    return clean_ref in clean_pred


def _string_match(cfg: dict[str, Any]) -> Checker:
    answers = cfg.get("reference_answers")
    if not isinstance(answers, dict) or not answers:
        raise CriterionProblem("config_json.reference_answers", "needs exact_match, must_include, must_exclude or "
                               "fuzzy_match")
    for key, value in answers.items():
        if key == "exact_match" and not isinstance(value, str):
            raise CriterionProblem("config_json.reference_answers.exact_match", "must be a string")
        elif key in ("must_include", "must_exclude") and not (isinstance(value, list) and all(isinstance(v, str) for v in value)):
            raise CriterionProblem(f"config_json.reference_answers.{key}", "must be a list of strings")
        elif key == "fuzzy_match" and value != "N/A":
            raise CriterionProblem("config_json.reference_answers.fuzzy_match", "fuzzy_match references are "
                                   "LLM-judged facts; only 'N/A' is graded here")
        elif key not in ("exact_match", "must_include", "must_exclude", "fuzzy_match"):
            raise CriterionProblem(f"config_json.reference_answers.{key}", "not a WebArena string_match approach")

    def check(ctx: EvalContext) -> Check:
        pred = clean_answer(ctx.trajectory.final_answer)
        for key, value in answers.items():
            if key == "exact_match" and not exact_match(value, pred):
                return Check(FAILS, f"exact_match: {pred[:80]!r} is not {value[:80]!r}", excerpt=excerpt(pred))
            if key == "must_include":
                for v in value:
                    if not must_include(v, pred, tokenize=len(value) == 1):
                        return Check(FAILS, f"must_include: {v[:80]!r} is not in the answer", excerpt=excerpt(pred))
            if key == "must_exclude":
                for v in value:
                    if must_include(v, pred):
                        return Check(FAILS, f"must_exclude: {v[:80]!r} is in the answer", excerpt=excerpt(pred))
            if key == "fuzzy_match" and not exact_match("N/A", pred):
                return Check(UNDECIDABLE, "fuzzy_match 'N/A': the answer is not 'N/A'; whether its reason matches "
                             f"the string_note ({cfg.get('string_note', '')[:80]!r}) needs an LLM (WebArena's ua_match)",
                             excerpt=excerpt(pred))
        return Check(HOLDS, f"string_match: the answer matches {list(answers)}", excerpt=excerpt(pred))

    return check


def _base_and_query(url: str) -> tuple[str, dict[str, list[str]]]:
    p = urlparse(url)
    return (p.netloc + p.path).rstrip("/"), parse_qs(p.query)


def url_matches(pred: str, reference: str) -> bool:
    """WebArena's URLEvaluator, "GOLD in PRED"."""
    refs = [u.rstrip("/") for u in reference.split(" |OR| ")]
    ref_bases, ref_queries = [], defaultdict(set)
    for u in refs:
        base, query = _base_and_query(u)
        ref_bases.append(base.rstrip("/"))
        for k, v in query.items():
            ref_queries[k].update(v)
    pred_base, pred_query = _base_and_query(pred.rstrip("/"))
    if not any(b in pred_base for b in ref_bases):  # upstream: `ref_base_path in pred_base_paths` (a string)
        return False
    return all(any(v in pred_query.get(k, []) for v in values) for k, values in ref_queries.items())


def url_exact(pred: str, reference: str) -> bool:
    """VisualWebArena's URLExactEvaluator, "EXACT"."""
    def clean(u: str) -> str:
        u = u.replace("localhost", "127.0.0.1")
        return u[:-1] if u.endswith("/") else u
    return clean(pred) in [clean(u) for u in reference.split(" |OR| ")]


def _url_match(cfg: dict[str, Any]) -> Checker:
    ref = cfg.get("reference_url")
    if not isinstance(ref, str) or not ref.strip():
        raise CriterionProblem("config_json.reference_url", "url_match needs a reference_url")
    rule = cfg.get("url_note", "GOLD in PRED")
    if rule not in ("GOLD in PRED", "EXACT"):
        raise CriterionProblem("config_json.url_note", f"unknown matching rule {cfg.get('url_note')!r}")
    matches = url_exact if rule == "EXACT" else url_matches

    def check(ctx: EvalContext) -> Check:
        pred = ctx.final_url()
        if not pred:
            return Check(UNDECIDABLE, "trajectory has no final URL", -1)
        ok = matches(pred, ref)
        return Check(HOLDS if ok else FAILS, f"final url {'matches' if ok else 'does not match'} {ref[:120]!r}", -1,
                     excerpt=excerpt(pred))

    return check


def reddit_get_post_url(url: str) -> str:
    """WebArena's helper: the post URL of a Postmill comment URL."""
    p = urlparse(url)
    tok = p.path.split("/")
    if len(tok) < 4 or tok[1] != "f":
        return url
    return f"{p.scheme}://{p.netloc}/f/{tok[2]}/{tok[3]}/"


#: What a registered func: helper needs that the judge does not have (the site's own API).
NEEDS_API = {"shopping_get_latest_order_url", "shopping_get_sku_latest_review_author",
             "shopping_get_sku_latest_review_rating"}


class _Missing(Exception):
    """A JavaScript TypeError: the chain reached an element that does not exist."""


def _element_value(ctx: EvalContext, pos: int, node: LexborNode, prop: str) -> Any:
    live = live_element(ctx, pos, node)
    if prop == "value":
        if live is not None and live.value:
            return live.value
        if node.tag == "textarea":
            return node.text(deep=True)
        if node.tag == "select":
            opts = node.css("option")
            chosen = next((o for o in opts if "selected" in o.attributes), opts[0] if opts else None)
            return (chosen.attributes.get("value") or chosen.text()) if chosen is not None else ""
        return node.attributes.get("value") or ""
    if prop == "checked":
        return bool(live.checked) if live is not None else "checked" in node.attributes
    if prop == "selectedIndex":
        opts = node.css("option")
        want = live.value if live is not None and live.value else None
        for i, o in enumerate(opts):
            if (want is not None and (o.attributes.get("value") or o.text()) == want) or (want is None and "selected" in o.attributes):
                return i
        return 0 if opts else -1
    if prop == "textContent":
        return node.text(deep=True)
    return node_text(node)  # outerText / innerText


def _js_str(v: Any) -> str:
    """What upstream's str(page.evaluate(...)) gives: Python's str of the JS value."""
    return "None" if v is None else str(v)


def _run_chain(ctx: EvalContext, pos: int, chain: Chain, nodes: bool = False) -> Any:
    tree = ctx.tree(pos)
    assert tree is not None
    cur: Any = tree
    for st in chain.steps:
        if cur is None:
            raise _Missing
        if st.op == "qs":
            cur = cur.css_first(st.arg)
        elif st.op == "qsa":
            found = cur.css(st.arg)
            if st.index is None:
                return found
            cur = found[st.index] if st.index < len(found) else None
        elif st.op in ("lastElementChild", "firstElementChild", "lastChild"):
            kids = list(cur.iter(include_text=st.op == "lastChild"))
            cur = (kids[0] if st.op == "firstElementChild" else kids[-1]) if kids else None
        elif st.op == "prop":
            cur = _element_value(ctx, pos, cur, st.arg) if cur.tag != "-text" else cur.text()
        elif st.op == "attr":
            cur = cur.attributes.get(st.arg)
        elif st.op == "to_string":
            cur = str(cur).lower() if isinstance(cur, bool) else str(cur)
    if not nodes and isinstance(cur, LexborNode):
        return node_text(cur)
    return cur


def evaluate_locator(ctx: EvalContext, pos: int, terms: tuple[Term, ...]) -> str:
    """The locator's value on the page at ``pos``, as upstream's ``str(page.evaluate(...))`` ("" on an error)."""
    if not terms:
        return ctx.observations[pos].html
    values: list[Any] = []
    try:
        for term in terms:
            if isinstance(term, MapJoin):
                elems = _run_chain(ctx, pos, term.base, nodes=True) or []
                parts = []
                for e in elems:
                    v = next((e.attributes.get(a) for a in term.attrs if e.attributes.get(a)), None)
                    parts.append(v or "")
                values.append(term.sep.join(parts))
            else:
                try:
                    values.append(_run_chain(ctx, pos, term))
                except _Missing:
                    if not term.fallback:
                        raise
                    values.append("")
    except _Missing:
        return ""
    if len(values) == 1:
        return _js_str(values[0])
    return "".join("null" if v is None else (str(v).lower() if isinstance(v, bool) else str(v)) for v in values)


def gitlab_get_project_memeber_role(ctx: EvalContext, pos: int, account: str) -> str:
    """WebArena's helper over the members page's HTML."""
    tree = ctx.tree(pos)
    assert tree is not None
    names = tree.css("td[data-label='Account'] span.gl-avatar-labeled-sublabel")
    idx = next((i for i, n in enumerate(names) if node_text(n) == f"@{account}"), -1)
    roles = tree.css("td.col-max-role span")
    return node_text(roles[idx]) if 0 <= idx < len(roles) else ""


def _observation_of(ctx: EvalContext, url: str) -> int | None:
    """The newest observation whose URL is ``url`` (trailing ``/`` ignored)."""
    want = url.rstrip("/")
    for pos in range(len(ctx.observations) - 1, -1, -1):
        if ctx.observations[pos].url.rstrip("/") == want:
            return pos
    return None


def _program_html(cfg: dict[str, Any]) -> Checker:
    targets = cfg.get("program_html")
    if not isinstance(targets, list) or not targets:
        raise CriterionProblem("config_json.program_html", "needs a list of targets")
    compiled: list[tuple[str, Func | None, tuple[Term, ...] | Func, str, Any]] = []
    for i, t in enumerate(targets):
        field = f"config_json.program_html[{i}]"
        if not isinstance(t, dict) or not isinstance(t.get("url"), str) or not isinstance(t.get("locator"), str):
            raise CriterionProblem(field, "a target needs url and locator strings")
        rc = t.get("required_contents")
        keys = [k for k in ("exact_match", "must_include", "must_exclude") if isinstance(rc, dict) and k in rc]
        if len(keys) != 1:
            raise CriterionProblem(f"{field}.required_contents", "needs exactly one of exact_match, must_include, "
                                   "must_exclude")
        try:
            url_func = parse_func(t["url"], "url") if t["url"].startswith("func:") else None
        except LocatorError as exc:
            raise CriterionProblem(f"{field}.url", str(exc), "UNSUPPORTED_FUNC") from None
        try:
            loc = parse_func(t["locator"], "locator") if t["locator"].startswith("func:") else parse_locator(t["locator"])
        except LocatorError as exc:
            reason = "UNSUPPORTED_FUNC" if t["locator"].startswith("func:") else "UNSUPPORTED_LOCATOR"
            raise CriterionProblem(f"{field}.locator", str(exc), reason) from None
        compiled.append((t["url"], url_func, loc, keys[0], rc[keys[0]]))

    def check(ctx: EvalContext) -> Check:
        if not ctx.observations:
            return Check(UNDECIDABLE, "trajectory has no observations")
        for url, url_func, loc, how, want in compiled:
            if url_func is not None:
                if url_func.name in NEEDS_API:
                    return Check(UNDECIDABLE, f"func:{url_func.name} needs the site's own API, which the judge does "
                                 "not call")
                url = reddit_get_post_url(url_func.args[0].replace("__last_url__", ctx.final_url()))
            pos = ctx.final_position() if url == "last" else _observation_of(ctx, url)
            if pos is None:
                return Check(UNDECIDABLE, f"the episode never showed {url[:160]} (upstream reloads it after the "
                             "episode; the judge reads the pages the episode saw)")
            step = ctx.evidence_step(pos)
            if ctx.tree(pos) is None:
                return Check(UNDECIDABLE, f"step {step} has no HTML (not kept); program_html needs it", step)
            if isinstance(loc, Func):
                if loc.name in NEEDS_API:
                    return Check(UNDECIDABLE, f"func:{loc.name} needs the site's own API, which the judge does not call",
                                 step)
                if loc.name == "gitlab_get_project_memeber_role":
                    selected = gitlab_get_project_memeber_role(ctx, pos, loc.args[1])
                else:  # VWA's get_query_text(_lowercase): the textContent of the first element the selector names
                    node = ctx.tree(pos).css_first(loc.args[1])  # type: ignore[union-attr]
                    selected = node.text(deep=True) if node is not None else ""
                    selected = selected.lower() if loc.name.endswith("_lowercase") else selected
            else:
                selected = evaluate_locator(ctx, pos, loc)
            selected = html.unescape(selected)
            if how == "exact_match":
                if not exact_match(str(want), selected):
                    return Check(FAILS, f"{url[:80]}: {selected[:80]!r} is not {str(want)[:80]!r}", step, FMT_HTML,
                                 excerpt=excerpt(selected))
            elif how == "must_exclude":  # VWA: one-word references against the selection's tokens
                for content in want:
                    ref, pred = clean_answer(str(content)), clean_answer(selected)
                    if ref in (_tokens(pred) if len(_tokens(ref)) == 1 else pred):
                        return Check(FAILS, f"{url[:80]}: {str(content)[:80]!r} is in the selection", step, FMT_HTML,
                                     excerpt=excerpt(selected, str(content)))
            else:
                for content in want:
                    if not any(must_include(c, selected) for c in str(content).split(" |OR| ")):
                        return Check(FAILS, f"{url[:80]}: {str(content)[:80]!r} is not in the selection", step, FMT_HTML,
                                     excerpt=excerpt(selected, str(content)))
        return Check(HOLDS, f"every program_html target holds ({len(compiled)})", -1, FMT_HTML)

    return check


# -- WebArena-Verified -------------------------------------------------------------------------


def _agent_response_json(answer: str) -> Any:
    """The agent's final response as JSON, as AgentResponseEvaluator reads it (a fenced block unwrapped)."""
    value = answer.strip()
    m = re.search(r"```(?:json)?\s*\n?(.*?)\n?```", value, re.DOTALL)
    if m:
        value = m.group(1).strip()
    try:
        return json.loads(value)
    except json.JSONDecodeError:
        return value or None


def _norm(v: Any) -> Any:
    if isinstance(v, bool) or v is None:
        return v
    if isinstance(v, (int, float)):
        return float(v)
    if isinstance(v, str):
        s = v.strip()
        try:
            return float(s.replace(",", "")) if re.fullmatch(r"-?[\d,]*\.?\d+", s) else s.lower()
        except ValueError:
            return s.lower()
    if isinstance(v, dict):
        return {str(k).strip().lower(): _norm(x) for k, x in v.items()}
    if isinstance(v, list):
        return [_norm(x) for x in v]
    return v


def _same(expected: Any, actual: Any) -> bool:
    """Expected (alternatives as a list, ``^...$`` strings as regexes) against actual, both normalised."""
    if isinstance(expected, list) and not isinstance(actual, list):
        return any(_same(e, actual) for e in expected)
    if isinstance(expected, str) and expected.startswith("^") and expected.endswith("$") and isinstance(actual, str):
        try:
            return re.fullmatch(expected, actual, re.IGNORECASE) is not None
        except re.error:
            return expected == actual
    if isinstance(expected, dict) and isinstance(actual, dict):
        return expected.keys() == actual.keys() and all(_same(expected[k], actual[k]) for k in expected)
    if isinstance(expected, list) and isinstance(actual, list):
        return len(expected) == len(actual) and all(_same(e, a) for e, a in zip(expected, actual, strict=True))
    return expected == actual


def _multiset_equal(expected: list[Any], actual: list[Any], ordered: bool) -> bool:
    if len(expected) != len(actual):
        return False
    if ordered:
        return all(_same(e, a) for e, a in zip(expected, actual, strict=True))
    left = list(actual)
    for e in expected:
        hit = next((i for i, a in enumerate(left) if _same(e, a)), None)
        if hit is None:
            return False
        left.pop(hit)
    return True


def _agent_response(cfg: dict[str, Any]) -> Checker:
    expected = cfg.get("expected")
    if not isinstance(expected, dict) or "task_type" not in expected or "status" not in expected:
        raise CriterionProblem("config_json.expected", "needs task_type and status")
    ordered = bool(cfg.get("ordered", False))
    retrieve = str(expected["task_type"]).lower() == "retrieve"
    want_data = expected.get("retrieved_data")

    def check(ctx: EvalContext) -> Check:
        got = _agent_response_json(ctx.trajectory.final_answer)
        if not isinstance(got, dict):
            return Check(FAILS, "the final answer is not the structured response (a JSON object with task_type, "
                         "status, retrieved_data)", excerpt=excerpt(ctx.trajectory.final_answer))
        got_type = str(got.get("task_type", got.get("performed_operation", ""))).strip().lower()
        if not _same(_norm(expected["task_type"]), got_type):
            return Check(FAILS, f"task_type: expected {expected['task_type']}, got {got_type or 'none'}")
        got_status = str(got.get("status", "")).strip().lower()
        if not _same(_norm(expected["status"]), got_status):
            return Check(FAILS, f"status: expected {expected['status']}, got {got_status or 'none'}")
        if retrieve:
            data = got.get("retrieved_data")
            norm_want = _norm(want_data) if want_data not in (None, [], "") else None
            norm_got = _norm(data if isinstance(data, list) else [data]) if data not in (None, [], "") else None
            if norm_want is None or norm_got is None:
                if norm_want is not norm_got:
                    return Check(FAILS, f"retrieved_data: expected {json.dumps(want_data)[:120]}, got "
                                 f"{json.dumps(data)[:120]}")
            elif not _multiset_equal(norm_want, norm_got, ordered):
                return Check(FAILS, f"retrieved_data: expected {json.dumps(want_data)[:120]}, got {json.dumps(data)[:120]}",
                             excerpt=excerpt(json.dumps(data)))
        return Check(HOLDS, "the agent's response matches task_type, status and retrieved_data",
                     excerpt=excerpt(json.dumps(got)))

    return check


#: NetworkEventEvaluator fields the farm's trace has no data for (response bodies and cookies are not recorded).
_UNRECORDED = ("response_content", "response_cookies")
_UNSUPPORTED_CFG = ("decode_base64_query",)  # the schemas only type values: compared as normalised here


def _url_key(url: str) -> tuple[str, dict[str, list[str]]]:
    """(host+path without a trailing /, case-folded host; query parameters) of a URL."""
    p = urlparse(url.strip())
    return (p.netloc.lower() + p.path).rstrip("/"), parse_qs(p.query, keep_blank_values=True)


def _post_data(body: str) -> Any:
    """A request body as data: JSON, else form fields (a field given once is a value, several a list)."""
    if not body:
        return None
    try:
        return json.loads(body)
    except (json.JSONDecodeError, RecursionError):
        form = parse_qs(body, keep_blank_values=True)
        return {k: v[0] if len(v) == 1 else v for k, v in form.items()} or body


def _network_event(cfg: dict[str, Any]) -> Checker:
    """WebArena-Verified's NetworkEventEvaluator over the episode's network trace (Trajectory.network_events)."""
    expected = cfg.get("expected")
    if not isinstance(expected, dict) or not expected.get("url"):
        raise CriterionProblem("config_json.expected.url", "NetworkEventEvaluator needs an expected url")
    urls = expected["url"] if isinstance(expected["url"], list) else [expected["url"]]
    if not all(isinstance(u, str) and u for u in urls):
        raise CriterionProblem("config_json.expected.url", "must be a URL or a list of URLs")
    method = str(expected.get("http_method") or "GET").upper()
    status = expected.get("response_status", 200)
    ignored = set(cfg.get("ignored_query_params") or [])
    try:
        patterns = [re.compile(p) for p in cfg.get("ignored_query_params_patterns") or []]
    except (re.error, TypeError) as exc:
        raise CriterionProblem("config_json.ignored_query_params_patterns", f"not a regex: {exc}") from None
    post_paths = {}
    for key in (expected.get("post_data") or {}):
        if key.startswith("$"):
            try:
                post_paths[key] = compile_path(key)
            except JsonPathError as exc:
                raise CriterionProblem(f"config_json.expected.post_data.{key[:80]}", str(exc), "INVALID_PATH") from None
    navigate = str(cfg.get("task_type", "")).lower() == "navigate" and method == "GET"
    last_only = bool(cfg.get("last_event_only", True))
    unrecorded = [k for k in _UNRECORDED if expected.get(k)] + [k for k in _UNSUPPORTED_CFG if cfg.get(k)]

    def kept(query: dict[str, list[str]]) -> dict[str, list[str]]:
        return {k: sorted(str(_norm(x)) for x in v) for k, v in query.items()
                if k not in ignored and not any(p.fullmatch(k) for p in patterns)}

    def url_ok(got: str) -> bool:
        for want in urls:
            if want.startswith("^") and want.endswith("$"):
                try:
                    if re.fullmatch(want, got, re.IGNORECASE):
                        return True
                except re.error:
                    pass
                continue
            wpath, wquery = _url_key(want)
            for k, v in (expected.get("query_params") or {}).items():
                wquery[k] = v if isinstance(v, list) else [v]
            gpath, gquery = _url_key(got)
            if wpath == gpath and kept(wquery) == kept(gquery):
                return True
        return False

    def path_ok(got: str) -> bool:
        return any((w.startswith("^") and w.endswith("$")) or _url_key(w)[0] == _url_key(got)[0] for w in urls)

    def fields_ok(e: common_pb2.NetworkEvent) -> str:
        """'' when the event has every expected field, else what differs."""
        if not url_ok(e.url):
            return f"url {e.url[:160]}"
        if status is not None and e.status != int(status):
            return f"status {e.status} (expected {status})"
        want_post = expected.get("post_data") or {}
        if want_post:
            data = _post_data(e.post_data)
            for key, value in want_post.items():
                if key in post_paths:
                    found = post_paths[key].find(data) if isinstance(data, (dict, list)) else []
                    got = found[0] if found else None
                else:
                    got = data.get(key) if isinstance(data, dict) else None
                if got is None or not _same(_norm(value), _norm(got)):
                    return f"post_data {key[:60]}: {json.dumps(got)[:80]} (expected {json.dumps(value)[:80]})"
        headers = {k.lower(): v for k, v in e.request_headers.items()}
        for key, value in (expected.get("headers") or {}).items():
            got = headers.get(key.lower())
            if key.lower() == "referer" and got is not None:
                if _url_key(str(value))[0] != _url_key(got)[0]:
                    return f"header referer {got[:80]}"
            elif got is None or not _same(_norm(value), _norm(got)):
                return f"header {key[:40]}: {str(got)[:80]}"
        return ""

    def check(ctx: EvalContext) -> Check:
        if unrecorded:
            return Check(UNDECIDABLE, f"NetworkEventEvaluator: {', '.join(unrecorded)} not graded (the farm's trace "
                         "records no response bodies or cookies; base64-encoded queries are not decoded)")
        events = list(ctx.trajectory.network_events)
        if navigate:  # upstream: a navigate task's GET is the last navigation of the session
            navs = [e for e in events if e.navigation]
            candidates = navs[-1:]
        else:
            candidates = [e for e in events if e.method.upper() == method and path_ok(e.url)]
            candidates = candidates[-1:] if last_only else candidates
        if cfg.get("should_not_exist"):  # upstream: any request to the path fails it
            return Check(FAILS if candidates else HOLDS, f"{len(candidates)} matching request(s), none expected",
                         excerpt=excerpt(candidates[0].url) if candidates else "")
        if not events:
            return Check(FAILS, "no network event recorded (did the episode keep its trace?)")
        if not candidates:
            return Check(FAILS, f"no {method} request to {urls[0][:160]}" + (" (last navigation)" if navigate else ""))
        misses = [fields_ok(e) for e in candidates]
        if any(m == "" for m in misses):
            e = candidates[misses.index("")]
            return Check(HOLDS, f"{e.method} {e.url[:160]} -> {e.status}", excerpt=excerpt(e.url))
        return Check(FAILS, f"the {'last navigation' if navigate else 'matching request'} differs: {misses[-1]}",
                     excerpt=excerpt(candidates[-1].url))

    return check


# -- AssistantBench ----------------------------------------------------------------------------


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

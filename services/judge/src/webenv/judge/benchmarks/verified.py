"""WebArena-Verified's evaluators: ``webarena_verified.agent_response`` (the final answer as JSON) and
``webarena_verified.network_event`` (the farm's network trace of the episode)."""


from __future__ import annotations

import json
import re
from typing import Any
from urllib.parse import parse_qs, urlparse

from webenv.judge.context import EvalContext
from webenv.judge.criteria import (
    FAILS,
    HOLDS,
    UNDECIDABLE,
    Check,
    Checker,
    CriterionProblem,
    excerpt,
)
from webenv.judge.jsonpath import JsonPathError, compile_path
from webenv.v1 import common_pb2


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

"""WebArena's HTMLContentEvaluator (``webarena.program_html``): a locator (:mod:`webenv.taskfiles.locators`,
parsed by the sdk) interpreted on the HTML of a page the episode saw, its selection checked with ``exact_match``,
``must_include`` or ``must_exclude``; ``func:`` helpers the judge can compute (``reddit_get_post_url``,
``gitlab_get_project_memeber_role``) and those it cannot (``NEEDS_API``)."""


from __future__ import annotations

import html
from typing import Any
from urllib.parse import urlparse

from selectolax.lexbor import LexborNode
from webenv.judge.benchmarks.webarena import answer_tokens, clean_answer, exact_match, must_include
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
from webenv.taskfiles.locators import Chain, Func, LocatorError, MapJoin, Term, parse_func, parse_locator


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
                    if ref in (answer_tokens(pred) if len(answer_tokens(ref)) == 1 else pred):
                        return Check(FAILS, f"{url[:80]}: {str(content)[:80]!r} is in the selection", step, FMT_HTML,
                                     excerpt=excerpt(selected, str(content)))
            else:
                for content in want:
                    if not any(must_include(c, selected) for c in str(content).split(" |OR| ")):
                        return Check(FAILS, f"{url[:80]}: {str(content)[:80]!r} is not in the selection", step, FMT_HTML,
                                     excerpt=excerpt(selected, str(content)))
        return Check(HOLDS, f"every program_html target holds ({len(compiled)})", -1, FMT_HTML)

    return check

"""Prediction: the whole world model behind one call — rules, analogy, the language model, recall, composition.

One step of a simulated browser is decided in this order (each part is measured in evaluate.py):
1. **rules** — actions that never change what the farm observes (wait, scroll, hover, noop, answer) keep the
   page; `navigate(url)` goes to its URL and `go_back`/`go_forward` to the session's history, as a browser does;
2. **analogy** — for an action on the page (click, fill, select, press, type), the training websites' same
   action decides: no change, an edit placed at the element acted on, or a new document at a URL template bound
   to this page (analogy.PageActions);
3. **the language model** — for a page action analogy has no exemplar for, it decides between an edit of this
   page (`<same>` + edit) and a new document at a URL (`<nav>/path`);
4. **the page of a new document** — recalled when this session has been there (compose.PageMemory), otherwise
   composed by analogy with a training transition of the same kind (compose.Exemplars), else the current page
   with the lines a navigation drops taken out (compose.LineSurvival).
Analogy's URL of a page action is believed only on a URL path this website has shown (known_paths: the current
URL, its links, the session's pages): on the validation builders' websites, 132 of analogy's 247 navigations went to
a path the website had never shown (another builder's scheme: `/index.php?search=` or `/shop?s=` for a docs site's
search) and none of them was right, while 105 of the 115 on a path it had shown were. A form whose URL is not known that way is submitted where this
session's own earlier submission went (session_search), else at the current URL, as a new document.
Shared by the Predict RPC, the simulated environment and the evaluation, so all three measure the same thing.
A malformed completion keeps the current page and sets `fallback`; the simulation goes on instead of failing.
A predicted URL is accepted only when it is a web URL (`url_problem`): otherwise the prediction is malformed too
(`fallback`, reason `url`) and a click on a link of this page loads the link's href, anything else keeps the page.
The language model is a backend of the sdk's LLM layer (webenv.llm; served behind its Batcher, so concurrent
steps of many sessions share backend calls): prompts go in as raw text with the BOS token training used, and
come back with the special markers (`<same>`, `<nav>`) kept.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from webenv.envcontract import web_url_problem
from webenv.llm import BackendConfig, GenerationRequest, LLMBackend, SamplingParams, make_backend
from webenv.worldmodel import metrics
from webenv.worldmodel.analogy import PageActions, apply_outcome, context, fill_template
from webenv.worldmodel.compose import (
    Exemplars,
    LineSurvival,
    PageMemory,
    PageView,
    compose,
    navigation_target,
    refresh_chrome,
    session_lines,
)
from webenv.worldmodel.dataset import (
    HISTORY,
    NO_CHANGE,
    TransitionRecord,
    build_prompt,
    is_page_action,
    jsonl_rows,
    parse_output,
    read_transitions,
)
from webenv.worldmodel.page import TEXT_FIELDS, action_kind, parse, resolve

#: Least likeness (compose.Exemplars.best_scored) of a training exemplar's source page to the current page for the
#: new document to be composed from it; chosen on the validation builders' websites (bench/results/worldmodel-builders.md)
MIN_SIMILARITY = 0.5
SIBLING_FIRST = False
#: Least learned survival (compose.LineSurvival) of a current-page line for it to stay in a new document nothing else
#: supplies; chosen on the validation builders' websites by a rule written before the held-out figures were read
#: (bench/results/worldmodel-builders.md): line F1 0 (off) 0.835, 0.2 0.841, 0.25-0.4 0.843-0.844, 0.5 0.826
SURVIVAL_THRESHOLD = 0.4
EXEMPLARS_FILE = "exemplars.jsonl"
PAGE_ACTIONS_FILE = "page_actions.jsonl"
START_STATES_FILE = "start_states.jsonl"
LINE_SURVIVAL_FILE = "line_survival.json"
#: Who decides page actions: analogy with the language model as fallback (served), either alone, nothing but
#: the rules (page actions keep the page, new documents only recalled: the evaluation's rules-alone baseline), or
#: a model of your own in WebWorld's format (webworld.py), retrieval's result optionally given to it as context.
MODES = ("analogy+lm", "analogy", "lm", "rules", "webworld")


@dataclass
class ModelInfo:
    """What GetModelInfo reports, and the prompt settings training used."""

    model: str
    backend: str
    formats: list[str]
    parameters: int
    max_context_tokens: int
    history_window: int = 3
    max_lines: int = 24
    reasoning: bool = False


def read_meta(path: str) -> dict:
    """The worldmodel.json written by training (formats, history window, prompt window), or defaults."""
    meta = Path(path) / "worldmodel.json"
    return json.loads(meta.read_text()) if meta.exists() else {}


def model_info(path: str, backend: str = "", parameters: int = 0, max_context_tokens: int = 0) -> ModelInfo:
    """ModelInfo from the worldmodel.json training wrote next to the weights (prompt settings, reasoning)."""
    meta = read_meta(path)
    return ModelInfo(model=path, backend=backend, formats=meta.get("formats", ["axtree"]), parameters=parameters,
                     max_context_tokens=max_context_tokens, history_window=meta.get("history_window", 3),
                     max_lines=meta.get("max_lines", 24), reasoning=bool(meta.get("reasoning_fraction", 0.0)))


@dataclass
class Query:
    """One prediction request in service-neutral form. `memory` is the session's (None for a stateless Predict)."""

    page: PageView
    action_text: str
    history: list[tuple[str, str]] = field(default_factory=list)
    instruction: str = ""
    memory: PageMemory | None = None
    max_new_tokens: int = 0
    temperature: float = 0.0
    reason: bool | None = None


@dataclass
class Prediction:
    """The predicted next page and how it was obtained: `source` says where the page came from (rule, edit,
    recall, compose, sibling, prune, keep; generate: written whole by a WebWorld-format model), `decided_by` who decided the action's effect (rule, analogy, lm)."""

    page: PageView
    source: str
    navigated: bool = False
    decided_by: str = "rule"
    edit: str = ""
    reasoning: str = ""
    prompt_tokens: int = 0
    completion_tokens: int = 0
    latency_seconds: float = 0.0
    fallback: bool = False
    error: str = ""
    repaired: bool = False
    #: Why `fallback` (the fallbacks metric's label): output (the completion is malformed), url (a predicted URL
    #: that is not a web URL).
    fallback_reason: str = ""

    @property
    def next_state(self) -> str:
        return self.page.state

    @property
    def next_url(self) -> str:
        return self.page.url


def history_target(q: Query) -> str:
    """Where go_back / go_forward lead: the session's history, else the request's (the last other URL)."""
    kind = action_kind(q.action_text)
    if q.memory is not None:
        return (q.memory.back_url() if kind == "go_back" else q.memory.forward_url()) or q.page.url
    if kind == "go_back":
        return next((u for u, _ in reversed(q.history) if u != q.page.url), q.page.url)
    return q.page.url


def url_problem(url: str) -> str:
    """What keeps a predicted URL from being the next page's ('' when nothing): the farm's rule for the URLs it
    opens (webenv.envcontract.web_url_problem: http or https, a host name, a valid port), and no whitespace or
    angle brackets anywhere (a browser's URL has them percent-encoded; a tiny model's `<nav><nav>...` has them)."""
    problem = web_url_problem(url)
    if problem:
        return problem
    if any(c.isspace() or c in "<>" for c in url):
        return "has whitespace or angle brackets"
    return ""


def checked_target(q: Query, url: str) -> tuple[str, str]:
    """The URL a predicted navigation loads: `url` when it is a web URL; else the clicked link's href when this page
    has it, or '' (keep the page). Second, what was wrong with `url` ('' when nothing)."""
    problem = url_problem(url)
    if not problem:
        return url, ""
    href = navigation_target(q.page, q.action_text) if action_kind(q.action_text) == "click" else ""
    return (href if href and not url_problem(href) else ""), f"predicted URL {url!r} {problem}"


def known_paths(page: PageView, memory: PageMemory | None) -> set[str]:
    """The URL paths this website has shown this session: the current URL's, its links', the pages loaded."""
    host = urlsplit(page.url).netloc
    urls = [page.url, *(resolve(page.url, h) for h in page.links.values()), *(memory.pages if memory is not None else ())]
    return {u.path or "/" for u in map(urlsplit, urls) if u.netloc == host}


def session_search(page: PageView, memory: PageMemory | None, ctx) -> str:
    """The URL a form on this page submits to, from this session's own earlier submission: a page it loaded on this
    website whose URL holds, as a query value, the text a field of that page shows (a results page showing its
    query), re-bound to the text this page's field holds ('' when none)."""
    typed = next((v for k, v in ctx.variables().items() if k.startswith("V:") and v), "")
    if memory is None or not typed:
        return ""
    host = urlsplit(page.url).netloc
    for url, seen in reversed(list(memory.pages.items())):
        u = urlsplit(url)
        if u.netloc != host or not u.query:
            continue
        shown = {v for n in parse(seen.state) if n.role in TEXT_FIELDS for v in _field_values(n.states) if v}
        pairs = parse_qsl(u.query, keep_blank_values=True)
        if any(v in shown for _, v in pairs):
            query = urlencode([(k, typed if v in shown else v) for k, v in pairs])
            return urlunsplit((u.scheme, u.netloc, u.path, query, ""))
    return ""


def _field_values(states: str) -> list[str]:
    return [json.loads(m) for m in re.findall(r'value=("(?:[^"\\]|\\.)*")', states)]


def _navigate_url(action_text: str) -> str:
    inner = action_text[action_text.find("(") + 1: action_text.rfind(")")]
    try:
        return json.loads(inner)
    except json.JSONDecodeError:
        return inner.strip("\"'")


class Predictor:
    """Builds prompts the way training did, parses completions and supplies the pages of new documents."""

    def __init__(self, llm: LLMBackend | None, info: ModelInfo, exemplars: Exemplars | None = None,
                 page_actions: PageActions | None = None, default_max_new_tokens: int = 256, repair: bool = True,
                 reason: bool = False, mode: str = "analogy+lm", retrieval_context: bool = True,
                 siblings: bool = True, min_similarity: float = MIN_SIMILARITY,
                 survival: LineSurvival | None = None) -> None:
        if mode not in MODES:
            raise ValueError(f"mode: expected one of {', '.join(MODES)}, got {mode!r}")
        if llm is None and mode not in ("analogy", "rules"):
            raise ValueError(f"mode {mode!r} needs a language model")
        #: The language model (a started backend, or a Batcher in front of one).
        self.llm = llm
        self.info = info
        self.exemplars = exemplars or Exemplars()
        self.page_actions = page_actions or PageActions()
        self.repair = repair
        self.reason = reason
        self.mode = mode
        #: webworld mode: retrieval's prediction goes into the prompt as a reference.
        self.retrieval_context = retrieval_context
        self.default_max_new_tokens = default_max_new_tokens
        #: a new document this session has not loaded takes the same website's last page of its kind (sibling)
        self.siblings = siblings
        self.sibling_first = SIBLING_FIRST
        #: a page action no training action matches: a click on a link with an href loads it (before the LM)
        self.link_default = True
        #: a family never trained on is matched against every family's page actions (edits of the element's line)
        self.any_family = True
        #: composition from a training exemplar only when its source page is at least this like the current one
        #: (markup the training builders share); below, the page is kept: copy by default on unseen markup
        self.min_similarity = min_similarity
        #: a new document nothing else supplies: the current page without the lines whose survival (learned from
        #: the training websites' navigations) is below this; 0 keeps the whole page
        self.survival = survival or LineSurvival()
        self.survival_threshold = SURVIVAL_THRESHOLD
        #: analogy's URL only on a path this website has shown (known_paths); else session_search or this URL
        self.known_paths = True

    def new_page(self, q: Query, url: str, fresh: bool = False) -> tuple[PageView, str]:
        """The page of a new document at `url`: recalled, composed, or (nothing to go by) the current one with the
        lines a navigation drops taken out; `fresh`: nothing but the last (a form submitted to a URL this website
        has not shown, guessed: its recalled page, siblings or exemplars would be of the guessed URL)."""
        if fresh:
            return self.unseen_page(q, url)
        seen = q.memory.recall(url) if q.memory is not None else (q.page if url == q.page.url else None)
        if seen is not None:
            return refresh_chrome(PageView(url, seen.state, seen.links), q.page), "recall"
        if self.mode == "rules":
            return PageView(url, q.page.state, q.page.links), "keep"
        sibling = q.memory.sibling(url) if q.memory is not None and self.siblings else None
        if sibling is not None and self.sibling_first:
            return refresh_chrome(PageView(url, sibling.state, sibling.links), q.page), "sibling"
        ex, similarity = self.exemplars.best_scored(q.page, q.action_text, url)
        if ex is not None and similarity >= self.min_similarity:
            return compose(q.page, q.action_text, url, ex), "compose"
        if sibling is not None:
            return refresh_chrome(PageView(url, sibling.state, sibling.links), q.page), "sibling"
        return self.unseen_page(q, url)

    def unseen_page(self, q: Query, url: str) -> tuple[PageView, str]:
        """A new document nothing supplies: the current page without the lines whose learned survival is below the
        threshold (compose.LineSurvival), or the whole current page (threshold 0, or no survival learned)."""
        if self.survival_threshold > 0 and len(self.survival):
            return self.survival.prune(q.page, url, session_lines(q.memory, q.page.url), self.survival_threshold), "prune"
        return PageView(url, q.page.state, q.page.links), "keep"

    async def predict_many(self, queries: list[Query]) -> list[Prediction]:
        """Predictions of `queries`, in order: rules and analogy on a worker thread (they parse whole pages), the
        language model's share in one generate call."""
        out, lm = await asyncio.to_thread(self._decide, queries)
        if lm:
            await self._language_model([queries[i] for i in lm], lm, out)
        for p in out:
            assert p is not None
            metrics.observe_prediction(p.latency_seconds, p.completion_tokens, p.fallback, p.source, p.decided_by,
                                       p.fallback_reason)
        return out  # type: ignore[return-value]

    def _decide(self, queries: list[Query]) -> tuple[list[Prediction | None], list[int]]:
        """Predictions of the queries rules or analogy decide, and the positions left to the language model."""
        out: list[Prediction | None] = [None] * len(queries)
        lm: list[int] = []
        for i, q in enumerate(queries):
            kind = action_kind(q.action_text)
            t0 = time.perf_counter()
            if kind in NO_CHANGE:
                out[i] = Prediction(q.page, "rule", latency_seconds=time.perf_counter() - t0)
            elif kind in HISTORY:
                restored = None
                if q.memory is not None and kind != "navigate":  # back/forward restore the page as it was left
                    restored = q.memory.back_page() if kind == "go_back" else q.memory.forward_page()
                if restored is not None:
                    page, source = restored, "recall"
                else:
                    url = _navigate_url(q.action_text) if kind == "navigate" else history_target(q)
                    page, source = self.new_page(q, url)
                out[i] = Prediction(page, source, navigated=True, latency_seconds=time.perf_counter() - t0)
            elif self.mode == "rules":
                out[i] = Prediction(q.page, "keep", decided_by="rule", latency_seconds=time.perf_counter() - t0)
            elif self.mode == "webworld":
                lm.append(i)
            elif self.mode != "lm" and (p := self._analogy(q)) is not None:
                p.latency_seconds = time.perf_counter() - t0
                out[i] = p
            elif self.mode != "lm" and self.link_default and (href := self._link_href(q)):
                # no training action says otherwise: a click on a link whose href this page gives loads it
                page, source = self.new_page(q, href)
                out[i] = Prediction(page, source, navigated=True, decided_by="rule", latency_seconds=time.perf_counter() - t0)
            elif self.mode == "analogy":
                out[i] = Prediction(q.page, "keep", decided_by="analogy", latency_seconds=time.perf_counter() - t0)
            else:
                lm.append(i)
        return out, lm

    @staticmethod
    def _link_href(q: Query) -> str:
        """The web URL a click on a link of this page loads ('' for another action, element or URL)."""
        if action_kind(q.action_text) != "click":
            return ""
        href = navigation_target(q.page, q.action_text)
        return href if href and not url_problem(href) and href != q.page.url else ""

    def _analogy(self, q: Query) -> Prediction | None:
        """The effect of a page action by analogy, or None when no training action matches (or it cannot be
        re-bound here: a URL variable this page lacks, an edit that does not fit)."""
        ctx = context(q.page, q.action_text)
        o, _, _ = self.page_actions.predict(ctx, any_family=self.any_family)
        if o is None:
            return None
        if o.kind == "none":
            return Prediction(q.page, "keep", decided_by="analogy")
        if o.kind == "nav":
            url = fill_template(o.url_template, ctx)
            if url is None or url_problem(url):  # bound to a value this page lacks, or not a web URL (javascript:)
                return None
            if self.known_paths and urlsplit(url).path not in known_paths(q.page, q.memory):
                # another builder's URL scheme: this website has shown no such path; a new document all the same, at
                # the URL this session's own searches went to (with this page's typed text), else at this URL
                url = session_search(q.page, q.memory, ctx) or q.page.url
                page, source = self.new_page(q, url, fresh=True)
                return Prediction(page, source, navigated=True, decided_by="analogy")
            page, source = self.new_page(q, url)
            return Prediction(page, source, navigated=True, decided_by="analogy")
        state = apply_outcome(o, ctx)
        if state is None:
            return None
        return Prediction(PageView(q.page.url, state, q.page.links), "edit", decided_by="analogy")

    def request(self, q: Query) -> GenerationRequest:
        """The language model's request for a query: the prompt as training built it, BOS first, markers kept (or,
        in webworld mode, WebWorld's chat prompt with retrieval's prediction as reference)."""
        window = self.info.history_window
        if self.mode == "webworld":
            from webenv.worldmodel import webworld

            ref = self._analogy(q) if self.retrieval_context else None
            msgs = webworld.prompt(q.instruction, q.history[-window:] if window else [], q.page.url, q.page.state,
                                   q.action_text, (ref.next_url, ref.next_state) if ref is not None else None)
            return GenerationRequest(msgs, SamplingParams(max_tokens=q.max_new_tokens or self.default_max_new_tokens,
                                                          temperature=q.temperature))
        prompt = build_prompt(q.instruction, q.history[-window:] if window else [], q.page, q.action_text,
                              self.info.max_lines, self.reason if q.reason is None else q.reason)
        params = SamplingParams(max_tokens=q.max_new_tokens or self.default_max_new_tokens,
                                temperature=q.temperature, skip_special_tokens=False)
        return GenerationRequest(prompt, params, prepend_bos=True)

    async def _language_model(self, queries: list[Query], where: list[int], out: list[Prediction | None]) -> None:
        """The LM's predictions for ``queries``. Prompt building (a chat template over pages of up to 200k
        characters) and parsing (plus retrieval of a navigated-to page) run in a worker thread: on the event loop
        they held every other session's Step for as long as they took."""
        assert self.llm is not None
        requests = await asyncio.to_thread(lambda: [self.request(q) for q in queries])
        t0 = time.perf_counter()
        gens = await self.llm.generate(requests)
        metrics.GENERATE_SECONDS.observe(time.perf_counter() - t0)
        await asyncio.to_thread(self._read_generations, queries, where, gens, out)

    def _read_generations(self, queries: list[Query], where: list[int], gens: list, out: list[Prediction | None]) -> None:
        for i, q, g in zip(where, queries, gens, strict=True):
            t1 = time.perf_counter()
            if self.mode == "webworld":
                from webenv.worldmodel import webworld

                w = webworld.parse(g.text, q.page.url, q.page.state)
                nav = w.next_url != q.page.url
                target, bad = checked_target(q, w.next_url) if nav else (w.next_url, "")
                if bad:  # a malformed URL: the output is malformed (the link's href loads, or the page is kept)
                    page, source = self.new_page(q, target) if target else (q.page, "keep")
                    out[i] = Prediction(page, source, bool(target), "lm", "", "", g.prompt_tokens, g.completion_tokens,
                                        g.inference_seconds + time.perf_counter() - t1, True, bad, fallback_reason="url")
                    continue
                out[i] = Prediction(PageView(w.next_url, w.next_state, {} if nav else q.page.links),
                                    "keep" if w.fallback else "generate", nav, "lm", "", "",
                                    g.prompt_tokens, g.completion_tokens, g.inference_seconds + time.perf_counter() - t1,
                                    w.fallback, w.error, fallback_reason="output" if w.fallback else "")
                continue
            parsed = parse_output(g.text, q.page.url, q.page.state, repair=self.repair)
            navigates, fallback, error = parsed.navigates, parsed.fallback, parsed.error
            reason = "output" if fallback else ""
            target, bad = checked_target(q, parsed.next_url) if navigates else ("", "")
            if bad:  # a malformed URL: the output is malformed (the link's href loads, or the page is kept)
                navigates, fallback, error, reason = bool(target), True, bad, "url"
            if navigates:
                page, source = self.new_page(q, target)
            else:
                page, source = PageView(q.page.url, parsed.next_state, q.page.links), ("keep" if fallback else "edit")
            if parsed.repaired:
                metrics.REPAIRED.inc()
            out[i] = Prediction(page, source, navigates, "lm", parsed.edit, parsed.reasoning, g.prompt_tokens,
                                g.completion_tokens, g.inference_seconds + time.perf_counter() - t1, fallback,
                                error, parsed.repaired, reason)

    async def predict(self, query: Query) -> Prediction:
        return (await self.predict_many([query]))[0]


def advance(memory: PageMemory, query: Query, pred: Prediction) -> None:
    """Tell the session's memory what the step did (a new document, or a move in the history)."""
    kind = action_kind(query.action_text)
    if kind == "go_back" and pred.navigated:
        memory.go_back()
    elif kind == "go_forward" and pred.navigated:
        memory.go_forward()
    elif pred.navigated:
        memory.navigated(pred.page)
    else:
        memory.changed(pred.page)


# --- what the model directory holds besides the language model ----------------------------------------------------
def save_exemplars(records: list[TransitionRecord], path: Path, max_per_key: int = 12, seed: int = 0) -> int:
    """Write the training transitions that loaded a new document (a bounded sample per kind); returns how many."""
    ex = Exemplars(max_per_key, seed)
    chosen: dict[int, TransitionRecord] = {}
    for r in records:
        if r.split == "train" and r.next_url != r.url:
            ex.add(r.site, r.url, r.state, r.action_text, r.next_url, r.next_state, r.next_links, tag=id(r))
            chosen[id(r)] = r
    keep = {e.tag for bucket in ex.index.values() for e in bucket}
    with path.open("w") as fh:
        for tag in keep:
            fh.write(chosen[tag].model_dump_json() + "\n")
    return len(keep)


def save_page_actions(records: list[TransitionRecord], path: Path, per_behaviour: int = 3) -> int:
    """Write the training websites' page actions analogy matches against: at most `per_behaviour` per site family,
    action kind, description and outcome (more of the same adds no vote that changes a winner's kind)."""
    from webenv.worldmodel.analogy import outcome_of
    from webenv.worldmodel.page import family_of

    seen: dict[tuple, int] = {}
    n = 0
    with path.open("w") as fh:
        for r in records:
            if r.split != "train" or not is_page_action(r.action_text):
                continue
            ctx = context(r.page, r.action_text)
            key = (family_of(r.site), ctx.kind, tuple(sorted(ctx.features.items())),
                   outcome_of(ctx, r.next_url, r.next_state).signature)
            seen[key] = seen.get(key, 0) + 1
            if seen[key] <= per_behaviour:
                fh.write(r.model_dump_json(include={"site", "url", "state", "links", "action_text", "next_url",
                                                    "next_state", "episode_id", "step_index"}) + "\n")
                n += 1
    return n


def save_line_survival(records: list[TransitionRecord], path: Path) -> int:
    """Write the training websites' line survival (compose.LineSurvival): every navigation of a training episode
    to a page the episode had not loaded, replayed with the session's memory as it stood; returns how many."""
    from webenv.worldmodel.dataset import episodes

    ls, n = LineSurvival(), 0
    for ep in episodes(r for r in records if r.split == "train").values():
        memory = PageMemory()
        memory.navigated(ep[0].page)
        for r in ep:
            if r.next_url != r.url and memory.recall(r.next_url) is None:
                ls.add(r.url, r.state, r.next_url, r.next_state, session_lines(memory, r.url))
                n += 1
            memory.recorded(r.action_text, r.url, r.next_page)
    path.write_text(json.dumps(ls.to_json()))
    return n


def load_line_survival(path: Path) -> LineSurvival:
    return LineSurvival.from_json(json.loads(path.read_text())) if path.exists() else LineSurvival()


def load_page_actions(path: Path) -> PageActions:
    pa = PageActions()
    if path.exists():
        with path.open() as fh:
            for line in fh:
                d = json.loads(line)
                pa.add(d["site"], PageView(d["url"], d["state"], d.get("links") or {}), d["action_text"],
                       d["next_url"], d["next_state"])
    return pa


def load_exemplars(path: Path) -> Exemplars:
    ex = Exemplars(max_per_key=10**6)
    if path.exists():
        for r in read_transitions([path]):
            ex.add(r.site, r.url, r.state, r.action_text, r.next_url, r.next_state, r.next_links)
    return ex


def save_start_states(records: list[TransitionRecord], path: Path) -> int:
    """The first page recorded at each start URL of a training website (where simulated sessions can open), with
    its links. Held-out websites' pages never enter the model directory (the evaluation scores those websites as
    unseen); a session on one opens from a start-state file given at serving time (WEBENV_WORLDMODEL_START_STATES)
    or a task's `start_state`."""
    seen: dict[str, TransitionRecord] = {}
    for r in sorted(records, key=lambda r: r.step_index):
        if r.step_index == 0 and r.split == "train":
            seen.setdefault(r.url, r)
    with path.open("w") as fh:
        for r in seen.values():
            fh.write(json.dumps({"url": r.url, "state": r.state, "links": r.links, "instruction": r.instruction,
                                 "site": r.site}) + "\n")
    return len(seen)


def load_start_states(paths: list[Path | str]) -> dict[str, tuple[PageView, str]]:
    """url -> (page, instruction) from start-state files (the model directory's, or transitions JSONL)."""
    out: dict[str, tuple[PageView, str]] = {}
    for path in paths:
        for n, d in enumerate(jsonl_rows(path), start=1):
            if "url" not in d or "state" not in d:
                raise ValueError(f"{path}:{n}: not a start state: needs url and state")
            out.setdefault(d["url"], (PageView(d["url"], d["state"], d.get("links") or {}), d.get("instruction", "")))
    return out


def backend_config(backend: str, path: str, device: str = "cpu", threads: int = 0) -> BackendConfig:
    """The world model's language model on `backend` (transformers: sequential decoding with prompt-lookup
    drafts, FastLlama on the CPU; vllm: the GPU path)."""
    return BackendConfig(backend=backend, model_path=path, model_name=path, device=device, threads=threads,
                         sequential=True, gpu_memory_utilization=0.5, enforce_eager=False)


async def load_world_model(backend: str, path: str, device: str = "cpu", threads: int = 0, max_new_tokens: int = 256,
                           reason: bool | None = None, mode: str = "analogy+lm", llm: LLMBackend | None = None,
                           batch: int = 0, lm_path: str = "", retrieval_context: bool = True) -> Predictor:
    """The served world model of a model directory: its language model on `backend` (started here; behind a
    webenv.llm Batcher of `batch` requests when `batch` > 0), its page actions and exemplars; reasoning on when the
    model was trained with reasoning examples (unless `reason` says otherwise). `llm` passes a backend in instead.
    `lm_path` (a Hugging Face causal LM folder) serves that model in WebWorld's format instead (mode webworld)."""
    info = model_info(path, backend)
    if lm_path:
        mode, info.model, info.reasoning = "webworld", lm_path, False
    if mode not in ("analogy", "rules") and llm is None:
        cfg = backend_config(backend, lm_path or path, device, threads)
        if lm_path:  # a general model: no prompt-lookup drafts (tuned for the tiny model's edits)
            cfg = dataclasses.replace(cfg, lookup_draft=0)
        lm = make_backend(cfg)
        assert lm is not None
        if batch > 0:
            from webenv.llm import Batcher

            lm = Batcher(lm, max_batch=batch, window_seconds=0.0, label="worldmodel")
        await lm.start()
        llm = lm
    if llm is not None:
        info.parameters, info.max_context_tokens = llm.parameters, llm.max_context_tokens
    exemplars, page_actions, survival = await asyncio.to_thread(
        lambda: (load_exemplars(Path(path) / EXEMPLARS_FILE), load_page_actions(Path(path) / PAGE_ACTIONS_FILE),
                 load_line_survival(Path(path) / LINE_SURVIVAL_FILE)))
    trained_with = llm is not None and info.reasoning
    return Predictor(llm, info, exemplars, page_actions, max_new_tokens,
                     reason=trained_with if reason is None else reason, mode=mode, retrieval_context=retrieval_context,
                     survival=survival)

"""Training data: the collector's TRANSITIONS exports -> the world model's transitions -> language-model examples.

`join_exports` pairs the a11y-tree export of a run with its Markdown export (same episode and step) to get each
page's link targets, and takes every website's split from the task catalog's (`sites.json`, written by
`webenv worldmodel build` from `TaskService.ListTasks`): crawl episodes carry no task, so the split is the
site's, never guessed.

The language model learns the part of a transition that is decided on the page itself: whether a page action
(click, fill, select, press, type) loads a new document, where to, and otherwise how the page changes. Its
prompt is the URL, the last actions, the numbered a11y tree (link lines carry their href as ` -> /path`; a long
page is cut to the lines around the element acted on, with its real line numbers) and the action with its
element's line. Its target opens with a single decision token:

    <nav>/products/P1007                      a new document at that URL (the page itself: compose.py)
    <same>\\nEDIT\\n@19 1\\n+\\t[16] searchbox "Search" value="cedar", focused      an edit of this page

Navigation actions (navigate, go_back, go_forward) and actions that never change the page are structural and
need no model (predict.py). Reasoning injection (WebWorld): with `--reasoning-fraction`, that fraction of
examples asks for `<predict reason>` and the target opens with a `<reasoning>...</reasoning>` paragraph, so one
model serves with reasoning on or off.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal
from urllib.parse import urljoin, urlsplit

from pydantic import BaseModel, ConfigDict
from webenv.worldmodel import diff
from webenv.worldmodel.compose import PageView
from webenv.worldmodel.page import action_kind, links_from_markdown, target_id_of_line, target_line

PROMPT_END = "<predict>\n"
PROMPT_END_REASON = "<predict reason>\n"
REASONING_OPEN, REASONING_CLOSE = "<reasoning>", "</reasoning>"
NAV, SAME = "<nav>", "<same>"
#: Actions answered without the model: the page does not change (the farm observes the whole tree, not the viewport).
NO_CHANGE = frozenset({"wait", "noop", "scroll", "scroll_element", "hover", "answer"})
#: Actions whose next URL the action itself says (navigate) or the browser history does (back, forward).
HISTORY = frozenset({"navigate", "go_back", "go_forward"})


class TransitionRecord(BaseModel):
    """One transition: the collector's TRANSITIONS schema plus the link targets of both pages."""

    model_config = ConfigDict(extra="ignore")
    episode_id: str
    step_index: int
    site: str
    split: Literal["train", "validation", "test"] = "train"
    #: the site builder of its website (`Task.builder`; "handmade", "miniwob" for the outside suites), "" unknown
    builder: str = ""
    #: the evaluation suite its website belongs to (train, validation, held_out_builders, handmade, miniwob), "" none
    suite: str = ""
    format: Literal["axtree"] = "axtree"
    instruction: str = ""
    url: str
    state: str
    action_text: str
    next_url: str
    next_state: str
    env_kind: str = "browser"
    level: str = ""
    links: dict[str, str] = {}
    next_links: dict[str, str] = {}

    @property
    def page(self) -> PageView:
        return PageView(self.url, self.state, dict(self.links))

    @property
    def next_page(self) -> PageView:
        return PageView(self.next_url, self.next_state, dict(self.next_links))


def read_transitions(paths: Iterable[Path | str]) -> list[TransitionRecord]:
    """Read and validate transitions JSONL files; a bad line raises ValueError naming file and line."""
    out: list[TransitionRecord] = []
    for path in paths:
        with Path(path).open() as fh:
            for n, line in enumerate(fh, start=1):
                if not line.strip():
                    continue
                try:
                    out.append(TransitionRecord.model_validate_json(line))
                except ValueError as exc:
                    raise ValueError(f"{path}:{n}: not a transition: {str(exc)[:200]}") from exc
    return out


def jsonl_rows(path: Path | str) -> Iterator[dict]:
    """The objects of a JSONL file; a bad line raises ValueError naming file and line."""
    with Path(path).open() as fh:
        for n, line in enumerate(fh, start=1):
            if line.strip():
                try:
                    yield json.loads(line)
                except json.JSONDecodeError as exc:
                    raise ValueError(f"{path}:{n}: not JSON: {exc}") from exc


def join_exports(axtree: list[Path | str], markdown: list[Path | str], sites: dict[str, dict[str, str]],
                 level: str = "") -> list[TransitionRecord]:
    """Transitions of the a11y-tree exports with link targets from the Markdown exports of the same runs.

    `sites` maps host -> {"split": "train"|"validation"|"test", "builder"?, "suite"?, ...} as the build splits them
    (the task catalog's split, or the build's split by builder); a transition on a site it does not list is an error
    (its split would be a guess)."""
    links: dict[tuple[str, int], tuple[dict[str, str], dict[str, str]]] = {}
    for path in markdown:
        for r in jsonl_rows(path):
            if r.get("format") != "markdown":
                raise ValueError(f"{path}: expected a Markdown TRANSITIONS export, got format {r.get('format')!r}")
            links[(r["episode_id"], r["step_index"])] = (links_from_markdown(r["state"]), links_from_markdown(r["next_state"]))
    out: list[TransitionRecord] = []
    for path in axtree:
        for r in jsonl_rows(path):
            if r.get("format") != "axtree":
                raise ValueError(f"{path}: expected an AXTREE TRANSITIONS export, got format {r.get('format')!r}")
            host = r["site"]
            if host not in sites:
                raise ValueError(f"{path}: site {host!r} is not in the sites file: its split is unknown")
            got = links.get((r["episode_id"], r["step_index"]))
            if got is None:
                raise ValueError(f"{path}: episode {r['episode_id']} step {r['step_index']} has no Markdown export")
            out.append(TransitionRecord.model_validate(
                {**r, "split": sites[host]["split"], "builder": sites[host].get("builder", ""),
                 "suite": sites[host].get("suite", ""), "level": r.get("level") or level, "links": got[0], "next_links": got[1]}))
    return out


def write_transitions(records: list[TransitionRecord], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w") as fh:
        for r in records:
            fh.write(r.model_dump_json() + "\n")


# --- prompt and target -----------------------------------------------------------------------------------------------
def encode_url(url: str, next_url: str) -> str:
    """A path when on the same origin (so it transfers to unseen sites), else the absolute URL."""
    a, b = urlsplit(url), urlsplit(next_url)
    if (a.scheme, a.netloc) == (b.scheme, b.netloc) and b.path.startswith("/"):
        return b.path + (f"?{b.query}" if b.query else "")
    return next_url


def decode_url(url: str, encoded: str) -> str:
    encoded = encoded.strip()
    if not encoded:
        return url
    return urljoin(url, encoded) if encoded.startswith("/") else encoded


def _path(url: str) -> str:
    p = urlsplit(url)
    return (p.path or "/") + (f"?{p.query}" if p.query else "")


def page_lines(page: PageView) -> list[str]:
    """The state's lines, link lines carrying their href (` -> /path`)."""
    out = []
    for line in diff.split_lines(page.state):
        tid = target_id_of_line(line)
        href = page.links.get(tid) if tid else None
        out.append(f"{line} -> {href}" if href else line)
    return out




def window(lines: list[str], target: int | None, max_lines: int, head: int = 5) -> list[int]:
    """Which lines to show (indexes, in order): the whole page when short, else its head, any open dialog (a
    modal swallows clicks outside it) and the lines around the element acted on, up to max_lines."""
    n = len(lines)
    if n <= max_lines:
        return list(range(n))
    keep = set(range(min(head, n)))
    for i, line in enumerate(lines):  # dialogs and their subtrees
        s = line.lstrip("\t")
        if s.startswith("[") and " dialog " in s:
            depth = len(line) - len(s)
            j = i + 1
            while j < n and len(lines[j]) - len(lines[j].lstrip("\t")) > depth:
                j += 1
            keep.update(range(i, min(j, i + 6)))
    budget = max_lines - len(keep)
    centre = target if target is not None else head + budget // 2
    a = max(0, centre - budget // 2)
    for i in range(a, n):
        if budget <= 0:
            break
        if i not in keep:
            keep.add(i)
            budget -= 1
    return sorted(keep)


def build_prompt(instruction: str, history: list[tuple[str, str]], page: PageView, action_text: str,
                 max_lines: int = 24, reason: bool = False) -> str:
    """The prompt shared by training and serving. `history` holds (url, action_text), oldest first."""
    lines = page_lines(page)
    t = target_line(lines, action_text)
    shown: list[str] = []
    last = -1
    for i in window(lines, t, max_lines):
        if i > last + 1:
            shown.append("...")
        shown.append(f"{i + 1} {lines[i]}")
        last = i
    if last < len(lines) - 1:
        shown.append("...")
    hist = "\n".join(f"{_path(u)} {a}" for u, a in history) or "-"
    target = f"{t + 1} {lines[t].strip()}" if t is not None else "-"
    return (f"<instruction>\n{instruction or '-'}\n<history>\n{hist}\n<url>\n{page.url}\n<state lines={len(lines)}>\n"
            + "\n".join(shown) + f"\n<action>\n{action_text}\n{target}\n" + (PROMPT_END_REASON if reason else PROMPT_END))


def build_target(r: TransitionRecord, reasoning: str = "") -> str:
    head = f"{REASONING_OPEN}{reasoning}{REASONING_CLOSE}\n" if reasoning else ""
    if r.next_url != r.url:
        return f"{head}{NAV}{encode_url(r.url, r.next_url)}"
    return f"{head}{SAME}\nEDIT\n" + diff.make_edit(r.state, r.next_state)


@dataclass
class ParsedOutput:
    """A completion: either a navigation (next_url; the page comes from compose.py) or an edit of this page."""

    navigates: bool
    next_url: str
    next_state: str
    edit: str = ""
    reasoning: str = ""
    fallback: bool = False
    error: str = ""
    repaired: bool = False


def parse_output(text: str, url: str, state: str, repair: bool = True) -> ParsedOutput:
    """Parse a completion; anything malformed keeps the current page (fallback=True) with the reason.

    With `repair`, an edit that does not apply as a whole is applied leniently (`diff.apply_lenient`) and flagged
    `repaired` instead of being dropped."""
    reasoning = ""
    if text.startswith(REASONING_OPEN):
        end = text.find(REASONING_CLOSE)
        if end < 0:
            return ParsedOutput(False, url, state, fallback=True, error="reasoning is not closed")
        reasoning = text[len(REASONING_OPEN):end]
        text = text[end + len(REASONING_CLOSE):].lstrip("\n")
    if text.startswith(NAV):
        target = text[len(NAV):].split("\n", 1)[0].strip()
        if not target:
            return ParsedOutput(False, url, state, reasoning=reasoning, fallback=True, error="<nav> without a URL")
        return ParsedOutput(True, decode_url(url, target), state, reasoning=reasoning)
    if not text.startswith(SAME):
        return ParsedOutput(False, url, state, reasoning=reasoning, fallback=True, error="output does not start with <nav> or <same>")
    rest = text[len(SAME):].lstrip("\n")
    kind, _, body = rest.partition("\n")
    if kind != "EDIT":
        return ParsedOutput(False, url, state, reasoning=reasoning, fallback=True, error="expected EDIT after <same>")
    try:
        return ParsedOutput(False, url, diff.apply(body, state), edit=body, reasoning=reasoning)
    except diff.EditError as exc:
        if not repair:
            return ParsedOutput(False, url, state, edit=body, reasoning=reasoning, fallback=True, error=str(exc))
        return ParsedOutput(False, url, diff.apply_lenient(body, state), edit=body, reasoning=reasoning, repaired=True,
                            error=str(exc))


Reasoner = Callable[[TransitionRecord], str]
"""record -> reasoning text; e.g. an LLM backend's explanation of the change."""


def rule_reasoner(r: TransitionRecord) -> str:
    """A deterministic stand-in for an LLM explanation: what the element is and what the action does to the page."""
    lines = page_lines(r.page)
    t = target_line(lines, r.action_text)
    what = lines[t].strip() if t is not None else "the element the selector names"
    if r.next_url != r.url:
        effect = f"loads {_path(r.next_url)}" + (" (its link target)" if t is not None and _path(r.next_url) in lines[t] else "")
    else:
        changed = sum(h.delete + len(h.insert) for h in diff.compute(r.state, r.next_state))
        effect = f"stays on the page; {changed} lines change" if changed else "changes nothing"
    return f"{action_kind(r.action_text)} on {what}: {effect}."


def is_page_action(action_text: str) -> bool:
    """Actions the language model decides (the rest are structural, see predict.py)."""
    kind = action_kind(action_text)
    return kind not in NO_CHANGE and kind not in HISTORY


@dataclass
class Example:
    """One language-model example and the transition it came from."""

    prompt: str
    target: str
    record: TransitionRecord
    history: list[tuple[str, str]] = field(default_factory=list)

    @property
    def text(self) -> str:
        return self.prompt + self.target


def episodes(records: Iterable[TransitionRecord]) -> dict[str, list[TransitionRecord]]:
    eps: dict[str, list[TransitionRecord]] = {}
    for r in records:
        eps.setdefault(r.episode_id, []).append(r)
    for v in eps.values():
        v.sort(key=lambda r: r.step_index)
    return eps


def build_examples(records: list[TransitionRecord], history_window: int = 3, max_lines: int = 24,
                   reasoning_fraction: float = 0.0, reasoner: Reasoner | None = None, seed: int = 0) -> list[Example]:
    """Examples of the page actions, history from the episode."""
    rng = random.Random(seed)
    out: list[Example] = []
    for eps in episodes(records).values():
        for i, r in enumerate(eps):
            if not is_page_action(r.action_text):
                continue
            history = [(p.url, p.action_text) for p in eps[max(0, i - history_window):i]]
            reasoning = ""
            if reasoning_fraction > 0 and rng.random() < reasoning_fraction:
                reasoning = (reasoner or rule_reasoner)(r).replace(REASONING_CLOSE, "")
            prompt = build_prompt(r.instruction, history, r.page, r.action_text, max_lines, reason=bool(reasoning))
            out.append(Example(prompt, build_target(r, reasoning), r, history))
    return out


def split_examples(examples: list[Example]) -> tuple[list[Example], list[Example]]:
    """(train, held out) by the records' website split; held out is the validation websites when there are any
    (the split by builder: the training's eval loss then never reads the held-out builders), else the test ones."""
    held = [e for e in examples if e.record.split == "validation"] or [e for e in examples if e.record.split == "test"]
    return [e for e in examples if e.record.split == "train"], held


def iter_texts(examples: Iterable[Example]) -> Iterator[str]:
    """Texts to train a tokenizer on."""
    for ex in examples:
        yield ex.prompt
        yield ex.target


"""Transitions JSONL -> world-model training examples (prompt text, target text), split by website.

A prompt holds the instruction, a window of earlier actions, the current URL, the current state with
1-based line numbers (so an edit can name lines without the model counting them) and the action. The
target is the next URL — `=` when unchanged, a path when on the same origin (so it transfers to unseen
sites), else absolute — followed by either the compact edit of `diff` or the full next state, optionally
preceded by a reasoning paragraph (WebWorld's chain-of-thought injection, for a fraction of examples).
"""

from __future__ import annotations

import hashlib
import json
import random
import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal
from urllib.parse import urljoin, urlsplit

from pydantic import BaseModel, ConfigDict
from webenv.worldmodel import diff
from webenv.worldmodel.formats import Format, convert

PROMPT_END = "<predict>\n"
REASONING_OPEN, REASONING_CLOSE = "<reasoning>", "</reasoning>"


class TransitionRecord(BaseModel):
    """One line of the cross-service transitions JSONL."""

    model_config = ConfigDict(extra="ignore")
    episode_id: str
    step_index: int
    site: str
    split: Literal["train", "test"] = "train"
    format: Format = Format.AXTREE
    instruction: str = ""
    url: str
    state: str
    action_text: str
    next_url: str
    next_state: str
    env_kind: str = "browser"


@dataclass
class Example:
    """One training/evaluation example and the transition it came from."""

    prompt: str
    target: str
    record: TransitionRecord
    history: list[tuple[str, str]] = field(default_factory=list)
    state: str = ""
    next_state: str = ""

    @property
    def text(self) -> str:
        return self.prompt + self.target


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


def site_split(site: str, test_fraction: float = 0.25) -> str:
    """Deterministic split by website for records that do not carry one."""
    h = int(hashlib.sha256(site.encode()).hexdigest()[:8], 16) / 0xFFFFFFFF
    return "test" if h < test_fraction else "train"


NAV, SAME = "<nav>", "<same>"


def encode_url(url: str, next_url: str) -> str:
    """`<same>` when unchanged; else `<nav>` then path?query when same origin, or the absolute URL.

    Both markers are single tokens opening the target, so "does the page change?" is one greedy decision between
    two tokens; with a plain `URL =` / `URL /path` line the probability of navigating was split over many path
    tokens and greedy decoding said "unchanged" far too often."""
    if next_url == url:
        return SAME
    a, b = urlsplit(url), urlsplit(next_url)
    if (a.scheme, a.netloc) == (b.scheme, b.netloc) and b.path.startswith("/"):
        return NAV + b.path + (f"?{b.query}" if b.query else "") + (f"#{b.fragment}" if b.fragment else "")
    return NAV + next_url


def decode_url(url: str, encoded: str) -> str:
    """Inverse of encode_url."""
    encoded = encoded.strip().removeprefix(NAV).strip()
    if encoded in ("", "=", SAME):
        return url
    return urljoin(url, encoded) if encoded.startswith("/") else encoded


def number_lines(state: str) -> str:
    return "\n".join(f"{i} {line}" for i, line in enumerate(diff.split_lines(state), start=1))


def _path(url: str) -> str:
    p = urlsplit(url)
    return (p.path or "/") + (f"?{p.query}" if p.query else "")


_ACTION_ID = re.compile(r"^\w+\((\d+)\b")


def target_line(state: str, action_text: str) -> str:
    """`<n> <line>` of the element an action names by id, so the model need not search the state for it."""
    m = _ACTION_ID.match(action_text)
    if not m:
        return "-"
    needles = (f"[{m.group(1)}] ", f'id="{m.group(1)}"')
    for i, line in enumerate(diff.split_lines(state), start=1):
        if any(n in line for n in needles):
            return f"{i} {line.strip()}"
    return "missing"


def build_prompt(instruction: str, history: list[tuple[str, str]], url: str, state: str, action_text: str,
                 fmt: Format = Format.AXTREE, as_edit: bool = True) -> str:
    """The prompt text shared by training and serving. `history` holds (url, action_text), oldest first."""
    hist = "\n".join(f"{_path(u)} {a}" for u, a in history) or "-"
    mode = "edit" if as_edit else "state"
    return (f"<instruction>\n{instruction or '-'}\n<history>\n{hist}\n<url>\n{url}\n<format>\n{fmt.value} {mode}\n"
            f"<state>\n{number_lines(state)}\n<action>\n{action_text}\n{target_line(state, action_text)}\n{PROMPT_END}")


def build_target(url: str, next_url: str, state: str, next_state: str, as_edit: bool, reasoning: str = "") -> str:
    head = f"{REASONING_OPEN}{reasoning}{REASONING_CLOSE}\n" if reasoning else ""
    body = "EDIT\n" + diff.make_edit(state, next_state) if as_edit else "STATE\n" + next_state
    return f"{head}{encode_url(url, next_url)}\n{body}"


@dataclass
class ParsedOutput:
    """A model completion parsed into the next state and URL."""

    next_state: str
    next_url: str
    edit: str = ""
    reasoning: str = ""
    fallback: bool = False
    error: str = ""
    repaired: bool = False


def parse_output(text: str, url: str, state: str, repair: bool = False) -> ParsedOutput:
    """Parse a completion; anything malformed keeps the current state (fallback=True) with the reason.

    With `repair`, an edit that does not apply as a whole is applied leniently (`diff.apply_lenient`) and
    flagged `repaired` instead of being dropped."""
    reasoning = ""
    if text.startswith(REASONING_OPEN):
        end = text.find(REASONING_CLOSE)
        if end < 0:
            return ParsedOutput(state, url, fallback=True, error="reasoning is not closed")
        reasoning = text[len(REASONING_OPEN):end]
        text = text[end + len(REASONING_CLOSE):].lstrip("\n")
    first, _, rest = text.partition("\n")
    first = first.removeprefix("URL ")
    if not first.startswith((NAV, SAME, "=")):
        return ParsedOutput(state, url, reasoning=reasoning, fallback=True, error="output does not start with <nav> or <same>")
    next_url = decode_url(url, first)
    kind, _, body = rest.partition("\n")
    if kind == "EDIT":
        try:
            return ParsedOutput(diff.apply(body, state), next_url, edit=body, reasoning=reasoning)
        except diff.EditError as exc:
            if not repair:
                return ParsedOutput(state, next_url, edit=body, reasoning=reasoning, fallback=True, error=str(exc))
            return ParsedOutput(diff.apply_lenient(body, state), next_url, edit=body, reasoning=reasoning,
                                repaired=True, error=str(exc))
    if kind == "STATE":
        return ParsedOutput(body, next_url, reasoning=reasoning)
    return ParsedOutput(state, next_url, reasoning=reasoning, fallback=True, error="expected EDIT or STATE")


Reasoner = Callable[[TransitionRecord, str, str], str]
"""(record, state, next_state) -> reasoning text; e.g. an LLM backend's explanation of the change."""


def rule_reasoner(record: TransitionRecord, state: str, next_state: str) -> str:
    """A deterministic stand-in for an LLM explanation: what the action does and how much changes."""
    hunks = diff.compute(state, next_state)
    changed = sum(h.delete + len(h.insert) for h in hunks)
    where = "stays on the page" if record.url == record.next_url else f"navigates to {_path(record.next_url)}"
    return f"{record.action_text} {where}; {changed} lines change."


def build_examples(records: list[TransitionRecord], fmt: Format = Format.AXTREE, as_edit: bool = True,
                   history_window: int = 3, reasoning_fraction: float = 0.0, reasoner: Reasoner | None = None,
                   seed: int = 0) -> list[Example]:
    """Examples in `fmt` (converted from the recorded format where derivable), history from the episode."""
    rng = random.Random(seed)
    by_episode: dict[str, list[TransitionRecord]] = {}
    for r in records:
        by_episode.setdefault(r.episode_id, []).append(r)
    out: list[Example] = []
    for eps in by_episode.values():
        eps.sort(key=lambda r: r.step_index)
        for i, r in enumerate(eps):
            state, next_state = convert(r.state, r.format, fmt), convert(r.next_state, r.format, fmt)
            history = [(p.url, p.action_text) for p in eps[max(0, i - history_window):i]]
            reasoning = ""
            if reasoning_fraction > 0 and rng.random() < reasoning_fraction:
                reasoning = (reasoner or rule_reasoner)(r, state, next_state).replace(REASONING_CLOSE, "")
            prompt = build_prompt(r.instruction, history, r.url, state, r.action_text, fmt, as_edit)
            target = build_target(r.url, r.next_url, state, next_state, as_edit, reasoning)
            out.append(Example(prompt, target, r, history, state, next_state))
    return out


def split_examples(examples: list[Example]) -> tuple[list[Example], list[Example]]:
    """(train, test) by the records' website split."""
    train = [e for e in examples if e.record.split == "train"]
    test = [e for e in examples if e.record.split == "test"]
    return train, test


def iter_texts(records: Iterable[TransitionRecord]) -> Iterator[str]:
    """Texts to train a tokenizer on (prompts and targets in every derivable format)."""
    for ex in build_examples(list(records)):
        yield ex.prompt
        yield ex.target


def write_jsonl(examples: list[Example], path: Path) -> None:
    """Write examples as {"prompt","target","site","split"} lines (for inspection or other trainers)."""
    with path.open("w") as fh:
        for e in examples:
            fh.write(json.dumps({"prompt": e.prompt, "target": e.target, "site": e.record.site,
                                 "split": e.record.split}) + "\n")

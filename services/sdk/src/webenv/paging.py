"""AIP-158 pagination for every List RPC: one page-size rule and one page-token format.

A List request has ``page_size`` and ``page_token`` and its response ``next_page_token`` (empty on the last page).
:func:`read` reads the two fields of a request:

- ``page_size``: 0 takes the RPC's default, a larger value than the RPC's maximum is capped at it, a negative one
  is INVALID_ARGUMENT ``BAD_PAGE_SIZE`` naming ``page_size``;
- ``page_token``: an opaque offset bound to the rest of the request it was issued for (its filter: ListTasks'
  ``filter``, ListRuns' ``state``, ListSessions' ``labels``, ...), so a token reused with another filter, or a
  tampered or garbage one, is INVALID_ARGUMENT ``BAD_PAGE_TOKEN`` naming ``page_token`` instead of silently
  returning the wrong page.

The token is base64url (no padding) of ``{"o": offset, "f": key}``, ``key`` the first 16 hex digits of the SHA-256
of the request with its page fields cleared (deterministic serialization, so a map filter hashes the same in any
order). An offset rather than a cursor: every listing here is an ordered in-memory list or one ordered store query,
and an offset token costs nothing to check.

:func:`page_of` pages an in-memory list in one call; a store that reads ``size + 1`` rows itself uses
:func:`read` and :meth:`Page.next_token`. :func:`iterate` is the client side: every item of every page.
"""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from google.protobuf.message import Message
from webenv import errors

T = TypeVar("T")

PAGE_FIELDS = ("page_size", "page_token")


def _scope(request: Message) -> str:
    """The key a token is bound to: the request without its page fields."""
    rest = type(request)()
    rest.CopyFrom(request)
    for name in PAGE_FIELDS:
        rest.ClearField(name)
    return hashlib.sha256(rest.SerializeToString(deterministic=True)).hexdigest()[:16]


def _bad_token(message: str) -> errors.InvalidArgument:
    return errors.InvalidArgument(f"page_token: {message}", reason="BAD_PAGE_TOKEN", metadata={"field": "page_token"})


@dataclass(frozen=True)
class Page:
    """Where a page starts, how long it is, and the key its tokens carry."""

    offset: int
    size: int
    scope: str

    def next_token(self, more: bool) -> str:
        """The token of the page after this one ("" when ``more`` is false: this is the last page)."""
        if not more:
            return ""
        raw = json.dumps({"o": self.offset + self.size, "f": self.scope}, separators=(",", ":")).encode()
        return base64.urlsafe_b64encode(raw).decode().rstrip("=")

    def check_within(self, total: int) -> None:
        """INVALID_ARGUMENT when the token points past the end of ``total`` results."""
        if self.offset > total:
            raise _bad_token("points past the end of the results")


def read(request: Message, *, default: int, maximum: int) -> Page:
    """The page a List request asks for (INVALID_ARGUMENT naming ``page_size`` or ``page_token`` when bad)."""
    if request.page_size < 0:
        raise errors.InvalidArgument(f"page_size: must be >= 0, got {request.page_size}", reason="BAD_PAGE_SIZE",
                                     metadata={"field": "page_size"})
    size = min(request.page_size or default, maximum)
    scope = _scope(request)
    token = request.page_token
    if not token:
        return Page(0, size, scope)
    try:
        data = json.loads(base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)))
        offset, key = int(data["o"]), str(data["f"])
    except (ValueError, KeyError, TypeError) as exc:
        raise _bad_token(f"{token[:40]!r} is not a token from a previous response") from exc
    if key != scope:
        raise _bad_token("was issued for a different filter (the request's other fields must stay the same)")
    if offset < 0:
        raise _bad_token("has a negative offset")
    return Page(offset, size, scope)


def page_of(request: Message, items: Sequence[T], *, default: int, maximum: int) -> tuple[Sequence[T], str]:
    """One page of an ordered list and the next page's token."""
    page = read(request, default=default, maximum=maximum)
    page.check_within(len(items))
    return items[page.offset:page.offset + page.size], page.next_token(page.offset + page.size < len(items))


def iterate(call: Callable[[Any], Any], request: Message, field: str) -> Iterator[Any]:
    """Every item (the response's repeated ``field``) of every page, calling ``call(request)`` page by page."""
    req = type(request)()
    req.CopyFrom(request)
    while True:
        resp = call(req)
        yield from getattr(resp, field)
        if not resp.next_page_token:
            return
        req.page_token = resp.next_page_token

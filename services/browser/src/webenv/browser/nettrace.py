"""The per-session network trace: the HTTP requests a session's pages made and the status each got, for
CloseSession (``network_events``, with ``capture_evidence``) and so the judge (WebArena-Verified's
NetworkEventEvaluator).

A trace listens to one session's browser contexts only (each session has its own context, closed when it ends), so it
holds nothing of other sessions. It is bounded: static resources (images, stylesheets, fonts, media) are left out,
URLs and bodies are cut at 4,096 characters, headers at 50 (cookie and authorization never kept), and past
``MAX_EVENTS`` events the oldest are dropped (``dropped`` counts them). Requests a context made before the session
adopted it (a primed start page) are not in it.
"""

from __future__ import annotations

import time
from collections import deque

from playwright.async_api import BrowserContext, Request, Response
from webenv.v1 import common_pb2

MAX_EVENTS = 2000
MAX_CHARS = 4096
MAX_HEADERS = 50
MAX_HEADER_CHARS = 512
SKIPPED_TYPES = frozenset({"image", "stylesheet", "font", "media"})
SECRET_HEADERS = frozenset({"cookie", "authorization", "proxy-authorization"})


class NetworkTrace:
    """The requests of the contexts :meth:`attach` was given, oldest first, at most ``max_events``."""

    def __init__(self, max_events: int = MAX_EVENTS) -> None:
        self.events: deque[common_pb2.NetworkEvent] = deque(maxlen=max_events)
        self.dropped = 0
        self.t0 = time.monotonic()

    def attach(self, context: BrowserContext) -> None:
        context.on("response", self._on_response)
        context.on("requestfailed", self._on_failed)

    def _record(self, request: Request, status: int) -> None:
        if request.resource_type in SKIPPED_TYPES:
            return
        try:
            body = request.post_data or ""
        except Exception:  # a binary body that is not text
            body = ""
        headers = {}
        for k, v in list(request.headers.items())[:MAX_HEADERS]:
            if k.lower() not in SECRET_HEADERS:
                headers[k] = v[:MAX_HEADER_CHARS]
        if len(self.events) == self.events.maxlen:
            self.dropped += 1
        self.events.append(common_pb2.NetworkEvent(
            method=request.method.upper(), url=request.url[:MAX_CHARS], status=status, post_data=body[:MAX_CHARS],
            resource_type=request.resource_type, navigation=request.is_navigation_request(),
            request_headers=headers, seconds=round(time.monotonic() - self.t0, 3)))

    def _on_response(self, response: Response) -> None:
        self._record(response.request, response.status)

    def _on_failed(self, request: Request) -> None:
        self._record(request, 0)

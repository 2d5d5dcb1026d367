"""The ASGI app serving every synthetic site by Host header, plus MiniWoB++ under miniwob.web.test and the
hand-written websites (`data/handmade/<host>/`, static pages built unlike the generator's templates) on their hosts.

Per-session state is keyed by the `site_session` cookie (set per host; a request without it gets a fresh
one). Each synthetic-site request goes, in one call, to the site's builder (`builders/`: its URL scheme says what
the URL means, the shared handler reads or changes the state, the builder renders). Forms are plain urlencoded
POSTs answered with 303 redirects (post/redirect/get), so browser history and reloads behave as on real sites.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from urllib.parse import parse_qs

from prometheus_client import Counter, Histogram
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.staticfiles import StaticFiles
from webenv.sites import builders
from webenv.sites.builders.base import Ctx
from webenv.sites.catalog import Site, SiteCatalog
from webenv.sites.state import State, StateStore, default_state, valid_session_id

COOKIE = "site_session"
MINIWOB_HOST = "miniwob.web.test"

HTTP_REQUESTS = Counter("webenv_sites_http_requests_total", "HTTP requests served", ["family", "code"])
HTTP_SECONDS = Histogram(
    "webenv_sites_http_request_seconds", "HTTP request handling time",
    buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0),
)


class SitesApp:
    """ASGI callable: Host header -> site -> page handler."""

    def __init__(self, catalog: SiteCatalog, store: StateStore, miniwob_dir: str | None = None,
                 handmade_dir: Path | None = None) -> None:
        self.catalog = catalog
        self.store = store
        self.static: dict[str, tuple[str, StaticFiles]] = {}  # host -> (metrics family, its files)
        if miniwob_dir:
            self.static[MINIWOB_HOST] = ("miniwob", StaticFiles(directory=miniwob_dir))
        if handmade_dir is not None and handmade_dir.is_dir():
            for d in sorted(handmade_dir.iterdir()):
                if d.is_dir() and d.name.endswith(".web.test"):
                    self.static[d.name] = ("handmade", StaticFiles(directory=str(d), html=True))

    def state_factory(self, site: Site) -> Callable[[], State]:
        key = site.family.action.key if site.family.action else None
        return lambda: default_state(site.host, site.family.name, key)

    async def __call__(self, scope: dict, receive: Callable[[], Awaitable[dict]], send: Callable[[dict], Awaitable[None]]) -> None:
        if scope["type"] == "lifespan":
            while True:
                msg = await receive()
                if msg["type"] == "lifespan.startup":
                    await send({"type": "lifespan.startup.complete"})
                elif msg["type"] == "lifespan.shutdown":
                    await send({"type": "lifespan.shutdown.complete"})
                    return
        if scope["type"] != "http":
            return
        t0 = time.perf_counter()
        request = Request(scope, receive)
        host = (request.headers.get("host") or "").split(":", 1)[0].lower()
        if host in self.static:
            family, files = self.static[host]
            try:
                await files(scope, receive, send)
                code = 200
            except HTTPException as exc:  # StaticFiles raises before sending anything
                code = exc.status_code
                await PlainTextResponse(exc.detail, status_code=code)(scope, receive, send)
            HTTP_REQUESTS.labels(family, str(code)).inc()
            return
        site = self.catalog.get(host)
        if site is None:
            response: Response = PlainTextResponse(f"no such site: {host!r}", status_code=404)
            family = "none"
        else:
            family = site.family.name
            response = await self.handle(site, request)
        await response(scope, receive, send)
        HTTP_REQUESTS.labels(family, str(response.status_code)).inc()
        HTTP_SECONDS.observe(time.perf_counter() - t0)

    async def handle(self, site: Site, request: Request) -> Response:
        session = request.cookies.get(COOKIE) or ""
        new_cookie = not valid_session_id(session)  # a missing or malformed cookie gets a fresh session
        if new_cookie:
            session = self.store.new_session_id()
        st = self.store.get(session, site.host, self.state_factory(site))
        form: dict[str, str] = {}
        if request.method == "POST":
            body = (await request.body()).decode("utf-8", "replace")
            form = {k: v[-1] for k, v in parse_qs(body, keep_blank_values=True).items()}
        response = builders.get(site.builder_name).route(Ctx(site, session, st, request, form))
        if new_cookie:
            response.set_cookie(COOKIE, session, path="/", httponly=True, samesite="lax")
        return response

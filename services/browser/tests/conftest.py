"""Fixtures of the browser farm tests: a local HTTP server for test pages and MiniWoB++, and a farm
served over a real gRPC channel. `*.web.test` hosts are mapped to the local server by Chromium's
host-resolver rules, exactly as the synthetic web is in production."""

from __future__ import annotations

import html
import http.server
import threading
import urllib.parse
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import grpc
import pytest
from webenv.browser.__main__ import serving
from webenv.browser.config import Settings
from webenv.client import EnvironmentClient, make_channel
from webenv.v1 import browser_pb2_grpc, common_pb2, environment_pb2_grpc

PAGES: dict[str, str] = {
    # effects that come after the click: 4 ms later, and a chain of updates 6 ms apart, each well inside the 15 ms
    # DOM-quiet window (timers on 2 loaded cores fire late: at 8 and 10 ms the margin was too thin for CI)
    "late": """<!doctype html><html><body><button id="once">once</button><button id="chain">chain</button>
<p id="out">nothing yet</p><script>
const out = document.getElementById('out');
document.getElementById('once').onclick = () => setTimeout(() => { out.textContent = 'late once'; }, 4);
document.getElementById('chain').onclick = () => {
  let n = 0; const tick = () => { n += 1; out.textContent = 'chain ' + n; if (n < 5) setTimeout(tick, 6); };
  setTimeout(tick, 6);
};</script></body></html>""",
    # what the tree must follow (test_browser_fidelity.py; services/browser/fidelity.py measures it against CDP)
    "shadow": """<!doctype html><html><body><h1>Shop</h1><product-card></product-card><p id="out"></p>
<script>customElements.define('product-card', class extends HTMLElement { constructor() { super();
  const r = this.attachShadow({mode: 'open'});
  r.innerHTML = '<h2>Blue mug</h2><button>Add to cart</button><label for="q">Search</label><input id="q">';
  r.querySelector('button').addEventListener('click', () => { document.getElementById('out').textContent = 'added'; });
}});</script></body></html>""",
    "patterns": """<!doctype html><html><head><style>.icon { content: url(data:image/gif;base64,R0lGODlhAQABAAAAACw=);
width: 12px; height: 12px; } .alink { cursor: pointer; color: blue; }</style></head><body>
<fieldset><legend>Contact</legend><label>Email <input type="email"></label></fieldset>
<table><tr><th>Order</th><th>Total</th></tr><tr><th>#1001</th><td><span aria-label="twenty dollars">$20</span></td></tr></table>
<label for="d">Birthday</label><input type="date" id="d">
<ul role="tablist"><li role="tab" tabindex="0"><a href="#t1" role="presentation" tabindex="-1">Reviews</a></li></ul>
<p>Pick <span class="alink" id="w1">alpha</span> or <span class="alink" id="w2">beta</span></p>
<div id="box" style="width:40px;height:40px;background:red"></div><span class="icon" id="trash"></span>
<p id="log"></p><script>
const log = (t) => { document.getElementById('log').textContent = t; };
document.getElementById('box').addEventListener('click', () => log('box'));
document.getElementById('w2').addEventListener('click', () => log('beta'));
document.getElementById('trash').addEventListener('click', () => log('trash'));
</script></body></html>""",
    "basic": """<!doctype html><html><head><title>Basic page</title></head><body>
<h1>Welcome</h1>
<p id="para">Some text <a href="/pages/second" id="to-second">Second page</a></p>
<button id="btn" onclick="document.getElementById('out').textContent = 'clicked ' + (++window.n || (window.n = 1))">Press me</button>
<span id="out"></span>
<input id="name" placeholder="Your name">
<label for="agree">Agree</label><input type="checkbox" id="agree">
<select id="color"><option value="r">Red</option><option value="g">Green</option><option value="b">Blue</option></select>
<textarea id="notes"></textarea>
<div id="hover" onmouseover="this.textContent='hovered'">hover me</div>
<input id="keys" onkeydown="document.getElementById('out').textContent = 'key ' + event.key">
<div id="box" style="height:80px; overflow:auto" onscroll="document.getElementById('out').textContent='box scrolled ' + this.scrollTop"><div style="height:600px">tall content</div></div>
<div style="height:2000px">spacer</div>
<a href="/pages/second" target="_blank" id="newtab">Open in new tab</a>
<iframe src="/pages/inner" id="frame" style="width:300px;height:100px"></iframe>
<div style="display:none"><button id="hidden-btn">Hidden</button></div>
</body></html>""",
    # form fields whose values are typed text of a kind (numbers)
    "numbers": """<!doctype html><html><body><label for="qty">Quantity</label><input type="number" id="qty" min="0">
<label for="price">Price</label><input type="number" id="price" step="0.01"><p id="out"></p><script>
for (const id of ['qty', 'price']) document.getElementById(id).addEventListener('input', (e) => {
  document.getElementById('out').textContent = id + '=' + e.target.value; });
</script></body></html>""",
    # where a user clicks: a link wrapped onto two lines, inline buttons, a transformed element, one partly
    # scrolled out of its box, and one under a sticky header
    "aim": """<!doctype html><html><head><style>body { margin: 0; font: 16px/20px sans-serif; }
header { position: sticky; top: 0; height: 60px; background: #ccc; z-index: 2; }
.col { width: 220px; } #tilt { display: inline-block; transform: rotate(45deg) translateX(30px); width: 120px; }
#clip { height: 60px; overflow: auto; width: 300px; } #clip > div { height: 400px; }
#veil { position: absolute; left: 0; top: 0; width: 200px; height: 40px; background: #fff; }</style></head><body>
<header id="hdr">Header</header>
<p class="col">Some words before the link <a href="#" id="wrapped">a link that wraps onto the second line</a> after.</p>
<p class="col">Press <button id="ib1">one</button> or <button id="ib2">two</button> inline.</p>
<p><span id="tilt">tilted</span></p>
<div id="clip"><div><button id="half" style="margin-top:52px">half out</button></div></div>
<div style="position:relative; height:40px"><button id="veiled">veiled</button><div id="veil"></div></div>
<div style="position:relative; height:2600px"><button id="under" style="position:absolute; top:1000px">under</button></div>
<p id="log"></p><script>
for (const id of ['wrapped', 'ib1', 'ib2', 'tilt', 'half', 'under', 'veiled']) document.getElementById(id).addEventListener('click',
  (e) => { e.preventDefault(); document.getElementById('log').textContent = 'clicked ' + id; });
</script></body></html>""",
    "second": """<!doctype html><html><head><title>Second</title></head><body><h2>Second page</h2>
<a href="/pages/basic" id="back">Back</a></body></html>""",
    "inner": """<!doctype html><html><body><button id="inner-btn" onclick="this.textContent='inner clicked'">Inner</button></body></html>""",
    "drag": """<!doctype html><html><body style="margin:0"><div id="log">none</div>
<div id="pad" style="position:absolute;left:0;top:50px;width:400px;height:300px;background:#eee"
 onmousedown="this.dataset.d=event.clientX+','+event.clientY"
 onmouseup="document.getElementById('log').textContent='drag '+this.dataset.d+' -> '+event.clientX+','+event.clientY"
 onclick="document.getElementById('log').textContent += ' click '+event.clientX+','+event.clientY"></div></body></html>""",
    "loop": """<!doctype html><html><body><button id="hang" onclick="while(true){}">Hang</button>
<button id="alerts" onclick="while(true){alert('x')}">Alerts</button></body></html>""",
    "cookie": """<!doctype html><html><body><div id="c"></div><script>
document.getElementById('c').textContent = 'cookie=' + document.cookie;</script>
<button id="set" onclick="document.cookie='secret=s3cr3t; path=/'; document.getElementById('c').textContent='set'">Set</button>
</body></html>""",
    # navigation race: a form and a link whose targets are served late (/slow/<name>?ms=N)
    "navrace": """<!doctype html><html><head><title>Search</title></head><body><h1>Search</h1>
<form action="/slow/results" method="get"><input name="ms" id="ms" value="500">
<input name="q" id="q" value="shoes"><button id="search-btn" type="submit">Search</button></form>
<form action="/slow/results?ms=400" method="post"><input type="hidden" name="q" value="posted">
<button id="post-btn" type="submit">Post</button></form>
<a id="slow-link" href="/slow/target?ms=600">Slow link</a>
<form onsubmit="document.getElementById('out').textContent='stayed'; return false"><button id="js-btn">Stay</button></form>
<span id="out"></span></body></html>""",
    # ForkSession: storage as the page's scripts see it at load, fields of every kind, a scrolled box, a heap variable
    "fork": """<!doctype html><html><head><title>Fork</title></head><body><h1>Fork</h1><div id="seen"></div>
<input id="text"><input type="checkbox" id="check"><input type="radio" name="r" id="r1" checked>
<input type="radio" name="r" id="r2"><select id="sel"><option value="a">A</option><option value="b">B</option></select>
<select id="multi" multiple><option>x</option><option>y</option><option>z</option></select><textarea id="area"></textarea>
<div id="box" style="height:80px;overflow:auto"><div style="height:600px">tall</div></div>
<button id="store" onclick="localStorage.setItem('ls', 'L1'); sessionStorage.setItem('ss', 'S1');
 document.cookie = 'ck=C1; path=/'; window.heap = 'H'">Store</button><div style="height:3000px">spacer</div>
<script>document.getElementById('seen').textContent = 'ls=' + localStorage.getItem('ls') + ' ss=' +
 sessionStorage.getItem('ss') + ' ' + document.cookie;</script></body></html>""",
    "products": "".join(
        ["<!doctype html><html><head><title>Products</title></head><body><h1>Products</h1><ul>"]
        + [f'<li><a href="#p{i}">Product {i}</a> <span>${i}.99</span> <button id="b{i}" '
           f'onclick="this.textContent=\'added\'">Add</button></li>' for i in range(100)]
        + ["</ul></body></html>"]
    ),
    # ~8,000 elements: a menu, a search box, a 1,500-row orders table, then the answer a task asks for
    "big": "".join(
        ["<!doctype html><html><head><title>Orders</title></head><body><nav>"]
        + [f'<a href="#m{i}">Menu {i}</a> ' for i in range(40)]
        + ['</nav><h1>Orders</h1><input type="search" aria-label="Find an order"><table><tr><th>Order</th>'
           "<th>Status</th><th></th></tr>"]
        + [f'<tr><td><a href="#o{i}">Order {10000 + i}</a></td><td>shipped on day {i % 28 + 1}</td>'
           f"<td><button>Track {i}</button></td></tr>" for i in range(1500)]
        + ['</table><h2>Your question</h2><p id="answer">Order 4417 ships on 12 March.</p></body></html>']
    ),
}


def miniwob_html_dir() -> Path:
    """The html/ folder of the miniwob wheel (served as-is; importing miniwob is not needed)."""
    import importlib.util

    spec = importlib.util.find_spec("miniwob")
    assert spec is not None and spec.origin, "the miniwob wheel is not installed"
    return Path(spec.origin).parent / "html"


_FLAKY: dict[str, int] = {}
_FLAKY_LOCK = threading.Lock()


class _Handler(http.server.BaseHTTPRequestHandler):
    html_root: Path

    def log_message(self, *args: object) -> None:
        return

    def _send(self, code: int, body: bytes, ctype: str = "text/html; charset=utf-8", headers: dict | None = None) -> None:
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(body)

    def _slow(self, name: str, q: dict[str, list[str]]) -> None:
        """A page answered after `ms` milliseconds (navigation-race tests)."""
        import time

        time.sleep(int(q.get("ms", ["500"])[0]) / 1000)
        what = html.escape(q.get("q", [""])[0])
        body = (f"<!doctype html><html><head><title>Slow {name}</title></head><body><h1>Slow {name} {what}</h1>"
                "<button id=\"next-btn\" onclick=\"document.getElementById('res').textContent='next clicked'\">"
                "Next</button><span id=\"res\"></span></body></html>")
        return self._send(200, body.encode())

    def do_POST(self) -> None:
        url = urllib.parse.urlsplit(self.path)
        n = int(self.headers.get("Content-Length") or 0)
        q = urllib.parse.parse_qs(url.query)
        q.update(urllib.parse.parse_qs(self.rfile.read(n).decode()))
        if url.path.startswith("/slow/"):
            return self._slow(url.path.removeprefix("/slow/"), q)
        return self._send(404, b"not found")

    def do_GET(self) -> None:
        url = urllib.parse.urlsplit(self.path)
        q = urllib.parse.parse_qs(url.query)
        if url.path == "/flaky":  # the page `fork` `ok` times for a token, then connections closed unanswered
            with _FLAKY_LOCK:
                n = _FLAKY[q["token"][0]] = _FLAKY.get(q["token"][0], 0) + 1
            if n > int(q["ok"][0]):
                self.close_connection = True
                return
            return self._send(200, PAGES["fork"].encode())
        if url.path.startswith("/pages/"):
            name = url.path.removeprefix("/pages/")
            if name in PAGES:
                return self._send(200, PAGES[name].encode())
            return self._send(404, b"no such page")
        if url.path == "/frame":  # a page whose only content is an iframe of `src` (the frame waits)
            return self._send(200, ('<!doctype html><html><body><h1>Framed</h1><iframe src="' +
                                    html.escape(q["src"][0]) + '"></iframe></body></html>').encode())
        if url.path == "/no-content":
            return self._send(204, b"")
        if url.path == "/redirect":
            return self._send(302, b"", headers={"Location": q["to"][0]})
        if url.path == "/echo-cookie":
            return self._send(200, ("<html><body><pre id='c'>" + (self.headers.get("Cookie") or "") +
                                    "</pre></body></html>").encode())
        if url.path.startswith("/slow/"):
            return self._slow(url.path.removeprefix("/slow/"), q)
        rel = url.path.lstrip("/")
        path = (self.html_root / rel).resolve()
        if self.html_root in path.parents and path.is_file():
            ctype = {".html": "text/html", ".js": "application/javascript", ".css": "text/css",
                     ".png": "image/png"}.get(path.suffix, "application/octet-stream")
            return self._send(200, path.read_bytes(), ctype)
        return self._send(404, b"not found")


@dataclass
class PageServer:
    port: int

    @property
    def addr(self) -> str:
        return f"127.0.0.1:{self.port}"

    def url(self, name: str, host: str = "pages.web.test") -> str:
        return f"http://{host}/pages/{name}"

    @property
    def names(self) -> list[str]:
        """The hand-made pages it serves (`PAGES`)."""
        return list(PAGES)


@pytest.fixture(scope="session")
def page_server() -> Iterator[PageServer]:
    handler = type("H", (_Handler,), {"html_root": miniwob_html_dir().resolve()})
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    srv.daemon_threads = True
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    yield PageServer(srv.server_address[1])
    srv.shutdown()
    srv.server_close()


@dataclass
class FarmHandle:
    server: object
    farm: object
    channel: grpc.aio.Channel
    env: environment_pb2_grpc.EnvironmentServiceStub
    admin: browser_pb2_grpc.BrowserFarmServiceStub
    address: str
    metrics_port: int


def farm_settings(page_server: PageServer, chromium_path: str, **over: object) -> Settings:
    base: dict[str, object] = dict(
        grpc_port=0, metrics_port=0, host="127.0.0.1", farm_chromium_path=chromium_path,
        farm_sites_http_addr=page_server.addr, farm_warm_contexts=2, farm_max_sessions=24,
        farm_step_timeout_seconds=20.0, log_json=False, grace_seconds=1.0,
    )
    base.update(over)
    return Settings(**base)  # type: ignore[arg-type]


@asynccontextmanager
async def start_farm(settings: Settings) -> AsyncIterator[FarmHandle]:
    """A farm served on free ports with a client channel to it."""
    async with serving(settings) as (server, f):
        addr = f"127.0.0.1:{server.port}"
        channel = make_channel(addr, timeout=60.0)
        try:
            yield FarmHandle(server, f, channel, environment_pb2_grpc.EnvironmentServiceStub(channel),
                             browser_pb2_grpc.BrowserFarmServiceStub(channel), addr, server.metrics_port)
        finally:
            await channel.close()


@pytest.fixture(scope="session")
def farm_factory(page_server: PageServer, chromium_path: str):
    """Start a private farm with overridden settings: `async with farm_factory(farm_max_sessions=2) as f:`."""
    return lambda **over: start_farm(farm_settings(page_server, chromium_path, **over))


@pytest.fixture(scope="session")
async def farm(page_server: PageServer, chromium_path: str) -> AsyncIterator[FarmHandle]:
    """One farm for the module's tests (tests that break browsers start their own)."""
    async with start_farm(farm_settings(page_server, chromium_path)) as handle:
        yield handle


@pytest.fixture
async def env(farm: FarmHandle) -> AsyncIterator[EnvironmentClient]:
    """The sdk's EnvironmentClient on the farm's channel: actions as text, step indexes tracked."""
    async with EnvironmentClient(farm.channel) as client:
        yield client


def element_id(obs: common_pb2.Observation, text: str) -> str:
    """Id of the first axtree line containing `text` (e.g. '"Press me"')."""
    for line in obs.axtree.splitlines():
        if text in line and line.strip().startswith("["):
            return line.strip()[1:line.strip().index("]")]
    raise AssertionError(f"{text!r} not in axtree:\n{obs.axtree}")


@pytest.fixture
def eid():
    return element_id

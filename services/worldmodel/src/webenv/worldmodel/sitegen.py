"""Small procedurally generated multi-page websites for the local transitions collector.

Until the synthetic-web service serves real sites, the collector needs pages with the same shape:
shared navigation, lists of links, search, forms and in-page changes made by scripts (add to cart,
comments, toggles), so that transitions mix navigations (big changes) and small edits. Every site is
fully determined by its name (`<family>-<NNNN>`), served by host on one loopback port.
"""

from __future__ import annotations

import html
import random
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

FAMILIES = ("shop", "blog", "wiki")
WORDS = (
    "amber basalt cedar delta ember fjord garnet harbor indigo juniper kestrel lumen meadow nectar onyx "
    "pine quartz river saffron tundra umber violet willow xenon yarrow zephyr atlas beacon canyon dune "
    "echo falcon glacier haven island jade koi lotus maple nova orbit pebble quill raven summit tide"
).split()


def _words(rng: random.Random, n: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(n))


def site_names(count_per_family: int) -> list[str]:
    """Site host labels, e.g. shop-0003."""
    return [f"{fam}-{i:04d}" for fam in FAMILIES for i in range(count_per_family)]


class Site:
    """One generated website: its pages are functions of (path, query) and the site's seed."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.family = name.split("-")[0]
        self.rng = random.Random(name)
        self.title = _words(self.rng, 2).title()
        self.items = [
            {"slug": f"i{k}", "title": _words(self.rng, 2).title(), "price": self.rng.randint(5, 300),
             "text": _words(self.rng, self.rng.randint(5, 9)).capitalize() + "."}
            for k in range(self.rng.randint(5, 8))
        ]
        self.categories = sorted({_words(self.rng, 1) for _ in range(3)})

    # --- page chrome ---------------------------------------------------------------------------
    def _nav(self) -> str:
        labels = {"shop": ["Home", "Products", "Cart", "About"], "blog": ["Home", "Archive", "About"],
                  "wiki": ["Home", "Articles", "Search", "About"]}[self.family]
        links = "".join(f'<li><a href="/{"" if lab == "Home" else lab.lower()}">{lab}</a></li>' for lab in labels)
        cart = '<span id="cartcount">Cart: 0</span>' if self.family == "shop" else ""
        return f'<header><p>{html.escape(self.title)}</p>{cart}<nav><ul>{links}</ul></nav></header>'

    def page(self, path: str, query: dict[str, list[str]]) -> tuple[int, str]:
        """Status and HTML for a path."""
        body = self._body(path.rstrip("/") or "/", query)
        if body is None:
            return 404, self._wrap("Not found", "<h1>Page not found</h1><p>Nothing here.</p>")
        title, main = body
        return 200, self._wrap(title, main)

    def _wrap(self, title: str, main: str) -> str:
        script = """<script>
function addCart(){const c=document.getElementById('cartcount');const n=parseInt(c.textContent.split(': ')[1])+1;
c.textContent='Cart: '+n;const s=document.getElementById('status');s.textContent='Added to cart';}
function addComment(){const t=document.getElementById('comment');if(!t.value)return;const li=document.createElement('li');
li.textContent=t.value;document.getElementById('comments').appendChild(li);t.value='';}
function toggle(id){const e=document.getElementById(id);e.hidden=!e.hidden;}
</script>"""
        return (f"<!doctype html><html><head><title>{html.escape(title)}</title>{script}</head><body>"
                f"{self._nav()}<main>{main}</main><footer><p>{self.name} footer</p></footer></body></html>")

    def _item_list(self, items: list[dict]) -> str:
        base = {"shop": "product", "blog": "post", "wiki": "article"}[self.family]
        lis = "".join(
            f'<li><a href="/{base}/{it["slug"]}">{html.escape(it["title"])}</a>'
            + (f" ${it['price']}" if self.family == "shop" else "") + "</li>"
            for it in items)
        return f"<ul>{lis}</ul>"

    def _search_form(self, action: str) -> str:
        return (f'<form action="{action}"><input type="search" name="q" aria-label="Search">'
                '<button type="submit">Search</button></form>')

    def _body(self, path: str, q: dict[str, list[str]]) -> tuple[str, str] | None:
        fam, items = self.family, self.items
        if path == "/":
            intro = f"<h1>Welcome to {html.escape(self.title)}</h1><p>{_words(random.Random(self.name + 'i'), 6)}</p>"
            return self.title, intro + self._item_list(items[:3])
        if path == "/about":
            return "About", f"<h1>About {html.escape(self.title)}</h1><p>We love {self.categories[0]}.</p>"
        if path in ("/products", "/archive", "/articles"):
            head = {"/products": "Products", "/archive": "Archive", "/articles": "Articles"}[path]
            sort = ""
            if fam == "shop":
                opts = "".join(f"<option>{c}</option>" for c in ["all", *self.categories])
                sort = f'<label>Category <select name="cat">{opts}</select></label>'
            return head, f"<h1>{head}</h1>{self._search_form('/search')}{sort}{self._item_list(items)}"
        if path == "/search":
            term = (q.get("q") or [""])[0].strip().lower()
            hits = [it for it in items if term and term in (it["title"] + " " + it["text"]).lower()]
            res = self._item_list(hits) if hits else "<p>No results.</p>"
            return "Search", f"<h1>Search</h1>{self._search_form('/search')}<p>Results for {html.escape(term)}</p>{res}"
        if path == "/cart" and fam == "shop":
            return "Cart", '<h1>Cart</h1><p>Your cart is empty.</p><button onclick="toggle(\'help\')">Help</button><p id="help" hidden>Add products from their pages.</p>'
        for it in items:
            if path == f"/{ {'shop': 'product', 'blog': 'post', 'wiki': 'article'}[fam]}/{it['slug']}":
                t = html.escape(it["title"])
                if fam == "shop":
                    main = (f"<h1>{t}</h1><p>Price ${it['price']}</p><p>{it['text']}</p>"
                            '<label>Quantity <input type="number" value="1" min="1"></label>'
                            '<button onclick="addCart()">Add to cart</button><p id="status"></p>'
                            '<label><input type="checkbox"> Gift wrap</label>')
                elif fam == "blog":
                    main = (f"<h1>{t}</h1><p>{it['text']}</p><h2>Comments</h2><ul id=\"comments\"></ul>"
                            '<label>Comment <input type="text" id="comment"></label>'
                            '<button onclick="addComment()">Post comment</button>')
                else:
                    nxt = items[(items.index(it) + 1) % len(items)]
                    main = (f"<h1>{t}</h1><p>{it['text']}</p>"
                            '<button onclick="toggle(\'more\')">Show details</button>'
                            f'<p id="more" hidden>Related to {self.categories[-1]}.</p>'
                            f'<p>See also <a href="/article/{nxt["slug"]}">{html.escape(nxt["title"])}</a></p>')
                return it["title"], main
        return None


class SiteServer:
    """Serves every generated site by Host header (`<name>.web.test`) on one loopback port."""

    def __init__(self, names: list[str], port: int = 0) -> None:
        sites = {n: Site(n) for n in names}

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 (http.server API)
                host = (self.headers.get("Host") or "").split(":")[0]
                site = sites.get(host.removesuffix(".web.test"))
                parts = urlsplit(self.path)
                status, body = (404, "no such site") if site is None else site.page(parts.path, parse_qs(parts.query))
                data = body.encode()
                self.send_response(status)
                self.send_header("Content-Type", "text/html; charset=utf-8")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: object) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self.port = self.httpd.server_address[1]
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self) -> SiteServer:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

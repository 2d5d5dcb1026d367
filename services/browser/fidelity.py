"""Observation fidelity: the farm's accessibility tree held to Chromium's own (CDP Accessibility.getFullAXTree).

    .venv/bin/python services/browser/fidelity.py [--out bench/results] [--tasks click-test,...] [--show N]

Each page is loaded in one Chromium (the farm's launch switches); the farm's in-page pass (OBSERVE_JS, AXTREE)
and CDP getFullAXTree of every frame run on the same document. Both trees become multisets of (role, name)
pairs over the nodes an agent reads: CDP nodes of a DOM node that are not ignored, minus the structural roles
neither tree names (generic, none, StaticText and inline boxes, the root web area, list markers, layout tables,
a select's popup, labels and legends, which name their field or group). Pseudo-element content (::before and
::after images) has no DOM node, so nothing to act on by id; it is left out. Recall =
pairs of Chromium's tree the farm's tree has; precision = the farm's pairs Chromium's tree has.
"Reachable" = of Chromium's actionable nodes (links, buttons, fields, tabs, options, ...; and every node
with a click listener), the share whose DOM element or an ancestor carries a farm element id that the farm's
tree prints, so an agent can act on it by id.

Pages: all 130 MiniWoB++ tasks (the `miniwob` wheel's html, each episode started with a fixed seed) and
PATTERNS below, real-world constructs the tree must follow (open shadow roots, same-origin frames, tables with
row headers and labelled cells, forms with fieldsets, date inputs, jQuery-UI-style tabs). Writes
<out>/fidelity.json and <out>/fidelity.md; exits 1 when a page fails to load.
"""

from __future__ import annotations

import argparse
import asyncio
import http.server
import importlib.util
import json
import os
import re
import sys
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

from playwright.async_api import async_playwright
from webenv.browser.observe import OBSERVE_JS
from webenv.browser.settle.watchers import CLICK_WATCH_JS
from webenv.browser.tasks import MINIWOB_RESET_JS

CHROMIUM = os.environ.get("WEBENV_FARM_CHROMIUM_PATH", "/usr/lib/chromium/chromium")
ARGS = ["--no-sandbox", "--disable-gpu", "--mute-audio", "--no-first-run"]

#: CDP roles that carry no (role, name) an agent reads: structure and text runs (text is compared as names).
STRUCTURAL = {"generic", "none", "presentation", "StaticText", "InlineTextBox", "LineBreak", "RootWebArea",
              "WebArea", "ListMarker", "LayoutTable", "LayoutTableRow", "LayoutTableCell", "Ignored", "Section",
              "Canvas", "Pre", "Abbr", "superscript", "subscript", "emphasis", "strong", "time", "mark", "code",
              "Ruby", "ruby", "DescriptionList", "deletion", "insertion", "Iframe", "IframePresentational",
              "ScrollBar", "SvgRoot", "graphics-symbol", "graphics-document", "LabelText", "legend",
              "clickable", "MenuListPopup", "Legend"}
#: Roles an agent acts on.
ACTIONABLE = {"link", "button", "checkbox", "radio", "textbox", "searchbox", "combobox", "listbox", "option",
              "slider", "spinbutton", "switch", "tab", "menuitem", "menuitemcheckbox", "menuitemradio", "treeitem",
              "ListBoxOption", "MenuListOption", "PopUpButton", "DisclosureTriangle", "ToggleButton"}
#: CDP's internal role names for the ARIA roles our tree prints.
ALIASES = {"ListBoxOption": "option", "MenuListOption": "option",
           "PopUpButton": "combobox", "DisclosureTriangle": "button", "ToggleButton": "button",
           "image": "img", "contentinfo": "contentinfo", "HeaderAsNonLandmark": "generic",
           "FooterAsNonLandmark": "generic", "SectionWithoutName": "generic", "sectionheader": "generic",
           "sectionfooter": "generic"}
LINE = re.compile(r'^\t*\[(?P<id>[^\]]+)\] (?P<role>\S+) (?P<name>"(?:[^"\\]|\\.)*")')

PATTERNS: dict[str, str] = {
    "shadow-dom": """<!doctype html><html><body><h1>Shop</h1>
<product-card></product-card><search-box></search-box>
<script>
customElements.define('product-card', class extends HTMLElement { constructor() { super();
  this.attachShadow({mode: 'open'}).innerHTML = '<h2>Blue mug</h2><p>$12</p><button id="buy">Add to cart</button>' +
  '<a href="#details">Details</a>'; } });
customElements.define('search-box', class extends HTMLElement { constructor() { super();
  const r = this.attachShadow({mode: 'open'});
  r.innerHTML = '<label for="q">Search</label><input id="q" type="search"><slot></slot>'; } });
</script></body></html>""",
    "frames": """<!doctype html><html><body><h1>Checkout</h1>
<iframe title="Payment" srcdoc="<form><label>Card number <input name=card></label><button>Pay</button></form>"></iframe>
<iframe title="Help" srcdoc="<h2>Help</h2><a href='#faq'>FAQ</a><ul><li>One</li><li>Two</li></ul>"></iframe>
</body></html>""",
    "tables": """<!doctype html><html><body><h1>Orders</h1>
<table><caption>Recent orders</caption>
<thead><tr><th>Order</th><th>Total</th><th>Action</th></tr></thead>
<tbody><tr><th scope="row">#1001</th><td>$20</td><td><a href="#o1" aria-label="Open order 1001">Open</a></td></tr>
<tr><th scope="row">#1002</th><td>$35</td><td><button aria-label="Cancel order 1002">X</button></td></tr>
<tr><td><span aria-label="Status: shipped">&#10003;</span></td><td>$5</td><td></td></tr></tbody></table>
<table role="grid" aria-label="Stock"><tr><th>Item</th><th>Qty</th></tr>
<tr><td>Mug</td><td><input aria-label="Mug quantity" value="2"></td></tr></table>
</body></html>""",
    "forms": """<!doctype html><html><body><h1>Sign up</h1><form>
<fieldset><legend>Contact</legend><label>Email <input type="email" name="email"></label>
<label>Phone <input type="tel" name="phone"></label></fieldset>
<fieldset><legend>Plan</legend><label><input type="radio" name="plan" value="a"> Basic</label>
<label><input type="radio" name="plan" value="b"> Pro</label></fieldset>
<label for="bday">Birthday</label><input type="date" id="bday">
<label for="when">Meeting</label><input type="time" id="when">
<label for="country">Country</label><select id="country"><option>France</option><option>Peru</option></select>
<textarea aria-label="Comments"></textarea><label><input type="checkbox"> Agree</label>
<input type="range" aria-label="Volume" min="0" max="10"><input type="number" aria-label="Count">
<button type="submit">Create account</button></form></body></html>""",
    "tabs": """<!doctype html><html><body><h1>Product</h1>
<div id="tabs" class="ui-tabs"><ul role="tablist" class="ui-tabs-nav">
<li role="tab" tabindex="0" aria-controls="t1" aria-selected="true"><a href="#t1" role="presentation" tabindex="-1" class="ui-tabs-anchor">Description</a></li>
<li role="tab" tabindex="-1" aria-controls="t2" aria-selected="false"><a href="#t2" role="presentation" tabindex="-1" class="ui-tabs-anchor">Reviews</a></li></ul>
<div id="t1" role="tabpanel" aria-label="Description">A fine mug.</div>
<div id="t2" role="tabpanel" aria-label="Reviews" hidden>Great.</div></div>
<details><summary>Shipping</summary>Free over $50.</details>
<nav aria-label="Breadcrumb"><a href="/">Home</a> / <a href="/mugs">Mugs</a></nav>
<div role="menu" aria-label="Sort"><div role="menuitem" tabindex="-1">Price</div><div role="menuitem" tabindex="-1">Rating</div></div>
<span class="fake-link" onclick="this.textContent='clicked'">Click me</span>
<img src="data:image/gif;base64,R0lGODlhAQABAAAAACw=" alt="Mug photo"></body></html>""",
}


def miniwob_html() -> Path | None:
    """The `miniwob` wheel's html/ folder, found without importing it (nor the sites service's package: services
    meet only through the contract and the sdk)."""
    spec = importlib.util.find_spec("miniwob")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(next(iter(spec.submodule_search_locations))) / "html"
    return path if (path / "miniwob").is_dir() else None


def serve(root: Path) -> tuple[http.server.ThreadingHTTPServer, int]:
    """The MiniWoB html folder and the pattern pages on 127.0.0.1."""

    class Handler(http.server.SimpleHTTPRequestHandler):
        def __init__(self, *a: Any, **kw: Any) -> None:
            super().__init__(*a, directory=str(root), **kw)

        def log_message(self, *args: object) -> None:
            return

        def do_GET(self) -> None:
            if self.path.startswith("/patterns/"):
                body = PATTERNS.get(self.path.removeprefix("/patterns/"), "").encode()
                self.send_response(200 if body else 404)
                self.send_header("Content-Type", "text/html; charset=utf-8")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
                return
            super().do_GET()

    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    srv.daemon_threads = True
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv, srv.server_address[1]


def norm(s: str) -> str:
    s = re.sub(r"\s+", " ", s or "").strip()
    return s[:199] if len(s) > 200 else s


def chromium_name(role: str, name: str) -> str:
    """Chromium repeats a date or time part's label when its field has a name ("Day Day"): compared once."""
    half = len(name) // 2
    if role in ("spinbutton", "button") and len(name) % 2 == 1 and name[:half] == name[half + 1:] and name[half] == " ":
        return name[:half]
    return name


def farm_pairs(axtree: str) -> tuple[Counter, set[str]]:
    pairs: Counter = Counter()
    ids: set[str] = set()
    for line in axtree.splitlines():
        m = LINE.match(line)
        if not m:
            continue
        ids.add(m["id"])
        role = m["role"]
        if role in STRUCTURAL:
            continue
        pairs[(role, norm(json.loads(m["name"])))] += 1
    return pairs, ids


def cdp_role(node: dict[str, Any]) -> str:
    role = (node.get("role") or {}).get("value", "")
    return ALIASES.get(role, role)


async def cdp_nodes(cdp: Any) -> list[dict[str, Any]]:
    """Every frame's full tree (getFullAXTree covers one frame)."""
    tree = (await cdp.send("Page.getFrameTree"))["frameTree"]
    frames, stack = [], [tree]
    while stack:
        f = stack.pop()
        frames.append(f["frame"]["id"])
        stack.extend(f.get("childFrames", []))
    nodes: list[dict[str, Any]] = []
    for fid in frames:
        try:
            nodes += (await cdp.send("Accessibility.getFullAXTree", {"frameId": fid}))["nodes"]
        except Exception:  # a cross-origin frame answers from its own target; not in MiniWoB
            pass
    return nodes


ID_OF_JS = """function() {
  const tag = this.nodeType === 1 ? this.tagName : '';
  for (let n = this; n; n = n.parentNode || n.host) {
    if (n.nodeType === 1 && n.getAttribute('data-webenv-id')) return [tag, n.getAttribute('data-webenv-id')];
  }
  return [tag, ''];
}"""


async def reachable(cdp: Any, nodes: list[dict[str, Any]], ids: set[str]) -> tuple[int, int, list[str]]:
    """Actionable CDP nodes whose DOM element (or nearest ancestor) has an id the farm's tree prints.

    Actionable: an actionable role, or a click/mousedown/mouseup listener on the element itself (not the
    document, html or body: page-wide catch-alls such as MiniWoB's own)."""
    total = hit = 0
    missed: list[str] = []
    for n in nodes:
        if n.get("ignored") or "backendDOMNodeId" not in n or cdp_role(n) == "RootWebArea":
            continue
        try:
            obj = (await cdp.send("DOM.resolveNode", {"backendNodeId": n["backendDOMNodeId"]}))["object"]["objectId"]
            res = await cdp.send("Runtime.callFunctionOn", {"objectId": obj, "functionDeclaration": ID_OF_JS,
                                                             "returnByValue": True})
            tag, eid = res["result"].get("value") or ["", ""]
            if cdp_role(n) not in ACTIONABLE:
                if tag in ("", "BODY", "HTML"):
                    continue
                listeners = (await cdp.send("DOMDebugger.getEventListeners", {"objectId": obj}))["listeners"]
                if not any(x["type"] in ("click", "mousedown", "mouseup") for x in listeners):
                    continue
        except Exception:  # a node without a DOM element of its own
            continue
        total += 1
        if eid and eid in ids:
            hit += 1
        else:
            missed.append(f"{cdp_role(n)} {norm((n.get('name') or {}).get('value', ''))!r}")
    return hit, total, missed


async def measure(page: Any, cdp: Any) -> dict[str, Any]:
    t0 = time.perf_counter()
    out = json.loads(await page.evaluate(OBSERVE_JS, {"formats": {"axtree": True}, "maxChars": 400000,
                                                      "quietMs": 0, "maxMs": 0}))
    js_ms = (time.perf_counter() - t0) * 1e3
    ours, ids = farm_pairs(out["axtree"])
    t1 = time.perf_counter()
    nodes = await cdp_nodes(cdp)
    cdp_ms = (time.perf_counter() - t1) * 1e3
    ref: Counter = Counter()
    for n in nodes:
        role = cdp_role(n)
        if n.get("ignored") or role in STRUCTURAL or not role or "backendDOMNodeId" not in n:
            continue  # (no DOM node: ::before/::after content, e.g. MiniWoB social-media's icons; nothing to act on)
        ref[(role, chromium_name(role, norm((n.get("name") or {}).get("value", ""))))] += 1
    both = sum((ours & ref).values())
    hit, total, missed_ids = await reachable(cdp, nodes, ids)
    return {"ref": sum(ref.values()), "ours": sum(ours.values()), "both": both, "reach_hit": hit, "reach_total": total,
            "missing": sorted((ref - ours).elements())[:20], "extra": sorted((ours - ref).elements())[:20],
            "unreachable": missed_ids[:10], "js_ms": js_ms, "cdp_ms": cdp_ms}


def ratio(a: int, b: int) -> float:
    return a / b if b else 1.0


async def run(tasks: list[str] | None, seed: int) -> dict[str, Any]:
    root = miniwob_html()
    assert root is not None, "the miniwob wheel is not installed (make install)"
    srv, port = serve(root)
    pages = [(f"miniwob/{t}", f"http://127.0.0.1:{port}/miniwob/{t}.html", True)
             for t in (tasks or sorted(f.stem for f in (root / "miniwob").glob("*.html")))]
    pages += [(f"patterns/{p}", f"http://127.0.0.1:{port}/patterns/{p}", False) for p in PATTERNS if not tasks]
    per: dict[str, Any] = {}
    failed: list[str] = []
    async with async_playwright() as pw:
        browser = await pw.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        ctx = await browser.new_context(viewport={"width": 1280, "height": 720})
        await ctx.add_init_script(CLICK_WATCH_JS)  # as the farm's pool does
        for name, url, mini in pages:
            page = await ctx.new_page()
            try:
                await page.goto(url, wait_until="load")
                if mini:
                    res = await page.evaluate(MINIWOB_RESET_JS, [str(seed), 10000])
                    if res.get("error"):
                        raise RuntimeError(res["error"])
                cdp = await ctx.new_cdp_session(page)
                per[name] = await measure(page, cdp)
            except Exception as exc:  # reported and counted as a failure
                failed.append(f"{name}: {exc}")
            finally:
                await page.close()
        await browser.close()
    srv.shutdown()
    groups: dict[str, Any] = {}
    for prefix in ("miniwob/", "patterns/"):
        rows = [v for k, v in per.items() if k.startswith(prefix)]
        if not rows:
            continue
        b, r, o = (sum(x[k] for x in rows) for k in ("both", "ref", "ours"))
        rh, rt = sum(x["reach_hit"] for x in rows), sum(x["reach_total"] for x in rows)
        groups[prefix.rstrip("/")] = {
            "pages": len(rows), "recall": ratio(b, r), "precision": ratio(b, o), "reachable": ratio(rh, rt),
            "pages_recall_below_098": sum(1 for x in rows if ratio(x["both"], x["ref"]) < 0.98),
            "js_ms_p50": sorted(x["js_ms"] for x in rows)[len(rows) // 2],
            "cdp_ms_p50": sorted(x["cdp_ms"] for x in rows)[len(rows) // 2],
        }
    return {"groups": groups, "pages": per, "failed": failed, "seed": seed}


def render_md(r: dict[str, Any], show: int) -> str:
    lines = ["# Observation fidelity: the farm's tree vs Chromium's (CDP getFullAXTree)", "",
             "`.venv/bin/python services/browser/fidelity.py --out bench/results` (method: the script's docstring).", "",
             "| pages | n | recall | precision | reachable by id | pages with recall < 0.98 | farm pass p50 ms | CDP p50 ms |",
             "|---|---|---|---|---|---|---|---|"]
    for g, v in r["groups"].items():
        lines.append(f"| {g} | {v['pages']} | {v['recall']:.3f} | {v['precision']:.3f} | {v['reachable']:.3f} | "
                     f"{v['pages_recall_below_098']} | {v['js_ms_p50']:.1f} | {v['cdp_ms_p50']:.1f} |")
    worst = sorted(r["pages"].items(), key=lambda kv: ratio(kv[1]["both"], kv[1]["ref"]))[:show]
    if worst:
        lines += ["", "Pages with the lowest recall (what Chromium has that the farm's tree lacks; what it adds):", ""]
        for k, v in worst:
            lines.append(f"- {k}: recall {ratio(v['both'], v['ref']):.2f}, precision {ratio(v['both'], v['ours']):.2f}; "
                         f"missing {v['missing'][:6]}; extra {v['extra'][:6]}; unreachable {v['unreachable'][:4]}")
    if r["failed"]:
        lines += ["", "Failed pages: " + "; ".join(r["failed"])]
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default="", help="write fidelity.json and fidelity.md here")
    ap.add_argument("--tasks", default="", help="comma-separated MiniWoB task names (default: all, plus patterns)")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--show", type=int, default=12, help="pages listed with their differences")
    a = ap.parse_args()
    r = asyncio.run(run([t for t in a.tasks.split(",") if t] or None, a.seed))
    md = render_md(r, a.show)
    print(md)
    if a.out:
        out = Path(a.out)
        out.mkdir(parents=True, exist_ok=True)
        (out / "fidelity.json").write_text(json.dumps(r, indent=1, default=str))
        (out / "fidelity.md").write_text(md)
    sys.exit(1 if r["failed"] else 0)


if __name__ == "__main__":
    main()

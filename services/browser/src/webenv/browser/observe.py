"""Observations: one in-page JS pass for every text format, one CDP call for the screenshot.

Why JS and not CDP Accessibility.getFullAXTree: the CDP tree costs ~55 ms and ~28 ms of Python
CPU on a 300-element page and its node ids change between calls; the JS pass walks the DOM once,
computes ARIA roles and names the common way, marks each element with a `data-webenv-id`
attribute that survives across steps, and returns only the formats asked for as one JSON string.

Incremental passes (``ObservationSpec.incremental``): the pass keeps a MutationObserver on the document and reuses
the AXTREE and MARKDOWN lines of every subtree that saw no change since its last pass, walking only the changed
subtrees (observe.js says what is always walked again and what makes a pass whole), and sends the text back as line
edits to its last pass when the tab holds that pass's text (`PageText`). Measured on the ~8,000-element page: a
click's pass walked 9 elements and reused 1,507 subtrees (walk 2-13 ms against 170-520 ms whole), and the ~300 kB
of text a whole pass moves out of the page was most of its round trip (bench/results/observations.md). `observe`
returns the whole text always; `webenv.delta` makes the wire's edits from it.
"""

from __future__ import annotations

import asyncio
import io
import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from playwright.async_api import CDPSession, Page
from playwright.async_api import Error as PlaywrightError
from webenv import delta, screenshots
from webenv.browser import metrics
from webenv.browser.settle import retry
from webenv.v1 import common_pb2

_HERE = Path(__file__).parent
#: Where observe.js takes step 3 of the settle rule, the DOM-quiet wait (settle/quiet.js), in its own evaluate.
QUIET_MARK = "  // --- settle: step 3 of the settle rule, the DOM-quiet wait: settle/quiet.js, put here by observe.py ---\n"
_OBSERVE = (_HERE / "observe.js").read_text(encoding="utf-8")
assert _OBSERVE.count(QUIET_MARK) == 1, "observe.js has lost its settle line"
#: The observation pass: settle (the DOM-quiet wait), then every text format asked for, in one page.evaluate.
OBSERVE_JS = _OBSERVE.replace(QUIET_MARK, (_HERE / "settle" / "quiet.js").read_text(encoding="utf-8"))

F = common_pb2.ObservationFormat
TEXT_KEYS = {F.OBSERVATION_FORMAT_AXTREE: "axtree", F.OBSERVATION_FORMAT_HTML: "html",
             F.OBSERVATION_FORMAT_MARKDOWN: "markdown", F.OBSERVATION_FORMAT_DOM: "dom",
             F.OBSERVATION_FORMAT_ELEMENTS: "elements"}


@dataclass
class PageText:
    """A tab's text of its page's last incremental pass, which the next pass's line edits apply to (its token names
    the pass; a new document, or a pass this side never read, has another, and the page then sends the whole text)."""

    token: str = ""
    axtree: list[str] | None = None
    markdown: list[str] | None = None

    def rebuild(self, data: dict[str, Any]) -> None:
        """Fill ``data``'s text from its edits (when it has them), then keep its text as the next base."""
        edits = data.pop("edits", None)
        if edits is not None:
            for key in ("axtree", "markdown"):
                if edits.get(key) is not None:
                    data[key] = "\n".join(delta.apply(getattr(self, key) or [], (
                        common_pb2.TextEdit(start=a, deleted=n, lines=lines) for a, n, lines in edits[key])))
        inc = data.get("incremental") or {}
        self.token = inc.get("token", "")
        self.axtree = data["axtree"].split("\n") if "axtree" in data else None
        self.markdown = data["markdown"].split("\n") if "markdown" in data else None


@dataclass
class ObserveSettings:
    """Farm-wide knobs of the observation pass: its DOM-quiet wait (step 3. of the settle rule, `settle/`)
    and text caps."""

    quiet_ms: int = 15
    settle_max_ms: int = 1000
    max_chars: int = 200000
    nav_timeout_ms: int = 10000


def wanted_formats(spec: common_pb2.ObservationSpec) -> list[int]:
    """Formats to produce: the spec's, AXTREE when it names none."""
    return list(dict.fromkeys(spec.formats)) or [F.OBSERVATION_FORMAT_AXTREE]


async def page_data(page: Page, opts: dict[str, Any], nav_timeout_ms: int, attempts: int = 4) -> dict[str, Any]:
    """Run the observe JS, retrying on the new document when a navigation or a frame detach interrupts it
    (`settle.retry`)."""
    return json.loads(await retry.on_new_document(page, lambda: page.evaluate(OBSERVE_JS, opts), nav_timeout_ms,
                                                  attempts))


async def observe(
    page: Page,
    cdp: CDPSession | None,
    spec: common_pb2.ObservationSpec,
    cfg: ObserveSettings,
    *,
    settle: bool = True,
    miniwob: bool = False,
    frame_wait: bool = False,
    quiet_since_action: bool = False,
    fresh: bool = True,
    text: PageText | None = None,
) -> tuple[common_pb2.Observation, dict[str, Any]]:
    """Build an Observation of `page` in the formats of `spec`; returns it with the raw JS result.

    `quiet_since_action`: the DOM-quiet window counts from the page's last mutation or input event
    (watchers.QUIET_WATCH_JS) rather than from the pass's start: right after an action on the same document
    (a first observation of a document waits the whole window from the pass's start).
    With ``spec.incremental``: `fresh` walks the whole page rather than only what changed since the last pass (a whole
    observation is due: `webenv.delta.full_due`), and `text` (the tab's) receives the text as edits to its own."""
    formats = wanted_formats(spec)
    shot = F.OBSERVATION_FORMAT_SCREENSHOT in formats
    marks = shot and spec.screenshot.set_of_marks
    flags = {TEXT_KEYS[f]: True for f in formats if f in TEXT_KEYS}
    if marks:
        flags["elements"] = True
    opts = {
        "formats": flags,
        "maxChars": spec.max_text_chars or cfg.max_chars,
        "visibleOnly": spec.visible_only,
        "quietMs": cfg.quiet_ms if settle else 0,
        "maxMs": cfg.settle_max_ms,
        "frameMaxMs": cfg.nav_timeout_ms,
        "miniwob": miniwob,
        "frameWait": frame_wait and settle,
        "quietSinceAction": quiet_since_action,
        "incremental": spec.incremental,
        "fresh": fresh,
        "baseToken": text.token if text is not None and spec.incremental else "",
    }
    t0 = time.perf_counter()
    data = await page_data(page, opts, cfg.nav_timeout_ms)
    inc = data.get("incremental")
    if inc is not None:
        metrics.OBSERVE_ELEMENTS.labels("walked").inc(inc["walked"])
        metrics.OBSERVE_ELEMENTS.labels("reused").inc(inc["reused"])
        if inc["full"]:  # due (webenv.delta.full_due), or the page's own reason (a new document, a style change...)
            metrics.OBSERVE_WHOLE_PASSES.labels("due" if fresh else "page").inc()
        if text is not None:
            text.rebuild(data)
    metrics.OBSERVE_SECONDS.labels("text").observe(time.perf_counter() - t0)
    obs = common_pb2.Observation(url=data.get("url", page.url), title=data.get("title", ""),
                                 focused_element_id=data.get("focused", ""))
    sc = data.get("scroll") or {}
    obs.scroll.CopyFrom(common_pb2.ScrollPosition(**{k: float(v or 0) for k, v in sc.items()}))
    produced: list[int] = []
    for f in formats:
        key = TEXT_KEYS.get(f)
        if key == "axtree":
            obs.axtree = data.get("axtree", "")
        elif key == "html":
            obs.html = data.get("html", "")
        elif key == "markdown":
            obs.markdown = data.get("markdown", "")
        elif key == "dom":
            for n in data.get("dom", []):
                obs.dom_nodes.add(parent_index=n["p"], tag=n["t"], attributes=n.get("a", {}),
                                  text=n.get("x", ""), element_id=n.get("i", ""))
        elif key == "elements":
            obs.elements.extend(_elements(data.get("elements", [])))
        elif f != F.OBSERVATION_FORMAT_SCREENSHOT:
            continue
        produced.append(f)
    if shot:
        t1 = time.perf_counter()
        try:
            obs.screenshot.CopyFrom(await screenshot(page, cdp, spec.screenshot, sc,
                                                     data.get("elements", []) if marks else None))
        except PlaywrightError:
            produced.remove(F.OBSERVATION_FORMAT_SCREENSHOT)
        metrics.OBSERVE_SECONDS.labels("screenshot").observe(time.perf_counter() - t1)
    obs.formats.extend(produced)
    return obs, data


def _elements(items: list[dict[str, Any]]) -> list[common_pb2.Element]:
    out = []
    for e in items:
        bb = e.get("bbox") or {}
        out.append(common_pb2.Element(
            element_id=e["element_id"], tag=e["tag"], role=e.get("role", ""), name=e.get("name", ""),
            text=e.get("text", ""), bbox=common_pb2.BoundingBox(**{k: float(bb.get(k, 0)) for k in ("x", "y", "width", "height")}),
            visible=bool(e.get("visible")), clickable=bool(e.get("clickable")), focused=bool(e.get("focused")),
            value=e.get("value", ""), checked=bool(e.get("checked")), disabled=bool(e.get("disabled")),
            href=e.get("href", ""), frame=e.get("frame", ""),
        ))
    return out


async def screenshot(
    page: Page,
    cdp: CDPSession | None,
    spec: common_pb2.ScreenshotSpec,
    scroll: dict[str, Any],
    marks: list[dict[str, Any]] | None,
) -> common_pb2.Screenshot:
    """Capture the viewport once, at the size and codec asked for (CDP scales while capturing)."""
    vw = int(scroll.get("viewport_width") or (page.viewport_size or {}).get("width", 1280))
    vh = int(scroll.get("viewport_height") or (page.viewport_size or {}).get("height", 720))
    codec = screenshots.codec(spec.codec)
    fmt = screenshots.encoder(codec)
    quality = spec.quality or 75
    out_w = spec.width or (round(vw * spec.height / vh) if spec.height else vw)
    out_h = spec.height or round(vh * out_w / vw)
    params: dict[str, Any] = {"format": fmt}
    if fmt != "png":
        params["quality"] = quality
    if (out_w, out_h) != (vw, vh):
        params["clip"] = {"x": float(scroll.get("x", 0)), "y": float(scroll.get("y", 0)),
                          "width": vw, "height": vh, "scale": out_w / vw}
    if cdp is not None:
        import base64

        res = await cdp.send("Page.captureScreenshot", params)
        data = base64.b64decode(res["data"])
    else:
        data = await page.screenshot(type="jpeg" if fmt == "jpeg" else "png", quality=quality if fmt == "jpeg" else None)
    needs_resize = round(vh * out_w / vw) != out_h
    webp_from_png = fmt == "webp" and cdp is None  # Playwright's page.screenshot writes no WebP: re-encoded here
    if marks is not None or needs_resize or webp_from_png:
        data = await asyncio.to_thread(_postprocess, data, fmt, quality, out_w, out_h, vw, marks)
    return common_pb2.Screenshot(data=data, codec=codec, width=out_w, height=out_h, set_of_marks=marks is not None)


def _postprocess(data: bytes, fmt: str, quality: int, out_w: int, out_h: int, vw: int,
                 marks: list[dict[str, Any]] | None) -> bytes:
    """Resize to an exact size and draw set-of-marks boxes labelled with element ids."""
    from PIL import Image, ImageDraw

    img = Image.open(io.BytesIO(data)).convert("RGB")
    scale = img.width / vw
    if marks:
        draw = ImageDraw.Draw(img)
        for e in marks:
            bb = e.get("bbox") or {}
            if not e.get("visible") or not bb:
                continue
            x0, y0 = bb["x"] * scale, bb["y"] * scale
            x1, y1 = x0 + bb["width"] * scale, y0 + bb["height"] * scale
            draw.rectangle((x0, y0, x1, y1), outline=(255, 0, 0), width=2)
            label = str(e["element_id"])
            tw = 6 * len(label) + 4
            draw.rectangle((x0, max(0, y0 - 12), x0 + tw, max(12, y0)), fill=(255, 0, 0))
            draw.text((x0 + 2, max(0, y0 - 12)), label, fill=(255, 255, 255))
    if img.size != (out_w, out_h):
        img = img.resize((out_w, out_h))
    buf = io.BytesIO()
    img.save(buf, fmt.upper(), **({} if fmt == "png" else {"quality": quality}))
    return buf.getvalue()

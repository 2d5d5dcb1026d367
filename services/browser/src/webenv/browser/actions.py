"""Executing Actions on a page.

Two kinds of failure, kept apart on purpose:
- a malformed action (no kind, no target, empty key, negative wait, bad CSS selector) raises
  `errors.InvalidArgument` before anything touches the page (`webenv.envcontract.validate_action`, shared
  with the world model);
- a valid action that fails on the page (element gone, hidden, covered, navigation error, URL
  refused by the guard) returns a message that becomes `Observation.last_action_error`; the
  session goes on.

Clicks resolve the element in one JS call (its visible line boxes, hit test, scroll into view when none
hits, same-origin frames included) and then use trusted mouse events at that point: ~3 ms instead of the ~48 ms of
Playwright's `click()` actionability checks, with the same "is it really clickable" answer.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from playwright.async_api import Error as PlaywrightError
from playwright.async_api import Page
from webenv import errors
from webenv.browser.errortext import BLOCKED_BY_CLIENT, NOT_A_NUMBER, UNKNOWN_KEY
from webenv.browser.guard import BlockedUrl
from webenv.browser.settle import retry
from webenv.envcontract import element_ref as _target
from webenv.v1 import common_pb2

if TYPE_CHECKING:
    from webenv.browser.session import BrowserSession

FILL_TIMEOUT_MS = 5000
# What a number field takes from the keyboard (digits, sign, decimal point, exponent, spaces around).
_NOT_NUMBER_CHARS = re.compile(r"[^0-9.eE+\- ]")
# Is the focused element (through same-origin frames and open shadow roots) an input[type=number]?
FOCUSED_NUMBER_JS = """() => {
  let el = document.activeElement;
  for (;;) {
    if (el && el.shadowRoot && el.shadowRoot.activeElement) { el = el.shadowRoot.activeElement; continue; }
    let inner = null;
    if (el && el.tagName === 'IFRAME') { try { inner = el.contentDocument && el.contentDocument.activeElement; } catch (e) {} }
    if (!inner) break;
    el = inner;
  }
  return !!el && el.localName === 'input' && el.type === 'number';
}"""
_BUTTONS = {common_pb2.MOUSE_BUTTON_UNSPECIFIED: "left", common_pb2.MOUSE_BUTTON_LEFT: "left",
            common_pb2.MOUSE_BUTTON_MIDDLE: "middle", common_pb2.MOUSE_BUTTON_RIGHT: "right"}

# Find an element by id or selector (searching same-origin frames) and say where a user would click it, in
# top-level viewport coordinates: the centre of the first of its own line boxes (getClientRects, cut to what
# shows) that hit-tests to it, as Playwright's content quads do. A link wrapped onto two lines has its bounding
# box's centre on the paragraph around it; that point said "covered by p". When no box of it hits (out of view,
# scrolled out of its container, under a sticky header), it is scrolled to the centre and aimed at once more;
# then the element that covers it is named.
RESOLVE_JS = """
([ref, mode]) => {
  const sel = ref.id ? '[data-webenv-id="' + CSS.escape(ref.id) + '"]' : ref.sel;
  const inShadow = (root) => {  // open shadow roots, depth first (the tree's ids reach into them)
    for (const host of root.querySelectorAll('*')) {
      if (!host.shadowRoot) continue;
      const el = host.shadowRoot.querySelector(sel) || inShadow(host.shadowRoot);
      if (el) return el;
    }
    return null;
  };
  const find = (doc, frames) => {
    const el = doc.querySelector(sel) || inShadow(doc);
    if (el) return [el, frames];
    for (const f of doc.querySelectorAll('iframe')) {
      let d = null; try { d = f.contentDocument; } catch (e) {}
      if (d) { const got = find(d, frames.concat([f])); if (got) return got; }
    }
    return null;
  };
  let got;
  try { got = find(document, []); } catch (e) { return {error: 'BAD_SELECTOR', message: String(e.message || e)}; }
  if (!got) return {error: 'NOT_FOUND'};
  const [el, frames] = got;
  if (mode === 'handle') return el;
  const win = el.ownerDocument.defaultView;
  const offsets = () => {
    let x = 0, y = 0;
    for (const f of frames) { const r = f.getBoundingClientRect(); x += r.x + f.clientLeft; y += r.y + f.clientTop; }
    return [x, y];
  };
  const box = el.getBoundingClientRect();
  if (box.width === 0 || box.height === 0) return {error: 'NOT_VISIBLE'};
  const root = el.getRootNode();  // a shadow root answers hit tests with its own elements
  const reaches = (hit) => hit === el || el.contains(hit) || hit.control === el || el.tagName === 'OPTION';
  // The element's own boxes (one per line for wrapped inline content), each cut to what shows: the frame's and
  // the top window's viewports and every ancestor that clips its overflow; the first whose centre hit-tests to
  // the element (or inside it) is where a user would click. The hit test decides: a box cut only to the viewports
  // is tried after the others (an absolutely positioned menu escapes an overflow ancestor that is not its
  // containing block).
  const aim = () => {
    const [ox, oy] = offsets();
    const view = [Math.max(0, -ox), Math.max(0, -oy), Math.min(win.innerWidth, window.innerWidth - ox),
                  Math.min(win.innerHeight, window.innerHeight - oy)];
    let clip = view.slice();
    for (let a = el.parentElement || (el.parentNode && el.parentNode.host); a && a !== el.ownerDocument.documentElement
         && a !== el.ownerDocument.body; a = a.parentElement || (a.parentNode && a.parentNode.host)) {
      const st = win.getComputedStyle(a);
      if (st.overflowX === 'visible' && st.overflowY === 'visible') continue;
      const c = a.getBoundingClientRect();
      const l = c.left + a.clientLeft, t = c.top + a.clientTop;
      clip = [Math.max(clip[0], l), Math.max(clip[1], t), Math.min(clip[2], l + a.clientWidth), Math.min(clip[3], t + a.clientHeight)];
    }
    const rects = Array.from(el.getClientRects());
    let covered = null;
    for (const box of [clip, view]) {
      for (const r of rects) {
        const x0 = Math.max(r.left, box[0]), y0 = Math.max(r.top, box[1]);
        const x1 = Math.min(r.right, box[2]), y1 = Math.min(r.bottom, box[3]);
        if (x1 - x0 < 1 || y1 - y0 < 1) continue;
        const cx = (x0 + x1) / 2, cy = (y0 + y1) / 2;
        const hit = root.elementFromPoint(cx, cy);
        if (hit && reaches(hit)) return {x: cx + ox, y: cy + oy};
        if (hit && !covered) covered = hit;
      }
    }
    return {covered};
  };
  let at = aim();
  if (at.x === undefined) {  // out of view, clipped or covered where it shows (a sticky header): centre it, aim again
    for (const f of frames) f.scrollIntoView({block: 'center', inline: 'center', behavior: 'instant'});
    el.scrollIntoView({block: 'center', inline: 'center', behavior: 'instant'});
    at = aim();
  }
  const base = {eid: el.getAttribute('data-webenv-id') || '', disabled: !!el.disabled};
  if (at.x !== undefined) return {...base, x: at.x, y: at.y, covered: ''};
  if (!at.covered) return {...base, error: 'CLIPPED'};
  const c = at.covered;
  return {...base, covered: c.tagName.toLowerCase() + (c.id ? '#' + c.id : '')};
}
"""

SELECT_JS = """
(el, options) => {
  if (el.tagName !== 'SELECT') return 'element is a ' + el.tagName.toLowerCase() + ', not a select';
  let n = 0;
  for (const o of el.options) {
    const hit = options.includes(o.value) || options.includes(o.label.trim()) || options.includes(o.text.trim());
    if (hit && (el.multiple || n === 0)) { o.selected = true; n++; } else if (el.multiple) { o.selected = false; }
  }
  if (!n) return 'no option matches ' + JSON.stringify(options);
  el.dispatchEvent(new Event('input', {bubbles: true}));
  el.dispatchEvent(new Event('change', {bubbles: true}));
  return '';
}
"""


@dataclass
class ActionOutcome:
    """What an action did: an error for last_action_error, and whether it ended the episode."""

    error: str = ""
    done: bool = False
    answer: str = ""
    target_element_id: str = ""  # the element the target resolved to (StepResponse.target_element_id)


async def _evaluate(page: Page, arg: list[Any], nav_timeout_ms: int, handle: bool = False) -> Any:
    """RESOLVE_JS in the active document; when a navigation destroys the document under the call, wait for
    the new document's DOMContentLoaded and resolve once more there (`settle.retry`)."""
    return await retry.on_new_document(
        page, lambda: page.evaluate_handle(RESOLVE_JS, arg) if handle else page.evaluate(RESOLVE_JS, arg),
        nav_timeout_ms, attempts=2)


async def _resolve(page: Page, ref: dict[str, str], mode: str = "point", nav_timeout_ms: int = 10000) -> dict[str, Any]:
    res = await _evaluate(page, [ref, mode], nav_timeout_ms)
    if res.get("error") == "BAD_SELECTOR":
        raise errors.InvalidArgument(f"selector {ref.get('sel')!r} is not valid CSS: {res.get('message')}",
                                     reason="BAD_SELECTOR", metadata={"field": "target.selector"})
    return res


def _describe(ref: dict[str, str]) -> str:
    return f"element {ref['id']}" if "id" in ref else f"selector {ref['sel']!r}"


def _point_error(ref: dict[str, str], res: dict[str, Any], verb: str) -> str:
    if res.get("error") == "NOT_FOUND":
        return f"{_describe(ref)} not found on the page"
    if res.get("error") == "NOT_VISIBLE":
        return f"{_describe(ref)} is not visible (zero size)"
    if res.get("error") == "CLIPPED":
        return f"{_describe(ref)} is not visible (outside the viewport or clipped by a scrolled container)"
    if res.get("covered"):
        return f"{_describe(ref)} is covered by {res['covered']}; {verb} not performed"
    if res.get("disabled"):
        return f"{_describe(ref)} is disabled"
    return ""


async def _handle(page: Page, ref: dict[str, str], nav_timeout_ms: int = 10000) -> Any:
    """An ElementHandle for the target, or None when it is not on the page."""
    handle = await _evaluate(page, [ref, "handle"], nav_timeout_ms, handle=True)
    el = handle.as_element()
    if el is None:
        res = await handle.json_value()
        await handle.dispose()
        if isinstance(res, dict) and res.get("error") == "BAD_SELECTOR":
            raise errors.InvalidArgument(f"selector {ref.get('sel')!r} is not valid CSS: {res.get('message')}",
                                         reason="BAD_SELECTOR", metadata={"field": "target.selector"})
        return None
    return el


@dataclass
class _Step:
    """One action being performed: its kind, the navigation timeout and the element its target resolved to."""

    kind: str
    nav_timeout_ms: int
    resolved: str = ""


async def _at_point(session: BrowserSession, msg: Any, step: _Step) -> ActionOutcome:
    """click, hover: resolve the element to its centre point, then trusted mouse events there."""
    page = session.page
    ref = _target(msg, f"action.{step.kind}.target")
    assert ref is not None
    res = await _resolve(page, ref, nav_timeout_ms=step.nav_timeout_ms)
    err = _point_error(ref, res, step.kind)
    if err:
        return ActionOutcome(error=err)
    step.resolved = ref.get("id") or res.get("eid", "")
    if step.kind == "click":
        await page.mouse.click(res["x"], res["y"], button=_BUTTONS[msg.button],  # type: ignore[arg-type]
                               click_count=msg.click_count or 1)
    else:
        await page.mouse.move(res["x"], res["y"])
    return ActionOutcome(target_element_id=step.resolved)


async def _on_element(session: BrowserSession, msg: Any, step: _Step) -> ActionOutcome:
    """fill, select, scroll_element: act on the element's handle."""
    ref = _target(msg, f"action.{step.kind}.target")
    assert ref is not None
    el = await _handle(session.page, ref, step.nav_timeout_ms)
    if el is None:
        return ActionOutcome(error=f"{_describe(ref)} not found on the page")
    step.resolved = ref.get("id") or (await el.get_attribute("data-webenv-id") or "")
    if step.kind == "fill":
        # Playwright waits for the element to be editable; 2 s failed real fills on a loaded 2-core
        # machine (dozens of Chromium processes), 5 s did not. Non-text elements fail at once.
        try:
            await el.fill(msg.text, timeout=FILL_TIMEOUT_MS)
        except PlaywrightError as exc:
            if NOT_A_NUMBER.of(exc):
                return ActionOutcome(error=f"fill: {_describe(ref)} is a number field (input[type=number]); "
                                           f"{msg.text[:100]!r} is not a number, nothing was filled",
                                     target_element_id=step.resolved)
            raise
    elif step.kind == "select":
        err = await el.evaluate(SELECT_JS, list(msg.options))
        if err:
            return ActionOutcome(error=f"{_describe(ref)}: {err}")
    else:
        await el.evaluate("(el, [dx, dy]) => el.scrollBy(dx, dy)", [msg.dx, msg.dy])
    return ActionOutcome(target_element_id=step.resolved)


async def _press(session: BrowserSession, msg: Any, step: _Step) -> ActionOutcome:
    ref = _target(msg, "action.press.target", required=False)
    if ref is not None:
        el = await _handle(session.page, ref, step.nav_timeout_ms)
        if el is None:
            return ActionOutcome(error=f"{_describe(ref)} not found on the page")
        await el.focus()
    try:
        await session.page.keyboard.press(msg.key)
    except PlaywrightError as exc:
        if UNKNOWN_KEY.of(exc):
            raise errors.InvalidArgument(f"action.press.key: unknown key {msg.key!r}", reason="BAD_ACTION",
                                         metadata={"field": "action.press.key"}) from exc
        raise
    return ActionOutcome()


async def _click_at(session: BrowserSession, msg: Any, step: _Step) -> ActionOutcome:
    page = session.page
    vp = page.viewport_size or {"width": 1 << 30, "height": 1 << 30}
    if msg.x >= vp["width"] or msg.y >= vp["height"]:
        return ActionOutcome(error=f"point ({msg.x}, {msg.y}) is outside the viewport")
    await page.mouse.click(msg.x, msg.y, button=_BUTTONS[msg.button])  # type: ignore[arg-type]
    return ActionOutcome()


async def _type(session: BrowserSession, msg: Any, step: _Step) -> ActionOutcome:
    """Keys into the focused element. Chromium drops, without a word, the characters a focused number field
    cannot hold: text with one of them is refused as an action error instead (looked up only then)."""
    if _NOT_NUMBER_CHARS.search(msg.text) and await session.page.evaluate(FOCUSED_NUMBER_JS):
        return ActionOutcome(error=f"type: the focused element is a number field (input[type=number]); "
                                   f"{msg.text[:100]!r} is not a number, nothing was typed")
    await session.page.keyboard.type(msg.text)
    return ActionOutcome()


async def _scroll(session: BrowserSession, msg: Any, step: _Step) -> ActionOutcome:
    page = session.page
    vp = page.viewport_size or {"width": 1280, "height": 720}
    await page.mouse.move(vp["width"] / 2, vp["height"] / 2)
    await page.mouse.wheel(msg.dx, msg.dy)
    return ActionOutcome()


async def _drag(session: BrowserSession, msg: Any, step: _Step) -> ActionOutcome:
    mouse = session.page.mouse
    await mouse.move(msg.from_x, msg.from_y)
    await mouse.down()
    await mouse.move(msg.to_x, msg.to_y, steps=5)
    await mouse.up()
    return ActionOutcome()


async def _navigate(session: BrowserSession, msg: Any, step: _Step) -> ActionOutcome:
    return ActionOutcome(error=await goto(session, session.page, msg.url, step.nav_timeout_ms))


async def _history(session: BrowserSession, msg: Any, step: _Step) -> ActionOutcome:
    """go_back, go_forward.

    A tab's history starts with the about:blank page it was made with, before the session's start URL; that entry
    is no page of the session (fork.py drops it too), so going back to it is "no history entry" and the page stays:
    leaving a MiniWoB++ task page for it would lose the episode, which lives in that page's JavaScript, and leave an
    empty page that is not done.
    """
    page = session.page
    if step.kind == "go_back":
        nav = await (await session.cdp()).send("Page.getNavigationHistory")
        if all(e.get("url") in ("about:blank", "") for e in nav["entries"][:nav["currentIndex"]]):
            return ActionOutcome(error="go_back: no history entry")
    fn = page.go_back if step.kind == "go_back" else page.go_forward
    resp = await fn(wait_until="domcontentloaded", timeout=step.nav_timeout_ms)
    if resp is None and page.url in ("about:blank", ""):
        return ActionOutcome(error=f"{step.kind}: no history entry")
    return ActionOutcome()


async def _new_tab(session: BrowserSession, msg: Any, step: _Step) -> ActionOutcome:
    tab = await session.new_tab()
    if msg.url:
        return ActionOutcome(error=await goto(session, tab.page, msg.url, step.nav_timeout_ms))
    return ActionOutcome()


async def _switch_tab(session: BrowserSession, msg: Any, step: _Step) -> ActionOutcome:
    if not session.switch_tab(msg.tab_id):
        return ActionOutcome(error=f"tab {msg.tab_id!r} does not exist (open: {', '.join(session.tabs)})")
    return ActionOutcome()


async def _close_tab(session: BrowserSession, msg: Any, step: _Step) -> ActionOutcome:
    tab_id = msg.tab_id or session.active_tab_id
    if tab_id not in session.tabs:
        return ActionOutcome(error=f"tab {tab_id!r} does not exist")
    await session.close_tab(tab_id)
    return ActionOutcome()


async def _wait(session: BrowserSession, msg: Any, step: _Step) -> ActionOutcome:
    await asyncio.sleep(msg.milliseconds / 1000)
    return ActionOutcome()


async def _answer(session: BrowserSession, msg: Any, step: _Step) -> ActionOutcome:
    return ActionOutcome(done=True, answer=msg.text)


async def _noop(session: BrowserSession, msg: Any, step: _Step) -> ActionOutcome:
    return ActionOutcome()


#: How the farm performs each kind of action (what a kind is — its target, whether it navigates — is the sdk's
#: `webenv.actions.ACTION_KINDS`; this table must name the same kinds).
PERFORM: dict[str, Callable[[BrowserSession, Any, _Step], Awaitable[ActionOutcome]]] = {
    "click": _at_point, "fill": _on_element, "select": _on_element, "hover": _at_point, "press": _press,
    "scroll_element": _on_element, "click_at": _click_at, "type": _type, "scroll": _scroll, "drag": _drag,
    "navigate": _navigate, "go_back": _history, "go_forward": _history, "new_tab": _new_tab,
    "switch_tab": _switch_tab, "close_tab": _close_tab, "wait": _wait, "answer": _answer, "noop": _noop,
}


async def perform(session: BrowserSession, action: common_pb2.Action, kind: str, *, nav_timeout_ms: int) -> ActionOutcome:
    """Run one validated action in the session's active tab."""
    step = _Step(kind, nav_timeout_ms)
    try:
        return await PERFORM[kind](session, getattr(action, kind), step)
    except errors.WebenvError:
        raise
    except PlaywrightError as exc:
        text = str(exc).split("\n")[0]
        return ActionOutcome(error=f"{kind} failed: {text[:300]}", target_element_id=step.resolved)


async def goto(session: BrowserSession, page: Page, url: str, nav_timeout_ms: int) -> str:
    """Navigate after the guard's check; returns an error message or ''."""
    try:
        await session.guard.acheck(url, top_level=True)
    except BlockedUrl as exc:
        return f"navigation refused by the URL guard: {exc}"
    try:
        await page.goto(url, wait_until="domcontentloaded", timeout=nav_timeout_ms)
    except PlaywrightError as exc:
        text = str(exc).split("\n")[0]
        if BLOCKED_BY_CLIENT.matches(text) and session.slot.state.last_blocked():
            return f"navigation refused by the URL guard: {session.slot.state.last_blocked()}"
        return f"navigation to {url[:200]} failed: {text[:300]}"
    return ""

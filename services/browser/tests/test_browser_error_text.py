"""The error texts the farm decides on (webenv.browser.errortext): one test per case, on real Chromium where the
case can be caused on purpose (only loopback is contacted), else on the message the case documents."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest
from playwright.async_api import Browser, async_playwright
from playwright.async_api import Error as PlaywrightError
from webenv.browser import errortext
from webenv.browser.errortext import (
    BLOCKED_BY_CLIENT,
    CONTEXT_DESTROYED,
    DETACHED,
    NAVIGATION,
    NO_CONTEXT,
    NOT_A_NUMBER,
    SOCKS_REFUSED,
    TARGET_CLOSED,
    UNKNOWN_KEY,
)


@asynccontextmanager
async def chromium(path: str, *args: str) -> AsyncIterator[Browser]:
    async with async_playwright() as pw:
        browser = await pw.chromium.launch(executable_path=path, args=["--no-sandbox", *args])
        try:
            yield browser
        finally:
            await browser.close()


async def _error_of(call) -> PlaywrightError:
    try:
        await call
    except PlaywrightError as exc:
        return exc
    raise AssertionError("the call did not fail")


# -- the table -------------------------------------------------------------------------------------------
def test_each_case_is_named_documented_and_reached() -> None:
    """Every case has a name, a text, the message it comes with and a reason; its own example message falls
    under it and under no case before it (a case an earlier one shadows would be dead)."""
    names = [case.name for case in errortext.CASES]
    assert len(names) == len(set(names))
    for case in errortext.CASES:
        assert case.text and case.matches(case.example) and len(case.why) > 40, case.name
        assert next(c for c in errortext.CASES if c.matches(case.example)) is case, case.name
    for case in errortext.RETRY_CASES:
        assert errortext.retry_case(PlaywrightError(case.example)) is case


def test_other_errors_are_not_retried() -> None:
    assert errortext.retry_case(PlaywrightError("Page.evaluate: ReferenceError: foo is not defined")) is None
    assert errortext.retry_case(RuntimeError("Execution context was destroyed")) is None  # not Playwright's
    assert not errortext.interrupted_by_navigation(PlaywrightError("Timeout 500ms exceeded."))
    assert not UNKNOWN_KEY.of(RuntimeError('Unknown key: "Nope"'))


# -- retried once on the new document ----------------------------------------------------------------------
async def test_context_destroyed(chromium_path: str) -> None:
    """An evaluate still running when its page navigates; the same call on the new document answers."""
    async with chromium(chromium_path) as browser:
        page = await browser.new_page()
        await page.set_content("<p>old</p>")
        pending = asyncio.ensure_future(page.evaluate("new Promise(() => {})"))
        await asyncio.sleep(0)  # the call is sent before the navigation
        await page.goto("data:text/html,<p>new</p>")
        exc = await _error_of(asyncio.wait_for(pending, timeout=20))
        assert errortext.retry_case(exc) is CONTEXT_DESTROYED, str(exc)
        assert await page.evaluate("document.body.textContent") == "new"


def test_navigation() -> None:
    """Playwright's own navigation checks (page.content() while the page navigates: a race that cannot be
    caused on purpose): the documented message."""
    assert errortext.retry_case(PlaywrightError(NAVIGATION.example)) is NAVIGATION


async def test_detached(chromium_path: str) -> None:
    """An evaluate in a frame whose iframe was removed."""
    async with chromium(chromium_path) as browser:
        page = await browser.new_page()
        await page.set_content('<iframe srcdoc="<p>inner</p>"></iframe>')
        await page.wait_for_function("document.querySelector('iframe').contentDocument.body")
        frame = page.frames[1]
        await page.evaluate("document.querySelector('iframe').remove()")
        exc = await _error_of(frame.evaluate("1"))
        assert errortext.retry_case(exc) is DETACHED, str(exc)


def test_no_context() -> None:
    """Chromium's CDP answer for a dropped execution context id (a race inside Playwright, not causable)."""
    assert errortext.retry_case(PlaywrightError(NO_CONTEXT.example)) is NO_CONTEXT


async def test_target_closed(chromium_path: str) -> None:
    """A call on a page that is gone (callers retry only when `page.is_closed()` is false)."""
    async with chromium(chromium_path) as browser:
        page = await browser.new_page()
        await page.close()
        exc = await _error_of(page.evaluate("1"))
        assert errortext.retry_case(exc) is TARGET_CLOSED, str(exc)


# -- decided otherwise -------------------------------------------------------------------------------------
async def test_unknown_key(chromium_path: str) -> None:
    async with chromium(chromium_path) as browser:
        page = await browser.new_page()
        exc = await _error_of(page.keyboard.press("NoSuchKey"))
        assert UNKNOWN_KEY.of(exc) and errortext.retry_case(exc) is None, str(exc)


async def test_not_a_number(chromium_path: str) -> None:
    async with chromium(chromium_path) as browser:
        page = await browser.new_page()
        await page.set_content('<input type="number" id="n">')
        el = await page.query_selector("#n")
        assert el is not None
        await el.fill(" 42 ")  # numeric text is set
        assert await el.input_value() == "42"
        exc = await _error_of(el.fill("forty-two"))
        assert NOT_A_NUMBER.of(exc) and errortext.retry_case(exc) is None, str(exc)


async def test_blocked_by_client(chromium_path: str) -> None:
    """A navigation the URL guard's route aborts (as settle/watchers.py's route handler does)."""
    async with chromium(chromium_path) as browser:
        page = await browser.new_page()
        await page.route("**/*", lambda route: route.abort("blockedbyclient"))
        exc = await _error_of(page.goto("http://127.0.0.1:8099/refused"))
        assert BLOCKED_BY_CLIENT.of(exc), str(exc)


@pytest.fixture
async def refusing_socks5() -> AsyncIterator[int]:
    """A SOCKS5 proxy on loopback that refuses every CONNECT ("not allowed by ruleset"), as the egress proxy
    does; it connects nowhere."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            _, n = await reader.readexactly(2)
            await reader.readexactly(n)
            writer.write(b"\x05\x00")
            await reader.read(262)
            writer.write(b"\x05\x02\x00\x01\x00\x00\x00\x00\x00\x00")
            await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    try:
        yield server.sockets[0].getsockname()[1]
    finally:
        server.close()
        await server.wait_closed()


async def test_socks_refused(chromium_path: str, refusing_socks5: int) -> None:
    """A request the SOCKS5 proxy refused, as the requestfailed hook (settle/watchers.py) sees it."""
    async with chromium(chromium_path, f"--proxy-server=socks5://127.0.0.1:{refusing_socks5}",
                        "--proxy-bypass-list=<-loopback>") as browser:
        page = await browser.new_page()
        failures: list[str] = []
        page.on("requestfailed", lambda request: failures.append(request.failure or ""))
        await _error_of(page.goto("http://127.0.0.1:8099/refused"))
        assert failures and SOCKS_REFUSED.matches(failures[0]), failures

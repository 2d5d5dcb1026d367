"""The named error texts on which the farm retries a page call once (webenv.browser.observe.RETRY_CASES)."""

from __future__ import annotations

import asyncio

from playwright.async_api import Error as PlaywrightError
from playwright.async_api import async_playwright
from webenv.browser import observe


def test_each_case_is_named_and_documented() -> None:
    names = [case.name for case in observe.RETRY_CASES]
    assert len(names) == len(set(names))
    for case in observe.RETRY_CASES:
        assert case.text and len(case.why) > 40, case.name
        assert observe.retry_case(PlaywrightError(f"Page.evaluate: {case.text} (x)")) is not None


def test_other_errors_are_not_retried() -> None:
    assert observe.retry_case(PlaywrightError("Page.evaluate: ReferenceError: foo is not defined")) is None
    assert observe.retry_case(RuntimeError("Execution context was destroyed")) is None  # not Playwright's
    assert not observe.interrupted_by_navigation(PlaywrightError("Timeout 500ms exceeded."))


async def test_navigation_during_evaluate_is_a_named_case(chromium_path: str) -> None:
    """Real Chromium: an evaluate still running when its page navigates fails with a text a case names."""
    async with async_playwright() as pw:
        browser = await pw.chromium.launch(executable_path=chromium_path, args=["--no-sandbox"])
        try:
            page = await browser.new_page()
            await page.set_content("<p>old</p>")
            pending = asyncio.ensure_future(page.evaluate("new Promise(() => {})"))
            await asyncio.sleep(0)  # the call is sent before the navigation
            await page.goto("data:text/html,<p>new</p>")
            try:
                await asyncio.wait_for(pending, timeout=20)
            except PlaywrightError as exc:
                case = observe.retry_case(exc)
                assert case is not None, str(exc)
                assert observe.interrupted_by_navigation(exc)
            else:
                raise AssertionError("the evaluate outlived its document")
            assert await page.evaluate("document.body.textContent") == "new"
        finally:
            await browser.close()

"""The retry of an evaluate that a navigation interrupts (the last part of the settle rule, `settle/__init__.py`).

An evaluate whose document goes away under it (a navigation commits, a frame detaches: the named
`errortext.RETRY_CASES`, which Playwright reports only as error text) waits for the new document's
DOMContentLoaded and runs once more there; any other error, or a closed page, is raised at once. Used by the
observation pass (`observe.page_data`) and the resolution of an action's target (`actions._evaluate`).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TypeVar

from playwright.async_api import Error as PlaywrightError
from playwright.async_api import Page
from webenv.browser.errortext import interrupted_by_navigation

T = TypeVar("T")


async def on_new_document(page: Page, call: Callable[[], Awaitable[T]], nav_timeout_ms: int, attempts: int) -> T:
    """``call()`` on ``page``, at most ``attempts`` times: after a failure that a navigation caused (the page still
    open), wait (bounded by ``nav_timeout_ms``) for the new document's DOMContentLoaded and call again."""
    for attempt in range(attempts):
        try:
            return await call()
        except PlaywrightError as exc:
            if attempt == attempts - 1 or not interrupted_by_navigation(exc) or page.is_closed():
                raise
            try:
                await page.wait_for_load_state("domcontentloaded", timeout=nav_timeout_ms)
            except PlaywrightError:
                pass
    raise AssertionError("attempts must be at least 1")

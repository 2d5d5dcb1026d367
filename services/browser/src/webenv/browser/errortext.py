"""Decisions taken on the text of a Playwright/Chromium error: the named exception to "decide on types".

Playwright raises one `Error` class for everything (and reports a refused request only as its failure text),
so the few decisions that depend on what went wrong can only read the message. Each such decision is one named
`ErrorText` in this module, never a substring written at the call site: its `text` is what is matched, its
`example` the message as Chromium/Playwright 1.65 gives it, `why` the reason for the decision. Any other error
is a real failure (reported as `last_action_error`, or INTERNAL `PAGE_ERROR`), never retried.
`tests/test_browser_error_text.py` has one test per case: on real Chromium where the case can be caused on
purpose, else on its example message.
"""

from __future__ import annotations

from dataclasses import dataclass

from playwright.async_api import Error as PlaywrightError


@dataclass(frozen=True)
class ErrorText:
    """One error text the farm decides on."""

    name: str
    text: str  # matched as a substring of the error's message
    example: str  # the whole message as it comes (first line)
    why: str

    def matches(self, message: str) -> bool:
        return self.text in message

    def of(self, exc: BaseException) -> bool:
        """Is `exc` a Playwright error with this text?"""
        return isinstance(exc, PlaywrightError) and self.matches(str(exc))


# -- retried once on the new document: the document went away under the call (a navigation race) -----------
CONTEXT_DESTROYED = ErrorText(
    "context_destroyed", "Execution context was destroyed",
    "Page.evaluate: Execution context was destroyed, most likely because of a navigation",
    "Chromium's Runtime.executionContextDestroyed while an evaluate runs (the page navigated during the call), "
    "as Playwright words it; the new document is live, so the same call on it answers.")
NAVIGATION = ErrorText(
    "navigation", "navigat",
    "Page.content: Unable to retrieve content because the page is navigating and changing the content.",
    "Playwright's wording for the same race in its own checks (\"...the page is navigating...\", \"most likely "
    "because of a navigation\"); the page is still open. Broad on purpose, and only asked of evaluate-like calls: "
    "a goto's error carries Playwright's call log (\"navigating to ...\") and would match too.")
DETACHED = ErrorText(
    "detached", "detached",
    "Frame.evaluate: Frame was detached",
    "Playwright's frame-detach errors (\"Frame was detached\", \"Frame has been detached.\", \"Node is detached "
    "from document\"): the frame belonged to the old document; the retry looks the target up again in the new one.")
NO_CONTEXT = ErrorText(
    "no_context", "Cannot find context",
    "Page.evaluate: Protocol error (Runtime.callFunctionOn): Cannot find context with specified id",
    "Chromium's CDP answer when the execution context id was dropped between Playwright resolving it and the "
    "protocol call (a navigation in between).")
TARGET_CLOSED = ErrorText(
    "target_closed", "Target page, context or browser has been closed",
    "Page.evaluate: Target page, context or browser has been closed",
    "Playwright's text when the call's target went away during it; every caller checks `page.is_closed()` "
    "before retrying, so only a page that is still open (the target was a replaced document) is retried.")
RETRY_CASES = (CONTEXT_DESTROYED, NAVIGATION, DETACHED, NO_CONTEXT, TARGET_CLOSED)

# -- reported differently: a client's mistake, or a refusal by the farm's own guards ------------------------
UNKNOWN_KEY = ErrorText(
    "unknown_key", "Unknown key",
    'Keyboard.press: Unknown key: "Nope"',
    "Playwright's key-name check: the action named a key that does not exist, a bad request "
    "(INVALID_ARGUMENT on action.press.key), not a failure on the page.")
NOT_A_NUMBER = ErrorText(
    "not_a_number", "Cannot type text into input[type=number]",
    "ElementHandle.fill: Error: Cannot type text into input[type=number]",
    "Playwright's fill refuses text that is not a number for a number field (numeric text it sets): the policy "
    "chose a value the field cannot hold, so the action error says so in the farm's words (which field, which "
    "text), not Playwright's.")
BLOCKED_BY_CLIENT = ErrorText(
    "blocked_by_client", "ERR_BLOCKED_BY_CLIENT",
    "Page.goto: net::ERR_BLOCKED_BY_CLIENT at http://10.0.0.1/",
    "Chromium's net error for a request the URL guard's route aborted (`route.abort(\"blockedbyclient\")`): the "
    "navigation is reported as refused by the guard, with the guard's reason, instead of as a network failure.")
SOCKS_REFUSED = ErrorText(
    "socks_refused", "ERR_SOCKS_CONNECTION_FAILED",
    "net::ERR_SOCKS_CONNECTION_FAILED",
    "Chromium's request failure when the egress proxy (SOCKS5) refused the connection: the proxy is asked why "
    "(`EgressProxy.why_refused`) and the reason recorded as a refused URL.")
CASES = (*RETRY_CASES, UNKNOWN_KEY, NOT_A_NUMBER, BLOCKED_BY_CLIENT, SOCKS_REFUSED)


def retry_case(exc: BaseException) -> ErrorText | None:
    """The retry case a Playwright error falls under, or None (then it is a real failure, not retried)."""
    if not isinstance(exc, PlaywrightError):
        return None
    message = str(exc)
    return next((case for case in RETRY_CASES if case.matches(message)), None)


def interrupted_by_navigation(exc: BaseException) -> bool:
    """An evaluate failed because its document went away (a navigation, a frame detach): worth one retry
    on the new document."""
    return retry_case(exc) is not None

"""The EnvironmentService rules both implementations apply (the wire behaviour: tests/test_environment_conformance.py)."""

from __future__ import annotations

import pytest
from webenv import errors
from webenv.actions import parse_action
from webenv.envcontract import is_retry, validate_action, validate_lease
from webenv.v1 import common_pb2, environment_pb2


def test_step_index_rules() -> None:
    click, noop = parse_action("click(3)"), parse_action("noop()")

    def step(action: common_pb2.Action, index: int | None = None) -> environment_pb2.StepRequest:
        return environment_pb2.StepRequest(session_id="s", action=action, step_index=index)

    assert is_retry(step(click), 1, 0, click) is False  # unset: no check, the same action again acts
    assert is_retry(step(noop, 5), 5, 4, click) is False  # the next step
    assert is_retry(step(click, 4), 5, 4, click) is True  # the last step again: from cache
    assert is_retry(step(click, 0), 1, 0, click) is True  # step 0 too, when it is sent
    for index, last_action in ((0, noop), (3, click), (9, click)):  # another action / behind / ahead
        with pytest.raises(errors.FailedPrecondition) as info:
            is_retry(step(click, index), 1 if index == 0 else 5, 0 if index == 0 else 4, last_action)
        assert info.value.reason == "STEP_INDEX_MISMATCH" and info.value.metadata["field"] == "step_index"
    with pytest.raises(errors.InvalidArgument) as bad:
        is_retry(step(click, -1), 5, 4, click)
    assert bad.value.reason == "BAD_STEP_INDEX" and bad.value.metadata["field"] == "step_index"


def test_actions_and_leases_are_checked_naming_the_field() -> None:
    assert validate_action(parse_action('fill(3, "x")'), 1000) == "fill"
    with pytest.raises(errors.InvalidArgument) as info:
        validate_action(parse_action("wait(5000)"), 1000)
    assert info.value.metadata["field"] == "action.wait.milliseconds"
    validate_lease(0, 60)
    with pytest.raises(errors.InvalidArgument) as info:
        validate_lease(61, 60)
    assert (info.value.reason, info.value.metadata["field"]) == ("BAD_LEASE", "lease_seconds")


def test_web_urls_are_checked_as_a_browser_would_open_them() -> None:
    """The one rule for start URLs and navigations (farm, task files): what Chromium cannot navigate to is named."""
    from webenv.envcontract import web_url_problem

    for ok in ("http://shop-0001.web.test/", "https://example.com:8443/a?b=c#d", "http://127.0.0.1:8080/x",
               "http://[::1]:9000/", "  http://a.b/  "):
        assert web_url_problem(ok) == "", ok
    for bad, why in (("http://127.0.0.1:PORT/tasks", "port 'PORT' is not a number"),
                     ("http://127.0.0.1:70000/", "port 70000 is out of range"),
                     ("http://a.b:0/", "port 0 is out of range"),
                     ("ftp://a.b/", "scheme ftp: is not http or https"), ("shop.web.test/x", "scheme (none):"),
                     ("http:///path", "has no host"), ("http://a b.test/", "host 'a b.test' is not a host name"),
                     ("http://[::1/", "is not a URL"), ("", "is empty")):
        assert why in web_url_problem(bad), (bad, web_url_problem(bad))

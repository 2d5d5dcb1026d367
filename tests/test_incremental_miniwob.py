"""Incremental observations after every step of every scripted MiniWoB++ oracle episode (issue 52): the farm
observes with ``ObservationSpec.incremental`` (it walks only what changed, and sends edits to the session's last
observation), the sdk's EnvironmentClient rebuilds the whole text, and that text equals a whole observation pass of
the same page made right after the step (no increments, no cache). The oracle acts on that whole pass (its scripts
read ELEMENTS and DOM). Here rather than in the farm's tests (services/browser/tests/test_browser_incremental.py,
whose helpers it uses), since a service's tests import no other service."""

from __future__ import annotations

from pathlib import Path

import pytest
from webenv.actions import format_action
from webenv.testing import load_test_module
from webenv.v1 import common_pb2 as pb

pytestmark = pytest.mark.timeout(900)

ROOT = Path(__file__).resolve().parents[1]
_browser = load_test_module(ROOT / "services" / "browser" / "tests" / "conftest.py", "webenv_browser_test_fixtures")
page_server, farm, env = _browser.page_server, _browser.farm, _browser.env
_inc = load_test_module(ROOT / "services" / "browser" / "tests" / "test_browser_incremental.py",
                        "webenv_browser_incremental_tests")
INC, same, whole = _inc.INC, _inc.same, _inc.whole


async def test_rebuilt_equals_whole_after_every_miniwob_oracle_step(env, farm):
    from webenv.policy.policies.oracle import MINIWOB_SCRIPTS

    steps = increments = sent = full = 0
    for name in sorted(MINIWOB_SCRIPTS):
        task = pb.Task(task_id=f"miniwob/{name}", source=pb.TASK_SOURCE_MINIWOB, metadata={"miniwob_task": name})
        opened = await env.open(task=task, seed=1, spec=INC)
        sid = opened.session.session_id
        check = await whole(farm, sid)
        same(opened.observation, check, f"{name} open")
        try:
            for step in range(8):
                action = MINIWOB_SCRIPTS[name](opened.instruction, check, step)
                r = await env.step(sid, action)
                check = await whole(farm, sid)
                same(r.observation, check, f"{name} step {step} {format_action(action)}")
                steps += 1
                if r.observation.HasField("delta"):
                    increments += 1
                    sent += r.observation.delta.ByteSize()
                    full += len(r.observation.axtree.encode()) + len(r.observation.markdown.encode())
                if r.done:
                    break
        finally:
            await env.close(sid)
    assert steps >= 2 * len(MINIWOB_SCRIPTS) - 10 and increments >= steps // 2, (steps, increments)
    assert sent * 2 < full, (sent, full)  # measured 7,805 bytes of edits for 21,024 of text (small pages)

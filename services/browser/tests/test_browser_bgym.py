"""The BrowserGym baseline's child result as bench.py reads it (services/browser/bgym.py): a result is taken only
whole, and anything else becomes an {"error"} the bench shows instead of crashing. (The measurement itself needs
BrowserGym's own venv, downloaded: `make bench` runs it, the tests do not.)"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

_spec = importlib.util.spec_from_file_location("bgym", Path(__file__).resolve().parents[1] / "bgym.py")
assert _spec and _spec.loader
bgym = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bgym)

GOOD = {"reset_s": [1.5, 1.7], "step_s": [0.2, 0.25], "reset_launch_s": [0.3, 0.3], "step_observe_s": [0.1, 0.2],
        "versions": {"playwright": "1.44.0"}}


def test_the_last_json_line_is_the_result():
    out = "noise from a library\n" + json.dumps(GOOD) + "\n"
    assert bgym.parse_child(0, out, "Overriding the task's slow_mo parameter") == GOOD


def test_an_error_the_child_reports_is_passed_on():
    out = json.dumps({"error": "RuntimeError: episode 3: click(13) gave reward 0.0"})
    assert bgym.parse_child(1, out, "") == {"error": "RuntimeError: episode 3: click(13) gave reward 0.0"}


def test_no_result_gives_the_end_of_stderr():
    r = bgym.parse_child(1, "", "Traceback ...\nplaywright._impl._errors.Error: Executable doesn't exist at /x\n")
    assert "exited 1" in r["error"] and "Executable doesn't exist" in r["error"]
    assert "no output" in bgym.parse_child(-9, "", "")["error"]
    assert "error" in bgym.parse_child(0, "{not json", "")


def test_a_partial_result_is_an_error():
    short = dict(GOOD, step_s=[0.2])
    assert "equal per-episode series" in bgym.parse_child(0, json.dumps(short), "")["error"]
    missing = {k: v for k, v in GOOD.items() if k != "step_observe_s"}
    assert "error" in bgym.parse_child(0, json.dumps(missing), "")
    assert "non-number" in bgym.parse_child(0, json.dumps(dict(GOOD, step_s=[0.2, "x"])), "")["error"]
    assert "after a result" in bgym.parse_child(3, json.dumps(GOOD), "")["error"]

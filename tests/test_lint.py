"""`make lint`'s Python half runs in the test suite too, so CI (which runs only `make test`) keeps the code clean."""

from __future__ import annotations

import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_ruff_is_clean():
    ruff = ROOT / ".venv" / "bin" / "ruff"
    proc = subprocess.run([str(ruff), "check", "--output-format", "concise", "libs", "services", "tests", "bench",
                           "deploy"],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]

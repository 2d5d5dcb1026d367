"""BrowserGym on MiniWoB++ click-test, measured beside the farm (bench.py's MiniWoB section; `make bench`).

    .venv/bin/python services/browser/bgym.py install     # the venv alone (`make install-browsergym`)
    .venv/bin/python services/browser/bench.py --browsergym-only --out /tmp/bgym   # just this measurement

BrowserGym (browsergym-core / browsergym-miniwob 0.14.3) pins playwright==1.44 while the project's venv runs a
newer Playwright, so it lives in its own venv, `.webenv/venv-browsergym` (override WEBENV_BROWSERGYM_VENV), built on
first use (~20 s of downloads from the package index; never by `make install`, so CI downloads nothing). There is
no Playwright browser download here: BrowserGym's Playwright 1.44 launches the machine's Chromium (bench.py's
CHROMIUM; Chromium 156 was driven without trouble). BrowserEnv's `pw_chromium_kwargs` reaches only the task's
browser, not the second browser its chat window launches (browsergym/core/chat.py), so the child wraps the shared
Playwright's `chromium.launch` to give both the executable (and to time the launches).

This file is also the child: `<venv>/bin/python bgym.py --child --reps N --chromium PATH` with MINIWOB_URL set
(the MiniWoB html folder's URL, served on loopback by bench.py) runs N+1 episodes of `browsergym/miniwob.click-test`
(the first, which starts Playwright's driver, is not counted) and prints one JSON line: per episode the seconds of
env.reset(seed) and of env.step("click('<bid>')"), the bid read from the reset's AXTree, each step checked to end
the episode with reward 1. It imports nothing of webenv (that venv has none), only the standard library at
module level. Tuned for speed, nothing else changed: headless, slow_mo 0 (the MiniWoB tasks set 100 ms per
Playwright call), pre_observation_delay 0 (default 0.5 s); the task's own viewport (332x214) and timeout, and
BrowserGym's standard observation (DOM snapshot, merged AXTree, screenshot, element properties), which it has no
switch to trim short of `use_raw_page_output` (no observation at all). Each reset closes and relaunches both
browsers: that is BrowserGym's reset, measured as is.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
VENV = Path(os.environ.get("WEBENV_BROWSERGYM_VENV", ROOT / ".webenv" / "venv-browsergym"))
VERSION = "0.14.3"
PACKAGES = (f"browsergym-core=={VERSION}", f"browsergym-miniwob=={VERSION}")
TASK = "browsergym/miniwob.click-test"
SERIES = ("reset_s", "step_s", "reset_launch_s", "step_observe_s")  # what the child reports, per episode


class BrowserGymError(RuntimeError):
    """The BrowserGym venv could not be built or the measurement did not run; the message says why."""


def _python(venv: Path) -> Path:
    return venv / "bin" / "python"


def ensure_venv(venv: Path = VENV) -> Path:
    """The venv's python, the venv built first when missing (idempotent: a stamp file marks a finished install;
    a failed install removes the half-built venv and raises BrowserGymError with pip's last words)."""
    stamp = venv / f".webenv-browsergym-{VERSION}"
    if stamp.exists() and _python(venv).exists():
        return _python(venv)
    shutil.rmtree(venv, ignore_errors=True)
    venv.parent.mkdir(parents=True, exist_ok=True)
    base = getattr(sys, "_base_executable", sys.executable)  # not the project venv's python: a clean venv
    steps = [[base, "-m", "venv", str(venv)], [str(_python(venv)), "-m", "pip", "install", "-q", *PACKAGES],
             [str(_python(venv)), "-c", "import browsergym.miniwob, playwright.sync_api"]]
    for cmd in steps:
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            shutil.rmtree(venv, ignore_errors=True)
            # pip's notes about this machine's unused local indexes ("Location ... is ignored") are left out
            why = [ln for ln in (proc.stderr + proc.stdout).splitlines() if ln.strip() and "is ignored" not in ln]
            raise BrowserGymError(f"python {' '.join(cmd[1:4])} failed (exit {proc.returncode}): "
                                  + " | ".join(ln[:200] for ln in why[-3:]))
    stamp.touch()
    return _python(venv)


def parse_child(returncode: int, stdout: str, stderr: str) -> dict[str, Any]:
    """The child's result: its last stdout line that is a JSON object, checked to hold the per-episode series
    (equal, non-empty lists of seconds); otherwise {"error": why}, with the end of stderr when the child said
    nothing usable."""
    line = next((ln for ln in reversed(stdout.splitlines()) if ln.lstrip().startswith("{")), None)
    try:
        out = json.loads(line) if line is not None else None
    except json.JSONDecodeError:
        out = None
    if not isinstance(out, dict):
        tail = " | ".join(ln for ln in stderr.strip().splitlines()[-4:])[-500:]
        return {"error": f"BrowserGym child exited {returncode} without a result: {tail or 'no output'}"}
    if "error" in out:
        return {"error": str(out["error"])[:600]}
    lens = {k: len(out[k]) if isinstance(out.get(k), list) else -1 for k in SERIES}
    if min(lens.values()) < 1 or len(set(lens.values())) != 1:
        return {"error": f"BrowserGym child result lacks equal per-episode series: {lens}"}
    if not all(isinstance(x, int | float) for k in SERIES for x in out[k]):
        return {"error": "BrowserGym child result has a non-number in its series"}
    if returncode != 0:
        return {"error": f"BrowserGym child exited {returncode} after a result"}
    return out


def measure(miniwob_url: str, reps: int, chromium: str, timeout_s: float | None = None) -> dict[str, Any]:
    """BrowserGym's reset and step p50 (ms) on click-test over `reps` episodes, from its own venv, or
    {"error": why}: never raises, so a BrowserGym that cannot run leaves the rest of the bench standing."""
    try:
        py = ensure_venv()
    except (BrowserGymError, OSError) as exc:
        return {"error": str(exc)}
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}  # nothing of webenv
    env["MINIWOB_URL"] = miniwob_url
    cmd = [str(py), str(Path(__file__).resolve()), "--child", "--reps", str(reps), "--chromium", chromium]
    try:
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout_s or 90 + 15 * reps)
    except subprocess.TimeoutExpired as exc:
        return {"error": f"BrowserGym child did not finish within {exc.timeout:.0f} s"}
    raw = parse_child(proc.returncode, proc.stdout, proc.stderr)
    if "error" in raw:
        return raw
    # the bench's percentile (nearest rank); speed.py imports webenv, so not at module level (the child's venv)
    from speed import pct

    out = {k: v for k, v in raw.items() if k not in SERIES}
    for k in SERIES:
        out[k.removesuffix("_s") + "_p50_ms"] = pct(raw[k], 50) * 1e3
    out["reps"] = len(raw["reset_s"])
    return out


# -- the child, in BrowserGym's venv ------------------------------------------------------------------
def _child(reps: int, chromium: str) -> dict[str, Any]:
    import importlib.metadata

    import browsergym.miniwob  # noqa: F401  (registers the browsergym/miniwob.* environments)
    import gymnasium as gym
    from browsergym.core import _get_global_playwright

    pw = _get_global_playwright()
    launch, launch_s = pw.chromium.launch, [0.0]

    def timed_launch(**kw: Any) -> Any:
        kw.setdefault("executable_path", chromium)
        t = time.perf_counter()
        try:
            return launch(**kw)
        finally:
            launch_s[0] += time.perf_counter() - t

    pw.chromium.launch = timed_launch
    env = gym.make(TASK, headless=True, slow_mo=0, pre_observation_delay=0)
    base = env.unwrapped
    get_obs, obs_s = base._get_obs, [0.0]

    def timed_obs() -> Any:
        t = time.perf_counter()
        try:
            return get_obs()
        finally:
            obs_s[0] += time.perf_counter() - t

    base._get_obs = timed_obs
    out: dict[str, Any] = {k: [] for k in SERIES}
    try:
        for i in range(reps + 1):  # episode 0 starts Playwright's driver: not counted
            launch_s[0] = 0.0
            t0 = time.perf_counter()
            obs, _ = env.reset(seed=i + 1)
            t1 = time.perf_counter()
            reset_launch = launch_s[0]
            bid = next((n["browsergym_id"] for n in obs["axtree_object"]["nodes"]
                        if n.get("role", {}).get("value") == "button" and "browsergym_id" in n), None)
            if bid is None:
                raise RuntimeError("no button with a bid in the reset's AXTree")
            obs_s[0] = 0.0
            t2 = time.perf_counter()
            _, reward, terminated, _, info = env.step(f"click('{bid}')")
            t3 = time.perf_counter()
            if not (terminated and reward == 1.0):
                raise RuntimeError(f"episode {i}: click({bid}) gave reward {reward}, terminated {terminated}, "
                                   f"last_action_error {base.last_action_error!r}, task_info {info.get('task_info')}")
            if i:
                for k, v in zip(SERIES, (t1 - t0, t3 - t2, reset_launch, obs_s[0]), strict=True):
                    out[k].append(v)
        out["versions"] = {"browsergym": VERSION, "playwright": importlib.metadata.version("playwright"),
                           "chromium": base.browser.version}
        out["settings"] = {"headless": True, "slow_mo_ms": 0, "pre_observation_delay_s": 0,
                           "viewport": base.task.viewport, "timeout_ms": base.task.timeout,
                           "observation": "BrowserGym default (DOM snapshot, AXTree, screenshot, properties)"}
    finally:
        env.close()
        pw.stop()
    return out


def main(argv: list[str]) -> int:
    import argparse

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("command", nargs="?", choices=["install"], help="build the venv (idempotent) and exit")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--chromium", default=os.environ.get("WEBENV_FARM_CHROMIUM_PATH", "/usr/lib/chromium/chromium"))
    args = ap.parse_args(argv)
    if args.child:
        try:
            print(json.dumps(_child(args.reps, args.chromium)), flush=True)
        except Exception as exc:  # reported as the result: the parent shows it in the bench
            print(json.dumps({"error": f"{type(exc).__name__}: {exc}"[:600]}), flush=True)
            return 1
        return 0
    if args.command == "install":
        try:
            print(f"install-browsergym: {ensure_venv().parent.parent} is ready")
        except BrowserGymError as exc:
            print(f"install-browsergym: {exc}", file=sys.stderr)
            return 1
        return 0
    ap.error("say `install` (the measurement itself: bench.py --browsergym-only)")
    return 2


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))

"""Faults across the learning loop: kill -9 each of policy, judge, sites, trainer, one farm node and the collector
once during a small ``webenv train --stack`` run, each restarted as a Kubernetes pod is (same command, same
environment, same ports), and check what the loop and the store make of it.

The script starts ``webenv train --stack`` (a small loop: few demos, three iterations, small evaluations), waits
until every service to be killed runs as a child of it, then every ``--every`` seconds SIGKILLs the next service of ``--order`` — only
processes that are children of the train process it started, found by their ``-m webenv.<service>`` command line —
and relaunches it from its own /proc cmdline, environment and working folder. When the loop ends (or
``--timeout`` passes) it reports:

- whether the loop finished (exit status) and which kills it met,
- per run in the store: episodes stored vs the run's finished count, episode ids stored twice (none may be),
  episodes whose step indices are not 0..steps-1, and errored episodes with their first errors,
- checkpoints: every ``checkpoints/<family>/v<N>`` folder has a ``checkpoint.json`` that parses and no ``*.tmp``
  left behind (a half-written checkpoint),
- the collector's and policy's retry counters before their kills (webenv_collector_peer_retries_total,
  webenv_collector_episode_retries_total) as last scraped.

It takes longer than a CI test can (a train run of minutes plus six restarts), so it writes
bench/results/faults.md and .json instead.

    nice -n 19 .venv/bin/python bench/faults.py --out bench/results
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ORDER = ("policy", "judge", "sites", "trainer", "browser", "collector")
TRAIN_ARGS = ["--demos", "20", "--iterations", "3", "--collect", "60", "--eval", "20", "--train-eval", "0",
              "--validation-eval", "0", "--family-eval", "1", "--miniwob-tasks", "0", "--baselines", "",
              "--baseline-eval", "0", "--bc-epochs", "5", "--rl-epochs", "2", "--sites-count", "40"]


def children(pid: int) -> list[int]:
    try:
        kids = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    except OSError:
        return []
    return [int(k) for k in kids]


def service_of(pid: int) -> str:
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return ""
    for i, a in enumerate(argv[:-1]):
        if a == b"-m" and argv[i + 1].startswith(b"webenv."):
            return argv[i + 1].decode().split(".", 1)[1]
    return ""


def snapshot(pid: int) -> dict:
    """What relaunching ``pid`` as it was needs: argv, environment, working folder."""
    argv = [a.decode() for a in Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0") if a]
    env = dict(kv.decode().split("=", 1) for kv in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0") if b"=" in kv)
    return {"argv": argv, "env": env, "cwd": os.readlink(f"/proc/{pid}/cwd")}


def scrape(addr: str, names: tuple[str, ...]) -> dict[str, float]:
    try:
        with urllib.request.urlopen(f"http://{addr}/metrics", timeout=5) as r:
            text = r.read().decode()
    except OSError:
        return {}
    out: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith(names):
            key, _, value = line.rpartition(" ")
            out[key] = float(value)
    return out


def check_store(data_dir: Path) -> dict:
    from webenv.collector.store import Store

    store = Store(f"chdb://{data_dir / 'store'}", "webenv")
    try:
        runs = store.query("SELECT run_id, name, state, finished FROM {db}.runs FINAL ORDER BY created_at")
        per = store.query(
            "SELECT run_id, count() AS rows, uniqExact(episode_id) AS ids, countIf(error != '') AS errored, "
            "anyIf(error, error != '') AS first_error FROM {db}.episodes FINAL GROUP BY run_id")
        raw = store.query("SELECT run_id, episode_id, count() AS n FROM {db}.episodes GROUP BY run_id, episode_id "
                          "HAVING n > 1 LIMIT 20")
        gaps = store.query(
            "SELECT s.run_id AS run_id, s.episode_id AS episode_id FROM (SELECT run_id, episode_id, "
            "groupArray(step_index) AS idx FROM {db}.steps FINAL GROUP BY run_id, episode_id) AS s JOIN "
            "(SELECT run_id, episode_id, steps FROM {db}.episodes FINAL) AS e USING (run_id, episode_id) "
            "WHERE arraySort(s.idx) != range(e.steps) LIMIT 20")
    finally:
        store.close()
    by = {r["run_id"]: r for r in per}
    rows = []
    for r in runs:
        p = by.get(r["run_id"], {})
        rows.append({"run_id": r["run_id"], "name": r["name"], "state": r["state"], "finished": r["finished"],
                     "stored": p.get("rows", 0), "unique": p.get("ids", 0), "errored": p.get("errored", 0),
                     "first_error": p.get("first_error", "")})
    return {"runs": rows, "inserted_more_than_once": raw, "steps_not_contiguous": gaps}


def check_checkpoints(root: Path) -> list[dict]:
    out = []
    for v in sorted(root.glob("*/v[0-9]*")):
        problem = ""
        meta = v / "checkpoint.json"
        if not meta.is_file():
            problem = "no checkpoint.json"
        else:
            try:
                json.loads(meta.read_text())
            except ValueError as exc:
                problem = f"checkpoint.json does not parse: {exc}"
        tmp = [p.name for p in v.rglob("*.tmp")]
        if tmp:
            problem = (problem + "; " if problem else "") + f"left over: {tmp}"
        out.append({"checkpoint": f"{v.parent.name}/{v.name}", "ok": not problem, "problem": problem})
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(ROOT / "bench" / "results"))
    ap.add_argument("--order", default=",".join(ORDER), help="services to kill, in order, once each")
    ap.add_argument("--first", type=float, default=30.0, help="seconds after the stack is up before the first kill")
    ap.add_argument("--every", type=float, default=30.0, help="seconds between kills")
    ap.add_argument("--timeout", type=float, default=3600.0)
    ap.add_argument("--data-dir", default="")
    args = ap.parse_args()
    out = Path(args.out)
    data_dir = Path(args.data_dir or tempfile.mkdtemp(prefix="webenv-faults-"))
    report_dir = data_dir / "report"
    cmd = [sys.executable, "-m", "webenv.cli", "train", "--stack", "--data-dir", str(data_dir),
           "--out", str(report_dir), *TRAIN_ARGS]
    data_dir.parent.mkdir(parents=True, exist_ok=True)
    log = open(data_dir.parent / f"{data_dir.name}-train.log", "wb")
    t0 = time.monotonic()
    train = subprocess.Popen(cmd, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
    kills, counters = [], {}
    order = [s for s in args.order.split(",") if s]
    try:
        # `webenv train --stack` records no stack.json: its stack is the train process's children, up when every
        # service to be killed runs (the collector starts last)
        wanted = set(order)
        while train.poll() is None and not wanted <= {service_of(p) for p in children(train.pid)}:
            time.sleep(1)
        procs = {service_of(p): p for p in children(train.pid)}
        metrics_addr = ""
        if "collector" in procs:
            port = snapshot(procs["collector"])["env"].get("WEBENV_METRICS_PORT", "")
            metrics_addr = f"127.0.0.1:{port}" if port else ""
        next_kill = time.monotonic() + args.first
        while train.poll() is None and time.monotonic() - t0 < args.timeout:
            time.sleep(1)
            if order and time.monotonic() >= next_kill:
                name = order.pop(0)
                procs = {service_of(p): p for p in children(train.pid)}
                pid = procs.get(name)
                if pid is None:
                    kills.append({"service": name, "at_s": round(time.monotonic() - t0), "killed": False,
                                  "why": f"no child runs webenv.{name} (running: {sorted(k for k in procs if k)})"})
                    continue
                if metrics_addr:
                    counters = scrape(metrics_addr, ("webenv_collector_peer_retries_total",
                                                     "webenv_collector_episode_retries_total")) or counters
                snap = snapshot(pid)
                os.killpg(pid, signal.SIGKILL) if os.getpgid(pid) == pid else os.kill(pid, signal.SIGKILL)
                with_log = open(data_dir / "logs" / f"{name}-restarted.log", "ab")
                subprocess.Popen(snap["argv"], env=snap["env"], cwd=snap["cwd"], stdout=with_log, stderr=with_log,
                                 start_new_session=True)
                kills.append({"service": name, "at_s": round(time.monotonic() - t0), "killed": True, "pid": pid})
                print(f"killed {name} (pid {pid}) at {kills[-1]['at_s']}s, relaunched", flush=True)
                next_kill = time.monotonic() + args.every
        if train.poll() is None:
            train.send_signal(signal.SIGTERM)  # stops the stack it started
            train.wait(120)
    finally:
        if train.poll() is None:
            train.kill()
        for pid in list(children(os.getpid())):  # relaunched services are ours; the stack's went with train
            if service_of(pid):
                os.killpg(pid, signal.SIGTERM)
    result = {
        "bench": "faults", "when": datetime.now(UTC).isoformat(timespec="seconds"),
        "command": "nice -n 19 .venv/bin/python bench/faults.py " + " ".join(sys.argv[1:]),
        "train_command": " ".join(cmd[2:]), "train_exit": train.returncode,
        "seconds": round(time.monotonic() - t0), "kills": kills, "retry_counters_last_scraped": counters,
        "store": check_store(data_dir), "checkpoints": check_checkpoints(data_dir / "checkpoints"),
    }
    ok = (train.returncode == 0 and all(k["killed"] for k in kills)
          and not result["store"]["inserted_more_than_once"] and not result["store"]["steps_not_contiguous"]
          and all(r["stored"] == r["unique"] == r["finished"] for r in result["store"]["runs"])
          and all(c["ok"] for c in result["checkpoints"]))
    result["passed"] = ok
    out.mkdir(parents=True, exist_ok=True)
    (out / "faults.json").write_text(json.dumps(result, indent=2, default=str))
    lines = [f"# Faults across the learning loop ({result['when']})", "", f"    {result['command']}", "",
             f"`{result['train_command']}` exited {train.returncode} after {result['seconds']} s; "
             f"{'every check passed' if ok else 'SOME CHECKS FAILED'}.", "",
             "| kill | at s | done |", "| --- | --- | --- |"]
    lines += [f"| {k['service']} | {k['at_s']} | {'yes' if k['killed'] else k['why']} |" for k in kills]
    lines += ["", "| run | state | finished | stored | unique ids | errored | first error |",
              "| --- | --- | --- | --- | --- | --- | --- |"]
    lines += [f"| {r['name']} | {r['state']} | {r['finished']} | {r['stored']} | {r['unique']} | {r['errored']} | "
              f"{str(r['first_error'])[:80]} |" for r in result["store"]["runs"]]
    bad = [c for c in result["checkpoints"] if not c["ok"]]
    lines += ["", f"Checkpoints: {len(result['checkpoints'])}, half-written or unreadable: "
              f"{', '.join(c['checkpoint'] + ' (' + c['problem'] + ')' for c in bad) or 'none'}.",
              f"Episode ids inserted more than once: {len(result['store']['inserted_more_than_once'])}; episodes with "
              f"non-contiguous steps: {len(result['store']['steps_not_contiguous'])}.",
              f"Retry counters (last scrape before a kill): {counters or 'none scraped'}."]
    (out / "faults.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())

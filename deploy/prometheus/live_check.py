"""Live check of the monitoring set-up against a real local stack (about 2 minutes, uses Chromium).

    .venv/bin/python deploy/prometheus/live_check.py [--episodes 8] [--keep]

1. starts the stack with `webenv up --free-ports` (sites, browser, policy, judge, collector);
2. starts Prometheus (the Debian `prometheus` binary) with deploy/prometheus/prometheus.yml, targets rewritten to
   the stack's ports, 2 s scrapes, and alerts.yml;
3. runs a few episodes (oracle and random policies) through the collector;
4. executes every Grafana panel query and every rule expression on that Prometheus and reports: queries that
   fail (an error is a bug), queries with no data (expected only for what did not happen: the world model is
   not started, no LLM judge, no crash...), targets down, alerts pending or firing.

Exit code 1 when a query fails or a started service's target is down. Stops everything it started on exit.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent


def query(base: str, expr: str) -> dict:
    url = f"{base}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
    try:
        with urllib.request.urlopen(url, timeout=30) as r:
            return json.load(r)
    except urllib.error.HTTPError as exc:
        return json.load(exc)


def wait_for(pattern: str, path: Path, timeout: float) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        text = path.read_text() if path.exists() else ""
        if re.search(pattern, text):
            return text
        time.sleep(1)
    raise SystemExit(f"timed out waiting for {pattern!r} in {path}:\n{text[-2000:]}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--episodes", type=int, default=8)
    ap.add_argument("--keep", action="store_true", help="leave the work folder in place")
    args = ap.parse_args()
    prometheus = shutil.which("prometheus")
    if not prometheus:
        raise SystemExit("prometheus is not installed (Debian package `prometheus`)")
    work = Path(tempfile.mkdtemp(prefix="webenv-live-"))
    procs: list[subprocess.Popen] = []
    try:
        up_log = work / "up.log"
        procs.append(subprocess.Popen(
            [str(BIN / "webenv"), "up", "--free-ports", "--sites-count", "16", "--data-dir", str(work / "data")],
            stdout=up_log.open("w"), stderr=subprocess.STDOUT, start_new_session=True))
        text = wait_for(r"Ctrl-C stops everything", up_log, 300)
        rows = re.findall(r"(\w+)\s+│ 127\.0\.0\.1:(\d+)\s+│ http://127\.0\.0\.1:(\d+)/metrics", text)
        ports = {name: (int(g), int(m)) for name, g, m in rows}
        print("stack:", {k: v for k, v in ports.items()})

        config = yaml.safe_load((ROOT / "deploy/prometheus/prometheus.yml").read_text())
        config["global"].update(scrape_interval="2s", scrape_timeout="1s", evaluation_interval="2s")
        prom_port = free_port()
        for job in config["scrape_configs"]:
            name = job["job_name"]
            if name in ports or name == "prometheus":
                port = prom_port if name == "prometheus" else ports[name][1]
                job.pop("dns_sd_configs", None)
                job.pop("relabel_configs", None)
                job["static_configs"] = [{"targets": [f"127.0.0.1:{port}"],
                                          **({"labels": {"app": "webenv"}} if name in ports else {})}]
        (work / "prometheus.yml").write_text(yaml.safe_dump(config))
        shutil.copy(ROOT / "deploy/prometheus/alerts.yml", work / "alerts.yml")
        procs.append(subprocess.Popen(
            [prometheus, f"--config.file={work / 'prometheus.yml'}", f"--storage.tsdb.path={work / 'tsdb'}",
             f"--web.listen-address=127.0.0.1:{prom_port}"],
            stdout=(work / "prometheus.log").open("w"), stderr=subprocess.STDOUT, start_new_session=True))
        base = f"http://127.0.0.1:{prom_port}"
        wait_for(r"Server is ready to receive web requests", work / "prometheus.log", 60)

        collector = f"127.0.0.1:{ports['collector'][0]}"
        for policy in ("oracle", "random"):
            run = subprocess.run([str(BIN / "webenv"), "run", "--collector", collector, "--policy", policy,
                                  "--episodes", str(args.episodes)], capture_output=True, text=True, timeout=600)
            print(f"run ({policy}):", (run.stdout.strip().splitlines() or ["?"])[0], run.stderr.strip()[-300:])
        time.sleep(8)  # a few more scrapes and rule evaluations

        failed, empty, ok = [], [], 0
        exprs = []
        for board in sorted((ROOT / "deploy/grafana/dashboards").glob("*.json")):
            for panel in json.loads(board.read_text())["panels"]:
                for t in panel.get("targets", []):
                    exprs.append((f"{board.name}: {panel['title']} [{t['legendFormat']}]", t["expr"]))
        for group in yaml.safe_load((ROOT / "deploy/prometheus/alerts.yml").read_text())["groups"]:
            for rule in group["rules"]:
                exprs.append((f"alerts.yml: {rule.get('alert') or rule.get('record')}", rule["expr"]))
        for label, expr in exprs:
            result = query(base, expr.replace("$__rate_interval", "1m").replace("$job", ".*"))
            if result["status"] != "success":
                failed.append(f"{label}: {result.get('error')}")
            elif not result["data"]["result"]:
                empty.append(label)
            else:
                ok += 1
        targets = query(base, 'up{app="webenv"}')["data"]["result"]
        down = [t["metric"]["job"] for t in targets if t["value"][1] == "0"]
        alerts = [(a["metric"]["alertname"], a["metric"].get("job"), a["metric"]["alertstate"])
                  for a in query(base, "ALERTS")["data"]["result"]]
        print(f"\nqueries with data: {ok}; without data: {len(empty)}; failed: {len(failed)}")
        for line in empty:
            print("  no data:", line)
        for line in failed:
            print("  FAILED:", line)
        print("targets down:", down)
        print("alerts:", alerts)
        started_down = [j for j in down if j in ports]
        return 1 if failed or started_down else 0
    finally:
        for p in reversed(procs):
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
                try:
                    p.wait(60)
                except subprocess.TimeoutExpired:
                    p.kill()
        if args.keep:
            print("work folder:", work)
        else:
            shutil.rmtree(work, ignore_errors=True)


def free_port() -> int:
    """A free TCP port on 127.0.0.1."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


if __name__ == "__main__":
    sys.exit(main())

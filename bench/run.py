"""`make bench`: run every service's benchmark (services/*/bench.py) and index the figures they write.

Each bench.py measures its service against a baseline run side by side in the same script (ratios, not absolute
numbers, because machines here are small and noisy) and writes bench/results/<service>.json and .md. This runner
only schedules them one at a time (so they do not compete for the 2 cores), bounds each by a timeout, and writes
bench/results/SUMMARY.md with what ran, how long it took and where the figures are.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", default=str(ROOT / "bench" / "results"))
    parser.add_argument("--only", nargs="*", help="service names to run (default: all)")
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds per service benchmark")
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    rows = []
    for script in sorted(ROOT.glob("services/*/bench.py")):
        name = script.parent.name
        if args.only and name not in args.only:
            continue
        print(f"== bench {name}", flush=True)
        t0 = time.monotonic()
        try:
            proc = subprocess.run([sys.executable, str(script), "--out", str(out)], cwd=ROOT, timeout=args.timeout)
            status = "ok" if proc.returncode == 0 else f"exit {proc.returncode}"
        except subprocess.TimeoutExpired:
            status = f"timeout after {args.timeout:.0f}s"
        rows.append((name, status, time.monotonic() - t0))
    lines = ["# Benchmark results", "", f"Run at {time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime())}.", "",
             "| service | status | seconds | figures |", "| --- | --- | --- | --- |"]
    for name, status, secs in rows:
        lines.append(f"| {name} | {status} | {secs:.0f} | [{name}.md]({name}.md), [{name}.json]({name}.json) |")
    (out / "SUMMARY.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0 if all(s == "ok" for _, s, _ in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())

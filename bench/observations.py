"""Observations sized for language-model agents (issue 52): exported bytes per episode with screenshots, inline vs by
reference, the codecs side by side, and AXTREE characters per step whole vs within a budget.

One stack (`webenv.cli.stack.Stack`: sites, the browser farm on Chromium, policy, judge, collector) runs the oracle
on easy synthetic tasks with AXTREE and SCREENSHOT observed and kept, then exports the run as JSONL twice: with each
step's screenshot inline (``inline_screenshots``, base64 beside the key) and by reference (the key only;
``CollectorService.GetScreenshot`` / ``GET /v1/screenshots/{key}`` fetch it). Each codec (PNG, JPEG, WebP at
quality 75) gets a run of its own, so the per-episode figures compare the same tasks. Then the farm observes a few
synthetic start pages whole and with ``ObservationSpec.budget_chars``.

    .venv/bin/python -m bench.observations            # writes bench/results/observations.md and .json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from pathlib import Path

import grpc
from webenv.cli.stack import Stack
from webenv.client import EnvironmentClient, make_sync_channel
from webenv.v1 import collector_pb2, collector_pb2_grpc, common_pb2, task_pb2, task_pb2_grpc

RESULTS = Path(__file__).resolve().parent / "results"
CODECS = {"png": common_pb2.IMAGE_CODEC_PNG, "jpeg": common_pb2.IMAGE_CODEC_JPEG, "webp": common_pb2.IMAGE_CODEC_WEBP}
KEEP = [common_pb2.OBSERVATION_FORMAT_AXTREE, common_pb2.OBSERVATION_FORMAT_SCREENSHOT]


def run_and_export(stub: collector_pb2_grpc.CollectorServiceStub, codec: str, episodes: int, out: Path) -> dict:
    spec = collector_pb2.RunSpec(
        name=f"observations-{codec}", policy="oracle", episodes=episodes, seed=7, concurrency=2,
        tasks=task_pb2.TaskFilter(sources=[common_pb2.TASK_SOURCE_SYNTHETIC], difficulties=[common_pb2.DIFFICULTY_EASY],
                                  split=common_pb2.SPLIT_TRAIN),
        observation_spec=common_pb2.ObservationSpec(formats=KEEP, screenshot=common_pb2.ScreenshotSpec(
            codec=CODECS[codec], quality=75 if codec != "png" else 0)),
        keep_formats=KEEP,
    )
    run_id = stub.StartRun(collector_pb2.StartRunRequest(spec=spec), timeout=60).run.run_id
    deadline = time.monotonic() + 600
    while True:
        run = stub.GetRun(collector_pb2.GetRunRequest(run_id=run_id), timeout=30).run
        if run.state in (collector_pb2.RUN_STATE_SUCCEEDED, collector_pb2.RUN_STATE_FAILED,
                         collector_pb2.RUN_STATE_STOPPED) or time.monotonic() > deadline:
            break
        time.sleep(1)
    row: dict = {"codec": codec, "run_id": run_id, "state": collector_pb2.RunState.Name(run.state)}
    for mode, inline in (("reference", False), ("inline", True)):
        dest = out / f"{codec}-{mode}"
        r = stub.ExportRun(collector_pb2.ExportRunRequest(run_id=run_id, format=collector_pb2.EXPORT_FORMAT_JSONL,
                                                          destination=str(dest), inline_screenshots=inline), timeout=600)
        size = sum(Path(p).stat().st_size for p in r.paths)
        row |= {"episodes": r.episodes, "steps": r.steps, f"{mode}_bytes": size,
                f"{mode}_bytes_per_episode": size / max(r.episodes, 1)}
        if not inline:  # the keys by reference, each fetched back by GetScreenshot
            keys = {s["screenshot_key"] for line in Path(r.paths[0]).read_text().splitlines()
                    for s in json.loads(line)["steps_detail"] if s["screenshot_key"]}
            shots = [stub.GetScreenshot(collector_pb2.GetScreenshotRequest(screenshot_key=k), timeout=30) for k in keys]
            row |= {"distinct_screenshots": len(keys), "screenshot_bytes": sum(len(s.data) for s in shots)}
    row["ratio"] = row["inline_bytes"] / max(row["reference_bytes"], 1)
    return row


async def budgeted(browser: str, urls: list[str], budget: int) -> list[dict]:
    """AXTREE characters of each page observed whole and within ``budget`` (ObservationSpec.budget_chars)."""
    out = []
    async with EnvironmentClient(browser, timeout=120) as env:
        for url in urls:
            sizes = {}
            for name, b in (("full", 0), ("budgeted", budget)):
                o = await env.open(start_url=url, spec=common_pb2.ObservationSpec(
                    formats=[common_pb2.OBSERVATION_FORMAT_AXTREE], budget_chars=b))
                sizes[name] = len(o.observation.axtree)
                if b:
                    sizes["full_chars"] = o.observation.budget.full_chars or sizes["full"]
                await env.close(o.session.session_id)
            out.append({"url": url, **sizes})
    return out


def report(rows: list[dict], budget_rows: list[dict], budget: int) -> str:
    lines = ["# Observations for language-model agents: screenshots by reference", "",
             "`python -m bench.observations`: one stack on this machine, the oracle on easy synthetic train tasks, "
             "AXTREE and SCREENSHOT (1280x720 viewport) observed and kept; the run exported as JSONL with each step's "
             "screenshot inline (`inline_screenshots`: base64 beside the key, the way steps travelled before) and by "
             "reference (the key; `GetScreenshot` / `GET /v1/screenshots/{key}` fetch each image, stored once).", "",
             "| codec | episodes | steps | distinct screenshots | inline bytes/episode | by-reference bytes/episode "
             "| inline / reference | mean screenshot bytes |",
             "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        mean = r["screenshot_bytes"] / max(r["distinct_screenshots"], 1)
        lines.append(f"| {r['codec']} | {r['episodes']} | {r['steps']} | {r['distinct_screenshots']} | "
                     f"{r['inline_bytes_per_episode']:,.0f} | {r['reference_bytes_per_episode']:,.0f} | "
                     f"{r['ratio']:.1f}x | {mean:,.0f} |")
    lines += ["", "Goal (issue 52): exported bytes per episode >= 5x fewer by reference than inline. The by-reference "
              "export still names every image; fetching them costs the bytes once per distinct image, not once per "
              "step or export.", "",
              f"## Budgeted observations (`budget_chars={budget}`)", "",
              "The AXTREE of synthetic start pages on the same farm, whole and within the budget "
              "(`webenv.budget`: long lists collapsed with counts, interactive nodes in view first).", "",
              "| page | full chars | budgeted chars | full / budgeted |", "|---|---:|---:|---:|"]
    for r in budget_rows:
        lines.append(f"| {r['url']} | {r['full_chars']:,} | {r['budgeted']:,} | {r['full_chars'] / r['budgeted']:.1f}x |")
    lines.append("")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--episodes", type=int, default=6)
    ap.add_argument("--codecs", default="png,jpeg,webp")
    ap.add_argument("--data-dir", type=Path, default=None)
    ap.add_argument("--budget", type=int, default=1000)
    args = ap.parse_args(argv)
    tmp = Path(tempfile.mkdtemp(prefix="webenv-bench-observations-"))
    stack = Stack(args.data_dir or tmp / "stack", free_ports=True, sites_count=8)
    stack.start(timeout=240, on_ready=lambda n, a: print(f"{n} SERVING at {a}", flush=True))
    rows = []
    try:
        stub = collector_pb2_grpc.CollectorServiceStub(make_sync_channel(stack.address("collector")))
        for codec in args.codecs.split(","):
            try:
                rows.append(run_and_export(stub, codec, args.episodes, tmp / "export"))
            except grpc.RpcError as exc:
                print(f"{codec}: {exc.code().name}: {exc.details()}", file=sys.stderr)
                return 1
            print(json.dumps(rows[-1]), flush=True)
        tasks = task_pb2_grpc.TaskServiceStub(make_sync_channel(stack.address("sites"))).ListTasks(
            task_pb2.ListTasksRequest(filter=task_pb2.TaskFilter(sources=[common_pb2.TASK_SOURCE_SYNTHETIC]),
                                      page_size=200), timeout=60).tasks
        urls = list(dict.fromkeys(t.start_url for t in tasks))[:6]
        budget_rows = asyncio.run(budgeted(stack.address("browser"), urls, args.budget))
    finally:
        stack.stop()
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "observations.json").write_text(json.dumps({"screenshots": rows, "budget": budget_rows}, indent=1) + "\n",
                                               encoding="utf-8")
    text = report(rows, budget_rows, args.budget)
    (RESULTS / "observations.md").write_text(text, encoding="utf-8")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""`webenv rescore RUN`: re-grade a stored run's episodes with the judge as it is now (a newer evaluator, a fixed
rubric), without a browser: each stored task and trajectory (CollectorService.ReadEpisodes) is sent to
JudgeService.Evaluate again, uncached, and the new verdicts are compared with the stored ones. ``--out`` also writes
the results in the benchmarks' own formats, so their authors' tools can read them: WebArena-Verified's
``eval_result.json`` and ``agent_response.json`` per task, Online-Mind2Web's ``result.json`` (schema
online-mind2web-v2), WebVoyager's ``interact_messages.json``, and ``rescore.json`` with every episode's old and new
verdict. Exit 1 when the judge refuses a task (the message names it) or the run cannot be read."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import grpc
import typer
from rich import box
from rich.table import Table
from webenv import errors
from webenv.actions import format_action
from webenv.cli.commands.common import address, console, fail
from webenv.client import make_sync_channel
from webenv.v1 import collector_pb2, collector_pb2_grpc, common_pb2, judge_pb2, judge_pb2_grpc

HOLDS = common_pb2.FACT_OUTCOME_HOLDS
#: The judge's evaluator name -> WebArena-Verified's.
VERIFIED_NAMES = {"webarena_verified.agent_response": "AgentResponseEvaluator",
                  "webarena_verified.network_event": "NetworkEventEvaluator"}


def _safe(name: str) -> str:
    """A task id as one folder name."""
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in name)[:120] or "_"


def verified_eval_result(ep: collector_pb2.StoredEpisode, verdict: common_pb2.Verdict) -> dict[str, Any]:
    """WebArena-Verified's eval_result.json for one episode (its examples/agent_logs format)."""
    results = []
    facts = {f.fact_id: f for g in ep.task.rubric.groups for f in g.facts}
    for r in verdict.results:
        crit = facts[r.fact_id].criterion.benchmark if r.fact_id in facts else common_pb2.BenchmarkCriterion()
        cfg = json.loads(crit.config_json or "{}")
        ok = r.outcome == HOLDS
        results.append({
            "evaluator_name": VERIFIED_NAMES.get(crit.evaluator, crit.evaluator or r.criterion_kind),
            "status": "success" if ok else "failure", "score": 1.0 if ok else 0.0,
            "actual": ep.trajectory.final_answer if crit.evaluator.endswith("agent_response") else None,
            "expected": cfg.get("expected"),
            "assertions": [] if ok else [{"assertion_name": r.fact_id, "status": "failure", "assertion_msgs": [r.reason]}],
            "error_msg": r.reason if r.outcome == common_pb2.FACT_OUTCOME_UNDECIDABLE else None,
        })
    meta = ep.task.metadata
    tid = meta.get("benchmark_task_id", ep.task.task_id)
    return {"task_id": int(tid) if tid.isdigit() else tid,
            "intent_template_id": ep.task.template_id.rpartition("/")[2] or None,
            "sites": [s for s in meta.get("sites", "").split(",") if s],
            "task_revision": int(meta["revision"]) if meta.get("revision", "").isdigit() else None,
            "status": "success" if verdict.passed else "failure", "score": 1.0 if verdict.passed else 0.0,
            "evaluators_results": results, "webenv_judge_version": verdict.judge_version}


def mind2web_result(ep: collector_pb2.StoredEpisode) -> dict[str, Any]:
    """Online-Mind2Web's result.json (schema online-mind2web-v2) for one episode; screenshots are not written."""
    history = []
    for s in ep.trajectory.steps:
        action = s.action_text or (format_action(s.action) if s.action.WhichOneof("kind") else "")
        history.append({"step": s.step_index, "screenshot": None, "url": s.observation.url, "action": action,
                        "action_status": "FAILED" if s.last_action_error else "SUCCESS", "thought": s.raw_output or None})
    meta = ep.task.metadata
    return {"schema_version": "online-mind2web-v2", "task": ep.task.instruction,
            "task_id": meta.get("benchmark_task_id", ep.task.task_id), "agent_final_answer": ep.trajectory.final_answer,
            "reference_length": int(meta["reference_length"]) if meta.get("reference_length", "").isdigit() else None,
            "action_history": history}


def webvoyager_messages(ep: collector_pb2.StoredEpisode) -> list[dict[str, str]]:
    """WebVoyager's interact_messages.json: the task, then per step the page (its text) and the agent's reply."""
    messages = [{"role": "user", "content": f"Now given a task: {ep.task.instruction}  Please interact with "
                                            f"{ep.task.start_url} and get the answer."}]
    for s in ep.trajectory.steps:
        obs = s.observation
        messages.append({"role": "user", "content": f"Observation: {obs.url}\n{(obs.axtree or obs.markdown)[:4000]}"})
        action = s.action_text or (format_action(s.action) if s.action.WhichOneof("kind") else "")
        messages.append({"role": "assistant", "content": s.raw_output or f"Action: {action}"})
    if ep.trajectory.final_answer:
        messages.append({"role": "assistant", "content": f"Action: ANSWER; {ep.trajectory.final_answer}"})
    return messages


def write_authors_formats(out: Path, ep: collector_pb2.StoredEpisode, verdict: common_pb2.Verdict) -> str:
    """The episode's result in its benchmark's own format under ``out``; the path written, or "" for none."""
    bench = ep.task.metadata.get("benchmark", "")
    tid = _safe(ep.task.metadata.get("benchmark_task_id", ep.task.task_id))
    if bench == "webarena-verified":
        folder = out / bench / tid
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "eval_result.json").write_text(json.dumps(verified_eval_result(ep, verdict), indent=2) + "\n")
        (folder / "agent_response.json").write_text(ep.trajectory.final_answer + "\n")
        return str(folder / "eval_result.json")
    if bench == "online-mind2web":
        folder = out / bench / tid
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "result.json").write_text(json.dumps(mind2web_result(ep), indent=2, ensure_ascii=False) + "\n")
        return str(folder / "result.json")
    if bench == "webvoyager":
        folder = out / bench / f"task{tid}"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "interact_messages.json").write_text(json.dumps(webvoyager_messages(ep), indent=2, ensure_ascii=False) + "\n")
        return str(folder / "interact_messages.json")
    return ""


def rescore(
    run_id: str = typer.Argument(..., help="The stored run to re-grade."),
    out: Path = typer.Option(None, help="Write rescore.json and the benchmarks' own result files in this folder."),
    allow_llm: bool = typer.Option(False, help="Let the judge grade LLM-judged facts (its backend must be set)."),
    limit: int = typer.Option(0, help="Episodes at most (0 = all)."),
    collector: str = typer.Option(None, help="CollectorService address."),
    judge: str = typer.Option(None, help="JudgeService address."),
) -> None:
    """Re-grade a stored run with the judge as it is now, without a browser."""
    if limit < 0:
        raise typer.BadParameter("must be >= 0", param_hint="--limit")
    store = collector_pb2_grpc.CollectorServiceStub(make_sync_channel(address("collector", collector)))
    grader = judge_pb2_grpc.JudgeServiceStub(make_sync_channel(address("judge", judge)))
    options = judge_pb2.JudgeOptions(no_cache=True, allow_llm=allow_llm)
    rows, written = [], 0
    counts = {"episodes": 0, "regraded": 0, "same": 0, "now_passed": 0, "now_failed": 0, "facts_changed": 0}
    try:
        req = collector_pb2.ReadEpisodesRequest(run_ids=[run_id], limit=limit,
                                                filter=collector_pb2.ExportFilter(include_errored=True))
        for resp in store.ReadEpisodes(req, timeout=600):
            ep = resp.episode
            counts["episodes"] += 1
            if not len(ep.task.rubric.groups) or not ep.HasField("verdict"):
                continue  # a crawl episode, or one that errored before it was graded
            try:
                new = grader.Evaluate(judge_pb2.EvaluateRequest(task=ep.task, trajectory=ep.trajectory, options=options),
                                      timeout=120).verdict
            except grpc.RpcError as exc:  # the judge refuses the task: say which
                console.print(f"[red]error[/red] task {ep.task.task_id} (episode {ep.episode_id}): {exc.code().name}: "
                              f"{errors.from_rpc_error(exc).message}", markup=False, highlight=False)
                raise typer.Exit(1) from None
            counts["regraded"] += 1
            old_outcomes = {r.fact_id: r.outcome for r in ep.verdict.results}
            changed = [r.fact_id for r in new.results if old_outcomes.get(r.fact_id) != r.outcome]
            counts["facts_changed"] += len(changed)
            if new.passed == ep.verdict.passed:
                counts["same"] += 1
            else:
                counts["now_passed" if new.passed else "now_failed"] += 1
            path = write_authors_formats(out, ep, new) if out is not None else ""
            written += bool(path)
            rows.append({"episode_id": ep.episode_id, "task_id": ep.task.task_id, "passed_before": ep.verdict.passed,
                         "passed_now": new.passed, "judge_before": ep.verdict.judge_version, "judge_now": new.judge_version,
                         "facts_changed": changed, "result_file": path})
    except grpc.RpcError as exc:
        raise fail(exc) from None
    if counts["episodes"] == 0:
        console.print(f"[red]error[/red] run {run_id!r} has no stored episodes")
        raise typer.Exit(1)
    t = Table(title=f"run {run_id}: re-graded", box=box.SIMPLE_HEAD, pad_edge=False)
    for col in counts:
        t.add_column(col.replace("_", " "), justify="right")
    t.add_row(*(str(v) for v in counts.values()))
    console.print(t)
    versions = sorted({(r["judge_before"], r["judge_now"]) for r in rows})
    for before, now in versions[:5]:
        console.print(f"judge {before or '?'} -> {now}")
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        (out / "rescore.json").write_text(json.dumps({"run_id": run_id, **counts, "episodes_detail": rows}, indent=2) + "\n")
        console.print(f"rescore.json and {written} result files in the benchmarks' formats written to {out}")

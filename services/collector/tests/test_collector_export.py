"""Exports read back with pyarrow, datasets and json; filters and world-model transitions."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import datasets
import grpc
import pyarrow.parquet as pq
import pytest
from webenv.llm.tinymodel import DEFAULT_TEXTS, build_tiny_model
from webenv.testing import assert_grounded
from webenv.v1 import collector_pb2, common_pb2

TRANSITION_KEYS = {
    "episode_id", "step_index", "site", "split", "format", "instruction", "url", "state", "action_text",
    "next_url", "next_state", "env_kind",
}  # fmt: skip


def read_jsonl(path: str) -> list[dict]:
    return [json.loads(x) for x in Path(path).read_text().splitlines()]


@pytest.fixture
async def finished_run(stub, watch, world):
    spec = collector_pb2.RunSpec(
        policy="random", repeats=2, seed=9, concurrency=8,
        horizons=collector_pb2.Horizons(easy=3, medium=3, hard=3),
        observation_spec=common_pb2.ObservationSpec(formats=[common_pb2.OBSERVATION_FORMAT_AXTREE, common_pb2.OBSERVATION_FORMAT_HTML]),
    )
    run = (await stub.StartRun(collector_pb2.StartRunRequest(spec=spec))).run
    oracle = (await stub.StartRun(collector_pb2.StartRunRequest(spec=collector_pb2.RunSpec(policy="oracle", seed=2)))).run
    await watch(stub, run.run_id)
    await watch(stub, oracle.run_id)
    return run.run_id, oracle.run_id


async def export(stub, run_id, fmt, dest, **kw):
    return await stub.ExportRun(collector_pb2.ExportRunRequest(run_id=run_id, format=fmt, destination=str(dest), **kw))


async def test_parquet_and_filters(stub, finished_run, world, tmp_path):
    run_id, _ = finished_run
    r = await export(stub, run_id, collector_pb2.EXPORT_FORMAT_PARQUET, tmp_path / "all")
    eps = pq.read_table(r.paths[0])
    st = pq.read_table(r.paths[1])
    assert eps.num_rows == r.episodes == 2 * len(world.tasks)
    assert st.num_rows == r.steps == 3 * eps.num_rows
    assert set(st.column("episode_id").to_pylist()) == set(eps.column("episode_id").to_pylist())
    assert all(st.column("html").to_pylist())  # both produced formats kept

    test_only = await export(stub, run_id, collector_pb2.EXPORT_FORMAT_PARQUET, tmp_path / "test",
                             filter=collector_pb2.ExportFilter(split=common_pb2.SPLIT_TEST))
    splits = set(pq.read_table(test_only.paths[0]).column("split").to_pylist())
    assert splits == {"test"} and 0 < test_only.episodes < r.episodes

    crawl = await export(stub, run_id, collector_pb2.EXPORT_FORMAT_PARQUET, tmp_path / "crawl",
                         filter=collector_pb2.ExportFilter(level=collector_pb2.COLLECTION_LEVEL_RANDOM_CRAWL))
    tasks = await export(stub, run_id, collector_pb2.EXPORT_FORMAT_PARQUET, tmp_path / "tasks",
                         filter=collector_pb2.ExportFilter(level=collector_pb2.COLLECTION_LEVEL_TASK_ORIENTED))
    assert crawl.episodes == 0 and tasks.episodes == r.episodes

    no_rep = await export(stub, run_id, collector_pb2.EXPORT_FORMAT_PARQUET, tmp_path / "norep",
                          filter=collector_pb2.ExportFilter(drop_repeated=True))
    kept = pq.read_table(no_rep.paths[1])
    assert 0 < kept.num_rows < st.num_rows
    assert set(kept.column("repeated_state").to_pylist()) == {0}


async def test_passed_filter_across_runs(stub, finished_run, world, tmp_path):
    passed = await export(stub, "", collector_pb2.EXPORT_FORMAT_PARQUET, tmp_path / "p",
                          filter=collector_pb2.ExportFilter(passed=True))
    failed = await export(stub, "", collector_pb2.EXPORT_FORMAT_PARQUET, tmp_path / "f",
                          filter=collector_pb2.ExportFilter(passed=False))
    assert passed.episodes == len(world.tasks)  # the oracle run's episodes
    assert failed.episodes == 2 * len(world.tasks)  # the random run never answers
    assert set(pq.read_table(passed.paths[0]).column("passed").to_pylist()) == {1}


async def test_hf_dataset(stub, finished_run, tmp_path):
    run_id, _ = finished_run
    r = await export(stub, run_id, collector_pb2.EXPORT_FORMAT_HF_DATASET, tmp_path / "hf")
    dd = datasets.load_from_disk(r.paths[0])
    assert set(dd.keys()) == {"episodes", "steps"}
    assert dd["episodes"].num_rows == r.episodes and dd["steps"].num_rows == r.steps
    assert dd["steps"][0]["episode_id"].startswith(run_id)


async def test_messages_is_trls_conversational_format(stub, finished_run, world, tmp_path):
    _, oracle_id = finished_run
    r = await export(stub, oracle_id, collector_pb2.EXPORT_FORMAT_MESSAGES, tmp_path / "m")
    dd = datasets.load_from_disk(r.paths[0])
    assert set(dd) <= {"train", "validation", "test"} and sum(d.num_rows for d in dd.values()) == r.episodes
    rows = [row for d in dd.values() for row in d]
    assert {row["task_id"] for row in rows} == {t.task_id for t in world.tasks}
    for row in rows:
        msgs = row["messages"]
        # user (task + first page), then assistant action / user observation turns, ending on the last action
        assert [m["role"] for m in msgs] == ["user"] + ["assistant", "user"] * (len(row["rewards"]) - 1) + ["assistant"]
        assert msgs[0]["content"].startswith("Task: ") and "URL: http://" in msgs[0]["content"]
        assert msgs[-1]["content"].startswith("answer(") and row["passed"] and row["score"] == 1.0
        assert row["judge_version"] == "test-judge-1" and row["webenv_version"] and row["rubric_id"]
        # every element action names the element id the user turn before it shows (click(2)), never the
        # demonstration's selector (click("#next"))
        assert assert_grounded([(m["content"], n["content"]) for m, n in zip(msgs, msgs[1:], strict=False)
                                if n["role"] == "assistant"])
    # the run stored no screenshots: no image columns (TRL would take the dataset for a vision one)
    assert all(not {"images", "image_turns"} & set(d.column_names) for d in dd.values())
    with pytest.raises(grpc.aio.AioRpcError) as ei:
        await export(stub, oracle_id, collector_pb2.EXPORT_FORMAT_MESSAGES, tmp_path / "x",
                     filter=collector_pb2.ExportFilter(drop_repeated=True))
    assert ei.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "filter.drop_repeated" in ei.value.details()
    assert not (tmp_path / "x").exists()


async def test_messages_train_a_text_model_in_trls_sfttrainer(stub, finished_run, tmp_path):
    """The README's recipe as written: the export, loaded with load_from_disk, trains a text model in TRL's
    SFTTrainer (2 optimizer steps of a tiny model built here)."""
    from trl import SFTConfig, SFTTrainer

    _, oracle_id = finished_run
    r = await export(stub, oracle_id, collector_pb2.EXPORT_FORMAT_MESSAGES, tmp_path / "m")
    train = datasets.load_from_disk(str(Path(r.paths[0])))["train"]
    model = build_tiny_model(tmp_path / "lm", DEFAULT_TEXTS, vocab_size=400, hidden=32, layers=1, heads=2)
    args = SFTConfig(output_dir=str(tmp_path / "out"), max_steps=2, per_device_train_batch_size=2, max_length=256,
                     report_to=[], save_strategy="no", use_cpu=True, logging_steps=1, dataloader_num_workers=0)
    trainer = SFTTrainer(model=str(model), args=args, train_dataset=train)
    result = await asyncio.to_thread(trainer.train)
    assert result.global_step == 2 and result.training_loss > 0


async def test_jsonl_nests_steps(stub, finished_run, tmp_path):
    _, oracle_id = finished_run
    r = await export(stub, oracle_id, collector_pb2.EXPORT_FORMAT_JSONL, tmp_path / "j")
    lines = read_jsonl(r.paths[0])
    assert len(lines) == r.episodes
    for ep in lines:
        assert ep["steps"] == len(ep["steps_detail"])
        assert [s["step_index"] for s in ep["steps_detail"]] == list(range(ep["steps"]))
        assert ep["steps_detail"][-1]["action_text"].startswith("answer(")


async def test_transitions(stub, finished_run, tmp_path):
    _, oracle_id = finished_run
    r = await export(stub, oracle_id, collector_pb2.EXPORT_FORMAT_TRANSITIONS, tmp_path / "t",
                     transition_format=common_pb2.OBSERVATION_FORMAT_AXTREE)
    rows = read_jsonl(r.paths[0])
    assert len(rows) == r.steps > 0
    for row in rows:
        assert set(row) == TRANSITION_KEYS
        assert row["format"] == "axtree" and row["split"] in ("train", "test")
    by_ep: dict[str, list] = {}
    for row in rows:
        by_ep.setdefault(row["episode_id"], []).append(row)
    for trs in by_ep.values():
        for a, b in zip(trs, trs[1:], strict=False):
            assert a["next_state"] == b["state"] and a["next_url"] == b["url"]
        clicks = [t for t in trs if t["action_text"].startswith("click")]
        assert all(t["state"] != t["next_state"] for t in clicks)
        assert assert_grounded([(t["state"], t["action_text"]) for t in trs])
    html = await export(stub, oracle_id, collector_pb2.EXPORT_FORMAT_TRANSITIONS, tmp_path / "th",
                        transition_format=common_pb2.OBSERVATION_FORMAT_HTML)
    assert html.steps == r.steps  # the run kept only axtree, so html states are empty but rows exist


async def test_export_root_confines_destinations(make_collector, tmp_path, watch):
    import grpc
    from webenv.v1 import collector_pb2_grpc

    root = tmp_path / "exports"
    c = await make_collector(export_root=str(root))
    async with grpc.aio.insecure_channel(c.address) as ch:
        stub = collector_pb2_grpc.CollectorServiceStub(ch)
        run = (await stub.StartRun(collector_pb2.StartRunRequest(
            spec=collector_pb2.RunSpec(policy="oracle", task_limit=2)))).run
        await watch(stub, run.run_id)
        ok = await export(stub, run.run_id, collector_pb2.EXPORT_FORMAT_PARQUET, "mine")
        assert all(p.startswith(str(root.resolve() / "mine")) for p in ok.paths)
        for bad in ("../escape", "/etc/webenv"):
            with pytest.raises(grpc.aio.AioRpcError) as ei:
                await export(stub, run.run_id, collector_pb2.EXPORT_FORMAT_PARQUET, bad)
            assert ei.value.code() == grpc.StatusCode.PERMISSION_DENIED and "destination" in ei.value.details()

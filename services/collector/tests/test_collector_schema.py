"""The schema module and the migrations agree, and every row the collector builds has exactly the schema's columns."""

from __future__ import annotations

import uuid

from webenv.collector import schema
from webenv.collector.blobs import BlobStore
from webenv.collector.episode import Context, Episode, EpisodeJob
from webenv.collector.run import run_from_row, run_row
from webenv.collector.store import Store
from webenv.v1 import collector_pb2, common_pb2


def test_the_migrations_create_the_tables_the_schema_module_describes(chdb_url):
    store = Store(chdb_url, f"s_{uuid.uuid4().hex[:8]}")
    try:
        store.migrate()  # every shipped migration, in order, into a fresh database
        tables = {r["name"]: r for r in store.query(
            "SELECT name, engine_full, sorting_key FROM system.tables WHERE database = {d:String}",
            {"d": store.database})}
        assert set(tables) == set(schema.TABLES) | {"schema_migrations"}
        for name, table in schema.TABLES.items():
            described = [(r["name"], r["type"]) for r in store.query(f"DESCRIBE TABLE {{db}}.{name}")]
            assert described == list(table.columns), name
            assert tables[name]["sorting_key"] == ", ".join(table.key), name
            assert tables[name]["engine_full"].startswith("ReplacingMergeTree(version)"), name
    finally:
        store.close()


def test_rows_have_exactly_the_schemas_columns(tmp_path):
    task = common_pb2.Task(task_id="synthetic/shop-0001/info-0", source=common_pb2.TASK_SOURCE_SYNTHETIC,
                           split=common_pb2.SPLIT_TRAIN, difficulty=common_pb2.DIFFICULTY_EASY)
    ctx = Context(peers=None, blobs=BlobStore(tmp_path), collector_id="c1", webenv_version="0.1.0")  # type: ignore[arg-type]
    spec = collector_pb2.RunSpec(policy="oracle", level=collector_pb2.COLLECTION_LEVEL_TASK_ORIENTED)
    ep = Episode(EpisodeJob("run-1", "run-1-000000", 0, task, 7, 10), spec, ctx, "127.0.0.1:1")
    ep.steps.append(common_pb2.StepRecord(step_index=0, observation=common_pb2.Observation(url="http://x/")))
    ep.mark_finished()
    rows = ep.rows(schema.version_now())
    assert set(rows) == {schema.STEPS.name, schema.EPISODES.name}
    assert [list(r) for r in rows[schema.STEPS.name]] == [schema.STEPS.names]
    assert [list(r) for r in rows[schema.EPISODES.name]] == [schema.EPISODES.names]
    episode = rows[schema.EPISODES.name][0]
    assert (episode["source"], episode["split"], episode["difficulty"], episode["level"]) == (
        "synthetic", "train", "easy", "task_oriented")

    run = collector_pb2.Run(run_id="run-1", state=collector_pb2.RUN_STATE_RUNNING, spec=spec)
    run.counts.planned = 3
    run.created_at.GetCurrentTime()
    row = run_row(run, "c1", "0.1.0")
    assert list(row) == schema.RUNS.names and row["state"] == "running"
    back = run_from_row({**row, "finished_at": schema.EPOCH})
    assert back.run_id == "run-1" and back.state == run.state and back.counts.planned == 3
    assert not back.HasField("finished_at")


def test_state_names_are_the_stored_words_of_every_run_state():
    assert schema.STATE_NAMES[collector_pb2.RUN_STATE_SUCCEEDED] == "succeeded"
    assert set(schema.STATE_VALUES) == {"unspecified", "pending", "running", "succeeded", "stopped", "failed"}
    assert all(schema.STATE_VALUES[n] == v for v, n in schema.STATE_NAMES.items())

"""Spark users read a table's whole history: ``spark.read``/``readStream`` of ``format("tidehouse")`` after
retention deleted most of the hot log equal ``tidehouse query`` of the same table (lake snapshot + hot
tail)."""

from __future__ import annotations

import time

import pyarrow as pa
import pytest

from runtime.core.errors import ErrorCode, TidehouseError
from runtime.lake.tiering import tier_table
from runtime.storage.api import CHANGE, TableMeta
from tests.lake._lakekit import ACTIVITY, CLICKS, clicks, rows_of

pytestmark = pytest.mark.spark
TRIMMED_AFTER = 1.0  # storage.retention of the project


@pytest.fixture
def project(tmp_path, monkeypatch):
    """A project whose log table ods.clicks (2 buckets) and primary-key table dws.activity were tiered and
    then trimmed by retention: their first hot offsets are far above 0."""
    from runtime.project import Project

    (tmp_path / "tidehouse.yaml").write_text(
        "storage:\n  retention: 1s\n  segment_bytes: 2048\n  fsync: false\n"
    )
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("TIDEHOUSE_HOME", raising=False)
    project = Project.open()
    store = project.store
    store.create_table(TableMeta("ods.clicks", CLICKS, buckets=2, bucket_key=("user_id",)))
    store.create_table(
        TableMeta("dws.activity", ACTIVITY, kind="primary_key", primary_key=("user_id",), buckets=2)
    )
    for seq in range(12):
        store.write("ods.clicks", clicks(40, start=40 * seq), writer="w", seq=seq)
        store.write("dws.activity", _changes(seq), writer="w", seq=seq)
        if seq % 4 == 3:
            for name in ("ods.clicks", "dws.activity"):
                tier_table(store, project.lake, name)
    time.sleep(TRIMMED_AFTER + 0.2)
    for name in ("ods.clicks", "dws.activity"):
        store.write(
            name, clicks(5, start=10_000) if name == "ods.clicks" else _changes(99), writer="w", seq=100
        )
        tier_table(store, project.lake, name)  # its maintenance trims what is tiered and old enough
        store.write(
            name, clicks(3, start=20_000) if name == "ods.clicks" else _changes(100), writer="w", seq=101
        )
    for name in ("ods.clicks", "dws.activity"):
        assert min(store.start_offsets(name)) > 0, f"{name} was not trimmed: the test proves nothing"
    project.spark()  # binds the session's tidehouse source to this project
    yield project
    project.close()


def _changes(seq: int) -> pa.Table:
    rows = [
        {"user_id": f"u{(seq * 3 + i) % 11}", "events": seq * 10 + i, "last_item": f"i{seq}", CHANGE: "+U"}
        for i in range(5)
    ]
    rows.append({"user_id": f"u{seq % 11}", "events": None, "last_item": None, CHANGE: "-D"})
    return pa.Table.from_pylist(rows, schema=ACTIVITY.append(pa.field(CHANGE, pa.string())))


def _users(table: pa.Table) -> list[dict]:
    return rows_of(table.select([c for c in table.column_names if not c.startswith("__")]))


def test_spark_read_after_retention_equals_tidehouse_query(spark, project):
    for name in ("ods.clicks", "dws.activity"):
        expected = _users(project.query(f"SELECT * FROM {name}"))
        got = spark.read.format("tidehouse").load(name)
        assert _users(got.toArrow()) == expected, name
    assert _users(spark.read.format("tidehouse").load("ods.clicks").toArrow()) == _users(
        spark.read.format("tidehouse").option("columns", "user_id,item,price,ts").load("ods.clicks").toArrow()
    )
    lake = spark.read.format("tidehouse").load("ods.clicks$lake").toArrow()
    assert lake.num_rows == sum(json_offsets(project, "ods.clicks")) and "__offset" in lake.column_names
    changelog = spark.read.format("tidehouse").load("dws.activity$changelog").toArrow()
    assert changelog.num_rows == sum(
        e - f
        for e, f in zip(
            project.store.end_offsets("dws.activity"), project.store.start_offsets("dws.activity")
        )
    )


def json_offsets(project, name: str) -> list[int]:
    from runtime.lake.state import lake_offsets

    return lake_offsets(project.lake.load(name), 2)[0]


def test_spark_stream_from_earliest_after_retention_gets_every_row_once_then_the_tail(
    spark, project, tmp_path
):
    got: dict[str, list[pa.Table]] = {"ods.clicks": [], "dws.activity": []}
    queries = []
    for name in got:
        cap = "150" if name == "ods.clicks" else "10"  # far below the primary-key snapshot's offsets
        stream = (
            spark.readStream.format("tidehouse")
            .option("startingOffsets", "earliest")
            .option("maxRowsPerTrigger", cap)
            .load(name)
        )
        queries.append(
            stream.writeStream.option("checkpointLocation", str(tmp_path / "ck" / name))
            .foreachBatch(lambda df, _id, n=name: got[n].append(df.toArrow()))
            .start()
        )
    try:
        for q in queries:
            q.processAllAvailable()
        log = pa.concat_tables(got["ods.clicks"])
        assert _users(log) == _users(project.query("SELECT * FROM ods.clicks"))  # every row exactly once
        for b, end in enumerate(project.store.end_offsets("ods.clicks")):
            mine = sorted(
                o
                for o, k in zip(log.column("__offset").to_pylist(), log.column("__bucket").to_pylist())
                if k == b
            )
            assert mine == list(range(end)), f"bucket {b}: offsets not dense from 0"
        assert _state(got["dws.activity"]) == _users(project.query("SELECT * FROM dws.activity"))
        # maxRowsPerTrigger caps the first batch below the snapshot's offsets, but the state is never split:
        # the first batch is exactly the lake snapshot's state, as +I rows without offsets
        first = got["dws.activity"][0]
        assert (
            set(first.column(CHANGE).to_pylist()) == {"+I"}
            and first.column("__offset").null_count == first.num_rows
        )
        assert _users(first) == _users(project.query("SELECT * FROM dws.activity$lake"))
        # the tail: new rows after the bootstrap arrive as they are written
        project.store.write("ods.clicks", clicks(7, start=30_000), writer="w", seq=200)
        project.store.write("dws.activity", _changes(200), writer="w", seq=200)
        for q in queries:
            q.processAllAvailable()
        assert _users(pa.concat_tables(got["ods.clicks"])) == _users(
            project.query("SELECT * FROM ods.clicks")
        )
        assert _state(got["dws.activity"]) == _users(project.query("SELECT * FROM dws.activity"))
    finally:
        for q in queries:
            q.stop()


def _state(batches: list[pa.Table]) -> list[dict]:
    """Replay a changelog stream into the state it describes."""
    state: dict[str, dict] = {}
    for batch in batches:
        for row in batch.to_pylist():
            if row[CHANGE] in ("-U", "-D"):
                state.pop(row["user_id"], None)
            else:
                state[row["user_id"]] = {k: v for k, v in row.items() if not k.startswith("__")}
    return rows_of(pa.Table.from_pylist(list(state.values()), schema=ACTIVITY)) if state else []


def test_a_stream_of_a_rebuilt_table_is_an_error_naming_it(spark, project, tmp_path):
    seen: list[int] = []
    stream = spark.readStream.format("tidehouse").load("ods.clicks")
    query = (
        stream.writeStream.option("checkpointLocation", str(tmp_path / "ck"))
        .foreachBatch(lambda df, _id: seen.append(df.count()))
        .start()
    )
    query.processAllAvailable()
    query.stop()
    project.store.drop_table("ods.clicks")  # what --full-refresh does to the hot table
    project.store.create_table(TableMeta("ods.clicks", CLICKS, buckets=2, bucket_key=("user_id",)))
    project.store.write("ods.clicks", clicks(3), writer="w", seq=0)
    query = (
        stream.writeStream.option("checkpointLocation", str(tmp_path / "ck"))
        .foreachBatch(lambda df, _id: seen.append(df.count()))
        .start()
    )
    with pytest.raises(Exception) as info:
        query.processAllAvailable()
    assert "was rebuilt" in str(info.value) and "TH405" in str(info.value)
    query.stop()


def test_a_bare_root_has_no_lake_and_says_so(spark, project):
    with pytest.raises(Exception) as info:
        spark.read.format("tidehouse").option("root", project.config.storage_root).load("ods.clicks").count()
    assert "STORAGE_RANGE" in str(info.value) or "TH308" in str(info.value)
    with pytest.raises(TidehouseError) as err:
        list(project.store.read("ods.clicks", 0, 0))
    assert err.value.code is ErrorCode.STORAGE_RANGE


def test_filters_prune_buckets_and_lake_files_without_changing_results(spark, project):
    from pyspark.sql import datasource as ds

    from runtime.spark.datasource import BatchReader
    from runtime.spark.options import SourceOptions
    from runtime.storage.api import bucket_of

    for name, where in (
        ("ods.clicks", "user_id = 'u3'"),
        ("ods.clicks", "user_id IN ('u1', 'u5') AND item > 200"),
        ("dws.activity", "user_id = 'u4'"),
        ("ods.clicks", "price < 3.0"),
    ):
        got = spark.read.format("tidehouse").load(name).where(where).toArrow()
        expected = project.query(f"SELECT * FROM {name} WHERE {where}")
        assert _users(got) == _users(expected), (name, where)
    opts = SourceOptions.parse(
        {"path": "ods.clicks", "project": str(project.config.project_dir), "home": str(project.config.home)}
    )
    schema = spark.read.format("tidehouse").load("ods.clicks").schema
    reader = BatchReader(opts, schema)
    pushed = [ds.EqualTo(("user_id",), "u3"), ds.GreaterThan(("item",), 10), ds.EqualTo(("nope",), 1)]
    assert reader.pushFilters(pushed) == pushed  # Spark keeps applying every one of them
    wanted = bucket_of(pa.table({"user_id": ["u3"]}), ["user_id"], 2)[0].as_py()
    assert reader.buckets == [wanted]
    assert {b for part in reader.partitions() for b, _, _ in part.ranges} == {wanted}

"""The bridge on the shared SparkSession and the real embedded store: copies, aggregations, lookups, types."""

from __future__ import annotations

import datetime as dt
import decimal
import random

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from runtime.spark.types import ddl_to_arrow
from runtime.spark.writer import write_batch
from runtime.storage.api import TableMeta
from tests.spark._sparkkit import ALL_TYPES_DDL, read_stream, read_table, sorted_rows, start_writer, wait_for

pytestmark = pytest.mark.spark

EVENTS = pa.schema([("user", pa.string()), ("amount", pa.int64()), ("ts", pa.timestamp("us", tz="UTC"))])


def _events(rng: random.Random, n: int, users: int = 7) -> pa.Table:
    base = dt.datetime(2024, 1, 1, tzinfo=dt.timezone.utc)
    return pa.table(
        {
            "user": [f"u{rng.randrange(users)}" for _ in range(n)],
            "amount": [rng.randrange(-5, 100) for _ in range(n)],
            "ts": [base + dt.timedelta(seconds=rng.randrange(86400)) for _ in range(n)],
        },
        schema=EVENTS,
    )


def _ends(store, table):
    return sum(store.end_offsets(table))


def test_streaming_copy_of_a_log_table_equals_its_input(spark, store, root, tmp_path, seed):
    rng = random.Random(seed)
    store.create_table(TableMeta("ods.events", EVENTS, buckets=2, bucket_key=("user",)))
    store.create_table(TableMeta("dwd.events", EVENTS, buckets=3, bucket_key=("user",)))
    written = [_events(rng, rng.randrange(1, 400)) for _ in range(3)]
    store.write("ods.events", written[0], writer="src", seq=0)

    query = start_writer(read_stream(spark, root, "ods.events"), root, "dwd.events", tmp_path / "ck")
    try:
        for seq, batch in enumerate(written[1:], start=1):
            done = sum(t.num_rows for t in written[:seq])
            wait_for(lambda done=done: _ends(store, "dwd.events") == done, what="copy")
            store.write("ods.events", batch, writer="src", seq=seq)
        wait_for(lambda: _ends(store, "dwd.events") == sum(t.num_rows for t in written), what="last copy")
        assert query.exception() is None
    finally:
        query.stop()
    expected = pa.concat_tables(written)
    assert sorted_rows(store.scan("dwd.events")) == sorted_rows(expected)
    # rows are routed by the bucket function: every user lives in exactly one downstream bucket
    seen = {}
    for bucket in range(3):
        for batch in store.read("dwd.events", bucket, 0):
            for user in batch.column("user").to_pylist():
                assert seen.setdefault(user, bucket) == bucket
    # every downstream batch carries the origin of its input (the upstream commit time, at the first layer)
    info = store.batch_info("dwd.events", seen[written[-1].column("user")[0].as_py()])
    assert info.origin_ts is not None and info.origin_ts <= info.commit_ts


def test_aggregation_into_a_primary_key_table_equals_the_batch_aggregation(
    spark, store, root, tmp_path, seed
):
    from pyspark.sql import functions as F

    rng = random.Random(seed)
    store.create_table(TableMeta("dwd.pay", EVENTS, buckets=2))
    agg_schema = pa.schema([("user", pa.string()), ("n", pa.int64()), ("total", pa.int64())])
    store.create_table(TableMeta("dws.pay", agg_schema, kind="primary_key", primary_key=("user",), buckets=2))
    checkpoint = tmp_path / "agg"
    for seq in range(2):  # two runs, the second resuming the aggregation state from the checkpoint
        store.write("dwd.pay", _events(rng, rng.randrange(50, 300)), writer="src", seq=seq)
        stream = read_stream(spark, root, "dwd.pay", columns="user,amount")
        agg = stream.groupBy("user").agg(F.count("*").alias("n"), F.sum("amount").alias("total"))
        start_writer(
            agg, root, "dws.pay", checkpoint, output_mode="update", available_now=True
        ).awaitTermination()

    batch = (
        read_table(spark, root, "dwd.pay")
        .groupBy("user")
        .agg(F.count("*").alias("n"), F.sum("amount").alias("total"))
        .toArrow()
    )
    assert sorted_rows(store.scan("dws.pay")) == sorted_rows(batch)
    # the batch reader of a primary-key table gives the current state, with +I rows
    state = read_table(spark, root, "dws.pay").toArrow()
    assert sorted_rows(state, ["user", "n", "total"]) == sorted_rows(batch)
    assert set(state.column("__change").to_pylist()) == {"+I"}

    # its changelog streams with row kinds, and a writer passes __change through: a copy of the changelog
    # into another primary-key table reproduces the state, deletes included
    gone = min(batch.column("user").to_pylist())
    store.write("dws.pay", pa.table({"user": [gone], "__change": ["-D"]}), writer="admin", seq=0)
    store.create_table(TableMeta("ads.pay", agg_schema, kind="primary_key", primary_key=("user",)))
    start_writer(
        read_stream(spark, root, "dws.pay"), root, "ads.pay", tmp_path / "cl", available_now=True
    ).awaitTermination()
    kinds = {
        k
        for b in range(2)
        for batch_ in store.read("dws.pay", b, 0)
        for k in batch_.column("__change").to_pylist()
    }
    assert {"+I", "-U", "+U", "-D"} <= kinds
    assert sorted_rows(store.scan("ads.pay")) == sorted_rows(store.scan("dws.pay"))
    assert gone not in store.scan("ads.pay").column("user").to_pylist()


def test_unknown_table_is_a_tidehouse_error(spark, store, root):
    with pytest.raises(Exception) as info:
        read_table(spark, root, "ods.missing").collect()
    assert "TH300" in str(info.value)


def test_lookup_join_sees_updates_made_after_the_query_started(spark, store, root, tmp_path):
    dim_schema = pa.schema([("user", pa.string()), ("tier", pa.string())])
    store.create_table(TableMeta("dws.users", dim_schema, kind="primary_key", primary_key=("user",)))
    store.create_table(TableMeta("ods.clicks", pa.schema([("user", pa.string()), ("n", pa.int64())])))
    out_schema = pa.schema([("user", pa.string()), ("n", pa.int64()), ("tier", pa.string())])
    store.create_table(TableMeta("dwd.clicks", out_schema))
    store.write(
        "dws.users", pa.table({"user": ["a", "b"], "tier": ["bronze", "silver"]}), writer="dim", seq=0
    )

    clicks = read_stream(spark, root, "ods.clicks", systemColumns="false")
    users = read_table(spark, root, "dws.users", systemColumns="false")
    query = start_writer(clicks.join(users, "user", "left"), root, "dwd.clicks", tmp_path / "ck")
    try:
        store.write("ods.clicks", pa.table({"user": ["a", "b"], "n": [1, 2]}), writer="src", seq=0)
        wait_for(lambda: _ends(store, "dwd.clicks") == 2, what="first clicks")
        store.write("dws.users", pa.table({"user": ["a", "c"], "tier": ["gold", "new"]}), writer="dim", seq=1)
        store.write("ods.clicks", pa.table({"user": ["a", "c"], "n": [3, 4]}), writer="src", seq=1)
        wait_for(lambda: _ends(store, "dwd.clicks") == 4, what="second clicks")
    finally:
        query.stop()
    assert sorted_rows(store.scan("dwd.clicks")) == sorted(
        [("a", 1, "bronze"), ("b", 2, "silver"), ("a", 3, "gold"), ("c", 4, "new")], key=repr
    )


def _all_types_rows() -> pa.Table:
    schema = ddl_to_arrow(ALL_TYPES_DDL)
    utc = dt.timezone.utc
    rows = [
        {
            "s": "é✓",
            "i8": -128,
            "i16": 32767,
            "i32": -(2**31),
            "i64": 2**63 - 1,
            "f": 1.5,
            "d": -2.25,
            "dec": decimal.Decimal("123456789.123"),
            "b": True,
            "dt": dt.date(1970, 1, 2),
            "ts": dt.datetime(2024, 2, 29, 23, 59, 59, 999999, tzinfo=utc),
            "ntz": dt.datetime(1999, 12, 31, 1, 2, 3),
            "bin": b"\x00\xff",
            "arr": [1, None, 3],
            "m": [("k", 0.5)],
            "st": {"x": 1, "y": ["p", None], "z": [(1, dt.date(2000, 1, 1))]},
        },
        {name: None for name in schema.names},
    ]
    return pa.Table.from_pylist(rows, schema=schema)


def test_every_type_round_trips_through_spark(spark, store, root, tmp_path):
    from runtime.spark.types import arrow_to_spark, spark_to_arrow

    data = _all_types_rows()
    # the mapping itself: Spark takes the Arrow data with exactly the mapped schema and gives it back
    df = spark.createDataFrame(data, schema=arrow_to_spark(data.schema))
    assert spark_to_arrow(df.schema) == data.schema
    back = df.toArrow()
    assert back.to_pylist() == data.to_pylist()
    assert [f.type for f in back.schema] == [f.type for f in data.schema]

    # through the store: what it holds (it stores every timestamp as timestamp[us, UTC]) comes back unchanged
    store.create_table(TableMeta("ods.types", data.schema))
    store.create_table(TableMeta("dwd.types", data.schema))
    store.write("ods.types", data, writer="w", seq=0)
    stored = store.scan("ods.types")
    read_back = read_table(spark, root, "ods.types", systemColumns="false").toArrow()
    assert read_back.to_pylist() == stored.to_pylist()
    assert sorted_rows(stored, ["i64", "s", "dec", "bin"]) == sorted_rows(data, ["i64", "s", "dec", "bin"])
    start_writer(
        read_stream(spark, root, "ods.types"), root, "dwd.types", tmp_path / "ck", available_now=True
    ).awaitTermination()
    assert store.scan("dwd.types").to_pylist() == stored.to_pylist()


def test_projection_admission_control_and_starting_offsets(spark, store, root, tmp_path, seed):
    rng = random.Random(seed)
    store.create_table(TableMeta("ods.big", EVENTS, buckets=2, bucket_key=("user",)))
    for seq in range(4):
        store.write("ods.big", _events(rng, 250), writer="src", seq=seq)
    ends = store.end_offsets("ods.big")

    df = read_stream(
        spark,
        root,
        "ods.big",
        columns="amount",
        maxRowsPerTrigger=300,
        startingOffsets=f'{{"0": {ends[0] // 2}}}',
    )
    assert df.columns == ["amount", "__offset", "__bucket", "__ts"]
    query = (
        df.writeStream.format("memory")
        .queryName("big_proj")
        .trigger(availableNow=True)
        .option("checkpointLocation", str(tmp_path / "ck"))
        .start()
    )
    query.awaitTermination()
    rows = [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]]
    expected = ends[0] - ends[0] // 2 + ends[1]
    assert sum(rows) == expected and max(rows) <= 300 and len(rows) >= expected // 300
    got = spark.sql(
        "SELECT __bucket, min(__offset), max(__offset), count(*) FROM big_proj GROUP BY 1 ORDER BY 1"
    )
    assert [tuple(r) for r in got.collect()] == [
        (0, ends[0] // 2, ends[0] - 1, ends[0] - ends[0] // 2),
        (1, 0, ends[1] - 1, ends[1]),
    ]


def test_write_batch_is_idempotent_and_checks_columns(spark, store, root):
    from runtime.core.errors import ErrorCode, TidehouseError

    store.create_table(TableMeta("ods.w", pa.schema([("k", pa.string()), ("v", pa.int64())])))
    df = spark.createDataFrame([("a", 1), ("b", 2)], "k string, v int")  # int is widened to bigint
    first = write_batch(store, "ods.w", df, "w1", 7)
    again = write_batch(store, "ods.w", df, "w1", 7)
    assert first.rows == 2 and again.skipped and again.rows == 0
    assert store.scan("ods.w").column("v").to_pylist() == [1, 2]
    assert write_batch(store, "ods.w", df.limit(0), "w1", 8).rows == 0
    with pytest.raises(TidehouseError) as info:
        write_batch(store, "ods.w", spark.createDataFrame([("a", 1)], "k string, extra int"), "w1", 9)
    assert info.value.code == ErrorCode.WRITE_INVALID
    # a batch that cannot be converted fails before the store sees it: nothing becomes visible
    with pytest.raises(TidehouseError) as info:
        write_batch(store, "ods.w", pa.table({"k": ["c"], "v": ["not a number"]}), "w1", 9)
    assert info.value.code == ErrorCode.WRITE_INVALID
    assert pc.sum(store.scan("ods.w").column("v")).as_py() == 3 and store.last_seq("ods.w", "w1") == 7

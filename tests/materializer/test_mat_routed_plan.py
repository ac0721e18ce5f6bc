"""The executor path's routing plan (materializer.routing._routed) on the shared Spark session: which rows
each write task gets and in which order, from a batch of several partitions, without a store."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from materializer.routing import ORDER, SEQ, _routed
from runtime.storage.api import BUCKET

ROWS = 40


def _batch(spark, *, deletes: bool = False):
    """``ROWS`` rows in 4 partitions, in batch order ``pos``; keys repeat across partitions (the last upsert
    of a key must win); with ``deletes`` every 3rd row is a delete (``__order`` 0, the others 1)."""
    rows = [(i % 7, i, 0 if deletes and i % 3 == 0 else 1) for i in range(ROWS)]
    df = spark.createDataFrame(spark.sparkContext.parallelize(rows, 4), "k int, pos int, __order int")
    return df if deletes else df.drop(ORDER)


def _meta(buckets: int, primary_key: bool):
    return SimpleNamespace(buckets=buckets, is_primary_key=primary_key, effective_bucket_key=("k",))


def _tasks(df) -> list[list[tuple]]:
    """The rows each write task gets, in its order."""
    return [[tuple(r) for r in part] for part in df.rdd.glom().collect()]


@pytest.mark.spark
def test_a_one_bucket_log_table_is_merged_into_one_task_without_columns_added(spark):
    batch = _batch(spark)
    assert batch.rdd.getNumPartitions() == 4
    routed = _routed(batch, _meta(1, False), 4, False)
    assert routed.columns == ["k", "pos"]
    (task,) = _tasks(routed)
    assert sorted(pos for _, pos in task) == list(range(ROWS))


@pytest.mark.spark
@pytest.mark.parametrize("deletes_first", [False, True])
def test_a_one_bucket_primary_key_table_gets_its_rows_in_batch_order_in_one_task(spark, deletes_first):
    batch = _batch(spark, deletes=deletes_first)
    routed = _routed(batch, _meta(1, True), 4, deletes_first)
    assert BUCKET not in routed.columns and SEQ in routed.columns
    (task,) = _tasks(routed)
    got = [(row[2] if deletes_first else 1, row[1]) for row in task]  # (order, pos)
    assert got == sorted(got)  # deletes first, then batch order: the last upsert of a key last
    assert sorted(pos for _, pos in got) == list(range(ROWS))


@pytest.mark.spark
def test_a_table_of_several_buckets_gets_one_task_per_bucket_and_no_bucket_column(spark):
    batch = _batch(spark)
    routed = _routed(batch, _meta(3, True), 3, False)
    assert BUCKET not in routed.columns and SEQ in routed.columns
    tasks = [task for task in _tasks(routed) if task]
    keys = [{row[0] for row in task} for task in tasks]
    assert sum(len(task) for task in tasks) == ROWS
    assert all(not a & b for i, a in enumerate(keys) for b in keys[i + 1 :])  # a key in one task only
    for task in tasks:  # each key's rows in batch order
        for key in {row[0] for row in task}:
            positions = [row[1] for row in task if row[0] == key]
            assert positions == sorted(positions)

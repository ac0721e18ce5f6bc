"""Fixtures of the Spark bridge tests: a real hot store per test and helpers to drive streaming queries."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pytest

from runtime.spark.datasource import cached_store
from runtime.spark.writer import foreach_batch_writer


@pytest.fixture
def root(tmp_path) -> str:
    return str(tmp_path / "hot")


@pytest.fixture
def store(root):
    """The real embedded store, the same instance the in-process ``foreachBatch`` writers use."""
    return cached_store(root)


def wait_for(predicate: Callable[[], bool], timeout: float = 90.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def read_stream(spark, root: str, table: str, **options):
    reader = spark.readStream.format("tidehouse").option("root", root).option("table", table)
    for key, value in options.items():
        reader = reader.option(key, str(value))
    return reader.load()


def read_table(spark, root: str, table: str, **options):
    reader = spark.read.format("tidehouse").option("root", root).option("table", table)
    for key, value in options.items():
        reader = reader.option(key, str(value))
    return reader.load()


def start_writer(df, root: str, table: str, checkpoint: Path, *, writer_id: str | None = None,
                 output_mode: str = "append", available_now: bool = False, origin: bool = True):
    """Start ``df`` writing into ``table`` through the exactly-once ``foreachBatch`` writer."""
    fn = foreach_batch_writer(root, table, writer_id or f"{table}@{checkpoint}",
                              checkpoint=str(checkpoint) if origin else None)
    writer = df.writeStream.foreachBatch(fn).outputMode(output_mode).option("checkpointLocation", str(checkpoint))
    writer = writer.trigger(availableNow=True) if available_now else writer.trigger(processingTime="0 seconds")
    return writer.start()


def sorted_rows(table: pa.Table, columns: list[str] | None = None) -> list[tuple]:
    """Rows of an Arrow table (user columns only) as sorted tuples: equality ignoring order."""
    columns = columns or [c for c in table.column_names if not c.startswith("__")]
    data = table.select(columns).to_pylist()
    return sorted((tuple(r[c] for c in columns) for r in data), key=repr)

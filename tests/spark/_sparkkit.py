"""What the Spark bridge tests share: stream/table readers, a writer, waiting, sorted rows, the type table."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa

from runtime.spark.writer import foreach_batch_writer


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


def start_writer(
    df,
    root: str,
    table: str,
    checkpoint: Path,
    *,
    writer_id: str | None = None,
    output_mode: str = "append",
    available_now: bool = False,
    origin: bool = True,
):
    """Start ``df`` writing into ``table`` through the exactly-once ``foreachBatch`` writer."""
    fn = foreach_batch_writer(
        root, table, writer_id or f"{table}@{checkpoint}", checkpoint=str(checkpoint) if origin else None
    )
    writer = (
        df.writeStream.foreachBatch(fn).outputMode(output_mode).option("checkpointLocation", str(checkpoint))
    )
    writer = (
        writer.trigger(availableNow=True) if available_now else writer.trigger(processingTime="0 seconds")
    )
    return writer.start()


def sorted_rows(table: pa.Table, columns: list[str] | None = None) -> list[tuple]:
    """Rows of an Arrow table (user columns only) as sorted tuples: equality ignoring order."""
    columns = columns or [c for c in table.column_names if not c.startswith("__")]
    data = table.select(columns).to_pylist()
    return sorted((tuple(r[c] for c in columns) for r in data), key=repr)


ALL_TYPES_DDL = (
    "s string, i8 tinyint, i16 smallint, i32 int, i64 bigint, f float, d double, dec decimal(12,3), "
    "b boolean, dt date, ts timestamp, ntz timestamp_ntz, bin binary, arr array<bigint>, "
    "m map<string, double>, st struct<x: int, y: array<string>, z: map<int, date>>"
)
ALL_TYPES_ARROW = pa.schema(
    [
        ("s", pa.string()),
        ("i8", pa.int8()),
        ("i16", pa.int16()),
        ("i32", pa.int32()),
        ("i64", pa.int64()),
        ("f", pa.float32()),
        ("d", pa.float64()),
        ("dec", pa.decimal128(12, 3)),
        ("b", pa.bool_()),
        ("dt", pa.date32()),
        ("ts", pa.timestamp("us", tz="UTC")),
        ("ntz", pa.timestamp("us")),
        ("bin", pa.binary()),
        ("arr", pa.list_(pa.int64())),
        ("m", pa.map_(pa.string(), pa.float64())),
        (
            "st",
            pa.struct(
                [("x", pa.int32()), ("y", pa.list_(pa.string())), ("z", pa.map_(pa.int32(), pa.date32()))]
            ),
        ),
    ]
)

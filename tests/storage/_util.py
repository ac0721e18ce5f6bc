"""Helpers of the hot-storage tests: small table definitions, rows and a read-all."""

from __future__ import annotations

import pyarrow as pa

from runtime.storage import TableMeta

LOG_SCHEMA = pa.schema(
    [("id", pa.int64()), ("name", pa.string()), ("price", pa.float64()), ("ts", pa.timestamp("us", tz="UTC"))]
)


def log_meta(name: str = "ods.events", buckets: int = 1, **kw) -> TableMeta:
    return TableMeta(name, LOG_SCHEMA, buckets=buckets, bucket_key=("id",) if buckets > 1 else (), **kw)


def rows(start: int, n: int) -> pa.Table:
    ids = list(range(start, start + n))
    return pa.table(
        {
            "id": pa.array(ids, pa.int64()),
            "name": [f"n{i}" for i in ids],
            "price": [i * 0.5 for i in ids],
            "ts": pa.array([i * 1000 for i in ids], pa.timestamp("us", tz="UTC")),
        }
    )


def read_all(store, name: str, bucket: int = 0, start: int = 0, end=None, columns=None) -> pa.Table:
    batches = list(store.read(name, bucket, start, end, columns=columns))
    if not batches:
        return None
    return pa.Table.from_batches(batches)

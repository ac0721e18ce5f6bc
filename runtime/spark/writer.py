"""Exactly-once writes from Spark streaming queries into hot tables, through ``foreachBatch``.

Why ``foreachBatch``: Spark's Python stream writers refuse output mode ``update`` (so aggregations could not
feed primary-key tables) and cost ~770 ms per micro-batch here, against a few ms for ``df.toArrow()`` plus
one store append.

Exactly once: each micro-batch is written with ``store.write(table, data, writer=writer_id, seq=batch_id)``.
The store commits a write atomically per bucket and ignores a replay whose ``seq`` is not above the last
committed one of that writer in that bucket. Spark re-runs a batch whose commit-log entry is missing (a crash
between our write and Spark's commit) with the *same* batch id and the same input offsets, so the replay is
a no-op in the buckets that were already written and completes the ones that were not. A failure before the
store's commit leaves nothing visible. ``writer_id`` must therefore name one checkpoint: a query restarted
with a *new* checkpoint must use a new writer id (the materializer derives it from the checkpoint path).

Hot delay, measured end to end: the first layer stores ``origin_ts=None`` and the store takes the batch's
commit time as its origin. Every downstream write carries ``origin_ts`` = the oldest origin among the input
rows of its micro-batch. :func:`origin_from_checkpoint` finds it without touching the rows: the checkpoint's
offset log holds, per micro-batch, each ``tidehouse`` source's end offsets (the previous entry holds the
start offsets), and ``store.offset_times(upstream, bucket, start)`` gives the origin of the first row read
from each bucket. So for any table at any depth, ``commit_ts - origin_ts`` of a batch is the time from the
first layer's commit of its oldest source data to its visibility here, and the per-layer latency is the
difference between consecutive layers. The SQL of an action never needs to carry a timestamp column.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from typing import Any

import pyarrow as pa

from runtime.core.errors import ErrorCode, Location, TidehouseError
from runtime.core.literals import is_system_column
from runtime.core.settings import default
from runtime.core.uris import local_path
from runtime.spark.options import cached_store
from runtime.storage.api import CHANGE, TableStore, WriteResult


def to_arrow(data: Any) -> pa.Table:
    """A Spark DataFrame (``toArrow``, Spark 4: no pandas), an Arrow table or a record batch -> Arrow
    table."""
    if isinstance(data, pa.Table):
        return data
    if isinstance(data, pa.RecordBatch):
        return pa.Table.from_batches([data])
    if hasattr(data, "toArrow"):
        return data.toArrow()
    raise TidehouseError(
        ErrorCode.WRITE_INVALID,
        f"cannot write a {type(data).__name__}: expected a Spark DataFrame or Arrow data",
    )


def prepare(store: TableStore, table: str, data: pa.Table) -> pa.Table:
    """Keep the table's user columns (and ``__change`` for a primary-key table), cast to the table's types.

    Other ``__`` columns (e.g. the upstream ``__offset`` a copy query carries along) are dropped; a user
    column the table does not have is an error naming it.
    """
    meta = store.get_table(table)
    extra = [c for c in data.column_names if c not in meta.schema.names and not is_system_column(c)]
    if extra:
        raise TidehouseError(
            ErrorCode.WRITE_INVALID,
            f"table {table} has no column {extra[0]!r} (columns: {', '.join(meta.schema.names)})",
            hint="select only the table's columns, or evolve the table first",
            params={"table": table, "column": extra[0]},
        )
    arrays, fields = [], []
    for field in meta.schema:
        if field.name in data.column_names:
            column = data.column(field.name)
            if not column.type.equals(field.type):
                try:
                    column = column.cast(field.type)
                except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
                    raise TidehouseError(
                        ErrorCode.WRITE_INVALID,
                        f"table {table}: column {field.name!r} of type {column.type} cannot "
                        f"be written as {field.type}",
                        params={"table": table},
                    ) from exc
            arrays.append(column)
            fields.append(field)
    if meta.is_primary_key and CHANGE in data.column_names:
        arrays.append(data.column(CHANGE).cast(pa.string()))
        fields.append(pa.field(CHANGE, pa.string()))
    return pa.Table.from_arrays(arrays, schema=pa.schema(fields))


def write_batch(
    store: TableStore,
    table: str,
    df_or_arrow: Any,
    writer_id: str,
    batch_id: int,
    origin_ts: float | None = None,
) -> WriteResult:
    """Write one micro-batch exactly once: a replayed ``batch_id`` of ``writer_id`` is a no-op.

    An empty batch writes nothing (``WriteResult({})``).
    """
    data = prepare(store, table, to_arrow(df_or_arrow))
    if data.num_rows == 0:
        return WriteResult({})
    return store.write(table, data, writer=writer_id, seq=int(batch_id), origin_ts=origin_ts)


def foreach_batch_writer(
    root: str,
    table: str,
    writer_id: str,
    *,
    checkpoint: str | None = None,
    fsync: bool = default("storage.fsync"),
    on_write: Callable[[int, WriteResult], None] | None = None,
):
    """``fn(df, batch_id)`` for ``writeStream.foreachBatch``: writes each micro-batch to ``table``.

    With ``checkpoint`` (the query's checkpoint location) every write carries the origin time of its input
    (see the module docs); ``on_write`` is told each result (progress reporting).
    """

    def write(df, batch_id: int) -> None:
        store = cached_store(root, fsync)
        origin = origin_from_checkpoint(store, checkpoint, batch_id) if checkpoint else None
        result = write_batch(store, table, df, writer_id, batch_id, origin)
        if on_write is not None:
            on_write(batch_id, result)

    return write


# -- checkpoints ----------------------------------------------------------------------------------------
def clear_unstarted(checkpoint: str | os.PathLike) -> list[str]:
    """Remove what a query killed while Spark wrote its first offset log entry left: that write's temporary
    file (``offsets/.0.<uuid>.tmp``, and its ``.crc``) and no entry. Spark refuses to start such a query
    (``STATE_STORE_CHECKPOINT_LOCATION_NOT_EMPTY``: "offsets should be empty on batch 0"); with no entry in
    ``offsets`` no batch ran, so nothing else is lost. A checkpoint with an entry is left alone (Spark skips a
    later entry's leftovers itself). Returns the names removed."""
    root = local_path(str(checkpoint))
    offsets = root / "offsets"
    if not offsets.is_dir() or any(not p.name.startswith(".") for p in offsets.iterdir()):
        return []
    removed = []
    for folder in (offsets, root / "commits"):
        for p in sorted(folder.iterdir()) if folder.is_dir() else []:
            if p.name.startswith(".") and ".tmp" in p.name:  # a write that never landed
                p.unlink()
                removed.append(f"{folder.name}/{p.name}")
    return removed


# -- origin of a micro-batch's input --------------------------------------------------------------------
def read_offset_log(checkpoint: str | os.PathLike, batch_id: int) -> list[dict]:
    """The ``tidehouse`` source offsets recorded in the checkpoint for ``batch_id``.

    Spark writes a batch's entry before it runs the batch and keeps the entries of the last batches, so a
    missing or unreadable entry is an error (``STORAGE_IO``), never "no offsets": that would make a batch
    read nothing and write nothing. Lines of other sources (files, Kafka) are skipped.
    """
    path = local_path(str(checkpoint)) / "offsets" / str(batch_id)
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise TidehouseError(
            ErrorCode.STORAGE_IO,
            f"cannot read the offset log of micro-batch {batch_id}: {exc.strerror or exc}",
            location=Location(file=str(path)),
            hint="the query's checkpoint is incomplete or unreadable; restore it, or rebuild the "
            "table with --full-refresh",
        ) from exc
    out = []
    for line in lines[2:]:  # "v1", batch metadata, then one line per source
        try:
            value = json.loads(line)
        except json.JSONDecodeError:
            continue  # another source's offset need not be JSON
        if isinstance(value, dict) and "table" in value and "offsets" in value:
            out.append(value)
    return out


def origin_ts_of(store: TableStore, table: str, starts: dict[str, int], ends: dict[str, int]) -> float | None:
    """The oldest origin time among rows ``[starts, ends)`` of ``table`` (None when the range is empty)."""
    return _oldest_times(store, table, starts, ends)[0]


def _oldest_times(
    store: TableStore, table: str, starts: dict[str, int], ends: dict[str, int]
) -> tuple[float | None, float | None]:
    """(oldest origin time, oldest commit time) of rows ``[starts, ends)`` of ``table``, per bucket the
    batch at its start offset (Nones when the range is empty)."""
    origin = commit = None
    for bucket, end in ends.items():
        start = int(starts.get(bucket, 0))
        if int(end) <= start:
            continue
        info = store.offset_times(table, int(bucket), start)
        if info is None:
            continue
        o = info.origin_ts if info.origin_ts is not None else info.commit_ts
        origin = o if origin is None else min(origin, o)
        commit = info.commit_ts if commit is None else min(commit, info.commit_ts)
    return origin, commit


def batch_ranges(
    checkpoint: str | os.PathLike, batch_id: int
) -> dict[str, tuple[dict[str, int], dict[str, int]]]:
    """Per ``tidehouse`` source table of a micro-batch: ``(starts, ends)`` offsets per bucket
    (``{"0": 120}``).

    The end offsets are the batch's offset-log entry, the start offsets the previous entry's ends (Spark
    starts batch N where batch N-1 ended; it writes entry N before it runs the batch, and keeps N-1). A table
    with no previous entry (batch 0 of a new checkpoint) starts at ``{}``, i.e. every bucket at 0 — the
    ``earliest`` starting offsets the materializer's queries use. Empty when the batch has no entry.
    """
    ends = read_offset_log(checkpoint, batch_id)
    previous = read_offset_log(checkpoint, batch_id - 1) if batch_id > 0 and ends else None
    starts = {o["table"]: o["offsets"] for o in previous or []}
    return {o["table"]: (starts.get(o["table"], {}), o["offsets"]) for o in ends}


def batch_rows(checkpoint: str | os.PathLike, batch_id: int, table: str) -> int:
    """How many log entries of ``table`` a micro-batch covers (:func:`batch_ranges`)."""
    starts, ends = batch_ranges(checkpoint, batch_id).get(table, ({}, {}))
    return sum(max(0, int(e) - int(starts.get(b, 0))) for b, e in ends.items())


def origin_from_checkpoint(store: TableStore, checkpoint: str | os.PathLike, batch_id: int) -> float | None:
    """The oldest origin time of the rows a micro-batch read from its ``tidehouse`` sources.

    Batch 0 has no previous entry: its start offsets are unknown, so the newest input row's origin is used
    (the figure for the very first batch is a lower bound).
    """
    return input_times(store, checkpoint, batch_id)[0]


def input_times(
    store: TableStore, checkpoint: str | os.PathLike, batch_id: int
) -> tuple[float | None, float | None]:
    """(oldest origin time, oldest upstream commit time) of the rows a micro-batch reads from its
    ``tidehouse`` sources; Nones when it reads none (a file source, an empty batch). Batch 0 of a new
    checkpoint uses each bucket's newest row, as :func:`origin_from_checkpoint`."""
    origin = commit = None
    for table, (start, end) in batch_ranges(checkpoint, batch_id).items():
        if not start:
            start = {b: max(0, int(e) - 1) for b, e in end.items()}
        o, c = _oldest_times(store, table, start, end)
        if o is not None:
            origin = o if origin is None else min(origin, o)
        if c is not None:
            commit = c if commit is None else min(commit, c)
    return origin, commit

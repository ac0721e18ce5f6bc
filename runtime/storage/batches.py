"""What a write may contain and what a read yields, the same for every hot store.

Writes: :func:`prepare` validates and casts the data to the table schema, :func:`split_buckets` routes its
rows with :func:`runtime.storage.api.bucket_of`. Reads: :func:`read_columns` checks the columns asked for,
:func:`check_bucket` and :func:`check_start` the bucket and the offset, :func:`read_batches` cuts committed
frames to the range asked for and adds the system columns, :func:`scan_log` reads a whole log table.
The stores (:mod:`.local`, :mod:`.objectstore`) only say where the frames are.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence

import numpy as np
import pyarrow as pa

from runtime.core.errors import ErrorCode, Location, TidehouseError
from runtime.core.literals import BUCKET, CHANGE, OFFSET, ROW_KINDS, TS
from runtime.storage.api import TS_TYPE, TableMeta, bucket_of

_IGNORED = (OFFSET, BUCKET, TS)


def unknown_table(name: object) -> TidehouseError:
    return TidehouseError(
        ErrorCode.TABLE_UNKNOWN, f"unknown hot table {name!r}", location=Location(path=str(name))
    )


def table_exists(name: str) -> TidehouseError:
    return TidehouseError(
        ErrorCode.TABLE_EXISTS, f"table {name} already exists", location=Location(path=name)
    )


# -- writes ---------------------------------------------------------------------------------------------


def prepare(meta: TableMeta, data: pa.Table | pa.RecordBatch) -> tuple[pa.Table, list[str] | None]:
    """Validate and cast ``data`` for a write to ``meta``: the user columns (table order) and the row kinds if
    given (see :mod:`runtime.storage.local` for what a write may contain)."""
    loc = Location(path=meta.name)
    if isinstance(data, pa.RecordBatch):
        data = pa.Table.from_batches([data])
    if not isinstance(data, pa.Table):
        raise TidehouseError(
            ErrorCode.WRITE_INVALID,
            f"write to {meta.name}: expected an Arrow table or record batch, got {type(data).__name__}",
            location=loc,
        )
    kinds = None
    if CHANGE in data.column_names:
        if not meta.is_primary_key:
            raise TidehouseError(
                ErrorCode.WRITE_INVALID,
                f"write to log table {meta.name}: a {CHANGE} column is only accepted by primary-key tables",
                location=loc,
            )
        kinds = data.column(CHANGE).to_pylist()
        bad = {k for k in kinds if k is not None and k not in ROW_KINDS}
        if bad:
            raise TidehouseError(
                ErrorCode.WRITE_INVALID,
                f"write to {meta.name}: unknown row kinds "
                f"{sorted(bad)} in {CHANGE} (expected {list(ROW_KINDS)})",
                location=loc,
            )
    schema = meta.schema
    for c in data.column_names:
        if c == CHANGE or c in _IGNORED:
            continue
        if c not in schema.names:
            raise TidehouseError(
                ErrorCode.WRITE_INVALID,
                f"write to {meta.name}: unknown column {c!r} (table columns: {schema.names})",
                location=loc,
            )
    partial = meta.merge_engine == "partial_update" and meta.is_primary_key
    cols, names = [], []
    for f in schema:
        if f.name not in data.column_names:
            if f.name in meta.primary_key:
                raise TidehouseError(
                    ErrorCode.WRITE_INVALID,
                    f"write to {meta.name}: primary key column {f.name!r} is missing",
                    location=loc,
                )
            if partial:
                continue
            if not f.nullable:
                raise TidehouseError(
                    ErrorCode.WRITE_INVALID,
                    f"write to {meta.name}: non-nullable column {f.name!r} is missing",
                    location=loc,
                )
            cols.append(pa.nulls(data.num_rows, f.type))
            names.append(f.name)
            continue
        col = data.column(f.name)
        if col.type != f.type:
            try:
                col = col.cast(f.type, safe=not pa.types.is_timestamp(f.type))
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
                raise TidehouseError(
                    ErrorCode.WRITE_INVALID,
                    f"write to {meta.name}: column {f.name!r} "
                    f"of type {col.type} cannot be stored as {f.type}: {exc}",
                    location=loc,
                ) from exc
        if (not f.nullable or f.name in meta.primary_key) and col.null_count:
            raise TidehouseError(
                ErrorCode.WRITE_INVALID,
                f"write to {meta.name}: column {f.name!r} has "
                f"{col.null_count} null value(s) but is not nullable",
                location=loc,
            )
        cols.append(col)
        names.append(f.name)
    return pa.Table.from_arrays(cols, names=names), kinds


def split_buckets(
    meta: TableMeta, prepared: pa.Table, kinds: list[str] | None
) -> dict[int, tuple[pa.Table, list[str] | None]]:
    """The rows of a prepared write (and their row kinds) per bucket, in their order within each bucket."""
    if meta.buckets == 1:
        return {0: (prepared, kinds)}
    bucket_arr = bucket_of(prepared, meta.effective_bucket_key, meta.buckets).to_numpy()
    order = np.argsort(bucket_arr, kind="stable")
    sorted_b = bucket_arr[order]
    cuts = np.flatnonzero(np.diff(sorted_b)) + 1
    out = {}
    for s, idx in zip(np.r_[0, cuts], np.split(order, cuts)):
        out[int(sorted_b[s])] = (
            prepared.take(pa.array(idx)),
            None if kinds is None else [kinds[i] for i in idx],
        )
    return out


def one_batch(table: pa.Table) -> pa.RecordBatch:
    """``table`` as one record batch (an empty one when it has no rows)."""
    table = table.combine_chunks()
    batches = table.to_batches()
    if len(batches) == 1:
        return batches[0]
    return (
        pa.RecordBatch.from_arrays([pa.array([], f.type) for f in table.schema], schema=table.schema)
        if not batches
        else pa.Table.from_batches(batches).combine_chunks().to_batches()[0]
    )


# -- reads ----------------------------------------------------------------------------------------------
def read_columns(meta: TableMeta, columns: Sequence[str] | None) -> list[str]:
    """The user columns a read asks for (default: all); system columns named are skipped, others refused."""
    if columns is None:
        return list(meta.schema.names)
    out = []
    for c in columns:
        if c in (OFFSET, BUCKET, TS, CHANGE):
            continue
        if c not in meta.schema.names:
            raise TidehouseError(
                ErrorCode.TABLE_INVALID,
                f"{meta.name} has no column {c!r} (columns: {meta.schema.names})",
                location=Location(path=meta.name),
            )
        out.append(c)
    return out


def check_bucket(meta: TableMeta, bucket: int) -> None:
    if not isinstance(bucket, int) or not 0 <= bucket < meta.buckets:
        raise TidehouseError(
            ErrorCode.STORAGE_RANGE,
            f"{meta.name} has no bucket {bucket!r} (buckets: {meta.buckets})",
            location=Location(path=meta.name),
        )


def check_start(name: str, bucket: int, start: int, first: int, end: int, stop: int | None = None) -> None:
    """A read of a bucket whose offsets are ``[first, end)`` may start from 0 to ``end`` and stop at most at
    ``end``: a read asked to go past what is committed would silently return fewer rows."""
    if start < 0 or start > end:
        raise TidehouseError(
            ErrorCode.STORAGE_RANGE,
            f"{name} bucket {bucket}: start offset {start} is outside [{first}, {end}]",
            location=Location(path=name),
        )
    if stop is not None and stop > end:
        raise TidehouseError(
            ErrorCode.STORAGE_RANGE,
            f"{name} bucket {bucket}: a read up to offset {stop}, but only {end} are committed",
            location=Location(path=name),
            hint="a reader ahead of what this process sees of the writer; a retry reads it again",
        )


def read_batches(
    meta: TableMeta,
    frames: Iterable[tuple[int, int, int, pa.RecordBatch]],
    bucket: int,
    start: int,
    stop: int,
    cols: list[str],
) -> Iterator[pa.RecordBatch]:
    """What a read of ``[start, stop)`` of a bucket yields, from its frames
    ``(base_offset, rows, commit time in µs, batch)``: the frames' rows in the range, the user columns
    ``cols`` (nulls for a column a frame predates) and the system columns ``__offset``, ``__bucket``,
    ``__ts`` (and ``__change`` of a primary-key table)."""
    types = {f.name: f.type for f in meta.schema}
    out_schema = pa.schema(
        [meta.schema.field(c) for c in cols]
        + [
            pa.field(OFFSET, pa.int64(), False),
            pa.field(BUCKET, pa.int32(), False),
            pa.field(TS, TS_TYPE, False),
        ]
        + ([pa.field(CHANGE, pa.string(), False)] if meta.is_primary_key else [])
    )
    for base_offset, rows, commit_us, batch in frames:
        lo, hi = max(start - base_offset, 0), min(stop - base_offset, rows)
        if lo >= hi:
            continue
        if lo or hi < rows:
            batch = batch.slice(lo, hi - lo)
        n = hi - lo
        have = batch.schema.names
        arrays = [batch.column(c) if c in have else pa.nulls(n, types[c]) for c in cols]
        arrays.append(pa.array(np.arange(base_offset + lo, base_offset + hi, dtype=np.int64)))
        arrays.append(pa.array(np.full(n, bucket, dtype=np.int32)))
        arrays.append(pa.array(np.full(n, commit_us, dtype=np.int64)).view(TS_TYPE))
        if meta.is_primary_key:
            arrays.append(batch.column(CHANGE))
        yield pa.RecordBatch.from_arrays(arrays, schema=out_schema)


def scan_log(
    meta: TableMeta,
    cols: list[str],
    buckets: Iterable[tuple[int, int, int]],
    read: Callable[[int, int, int], Iterable[pa.RecordBatch]],
) -> pa.Table:
    """The whole content of a log table from each bucket's ``(bucket, first offset, end offset)``, read with
    ``read(bucket, start, stop)``. ``STORAGE_RANGE`` when retention deleted rows: a partial table must never
    pass for the whole one."""
    parts = []
    for b, first, end in buckets:
        if first > 0:
            raise TidehouseError(
                ErrorCode.STORAGE_RANGE,
                f"{meta.name} bucket {b}: offsets 0..{first - 1} were deleted by retention, so the hot table "
                "alone no longer holds every row",
                location=Location(path=meta.name),
                hint="read the lake snapshot plus the hot tail after its offsets (a union read), or raise "
                "storage.retention",
            )
        parts += [pa.Table.from_batches([batch]).select(cols) for batch in read(b, first, end)]
    schema = pa.schema([meta.schema.field(c) for c in cols])
    return pa.concat_tables(parts) if parts else schema.empty_table()

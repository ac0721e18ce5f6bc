"""A table's whole history: its lake snapshot plus the hot tail after the offsets that snapshot records.

See docs/architecture.md ("History"). Per bucket the lake covers offsets ``[0, O_b)`` (``tidehouse.offsets``
of its snapshot), the hot log holds ``[first_b, end_b)``, and retention keeps ``first_b <= O_b``: every
offset is in one of the two. :class:`TableHistory` is the one reader of that union:

* :meth:`TableHistory.read` — rows ``[start, end)`` of one bucket of a **log** table, from the lake below
  ``first_b`` and from the hot log above it, exactly once (no gap, no overlap). Rows of the lake part come
  in no particular order (they carry ``__offset``).
* :meth:`TableHistory.rows` — every row of a log table (the lake below ``first_b``, then the hot log).
* :meth:`TableHistory.state` — the current content of a **primary-key** table: the lake state at its
  snapshot with the changelog tail collapsed by key on top.
* :func:`bucket_snapshot` — one bucket of a primary-key table at the current lake snapshot and the offset it
  covers: what a hot store whose primary-key state is a cache (the object store) rebuilds it from.

A read below ``first_b`` of a primary-key table's changelog is ``STORAGE_RANGE``: the lake keeps the state,
not the changes. Without a lake (``lake=None``) the history is the hot window alone and a read below
``first_b`` is ``STORAGE_RANGE`` as well — never a partial result.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.compute as pc
from pyiceberg.expressions import AlwaysTrue, And, BooleanExpression, EqualTo, GreaterThanOrEqual, LessThan

from runtime.core.errors import ErrorCode, Location, TidehouseError
from runtime.lake.apply import collapse_changelog, key_mask
from runtime.lake.state import lake_offsets
from runtime.storage.api import BUCKET, CHANGE, INSERT, OFFSET, TS, TS_TYPE, TableMeta, TableStore

if TYPE_CHECKING:  # pragma: no cover
    from pyiceberg.table import Table

    from runtime.lake.catalog import Lake

MAX_ATTEMPTS = 5  # retention deleting a segment while it is read makes a read start over
EVERY_ROW: BooleanExpression = AlwaysTrue()  # the default row filter (pyiceberg's AlwaysTrue is a singleton)


@dataclass(frozen=True)
class LakeView:
    """One pinned lake snapshot of a table and the hot offsets it covers."""

    table: Table
    snapshot_id: int | None  # None: the lake table has no snapshot yet
    offsets: tuple[int, ...]


class TableHistory:
    """Reads of hot tables that may need rows retention deleted (see the module docstring)."""

    def __init__(self, store: TableStore, lake: Lake | None) -> None:
        self.store = store
        self.lake = lake

    # -- the lake side ---------------------------------------------------------------------------
    def view(self, name: str, buckets: int | None = None, snapshot_id: int | None = None) -> LakeView | None:
        """The lake's current snapshot of ``name`` (or ``snapshot_id``) and its offsets; None: no lake table.
        ``buckets`` defaults to what the lake table records of its hot table."""
        if self.lake is None or not self.lake.exists(name):
            return None
        table = self.lake.load(name)
        if buckets is None:
            buckets = int(table.properties.get("tidehouse.buckets", "1"))
        if snapshot_id is not None:
            snap = table.snapshot_by_id(snapshot_id)
            if snap is None:
                raise TidehouseError(
                    ErrorCode.STORAGE_RANGE,
                    f"lake snapshot {snapshot_id} of {name} was expired",
                    location=Location(path=name),
                    hint="raise tiering.max_snapshots, or restart the read from the current snapshot",
                )
            offsets, _ = lake_offsets(table, buckets, at=snap)
            return LakeView(table, snapshot_id, tuple(offsets))
        offsets, _ = lake_offsets(table, buckets)
        snap = table.current_snapshot()
        return LakeView(table, snap.snapshot_id if snap else None, tuple(offsets))

    def lake_rows(
        self,
        view: LakeView,
        *,
        columns: Sequence[str] | None = None,
        row_filter: BooleanExpression = EVERY_ROW,
    ) -> pa.Table:
        """Rows of a pinned snapshot (projection and filter pushed into the Iceberg scan)."""
        if columns is not None:  # a hot column the lake lacks (added, not tiered since): filled in by callers
            have = set(view.table.schema().column_names)
            columns = [c for c in columns if c in have]
        if view.snapshot_id is None:
            return _empty_lake(view.table, columns)
        scan = view.table.scan(
            row_filter=row_filter,
            snapshot_id=view.snapshot_id,
            selected_fields=tuple(columns) if columns is not None else ("*",),
        )
        return scan.to_arrow()

    # -- log tables --------------------------------------------------------------------------------
    def read(
        self,
        name: str,
        bucket: int,
        start: int,
        end: int,
        *,
        columns: Sequence[str] | None = None,
        row_filter: BooleanExpression = EVERY_ROW,
    ) -> Iterator[pa.RecordBatch]:
        """Rows ``[start, end)`` of one bucket, shaped like :meth:`TableStore.read` (the requested user
        columns, then ``__offset``, ``__bucket``, ``__ts`` and, for a primary-key table, ``__change``).

        ``row_filter`` prunes the lake part (files and rows); the hot part is not filtered: a caller that
        passes one filters the result itself (Spark re-applies the filters a source was given)."""
        meta = self.store.get_table(name)
        pos, attempts = start, 0
        while pos < end:
            first = self.store.start_offsets(name)[bucket]
            if pos < first:
                if meta.is_primary_key:
                    raise _trimmed_changelog(meta, bucket, pos, first)
                upto = min(end, first)
                yield from self._lake_range(meta, bucket, pos, upto, columns, row_filter)
                pos = upto
                continue
            try:
                for batch in self.store.read(name, bucket, pos, end, columns=columns):
                    yield batch
                    if batch.num_rows:
                        pos = batch.column(OFFSET)[-1].as_py() + 1
                return
            except TidehouseError as exc:  # retention deleted the segment being read: start over from there
                attempts += 1
                if exc.code is not ErrorCode.STORAGE_RANGE or attempts >= MAX_ATTEMPTS:
                    raise

    def rows(self, name: str, *, columns: Sequence[str] | None = None) -> pa.Table:
        """Every row of a log table (user columns), equal to the table as if retention had never deleted
        anything: the hot log alone while nothing was trimmed, else the lake snapshot (``[0, O_b)`` per
        bucket, read whole: no filter, no copy) and the hot log after its offsets."""
        meta = self.store.get_table(name)
        cols = list(columns) if columns is not None else list(meta.schema.names)
        schema = _user_schema(meta, cols)
        for _ in range(MAX_ATTEMPTS):
            firsts = self.store.start_offsets(name)
            parts, starts = [], firsts
            if any(firsts):
                view = self._covering_view(meta, firsts)
                lake = _user(self.lake_rows(view, columns=cols), meta, cols)
                _check_count(meta, lake.num_rows, sum(view.offsets), f"offsets below {list(view.offsets)}")
                parts.append(lake)
                starts = list(view.offsets)
            try:
                for bucket, (start, end) in enumerate(zip(starts, self.store.end_offsets(name))):
                    for batch in self.store.read(name, bucket, start, end, columns=cols):
                        parts.append(pa.Table.from_batches([batch]).select(cols))
            except TidehouseError as exc:
                if exc.code is ErrorCode.STORAGE_RANGE:
                    continue  # trimmed meanwhile: read again from the new first offsets
                raise
            parts = [p if p.schema.equals(schema) else p.cast(schema) for p in parts]
            return pa.concat_tables(parts) if parts else schema.empty_table()
        raise _busy(meta)

    def _lake_range(
        self,
        meta: TableMeta,
        bucket: int,
        lo: int,
        hi: int,
        columns: Sequence[str] | None,
        row_filter: BooleanExpression = EVERY_ROW,
    ) -> Iterator[pa.RecordBatch]:
        cols = list(columns) if columns is not None else list(meta.schema.names)
        view = self._covering_view(meta, [hi if b == bucket else 0 for b in range(meta.buckets)])
        flt = And(EqualTo(BUCKET, bucket), And(GreaterThanOrEqual(OFFSET, lo), LessThan(OFFSET, hi)))
        data = self.lake_rows(view, columns=[*cols, OFFSET, BUCKET, TS], row_filter=And(flt, row_filter))
        if isinstance(row_filter, AlwaysTrue):  # a filtered read holds fewer rows by design
            _check_count(meta, data.num_rows, hi - lo, f"offsets {lo}..{hi - 1} of bucket {bucket}")
        out = _shape(data, meta, cols, primary_key=False)
        yield from out.to_batches(max_chunksize=65_536)

    def _covering_view(self, meta: TableMeta, needed: Sequence[int]) -> LakeView:
        """The current lake snapshot, which must cover ``needed`` offsets per bucket (retention deletes only
        what a committed snapshot covers, so it does unless the lake table was dropped or reset)."""
        view = self.view(meta.name, meta.buckets)
        if view is None or any(o < n for o, n in zip(view.offsets, needed)):
            raise TidehouseError(
                ErrorCode.STORAGE_RANGE,
                f"{meta.name}: offsets below {list(needed)} were deleted from the hot log but the lake does "
                f"not hold them (lake offsets {list(view.offsets) if view else 'none: no lake table'})",
                location=Location(path=meta.name),
                hint="the lake table was dropped or reset after retention ran; rebuild with --full-refresh",
            )
        return view

    # -- primary-key tables ------------------------------------------------------------------------
    def state(
        self,
        name: str,
        *,
        columns: Sequence[str] | None = None,
        bucket: int | None = None,
        row_filter: BooleanExpression = EVERY_ROW,
    ) -> pa.Table:
        """The current rows of a primary-key table (user columns), or of one ``bucket`` of it: the lake state
        with the changelog tail collapsed by key on top. ``row_filter`` prunes the lake part only (a row it
        drops whose key the tail changed is replaced by the tail's image anyway); callers filter the
        result."""
        meta = self.store.get_table(name)
        cols = list(columns) if columns is not None else list(meta.schema.names)
        wanted = list(dict.fromkeys([*cols, *meta.primary_key]))
        only = None if bucket is None else [bucket]
        for _ in range(MAX_ATTEMPTS):
            view = self.view(name, meta.buckets)
            offsets = list(view.offsets) if view else [0] * meta.buckets
            try:
                tail = _read_tail(self.store, meta, offsets, wanted, only)
            except TidehouseError as exc:
                if exc.code is ErrorCode.STORAGE_RANGE:
                    continue  # a newer snapshot and retention moved on meanwhile: pin the new one
                raise
            flt = And(EqualTo(BUCKET, bucket), row_filter) if bucket is not None else row_filter
            base = (
                _user(self.lake_rows(view, columns=wanted, row_filter=flt), meta, wanted)
                if view
                else _user_schema(meta, wanted).empty_table()
            )
            if tail.num_rows:
                images, keys = collapse_changelog(tail, meta.primary_key)
                if base.num_rows:
                    base = base.filter(pc.invert(key_mask(base, keys, meta.primary_key)))
                base = pa.concat_tables([base, _user(images, meta, wanted)])
            return base.select(cols)
        raise _busy(meta)

    def bootstrap(
        self, name: str, bucket: int, view: LakeView | None, columns: Sequence[str] | None = None
    ) -> pa.Table:
        """One bucket of a primary-key table as of a pinned snapshot, as ``+I`` rows shaped like the
        changelog (``__offset`` and ``__ts`` null: the state has no offsets) — the first micro-batch of a
        stream that starts below the hot log."""
        meta = self.store.get_table(name)
        cols = list(columns) if columns is not None else list(meta.schema.names)
        if view is None or view.snapshot_id is None:
            rows = _user_schema(meta, cols).empty_table()
        else:
            flt = EqualTo(BUCKET, bucket) if meta.buckets > 1 else AlwaysTrue()
            rows = _user(self.lake_rows(view, columns=[*cols, BUCKET], row_filter=flt), meta, cols)
        n = rows.num_rows
        return (
            rows.append_column(OFFSET, pa.nulls(n, pa.int64()))
            .append_column(BUCKET, pa.array([bucket] * n, pa.int32()))
            .append_column(TS, pa.nulls(n, TS_TYPE))
            .append_column(CHANGE, pa.array([INSERT] * n, pa.string()))
        )


def bucket_snapshot(lake: Lake | None, meta: TableMeta, bucket: int) -> tuple[pa.Table, int] | None:
    """One bucket of a primary-key table at the lake's current snapshot: its rows and the bucket's offset the
    snapshot records (``tidehouse.offsets``); None while the lake holds nothing of it (no table, no snapshot,
    offset 0). The snapshot is pinned once (``view``), so its rows and its offset belong together whatever
    tiering commits meanwhile. What :func:`runtime.lake.lake_bootstrap` gives a hot store."""
    history = TableHistory(None, lake)  # type: ignore[arg-type]  # the lake side only: no store
    view = history.view(meta.name, meta.buckets)
    if view is None or view.snapshot_id is None or view.offsets[bucket] == 0:
        return None
    rows = history.lake_rows(view, columns=list(meta.schema.names), row_filter=EqualTo(BUCKET, bucket))
    return rows, view.offsets[bucket]


# -- helpers ---------------------------------------------------------------------------------------------


def _read_tail(
    store: TableStore,
    meta: TableMeta,
    offsets: Sequence[int],
    columns: list[str],
    buckets: Sequence[int] | None = None,
) -> pa.Table:
    ends = store.end_offsets(meta.name)
    parts = []
    for bucket, (lo, hi) in enumerate(zip(offsets, ends)):
        if hi > lo and (buckets is None or bucket in buckets):
            parts.extend(
                pa.Table.from_batches([b]) for b in store.read(meta.name, bucket, lo, hi, columns=columns)
            )
    if not parts:
        schema = _user_schema(meta, columns).append(pa.field(CHANGE, pa.string()))
        return schema.empty_table()
    return pa.concat_tables(parts)


def _user_schema(meta: TableMeta, columns: Sequence[str]) -> pa.Schema:
    return pa.schema([pa.field(c, meta.schema.field(c).type) for c in columns])


def _user(data: pa.Table, meta: TableMeta, columns: Sequence[str]) -> pa.Table:
    """Exactly the user ``columns`` with the hot table's types (a column the lake lacks: nulls)."""
    out = []
    for c in columns:
        t = meta.schema.field(c).type
        if c in data.column_names:
            col = data.column(c)
            out.append(col if col.type == t else col.cast(t, safe=False))
        else:
            out.append(pa.nulls(data.num_rows, t))
    return pa.Table.from_arrays(out, schema=_user_schema(meta, columns))


def _shape(data: pa.Table, meta: TableMeta, columns: Sequence[str], *, primary_key: bool) -> pa.Table:
    """Lake rows shaped like the hot store's reads: user columns, then ``__offset``, ``__bucket``,
    ``__ts``."""
    user = _user(data, meta, columns)
    out = user.append_column(pa.field(OFFSET, pa.int64(), False), data.column(OFFSET).cast(pa.int64()))
    out = out.append_column(pa.field(BUCKET, pa.int32(), False), data.column(BUCKET).cast(pa.int32()))
    return out.append_column(pa.field(TS, TS_TYPE, False), data.column(TS).cast(TS_TYPE, safe=False))


def _empty_lake(table, columns: Sequence[str] | None) -> pa.Table:
    from pyiceberg.io.pyarrow import schema_to_pyarrow

    schema = schema_to_pyarrow(table.schema(), include_field_ids=False)
    if columns is not None:
        schema = pa.schema([schema.field(c) for c in columns if c in schema.names])
    return schema.empty_table()


def _check_count(meta: TableMeta, got: int, expected: int, what: str) -> None:
    if got != expected:
        raise TidehouseError(
            ErrorCode.STORAGE_CORRUPT,
            f"{meta.name}: the lake holds {got} rows for {what}, expected {expected}",
            location=Location(path=meta.name),
            hint="the lake table does not match the hot offsets it records; rebuild with --full-refresh",
        )


class ChangelogTrimmed(TidehouseError):
    """A read of a primary-key table's changelog below the hot log's first offset (``STORAGE_RANGE``): the
    lake keeps the table's state, not its changes. Its own class, because a query that asked whether it fell
    behind retention before the read, and was not, meets it when retention trims during the read; the
    micro-batch then resyncs (:mod:`materializer.guard`)."""


def _trimmed_changelog(meta: TableMeta, bucket: int, start: int, first: int) -> ChangelogTrimmed:
    return ChangelogTrimmed(
        ErrorCode.STORAGE_RANGE,
        f"{meta.name} bucket {bucket}: changelog offsets {start}..{first - 1} were deleted by retention, "
        "and the lake keeps the table's state, not its changes",
        location=Location(path=meta.name),
        hint="read the table's state instead (a stream from startingOffsets=earliest begins with it)",
    )


def _busy(meta: TableMeta) -> TidehouseError:
    return TidehouseError(
        ErrorCode.STORAGE_RANGE,
        f"{meta.name}: retention kept deleting what this read needed ({MAX_ATTEMPTS} attempts)",
        location=Location(path=meta.name),
        hint="raise storage.retention; a reader that far behind re-reads from the lake",
    )

"""The embedded hot storage: :class:`LocalTableStore`, tables on a local filesystem.

Layout under ``root``::

    <layer>/<name>/meta.json            table definition + schema history (atomic replace)
    <layer>/<name>/bucket-<n>/lock      flock target serialising writers of the bucket (all processes)
    <layer>/<name>/bucket-<n>/index     one entry per frame (derived; rebuilt from segments)
    <layer>/<name>/bucket-<n>/<base>.log log segments (see :mod:`.frames` and :mod:`.log`)
    <layer>/<name>/bucket-<n>/kv/       primary-key state (RocksDB, see :mod:`.pk`)
    .catalog.lock                       flock target for create / evolve / drop

Every call re-checks ``meta.json`` (a ``stat``) and the bucket's index and segment sizes, so a store in one
process sees what another process committed at its next call; nothing stale is cached. A table dropped and
re-created elsewhere is noticed by its ``incarnation`` id.

Writes: the data is validated and cast to the table schema (unknown or ``__`` columns are refused, except the
read-side system columns ``__offset``/``__bucket``/``__ts`` which are ignored; missing nullable columns are
null; timestamps of any unit or zone become ``timestamp[us, UTC]``), routed with
:func:`runtime.storage.api.bucket_of`, and each bucket is written under its lock: an idempotency check of
``(writer, seq)``, then one frame (log table: the rows; primary-key table: the changelog, or an empty frame
that records the ``seq`` when nothing changed).
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import os
import shutil
import threading
import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
import pyarrow as pa

from runtime.core.errors import ErrorCode, Location, TidehouseError
from runtime.core.literals import BUCKET, CHANGE, OFFSET, ROW_KINDS, TS
from runtime.core.settings import default
from runtime.storage import fastpk
from runtime.storage import meta as metamod
from runtime.storage.api import TS_TYPE, BatchInfo, TableMeta, TableStore, WriteResult, bucket_of
from runtime.storage.frames import NO_ORIGIN
from runtime.storage.log import BucketLog
from runtime.storage.pk import Merger, Tablet, from_py, lookup_keys, rows_to_table, to_py

_IGNORED = (OFFSET, BUCKET, TS)


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


@dataclass
class _Table:
    meta: TableMeta
    incarnation: str
    stat: tuple
    logs: list[BucketLog]
    tablets: list[Tablet | None] = field(default_factory=list)

    def close(self) -> None:
        for t in self.tablets:
            if t is not None:
                t.close()
        for log in self.logs:
            log.close()


def _ipc(batch: pa.RecordBatch) -> pa.Buffer:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, batch.schema) as w:
        w.write_batch(batch)
    return sink.getvalue()


def _one_batch(table: pa.Table) -> pa.RecordBatch:
    table = table.combine_chunks()
    batches = table.to_batches()
    if len(batches) == 1:
        return batches[0]
    return (
        pa.RecordBatch.from_arrays([pa.array([], f.type) for f in table.schema], schema=table.schema)
        if not batches
        else pa.Table.from_batches(batches).combine_chunks().to_batches()[0]
    )


@contextlib.contextmanager
def _io_errors(what: str, file: Path | None, hint: str | None = None) -> Iterator[None]:
    """A failing disk (ENOSPC, EIO, EROFS, ...) becomes STORAGE_IO naming the operation, cause kept."""
    try:
        yield
    except OSError as exc:
        raise TidehouseError(
            ErrorCode.STORAGE_IO,
            f"{what} failed: {exc.strerror or exc}",
            location=Location(file=str(file) if file else None),
            hint=hint,
            params={"errno": exc.errno},
        ) from exc


class LocalTableStore(TableStore):
    """Hot tables under a local directory; safe for several processes sharing ``root``.

    A process that writes a primary-key bucket keeps its state (RocksDB, one writer process at a time) open
    for the next write; with ``shared_writers`` (Spark's Python workers, which take turns writing a bucket)
    it closes it after each write, so the next writer, under the bucket's lock, opens it in turn.
    """

    def __init__(
        self,
        root: str | os.PathLike,
        *,
        fsync: bool = default("storage.fsync"),
        segment_bytes: int = default("storage.segment_bytes"),
        lock_timeout: float = 30.0,
        shared_writers: bool = False,
    ) -> None:
        self.root = Path(root)
        self.shared_writers = shared_writers
        self.fsync = fsync
        self.segment_bytes = segment_bytes
        self.lock_timeout = lock_timeout
        self._tables: dict[str, _Table] = {}
        self._mutex = threading.RLock()
        try:
            self.root.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise TidehouseError(
                ErrorCode.STORAGE_IO,
                f"cannot create the storage root {self.root}: {exc}",
                location=Location(file=str(self.root)),
            ) from exc

    # -- catalog ------------------------------------------------------------------------------------
    @contextlib.contextmanager
    def _catalog_lock(self) -> Iterator[None]:
        fd = os.open(self.root / ".catalog.lock", os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)

    def _meta_path(self, name: str) -> Path:
        return metamod.table_dir(self.root, name) / "meta.json"

    def create_table(self, meta: TableMeta, *, exist_ok: bool = True) -> TableMeta:
        wanted = metamod.validate(meta)
        path = self._meta_path(wanted.name)
        with _io_errors(f"create table {wanted.name}", path), self._mutex, self._catalog_lock():
            if path.exists():
                doc = metamod.read_doc(path)
                current = metamod.from_json(doc)
                if not exist_ok:
                    raise TidehouseError(
                        ErrorCode.TABLE_EXISTS,
                        f"table {wanted.name} already exists",
                        location=Location(path=wanted.name),
                    )
                evolved = metamod.evolve(current, wanted)
                if evolved is None:
                    return current
                out = metamod.to_json(evolved, doc["schemas"])
                out["incarnation"] = doc.get("incarnation")
                metamod.write_atomic(path, metamod.encode_doc(out))
                return evolved
            created = replace(wanted, schema_id=0)
            doc = metamod.to_json(created, [])
            doc["incarnation"] = uuid.uuid4().hex
            metamod.write_atomic(path, metamod.encode_doc(doc))
            return created

    def _table(self, name: str) -> _Table:
        path = self._meta_path(name) if isinstance(name, str) and "." in name else None
        try:
            st = os.stat(path) if path is not None else None
        except FileNotFoundError:
            st = None
        with self._mutex:
            cached = self._tables.get(name)
            if st is None:
                if cached is not None:
                    cached.close()
                    del self._tables[name]
                raise TidehouseError(
                    ErrorCode.TABLE_UNKNOWN, f"unknown hot table {name!r}", location=Location(path=str(name))
                )
            key = (st.st_ino, st.st_mtime_ns, st.st_size)
            if cached is not None and cached.stat == key:
                return cached
            doc = metamod.read_doc(path)
            meta = metamod.from_json(doc)
            inc = doc.get("incarnation", "")
            if cached is not None and cached.incarnation == inc:
                cached.meta, cached.stat = meta, key
                return cached
            if cached is not None:
                cached.close()
            tdir = path.parent
            logs = [
                BucketLog(
                    tdir / f"bucket-{b}", b, fsync=self.fsync, segment_bytes=self.segment_bytes, table=name
                )
                for b in range(meta.buckets)
            ]
            tablets = [
                Tablet(log, lock_timeout=self.lock_timeout) if meta.is_primary_key else None for log in logs
            ]
            table = _Table(meta, inc, key, logs, tablets)
            self._tables[name] = table
            return table

    def get_table(self, name: str) -> TableMeta:
        return self._table(name).meta

    def incarnation(self, name: str) -> str:
        return self._table(name).incarnation

    def list_tables(self) -> list[str]:
        names = []
        for meta_file in self.root.glob("*/*/meta.json"):
            names.append(f"{meta_file.parent.parent.name}.{meta_file.parent.name}")
        return sorted(names)

    def has_table(self, name: str) -> bool:
        return isinstance(name, str) and "." in name and self._meta_path(name).exists()

    def drop_table(self, name: str) -> None:
        with self._mutex, self._catalog_lock():
            table = self._table(name)
            table.close()
            self._tables.pop(name, None)
            tdir = self._meta_path(name).parent
            trash = self.root / f".trash-{uuid.uuid4().hex}"
            os.replace(tdir, trash)
            metamod.fsync_dir(tdir.parent)
            shutil.rmtree(trash, ignore_errors=True)

    # -- writes -------------------------------------------------------------------------------------
    def _prepare(self, meta: TableMeta, data: pa.Table | pa.RecordBatch) -> tuple[pa.Table, list[str] | None]:
        """Validate and cast ``data``; returns the user columns (table order) and the row kinds if given."""
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
                    f"write to log table {meta.name}: a {CHANGE} column "
                    "is only accepted by primary-key tables",
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

    def write(
        self,
        name: str,
        data: pa.Table | pa.RecordBatch,
        *,
        writer: str,
        seq: int,
        origin_ts: float | None = None,
    ) -> WriteResult:
        table = self._table(name)
        meta = table.meta
        prepared, kinds = self._prepare(meta, data)
        if prepared.num_rows == 0:
            return WriteResult({})
        bucket_arr = bucket_of(prepared, meta.effective_bucket_key, meta.buckets).to_numpy()
        if meta.buckets == 1:
            groups = {0: None}
        else:
            order = np.argsort(bucket_arr, kind="stable")
            sorted_b = bucket_arr[order]
            cuts = np.flatnonzero(np.diff(sorted_b)) + 1
            groups = {int(sorted_b[s]): idx for s, idx in zip(np.r_[0, cuts], np.split(order, cuts))}
        ranges: dict[int, tuple[int, int]] = {}
        skipped = 0
        for b, idx in groups.items():
            part = prepared if idx is None else prepared.take(pa.array(idx))
            part_kinds = kinds if idx is None or kinds is None else [kinds[i] for i in idx]
            with _io_errors(
                f"write to {name} bucket {b} (writer {writer}, seq {seq})",
                None,
                hint="nothing partial is visible; retry with the same writer and seq "
                "(a retry is applied exactly once)",
            ):
                got = self._write_bucket(table, b, part, part_kinds, writer, seq, origin_ts)
            if got is None:
                skipped += 1
            else:
                ranges[b] = got
        return WriteResult(ranges, skipped=skipped == len(groups))

    def _write_bucket(
        self,
        table: _Table,
        b: int,
        part: pa.Table,
        kinds: list[str] | None,
        writer: str,
        seq: int,
        origin_ts: float | None,
    ) -> tuple[int, int] | None:
        log = table.logs[b]
        meta = table.meta
        with log.locked():
            last = log.last_seq(writer)
            if last is not None and seq <= last:
                return None
            if not meta.is_primary_key:
                batch = _one_batch(part)
                return log.append(
                    _ipc(batch),
                    rows=batch.num_rows,
                    schema_id=meta.schema_id,
                    writer=writer,
                    seq=seq,
                    origin_ts=origin_ts,
                )
            tablet = table.tablets[b]
            try:
                return self._write_state(tablet, meta, part, kinds, log, writer, seq, origin_ts)
            finally:
                if self.shared_writers:  # the next process that writes this bucket opens the state in turn
                    tablet.close()

    @staticmethod
    def _write_state(
        tablet: Tablet,
        meta: TableMeta,
        part: pa.Table,
        kinds: list[str] | None,
        log: BucketLog,
        writer: str,
        seq: int,
        origin_ts: float | None,
    ) -> tuple[int, int]:
        """A primary-key write inside the bucket's lock: merge into the state, append the changelog, then
        update the state."""
        db = tablet.catch_up(meta)
        is_del = fastpk.delete_mask(kinds, part.num_rows)
        if fastpk.supported(meta, part, is_del):  # last_row / first_row: vectorised
            merged = fastpk.merge(meta, part, is_del, db)
            changelog = merged.changelog

            def commit(end: int) -> None:
                tablet.write_state(db, fastpk.write_batch(merged, end))
        else:  # the reference row loop
            merger = Merger(meta, part.column_names)
            rows = list(zip(*[to_py(part.column(i)) for i in range(part.num_columns)]))
            out_rows, out_kinds, touched = tablet.apply(meta, merger, rows, kinds, db)
            changelog = rows_to_table(meta.schema, out_rows, out_kinds)
            commit = functools.partial(tablet.commit, db, touched.items())
        batch = _one_batch(changelog)  # the changelog is durable first; the KV state follows it
        start, end = log.append(
            _ipc(batch),
            rows=batch.num_rows,
            schema_id=meta.schema_id,
            writer=writer,
            seq=seq,
            origin_ts=origin_ts,
        )
        commit(end)
        return start, end

    def _refreshed_logs(self, name: str) -> list[BucketLog]:
        """The bucket logs of a table, each brought up to date with what other processes committed."""
        logs = self._table(name).logs
        for log in logs:
            log.refresh()
        return logs

    def last_seq(self, name: str, writer: str) -> int | None:
        seqs = [s for s in (log.last_seq(writer) for log in self._refreshed_logs(name)) if s is not None]
        return max(seqs) if seqs else None

    # -- reads --------------------------------------------------------------------------------------
    def end_offsets(self, name: str) -> list[int]:
        return [log.end_offset for log in self._refreshed_logs(name)]

    def start_offsets(self, name: str) -> list[int]:
        return [log.first_offset for log in self._refreshed_logs(name)]

    def _columns(self, meta: TableMeta, columns: Sequence[str] | None) -> list[str]:
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

    def _bucket_log(self, table: _Table, bucket: int) -> BucketLog:
        if not isinstance(bucket, int) or not 0 <= bucket < len(table.logs):
            raise TidehouseError(
                ErrorCode.STORAGE_RANGE,
                f"{table.meta.name} has no bucket {bucket!r} (buckets: {len(table.logs)})",
                location=Location(path=table.meta.name),
            )
        return table.logs[bucket]

    def read(
        self,
        name: str,
        bucket: int,
        start: int,
        end: int | None = None,
        *,
        columns: Sequence[str] | None = None,
    ) -> Iterator[pa.RecordBatch]:
        table = self._table(name)
        meta = table.meta
        log = self._bucket_log(table, bucket)
        cols = self._columns(meta, columns)
        log.refresh()
        stop = log.end_offset if end is None else end
        if start < 0 or start > log.end_offset:
            raise TidehouseError(
                ErrorCode.STORAGE_RANGE,
                f"{name} bucket {bucket}: start offset {start} is outside "
                f"[{log.first_offset}, {log.end_offset}]",
                location=Location(path=name),
            )
        return self._read_iter(meta, log, bucket, start, stop, cols)

    def _read_iter(
        self, meta: TableMeta, log: BucketLog, bucket: int, start: int, stop: int, cols: list[str]
    ) -> Iterator[pa.RecordBatch]:
        frames = ((e.base_offset, e.rows, e.commit_ts, batch) for e, batch in log.frames(start, stop))
        return read_batches(meta, frames, bucket, start, stop, cols)

    def scan(self, name: str, *, columns: Sequence[str] | None = None) -> pa.Table:
        table = self._table(name)
        meta = table.meta
        cols = self._columns(meta, columns)
        if not meta.is_primary_key:
            logs = self._refreshed_logs(name)
            return scan_log(
                meta,
                cols,
                [(b, log.first_offset, log.end_offset) for b, log in enumerate(logs)],
                lambda b, start, stop: self._read_iter(meta, logs[b], b, start, stop, cols),
            )
        rows = []
        for tablet in table.tablets:
            rows.extend(tablet.scan_rows(meta))
        return rows_to_table(meta.schema, rows).select(cols)

    def lookup(self, name: str, keys: pa.Table) -> pa.Table:
        table = self._table(name)
        meta = table.meta
        tuples, buckets = lookup_keys(meta, keys)
        rows = []
        for b, tablet in enumerate(table.tablets):
            wanted = [t for t, bb in zip(tuples, buckets) if bb == b]
            if wanted:
                rows.extend(tablet.lookup_rows(meta, wanted))
        return rows_to_table(meta.schema, rows)

    def batch_info(self, name: str, bucket: int) -> BatchInfo | None:
        table = self._table(name)
        log = self._bucket_log(table, bucket)
        e = log.last_entry()
        return None if e is None else self._info(log, bucket, e)

    def offset_times(self, name: str, bucket: int, offset: int) -> BatchInfo | None:
        table = self._table(name)
        log = self._bucket_log(table, bucket)
        e = log.entry_at(offset)
        return None if e is None else self._info(log, bucket, e)

    @staticmethod
    def _info(log: BucketLog, bucket: int, e) -> BatchInfo:
        writer, _sid = log.frame_writer(e)
        return BatchInfo(
            bucket=bucket,
            base_offset=e.base_offset,
            rows=e.rows,
            commit_ts=e.commit_ts / 1e6,
            origin_ts=None if e.origin_ts == NO_ORIGIN else e.origin_ts / 1e6,
            writer=writer,
            seq=e.seq,
        )

    # -- housekeeping -------------------------------------------------------------------------------
    def delete_before(self, name: str, bucket: int, offset: int, *, older_than: float) -> int:
        table = self._table(name)
        log = self._bucket_log(table, bucket)
        if table.meta.is_primary_key:  # never below what the key-value state has (durably) applied
            tablet = table.tablets[bucket]
            applied = tablet.applied_offset(durable=False)
            if not log.deletable(min(offset, applied if applied is not None else 0), older_than):
                return 0  # the usual case of a frequent call: no flush of the state for nothing
            applied = tablet.applied_offset()
            offset = min(offset, applied if applied is not None else 0)
        return log.delete_before(offset, older_than)

    def close(self) -> None:
        with self._mutex:
            for t in self._tables.values():
                t.close()
            self._tables.clear()

    def __enter__(self) -> LocalTableStore:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


__all__ = ["LocalTableStore", "from_py"]

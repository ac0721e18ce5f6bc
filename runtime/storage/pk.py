"""Primary-key tablets: the current row per key in RocksDB, merge engines, and the changelog they emit.

State: one RocksDB (``rocksdict``, raw bytes) per bucket in ``bucket-<n>/kv``. A row key is ``b"r"`` + the
pickled tuple of the primary-key values; the value is the pickled tuple of every column (in schema order; a
row stored before a schema evolution is shorter and read with nulls in the new columns). Temporal values are
kept as their integer storage (µs, days, ...), so the codec never builds ``datetime`` objects.

Crash consistency: the bucket's log (the changelog) is the source of truth. The KV store records, in the same
``WriteBatch`` as the rows, the log offset its state reflects (key ``b"\\x00applied"``). A writer first
appends the changelog frame (durable), then applies the batch; on open it replays changelog frames after the
recorded offset (``+I``/``+U`` put the row, ``-D`` deletes it; ``-U`` is always followed by the ``+U`` of the
same key). Readers in other processes follow the KV as a RocksDB *secondary* instance (a scratch folder in the
system temp directory, removed on close), caught up at every call, and overlay the changelog written after its
recorded offset, so a lookup or scan always reflects exactly the committed log. Retention never deletes log
the state has not applied (:meth:`Tablet.applied_offset`), and a state write that fails (full disk) is
``STORAGE_IO`` and is caught up from the durable changelog by the next write.

Merge engines (an incoming row is an upsert unless its ``__change`` is ``-U``/``-D``, which deletes the key
under every engine; for ``aggregate`` that discards the accumulated values):

* ``last_row``: the new row replaces the old one (missing nullable columns are null).
* ``first_row``: the first row of a key is kept; later upserts are ignored.
* ``aggregate``: per column ``sum``/``min``/``max`` (nulls ignored), ``count`` (number of non-null values
  received), ``last_non_null``; columns without a function take the new value (``last``, which the store also
  accepts by name; flows cannot name it, see :mod:`runtime.core.literals`).
* ``partial_update``: only the columns present in the write are set (to the written value, null included);
  the others keep their value (null for a new key).

Changelog: ``+I`` for a new key, ``-U`` (old row) + ``+U`` (new row) for a change, ``-D`` (old row) for a
delete; nothing when the merged row equals the stored one (value by value, with NaN equal to NaN and null
equal to null). Rows of one write are applied in order, one by one: a delete followed in the same write by an
upsert of that key emits ``-D`` (old row) then ``+I`` (new row), never a ``-U``/``+U`` pair; a consumer that
applies the changelog in order ends in the same state either way. An incoming ``-U`` is a delete too, so a
changelog copied from another primary-key table (``-U`` old, ``+U`` new) becomes ``-D`` old, ``+I`` new.

``last_row`` and ``first_row`` writes take a vectorised path (:mod:`.fastpk`) that yields the same changelog
and state; the loop below is its reference and serves every other case.

Only one process at a time can hold a bucket's KV store for writing (a RocksDB rule): a writer keeps it open
until :meth:`Tablet.close`; another process trying to write the same bucket meanwhile waits up to
``lock_timeout`` seconds and then fails with ``STORAGE_LOCKED``.
"""

from __future__ import annotations

import contextlib
import math
import os
import pickle
import shutil
import socket
import tempfile
import time
import weakref
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
from rocksdict import AccessType, Options, Rdict, WriteBatch

from runtime.core.errors import ErrorCode, Location, TidehouseError
from runtime.core.literals import IMPLICIT_AGGREGATION
from runtime.storage.api import CHANGE, DELETE, INSERT, UPDATE_AFTER, UPDATE_BEFORE, TableMeta, bucket_of
from runtime.storage.log import BucketLog

APPLIED = b"\x00applied"
ROW = b"r"
_DUMPS = pickle.dumps
_LOADS = pickle.loads
_PROTO = 5


# -- row codec -------------------------------------------------------------------------------------------


def _storage_type(t: pa.DataType) -> pa.DataType | None:
    if pa.types.is_timestamp(t) or pa.types.is_date64(t) or pa.types.is_time64(t) or pa.types.is_duration(t):
        return pa.int64()
    if pa.types.is_date32(t) or pa.types.is_time32(t):
        return pa.int32()
    return None


def to_py(arr: pa.Array | pa.ChunkedArray) -> list:
    """Python values of a column; temporal values as their integer storage."""
    st = _storage_type(arr.type)
    if st is not None:
        arr = arr.combine_chunks() if isinstance(arr, pa.ChunkedArray) else arr
        return arr.view(st).to_pylist()
    return arr.to_pylist()


def from_py(values: Sequence[Any], t: pa.DataType) -> pa.Array:
    st = _storage_type(t)
    if st is not None:
        return pa.array(values, type=st).view(t)
    return pa.array(values, type=t)


def key_bytes(key: tuple) -> bytes:
    return ROW + _DUMPS(key, _PROTO)


def lookup_keys(meta: TableMeta, keys: pa.Table | pa.RecordBatch) -> tuple[list[tuple], np.ndarray]:
    """The keys of a ``lookup`` on a primary-key table, as tuples of Python values (what the state is keyed
    by), and the bucket of each. Key columns are cast to the table's types; a missing or uncastable one, or a
    log table, is an error naming the table."""
    name, loc = meta.name, Location(path=meta.name)
    if not meta.is_primary_key:
        raise TidehouseError(
            ErrorCode.TABLE_INVALID, f"lookup needs a primary-key table; {name} is a log table", location=loc
        )
    if isinstance(keys, pa.RecordBatch):
        keys = pa.Table.from_batches([keys])
    missing = [c for c in meta.primary_key if c not in keys.column_names]
    if missing:
        raise TidehouseError(
            ErrorCode.WRITE_INVALID, f"lookup on {name}: key columns {missing} are missing", location=loc
        )
    key_cols = []
    for c in meta.primary_key:
        col, t = keys.column(c), meta.schema.field(c).type
        try:
            key_cols.append(col.cast(t, safe=not pa.types.is_timestamp(t)) if col.type != t else col)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
            raise TidehouseError(
                ErrorCode.WRITE_INVALID,
                f"lookup on {name}: key column {c!r} of type {col.type} does not match {t}",
                location=loc,
            ) from exc
    key_table = pa.Table.from_arrays(key_cols, names=list(meta.primary_key))
    buckets = bucket_of(key_table, meta.effective_bucket_key, meta.buckets).to_numpy()
    return list(zip(*[to_py(c) for c in key_cols])), buckets


def rows_to_table(schema: pa.Schema, rows: Sequence[tuple], kinds: Sequence[str] | None = None) -> pa.Table:
    n = len(schema)
    cols = list(zip(*rows)) if rows else [()] * n
    arrays = []
    for i, f in enumerate(schema):
        values = cols[i] if i < len(cols) else [None] * len(rows)
        arrays.append(from_py(values, f.type))
    names = list(schema.names)
    if kinds is not None:
        arrays.append(pa.array(kinds, pa.string()))
        names.append(CHANGE)
    return pa.Table.from_arrays(arrays, names=names) if arrays else pa.table({})


# -- merging ---------------------------------------------------------------------------------------------


def _sum(a, b):
    return a if b is None else b if a is None else a + b


def _min(a, b):
    return a if b is None else b if a is None else min(a, b)


def _max(a, b):
    return a if b is None else b if a is None else max(a, b)


class Merger:
    """Applies incoming rows to current rows for one table definition and one set of present columns."""

    def __init__(self, meta: TableMeta, present: Sequence[str]) -> None:
        names = meta.schema.names
        self.n = len(names)
        self.engine = meta.merge_engine
        self.pos = [names.index(c) for c in present]  # schema index of each incoming column
        self.key_in = [list(present).index(c) for c in meta.primary_key]
        aggs = meta.aggregations
        pk = set(meta.primary_key)
        self.aggs = [(i, aggs.get(n, IMPLICIT_AGGREGATION)) for i, n in enumerate(names) if n not in pk]
        self.count_cols = [i for i, n in enumerate(names) if aggs.get(n) == "count"]
        self.identity = self.pos == list(range(self.n))  # the write has every column, in order

    def full(self, r: tuple) -> list | tuple:
        if self.identity:
            return r
        row = [None] * self.n
        for j, i in enumerate(self.pos):
            row[i] = r[j]
        return row

    def merge(self, old: tuple | None, r: tuple) -> tuple:
        engine = self.engine
        if engine == "last_row":
            return tuple(self.full(r))
        if engine == "first_row":
            return old if old is not None else tuple(self.full(r))
        if engine == "partial_update":
            row = list(old) + [None] * (self.n - len(old)) if old is not None else [None] * self.n
            for j, i in enumerate(self.pos):
                row[i] = r[j]
            return tuple(row)
        new = list(self.full(r))  # aggregate
        if old is None:
            for i in self.count_cols:
                new[i] = 0 if new[i] is None else 1
            return tuple(new)
        row = list(old) + [None] * (self.n - len(old))
        for i, fn in self.aggs:
            v = new[i]
            if fn == IMPLICIT_AGGREGATION:
                row[i] = v
            elif fn == "sum":
                row[i] = _sum(row[i], v)
            elif fn == "min":
                row[i] = _min(row[i], v)
            elif fn == "max":
                row[i] = _max(row[i], v)
            elif fn == "count":
                row[i] = (row[i] or 0) + (v is not None)
            elif v is not None:  # last_non_null
                row[i] = v
        return tuple(row)


def same_row(a: tuple, b: tuple) -> bool:
    """Row equality for the no-op check: ``==`` per value, except that NaN equals NaN."""
    if a == b:
        return True
    return len(a) == len(b) and all(x == y or (_is_nan(x) and _is_nan(y)) for x, y in zip(a, b, strict=True))


def _is_nan(v: Any) -> bool:
    return isinstance(v, float) and math.isnan(v)


def pad(row: tuple, n: int) -> tuple:
    return row if len(row) >= n else row + (None,) * (n - len(row))


# -- the tablet ------------------------------------------------------------------------------------------

STATE_BUFFER_BYTES = 16 << 20  # memtable (and so unflushed WAL) per bucket: what a reader's secondary replays


def _writer_options() -> Options:
    opts = Options(raw_mode=True)
    opts.set_write_buffer_size(STATE_BUFFER_BYTES)
    return opts


READERS = "kv.readers"  # per bucket: a folder per reading process, for its RocksDB secondary instance


def reader_scratch(folder: Path) -> str:
    """A new folder for this process's secondary instance under ``folder`` (``<pid>@<host>-<random>``),
    first removing those of this host's processes that no longer run: a process killed with ``kill -9``
    leaves its folder behind, and would otherwise leave it in the system's temp folder forever. Another
    host's folders (a root on a shared file system) are its own to remove."""
    folder.mkdir(parents=True, exist_ok=True)
    host = socket.gethostname()
    for entry in folder.iterdir():
        pid, _, rest = entry.name.partition("@")
        if rest.rsplit("-", 1)[0] == host and pid.isdigit() and not _running(int(pid)):
            shutil.rmtree(entry, ignore_errors=True)
    return tempfile.mkdtemp(prefix=f"{os.getpid()}@{host}-", dir=folder)


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


class Tablet:
    """The key-value state of one primary-key bucket."""

    def __init__(self, log: BucketLog, *, lock_timeout: float = 30.0) -> None:
        self.log = log
        self.path = log.path / "kv"
        self.lock_timeout = lock_timeout
        self._db: Rdict | None = None
        self._secondary: Rdict | None = None  # readers: see _reader_db
        self._scratch = ""

    # KV handles
    def _writer_db(self) -> Rdict:
        if self._db is not None:
            return self._db
        deadline = time.monotonic() + self.lock_timeout
        while True:
            try:
                self._db = Rdict(str(self.path), _writer_options())
                self._close_secondary()  # this process now reads through its writer handle
                return self._db
            except Exception as exc:  # rocksdict raises a plain Exception for a held LOCK
                locked = "lock" in str(exc).lower()
                if not locked or time.monotonic() > deadline:
                    raise TidehouseError(
                        ErrorCode.STORAGE_LOCKED if locked else ErrorCode.STORAGE_IO,
                        f"{self.log.table} bucket {self.log.bucket}: cannot open the primary-key state "
                        f"{self.path}: {exc}",
                        location=Location(file=str(self.path)),
                        hint="another process is writing this primary-key table; one writer process at a time"
                        if locked
                        else "check the disk (space, permissions) under the storage root",
                    ) from exc
                time.sleep(0.05)

    def _reader_db(self) -> tuple[Rdict | None, bool]:
        """(db, owned): this process's writer handle; else a cached *secondary* instance caught up with the
        writer's files and WAL (a few ms per call, where a fresh read-only open replays the whole WAL: seconds
        for a busy table); else, if a secondary cannot be opened, a read-only handle to close after use."""
        if self._db is not None:
            return self._db, False
        if not (self.path / "CURRENT").exists():
            return None, False
        if self._secondary is not None:
            try:
                self._secondary.try_catch_up_with_primary()
                return self._secondary, False
            except Exception:  # noqa: BLE001 - rocksdict raises plain Exception; files vanished: reopen
                self._close_secondary()
        scratch = ""
        try:
            scratch = reader_scratch(self.log.path / READERS)
            self._secondary = Rdict(
                str(self.path), Options(raw_mode=True), access_type=AccessType.secondary(scratch)
            )
            self._scratch = scratch
            weakref.finalize(self, shutil.rmtree, scratch, True)  # also when never closed
            return self._secondary, False
        except Exception:  # noqa: BLE001 - no temp space, or rocksdict's plain Exception: read-only below
            if scratch:
                shutil.rmtree(scratch, ignore_errors=True)
        for attempt in range(5):
            try:
                return Rdict(str(self.path), Options(raw_mode=True), access_type=AccessType.read_only()), True
            except Exception as exc:  # files may move under a read-only open while a writer compacts
                if attempt == 4:
                    raise TidehouseError(
                        ErrorCode.STORAGE_IO,
                        f"cannot read {self.path}: {exc}",
                        location=Location(file=str(self.path)),
                    ) from exc
                time.sleep(0.05)
        raise AssertionError("unreachable")

    def _close_secondary(self) -> None:
        if self._secondary is not None:
            try:
                self._secondary.close()
            finally:
                self._secondary = None
                shutil.rmtree(self._scratch, ignore_errors=True)

    def close(self) -> None:
        self._close_secondary()
        if self._db is not None:
            self._db.close()
            self._db = None

    def applied_offset(self, *, durable: bool = True) -> int | None:
        """The log offset the KV state has applied (None: no state yet). Retention must keep the log from
        there on, or a restart could not replay it. With ``durable`` this process's own writer handle is
        flushed first (memtable to synced files); another process's state is read as its WAL shows it."""
        with self.log._mutex:
            if self._db is not None:
                if durable:
                    self._db.flush(wait=True)
                return self._applied(self._db, None)
            db, owned = self._reader_db()
            try:
                return self._applied(db, None)
            finally:
                if owned:
                    db.close()

    # recovery
    @staticmethod
    def _applied(db: Rdict | None, default: int | None) -> int | None:
        raw = db.get(APPLIED) if db is not None else None
        return int(raw) if raw is not None else default

    def _tail(self, meta: TableMeta, start: int, end: int) -> Iterable[tuple[bytes, tuple | None]]:
        """(key bytes, row or None for deleted) for each changelog row in ``[start, end)``."""
        names = meta.schema.names
        key_idx = [names.index(c) for c in meta.primary_key]
        for e, batch in self.log.frames(start, end):
            lo, hi = max(start - e.base_offset, 0), min(end - e.base_offset, e.rows)
            if lo >= hi:
                continue
            batch = batch.slice(lo, hi - lo)
            cols = [
                to_py(batch.column(c)) if c in batch.schema.names else [None] * batch.num_rows for c in names
            ]
            kinds = batch.column(CHANGE).to_pylist()
            for row, kind in zip(zip(*cols), kinds):
                if kind == UPDATE_BEFORE:
                    continue
                key = key_bytes(tuple(row[i] for i in key_idx))
                yield key, (None if kind == DELETE else row)

    def catch_up(self, meta: TableMeta) -> Rdict:
        """Writer side (inside the bucket lock): replay changelog frames the KV state has not applied."""
        db = self._writer_db()
        applied = self._applied(db, self.log.first_offset)
        end = self.log.end_offset
        if applied < end:
            self.commit(db, self._tail(meta, applied, end), end)
        return db

    def apply(
        self, meta: TableMeta, merger: Merger, rows: Sequence[tuple], kinds: Sequence[str] | None, db: Rdict
    ) -> tuple[list[tuple], list[str], dict[bytes, tuple | None]]:
        """Merge ``rows`` into the state; return the changelog rows, their kinds and the new state per key."""
        key_in = merger.key_in
        keys = [key_bytes(tuple(r[j] for j in key_in)) for r in rows]
        uniq = list(dict.fromkeys(keys))
        n = merger.n
        state: dict[bytes, tuple | None] = {}
        for k, raw in zip(uniq, db.get(uniq) if uniq else []):
            state[k] = None if raw is None else pad(_LOADS(raw), n)
        out_rows: list[tuple] = []
        out_kinds: list[str] = []
        touched: dict[bytes, tuple | None] = {}
        for idx, (k, r) in enumerate(zip(keys, rows)):
            old = state[k]
            kind = kinds[idx] if kinds is not None else None
            if kind in (UPDATE_BEFORE, DELETE):
                if old is not None:
                    out_rows.append(old)
                    out_kinds.append(DELETE)
                    state[k] = touched[k] = None
                continue
            new = merger.merge(old, r)
            if old is None:
                out_rows.append(new)
                out_kinds.append(INSERT)
            elif same_row(new, old):
                continue
            else:
                out_rows.append(old)
                out_kinds.append(UPDATE_BEFORE)
                out_rows.append(new)
                out_kinds.append(UPDATE_AFTER)
            state[k] = touched[k] = new
        return out_rows, out_kinds, touched

    def commit(self, db: Rdict, rows: Iterable[tuple[bytes, tuple | None]], applied: int) -> None:
        """Write the state of each key (``None``: deleted) and the log offset it reflects, in one batch."""
        wb = WriteBatch(raw_mode=True)
        for k, row in rows:
            if row is None:
                wb.delete(k)
            else:
                wb.put(k, _DUMPS(row, _PROTO))
        wb.put(APPLIED, str(applied).encode())
        self.write_state(db, wb)

    def write_state(self, db: Rdict, wb: WriteBatch) -> None:
        """Apply one ``WriteBatch`` to the state. A failure (full disk, I/O error) is STORAGE_IO; the handle
        is dropped (RocksDB may refuse writes after a background error) and the next write reopens it and
        catches up from the changelog, which is already durable."""
        try:
            db.write(wb)
        except Exception as exc:  # rocksdict raises a plain Exception for RocksDB I/O errors
            if db is self._db:
                with contextlib.suppress(Exception):
                    self.close()
            raise TidehouseError(
                ErrorCode.STORAGE_IO,
                f"{self.log.table} bucket {self.log.bucket}: the primary-key state {self.path} could not be "
                f"written: {exc}",
                location=Location(file=str(self.path)),
                hint="the changelog is durable; the state catches up from it on the next write once the disk "
                "works again (a retry with the same writer and seq is a no-op)",
            ) from exc

    # reads
    def _overlay(self, meta: TableMeta, db: Rdict | None) -> dict[bytes, tuple | None]:
        applied = self._applied(db, self.log.first_offset)
        self.log.refresh()
        end = self.log.end_offset
        return dict(self._tail(meta, applied, end)) if applied < end else {}

    def scan_rows(self, meta: TableMeta) -> list[tuple]:
        n = len(meta.schema)
        with self.log._mutex:
            db, owned = self._reader_db()
            try:
                overlay = self._overlay(meta, db)
                rows = []
                if db is not None:
                    for k, v in db.items(from_key=ROW):
                        if k in overlay:
                            continue
                        rows.append(pad(_LOADS(v), n))
                rows.extend(pad(r, n) for r in overlay.values() if r is not None)
                return rows
            finally:
                if owned:
                    db.close()

    def lookup_rows(self, meta: TableMeta, keys: Sequence[tuple]) -> list[tuple]:
        n = len(meta.schema)
        kb = [key_bytes(k) for k in keys]
        with self.log._mutex:
            db, owned = self._reader_db()
            try:
                overlay = self._overlay(meta, db)
                stored = db.get(kb) if (db is not None and kb) else [None] * len(kb)
                out = []
                for k, raw in zip(kb, stored):
                    if k in overlay:
                        row = overlay[k]
                    elif raw is None:
                        row = None
                    else:
                        row = _LOADS(raw)
                    if row is not None:
                        out.append(pad(row, n))
                return out
            finally:
                if owned:
                    db.close()

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
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

import pyarrow as pa

from runtime.core.errors import ErrorCode, Location, TidehouseError
from runtime.core.settings import default
from runtime.storage import batches, fastpk
from runtime.storage import meta as metamod
from runtime.storage.api import BatchInfo, TableMeta, TableStore, WriteResult
from runtime.storage.frames import NO_ORIGIN, ipc_streams
from runtime.storage.log import BucketLog
from runtime.storage.pk import Merger, Tablet, from_py, lookup_keys, rows_to_table, to_py


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


def _append(
    log: BucketLog, meta: TableMeta, rows: pa.Table, writer: str, seq: int, origin_ts: float | None
) -> tuple[int, int]:
    """Append ``rows`` as one frame (Arrow IPC stream) to the bucket's log; its offset range."""
    batch = batches.one_batch(rows)
    payload, _ = ipc_streams([batch])
    return log.append(
        payload,
        rows=batch.num_rows,
        schema_id=meta.schema_id,
        writer=writer,
        seq=seq,
        origin_ts=origin_ts,
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
                    raise batches.table_exists(wanted.name)
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
                raise batches.unknown_table(name)
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
        prepared, kinds = batches.prepare(meta, data)
        if prepared.num_rows == 0:
            return WriteResult({})
        groups = batches.split_buckets(meta, prepared, kinds)
        ranges: dict[int, tuple[int, int]] = {}
        skipped = 0
        for b, (part, part_kinds) in groups.items():
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
                return _append(log, meta, part, writer, seq, origin_ts)
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
        merged = fastpk.merge(meta, part, is_del, db) if fastpk.supported(meta, part, is_del) else None
        if merged is not None:  # last_row / first_row / aggregate: vectorised
            changelog = merged.changelog

            def commit(end: int) -> None:
                tablet.write_state(db, fastpk.write_batch(merged, end))
        else:  # the reference row loop
            merger = Merger(meta, part.column_names)
            rows = list(zip(*[to_py(part.column(i)) for i in range(part.num_columns)]))
            out_rows, out_kinds, touched = tablet.apply(meta, merger, rows, kinds, db)
            changelog = rows_to_table(meta.schema, out_rows, out_kinds)
            commit = functools.partial(tablet.commit, db, touched.items())
        # the changelog is durable first; the KV state follows it
        start, end = _append(log, meta, changelog, writer, seq, origin_ts)
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

    @staticmethod
    def _bucket_log(table: _Table, bucket: int) -> BucketLog:
        batches.check_bucket(table.meta, bucket)
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
        cols = batches.read_columns(meta, columns)
        log.refresh()
        stop = log.end_offset if end is None else end
        batches.check_start(name, bucket, start, log.first_offset, log.end_offset, stop)
        return self._read_iter(meta, log, bucket, start, stop, cols)

    def _read_iter(
        self, meta: TableMeta, log: BucketLog, bucket: int, start: int, stop: int, cols: list[str]
    ) -> Iterator[pa.RecordBatch]:
        frames = ((e.base_offset, e.rows, e.commit_ts, batch) for e, batch in log.frames(start, stop))
        return batches.read_batches(meta, frames, bucket, start, stop, cols)

    def scan(self, name: str, *, columns: Sequence[str] | None = None) -> pa.Table:
        table = self._table(name)
        meta = table.meta
        cols = batches.read_columns(meta, columns)
        if not meta.is_primary_key:
            logs = self._refreshed_logs(name)
            return batches.scan_log(
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
    def checkpoint_state(self, name: str) -> list[int]:
        """The key-value state (RocksDB, with the offset it applied) is durable on its own: it covers the
        whole changelog (``delete_before`` still never deletes what it has not applied)."""
        return self.end_offsets(name)

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

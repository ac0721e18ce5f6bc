"""The hot storage on an object store: :class:`ObjectTableStore` (see the package docstring)."""

from __future__ import annotations

import contextlib
import threading
import time
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import replace

import pyarrow as pa
import pyarrow.fs as pafs

from runtime.core.errors import ErrorCode, Location, TidehouseError
from runtime.core.literals import is_internal_table
from runtime.core.settings import default
from runtime.storage import batches
from runtime.storage import meta as metamod
from runtime.storage.api import BatchInfo, Bootstrap, TableMeta, TableStore, WriteResult
from runtime.storage.objectstore import blobs
from runtime.storage.objectstore.garbage import collect_garbage
from runtime.storage.objectstore.metacommit import Fenced, Stale
from runtime.storage.objectstore.metaschema import NewFrame
from runtime.storage.objectstore.metastore import Metastore, disconnected
from runtime.storage.objectstore.reader import FrameReader, Table, batch_info
from runtime.storage.objectstore.state import BucketState, load_state, merge
from runtime.storage.pk import lookup_keys, rows_to_table

_ATTEMPTS = 4  # a primary-key write whose state turned out stale is recomputed this many times at most


class ObjectTableStore(TableStore):
    """Hot tables as immutable data objects on a pyarrow filesystem, committed through a SQL metastore.

    ``filesystem`` + ``base`` say where the objects go (``bucket/prefix`` on S3, a folder on a
    ``LocalFileSystem``); ``metastore`` is a SQLAlchemy URL (default, only on a local filesystem:
    ``sqlite:///<base>/metastore.db``); ``store_id`` keys this root's rows in the metastore (default: the root
    URI). ``bootstrap(meta, bucket) -> (rows, offset) | None`` gives a snapshot of a primary-key bucket to
    rebuild its state from (else: the changelog from offset 0). ``delete_before`` returns the number of frames
    it deleted (a frame is the unit of retention here; segments exist only on local disk).

    A primary-key bucket has one writer at a time: writing takes it (a new epoch) and a writer whose epoch
    moved on is fenced (``STORAGE_LOCKED``). With ``shared_writers`` (Spark's Python workers, which take turns
    writing a bucket, one task per bucket and batch) a fenced writer takes the bucket back and writes again
    against the caught-up state; the commit's end-offset check still refuses a changelog computed on a stale
    state, so turns never lose an update.
    """

    def __init__(
        self,
        filesystem: pafs.FileSystem,
        base: str,
        *,
        metastore: str | None = None,
        store_id: str | None = None,
        fsync: bool = default("storage.fsync"),
        bootstrap: Bootstrap | None = None,
        cache_bytes: int = blobs.CACHE_BYTES,
        gc_interval: float = 3600.0,
        gc_grace: float = 3600.0,
        shared_writers: bool = False,
        snapshot_min_rows: int = default("storage.state_snapshot_rows"),
    ) -> None:
        self.fs = filesystem
        self.shared_writers = shared_writers
        self.base = base.rstrip("/")
        local = filesystem.type_name == "local"
        if metastore is None:
            if not local:
                raise TidehouseError(
                    ErrorCode.CONFIG_INVALID,
                    f"hot storage {self.base}: storage.metastore is required for an object-store root",
                    location=Location(path="storage.metastore"),
                    hint="set storage.metastore to a SQLAlchemy URL every host can reach, e.g. "
                    "postgresql+psycopg://user:${PGPASSWORD}@host/db (a local SQLite file would be a "
                    "metastore other hosts cannot see)",
                )
            metastore = f"sqlite:///{self.base}/metastore.db"
        self.root = store_id or (f"file://{self.base}" if local else f"s3://{self.base}")
        self.metastore = Metastore(metastore, self.root, durable=fsync)
        self.blobs = blobs.Blobs(filesystem, cache_bytes=cache_bytes)
        self.reader = FrameReader(self.metastore, self.blobs)
        self.bootstrap = bootstrap
        self.owner = uuid.uuid4().hex  # fencing identity of this instance
        self.gc_interval, self.gc_grace = gc_interval, gc_grace
        # a bucket's state is snapshotted once its changelog since the last snapshot is this long (and as long
        # as the state): checkpoint_state
        self.snapshot_min_rows = snapshot_min_rows
        self._last_gc: dict[str, float] = {}
        self._epochs: dict[tuple[str, int], int] = {}
        self._states: dict[tuple[str, int], BucketState] = {}
        self._locks: dict[tuple[str, int], threading.Lock] = {}
        self._write_meta: dict[str, Table] = {}  # table definitions as writes last saw them
        self._seqs_seen: dict[
            tuple[str, str], int
        ] = {}  # (incarnation, writer) -> highest seq it committed here
        self._mutex = threading.RLock()
        if local:
            filesystem.create_dir(self.base, recursive=True)
        else:
            blobs.check_root(filesystem, self.base)

    @classmethod
    def from_uri(cls, root: str, *, s3: dict | None = None, **kwargs) -> ObjectTableStore:
        fs, base = blobs.filesystem_for(root, s3)
        return cls(fs, base, store_id=root.rstrip("/"), **kwargs)

    # -- catalog ------------------------------------------------------------------------------------
    def _table(self, name: str) -> Table:
        got = self.metastore.table(name) if isinstance(name, str) else None
        if got is None:
            raise batches.unknown_table(name)
        inc, version, doc = got
        return Table(metamod.from_json(doc), inc, version)

    def create_table(self, meta: TableMeta, *, exist_ok: bool = True) -> TableMeta:
        wanted = metamod.validate(meta)
        with self._mutex:
            self._write_meta.pop(wanted.name, None)
        for _ in range(20):
            got = self.metastore.table(wanted.name)
            if got is None:
                created = replace(wanted, schema_id=0)
                if (
                    self.metastore.create(wanted.name, wanted.buckets, metamod.to_json(created, []))
                    is not None
                ):
                    return created
                continue  # created by someone else meanwhile: look again
            if not exist_ok:
                raise batches.table_exists(wanted.name)
            inc, version, doc = got
            current = metamod.from_json(doc)
            evolved = metamod.evolve(current, wanted)
            if evolved is None:
                return current
            if self.metastore.update_doc(inc, version, metamod.to_json(evolved, doc["schemas"])):
                return evolved
        raise TidehouseError(
            ErrorCode.STORAGE_LOCKED,
            f"table {wanted.name} keeps changing under create_table",
            location=Location(path=wanted.name),
        )

    def get_table(self, name: str) -> TableMeta:
        return self._table(name).meta

    def incarnation(self, name: str) -> str:
        return self._table(name).incarnation

    def list_tables(self) -> list[str]:
        return self.metastore.table_names()

    def has_table(self, name: str) -> bool:
        return isinstance(name, str) and self.metastore.table(name) is not None

    def drop_table(self, name: str) -> None:
        inc = self.metastore.drop(name)
        if inc is None:
            raise batches.unknown_table(name)
        self._forget(inc)
        with contextlib.suppress(TidehouseError):  # leftovers are garbage: collect_garbage deletes them
            self._delete_tree(blobs.object_dir(self.base, name, inc).rsplit("/", 1)[0])

    def _forget(self, inc: str) -> None:
        with self._mutex:
            self._write_meta = {n: t for n, t in self._write_meta.items() if t.incarnation != inc}
            for d in (self._states, self._epochs, self._locks):
                for key in [k for k in d if k[0] == inc]:
                    del d[key]

    def _delete_tree(self, path: str) -> None:
        try:
            self.fs.delete_dir(path)
        except FileNotFoundError:
            pass
        except (OSError, pa.ArrowException) as exc:
            raise blobs.io_error("deleting", path, exc) from exc

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
        # the table's definition is cached for writes: it is read again when the data names a column the
        # cached one lacks, and when the commit finds the table dropped (then the write goes to the new one)
        for fresh in (False, True):
            table = self._write_table(name, fresh)
            try:
                prepared, kinds = batches.prepare(table.meta, data)
                if prepared.num_rows == 0:
                    return WriteResult({})
                groups = batches.split_buckets(table.meta, prepared, kinds)
                return self._write_groups(table, groups, writer, seq, origin_ts)
            except TidehouseError as exc:
                if fresh or exc.code not in (ErrorCode.WRITE_INVALID, ErrorCode.TABLE_UNKNOWN):
                    raise
        raise AssertionError("unreachable")

    def _write_table(self, name: str, fresh: bool) -> Table:
        with self._mutex:
            cached = None if fresh else self._write_meta.get(name)
        if cached is None:
            cached = self._table(name)
            with self._mutex:
                self._write_meta[name] = cached
        return cached

    def _write_groups(
        self, table: Table, groups: dict[int, tuple], writer: str, seq: int, origin_ts: float | None
    ) -> WriteResult:
        meta = table.meta
        with self._write_locks(table, sorted(groups) if meta.is_primary_key else []):
            reconnected = False
            for _ in range(_ATTEMPTS):
                try:
                    return self._write_once(table, groups, writer, seq, origin_ts)
                except Stale:
                    continue  # the state was behind the bucket (another writer of this instance's epoch)
                except TidehouseError as exc:
                    # a pooled connection the server dropped (restart, idle timeout): retry once on a new one;
                    # had the lost COMMIT gone through, the retry finds the seq committed and is a no-op
                    if reconnected or not disconnected(exc):
                        raise
                    reconnected = True
        raise TidehouseError(
            ErrorCode.STORAGE_LOCKED,
            f"write to {meta.name} (writer {writer}, seq {seq}): the "
            f"buckets kept moving under {_ATTEMPTS} attempts",
            location=Location(path=meta.name),
            hint="one writer per primary-key bucket at a time; retry with the same seq",
        )

    @contextlib.contextmanager
    def _write_locks(self, table: Table, buckets: list[int]) -> Iterator[None]:
        with self._mutex:
            locks = [self._locks.setdefault((table.incarnation, b), threading.Lock()) for b in buckets]
        with contextlib.ExitStack() as stack:
            for lock in locks:
                stack.enter_context(lock)
            yield

    def _write_once(
        self, table: Table, groups: dict[int, tuple], writer: str, seq: int, origin_ts: float | None
    ) -> WriteResult:
        meta, inc = table.meta, table.incarnation
        known = self._seqs_seen.get((inc, writer))
        # drop the buckets that already have this seq (a replay after a restart) before doing any work; a
        # writer this instance has seen commit a lower seq needs no look (the commit checks again anyway)
        done = {} if known is not None and seq > known else self.metastore.seqs(inc, writer)
        todo = {b: g for b, g in groups.items() if b not in done or seq > done[b]}
        if not todo:
            return WriteResult({}, skipped=True)
        merges, epochs, expected, new_batches = {}, {}, {}, {}
        for b, (part, kinds) in sorted(todo.items()):
            if meta.is_primary_key:
                state = self._writer_state(table, b)
                epochs[b], expected[b] = self._epochs[(inc, b)], state.applied
                merges[b] = merge(meta, state, part, kinds)
                changelog = merges[b].changelog
                if changelog.num_rows:
                    new_batches[b] = batches.one_batch(changelog)
            else:
                new_batches[b] = batches.one_batch(part)
        obj, parts, buf = "", {b: NewFrame(0) for b in todo}, None
        if new_batches:
            obj = blobs.new_object_name(self.base, meta.name, inc)
            order = sorted(new_batches)
            buf, placed = blobs.encode([new_batches[b] for b in order])
            for b, p in zip(order, placed):
                parts[b] = NewFrame(new_batches[b].num_rows, p.position, p.length, p.crc)
                self.reader.verified.add((obj, p.position))
        put = None
        if buf is not None and self.metastore.row_locks:
            # the put runs while the transaction locks and checks the buckets and records the frames (row
            # locks: only this write's buckets wait); COMMIT waits for the put. On SQLite the lock is the
            # whole database, so there the put comes first
            put = self.reader.executor().submit(self.blobs.put, obj, buf)
        elif buf is not None:
            self.blobs.put(obj, buf)  # crash after this line: an orphan object, never visible
        try:
            with self.metastore.committing(
                inc, writer=writer, seq=seq, buckets=list(parts), epochs=epochs, expected=expected
            ) as commit:
                ranges = commit.record(
                    obj,
                    parts,
                    commit_us=time.time_ns() // 1000,
                    origin_us=None if origin_ts is None else int(origin_ts * 1e6),
                    schema_id=meta.schema_id,
                )
                if put is not None:  # the transaction commits only once its object is whole on storage;
                    put.result()  # a failed put rolls it back
        except (Fenced, Stale) as exc:
            if put is not None:
                with contextlib.suppress(Exception):
                    put.result()
            if obj:
                self._discard(obj)
            if isinstance(exc, Stale):
                raise
            if self.shared_writers:  # a writer that takes turns with others: take the bucket back, retry
                with self._mutex:
                    self._epochs.pop((inc, exc.bucket), None)
                raise Stale(exc.bucket, -1) from None
            raise TidehouseError(
                ErrorCode.STORAGE_LOCKED,
                f"write to {meta.name} bucket {exc.bucket} (writer {writer}, seq {seq}): this store was "
                f"fenced by a newer writer of the bucket (epoch {exc.epoch}, owner {exc.owner}); nothing "
                "was written",
                location=Location(path=meta.name),
                params={"bucket": exc.bucket, "epoch": exc.epoch},
                hint="one writer per primary-key bucket: the newest one wins; stop the other writer, or open "
                "a new store to take the bucket over",
            ) from None
        except BaseException:
            if put is not None:
                with contextlib.suppress(BaseException):
                    put.result()
            if obj:  # the commit may or may not have happened: the object stays (collected if orphaned)
                self.blobs.forget(obj)
            raise
        out = {}
        for b, rng in ranges.items():
            if rng is None:  # committed meanwhile under this seq: a replay
                continue
            out[b] = rng
            if b in merges:
                m = merges[b]
                self._states[(inc, b)].apply(m.puts, m.deletes, rng[1])
        if out:
            self._seqs_seen[(inc, writer)] = max(seq, self._seqs_seen.get((inc, writer), seq))
        if obj and not out:
            self._discard(obj)
        return WriteResult(out, skipped=not out)  # a no-op upsert that committed its seq has an empty range

    def _discard(self, obj: str) -> None:
        """An object whose commit did not happen: delete it now (else garbage collection does)."""
        with contextlib.suppress(TidehouseError):
            self.blobs.delete([obj])

    def last_seq(self, name: str, writer: str) -> int | None:
        seqs = self.metastore.seqs(self._table(name).incarnation, writer)
        return max(seqs.values()) if seqs else None

    # -- primary-key state --------------------------------------------------------------------------
    def _writer_state(self, table: Table, bucket: int) -> BucketState:
        key = (table.incarnation, bucket)
        if (
            key not in self._epochs
        ):  # take the bucket first, then load: nothing the old owner commits is missed
            self._epochs[key] = self.metastore.acquire(table.incarnation, bucket, self.owner)
        return self._state(table, bucket)

    def _state(self, table: Table, bucket: int, end: int | None = None) -> BucketState:
        """The bucket's state, loaded if missing and caught up with the changelog to its end offset.

        A state whose changelog tail retention deleted meanwhile (a reader's cache left behind, or a snapshot
        superseded between the bootstrap and the catch-up), or whose registered snapshot was replaced between
        reading the registration and the object, is loaded again from a newer snapshot."""
        key = (table.incarnation, bucket)
        for attempt in range(_ATTEMPTS):
            with self._mutex:
                state = self._states.get(key)
                if state is None:
                    try:
                        state = self._states[key] = self._load(table, bucket)
                    except TidehouseError as exc:
                        if exc.code is not ErrorCode.STORAGE_RANGE or attempt == _ATTEMPTS - 1:
                            raise
                        continue
            with state.lock:
                if end is None:
                    end = self._head(table, bucket).end_offset
                try:
                    if state.applied < end:
                        for frame, batch in self.reader.frames(table, bucket, state.applied, end):
                            lo = max(state.applied - frame.base_offset, 0)
                            state.replay(table.meta, batch.slice(lo) if lo else batch, frame.end_offset)
                        state.applied = max(state.applied, end)
                    return state
                except TidehouseError as exc:
                    if exc.code is not ErrorCode.STORAGE_RANGE or attempt == _ATTEMPTS - 1:
                        raise
                    with self._mutex:  # trimmed under the cached state: start again from a snapshot
                        if self._states.get(key) is state:
                            del self._states[key]
        raise AssertionError("unreachable")

    def _load(self, table: Table, bucket: int) -> BucketState:
        """From the bucket's own snapshot (state tables, :meth:`checkpoint_state`), else the bootstrap (the
        lake's), else from offset 0."""
        head = self._head(table, bucket)
        own = self.metastore.snapshot(table.incarnation, bucket)
        if own is not None:
            offset, obj = own
            try:
                rows = blobs.decode_table(self.blobs.get(obj))
                self.blobs.forget(obj)  # read once: the state holds the rows now
            except FileNotFoundError:
                raise TidehouseError(
                    ErrorCode.STORAGE_RANGE,
                    f"{table.meta.name} bucket {bucket}: state snapshot {obj} was replaced meanwhile",
                    location=Location(path=table.meta.name),
                ) from None
            return load_state(table.meta, bucket, (rows, offset), head)
        got = self.bootstrap(table.meta, bucket) if self.bootstrap is not None else None
        return load_state(table.meta, bucket, got, head)

    def checkpoint_state(self, name: str) -> list[int]:
        """Per bucket, the offset below which primary-key table ``name``'s changelog is no longer needed to
        rebuild its state: its registered snapshot's. A bucket whose changelog since that snapshot is at least
        as long as its state (and at least ``snapshot_min_rows``) gets a new snapshot first
        (docs/architecture.md, "Retention of state tables")."""
        table = self._table(name)
        if not table.meta.is_primary_key:
            raise TidehouseError(ErrorCode.INTERNAL, f"{name} is a log table: it has no state to snapshot")
        covered = []
        for head in self.metastore.heads(table.incarnation):
            own = self.metastore.snapshot(table.incarnation, head.bucket)
            done = own[0] if own is not None else 0
            if head.end_offset - done >= self.snapshot_min_rows:
                state = self._state(table, head.bucket, head.end_offset)
                with state.lock:  # the rows and the offset they reflect, together
                    if state.applied - done >= max(len(state.rows), self.snapshot_min_rows):
                        offset = state.applied
                        rows = rows_to_table(table.meta.schema, state.scan_rows(len(table.meta.schema)))
                    else:
                        offset = None
                if offset is not None:
                    obj = blobs.new_snapshot_name(self.base, name, table.incarnation, head.bucket, offset)
                    self.blobs.put(obj, blobs.encode_table(rows))
                    self.blobs.forget(obj)  # not read back by this process: its state has the rows
                    gone = self.metastore.register_snapshot(table.incarnation, head.bucket, offset, obj)
                    if gone is not None:
                        with contextlib.suppress(TidehouseError):  # else collected as garbage later
                            self.blobs.delete([gone])
                    if gone != obj:
                        done = offset
            covered.append(done)
        return covered

    # -- reads --------------------------------------------------------------------------------------
    def _head(self, table: Table, bucket: int):
        batches.check_bucket(table.meta, bucket)
        head = self.metastore.head(table.incarnation, bucket)
        if head is None:
            raise TidehouseError(
                ErrorCode.TABLE_UNKNOWN,
                f"hot table {table.meta.name} was dropped meanwhile",
                location=Location(path=table.meta.name),
            )
        return head

    def end_offsets(self, name: str) -> list[int]:
        return [h.end_offset for h in self.metastore.heads(self._table(name).incarnation)]

    def start_offsets(self, name: str) -> list[int]:
        return [h.start_offset for h in self.metastore.heads(self._table(name).incarnation)]

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
        cols = batches.read_columns(table.meta, columns)
        head = self._head(table, bucket)
        stop = head.end_offset if end is None else end
        batches.check_start(name, bucket, start, head.start_offset, head.end_offset, stop)
        if start < head.start_offset:
            raise TidehouseError(
                ErrorCode.STORAGE_RANGE,
                f"{name} bucket {bucket}: offset {start} was deleted by "
                f"retention (earliest kept offset {head.start_offset})",
                location=Location(path=name),
            )
        return self._read_iter(table, bucket, start, stop, cols)

    def _read_iter(
        self, table: Table, bucket: int, start: int, stop: int, cols: list[str]
    ) -> Iterator[pa.RecordBatch]:
        frames = (
            (f.base_offset, f.rows, f.commit_us, batch)
            for f, batch in self.reader.frames(table, bucket, start, stop)
        )
        return batches.read_batches(table.meta, frames, bucket, start, stop, cols)

    def scan(self, name: str, *, columns: Sequence[str] | None = None) -> pa.Table:
        table = self._table(name)
        meta = table.meta
        cols = batches.read_columns(meta, columns)
        heads = self.metastore.heads(table.incarnation)
        if not meta.is_primary_key:
            return batches.scan_log(
                meta,
                cols,
                [(h.bucket, h.start_offset, h.end_offset) for h in heads],
                lambda b, start, stop: self._read_iter(table, b, start, stop, cols),
            )
        rows = []
        n = len(meta.schema)
        for h in heads:
            state = self._state(table, h.bucket, h.end_offset)
            with state.lock:
                rows.extend(state.scan_rows(n))
        return rows_to_table(meta.schema, rows).select(cols)

    def lookup(self, name: str, keys: pa.Table) -> pa.Table:
        table = self._table(name)
        meta = table.meta
        tuples, buckets = lookup_keys(meta, keys)
        rows, n = [], len(meta.schema)
        heads = {h.bucket: h for h in self.metastore.heads(table.incarnation)}
        for b in sorted({int(x) for x in buckets}):
            state = self._state(table, b, heads[b].end_offset)
            with state.lock:
                rows.extend(state.lookup_rows([t for t, bb in zip(tuples, buckets) if bb == b], n))
        return rows_to_table(meta.schema, rows)

    def batch_info(self, name: str, bucket: int) -> BatchInfo | None:
        table = self._table(name)
        self._head(table, bucket)
        return batch_info(self.metastore.frame_at(table.incarnation, bucket, None))

    def offset_times(self, name: str, bucket: int, offset: int) -> BatchInfo | None:
        table = self._table(name)
        self._head(table, bucket)
        return batch_info(self.metastore.frame_at(table.incarnation, bucket, offset))

    # -- housekeeping -------------------------------------------------------------------------------
    def delete_before(self, name: str, bucket: int, offset: int, *, older_than: float) -> int:
        table = self._table(name)
        self._head(table, bucket)
        if is_internal_table(name):  # a query's state: only its own snapshot covers its changelog
            own = self.metastore.snapshot(table.incarnation, bucket)
            offset = min(offset, own[0] if own is not None else 0)
            if offset <= 0:
                return 0
        elif table.meta.is_primary_key and self.bootstrap is None:
            # the changelog is the only copy of a primary-key state this store can rebuild without a snapshot
            # source: retention keeps it whole (as the local store keeps what its state has not applied)
            return 0
        deleted, orphans = self.metastore.trim(table.incarnation, bucket, offset, int(older_than * 1e6))
        self.blobs.delete(orphans)  # a crash before this: the objects are orphans, collected later
        now = time.monotonic()
        if now - self._last_gc.get(name, -float("inf")) >= self.gc_interval:
            self._last_gc[name] = now
            self.collect_garbage(name)
        return deleted

    def collect_garbage(self, name: str | None = None, *, grace: float | None = None) -> int:
        """Delete data objects no committed frame references, last modified more than ``grace`` seconds ago
        (default ``gc_grace``), of one table (or of every table under the root, including dropped ones).
        Returns how many objects were deleted."""
        grace = self.gc_grace if grace is None else grace
        return collect_garbage(self.fs, self.base, self.metastore, self.blobs, name, grace)

    def close(self) -> None:
        with self._mutex:
            self._states.clear()
            self._epochs.clear()
            self._write_meta.clear()
            self._seqs_seen.clear()
            self.blobs.clear()
            self.reader.close()

    def __enter__(self) -> ObjectTableStore:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

"""The metastore of the object-store hot storage: tables, bucket heads, committed frames, writer seqs.

A SQL database through SQLAlchemy Core (PostgreSQL for a team, SQLite for one machine). Every commit of a
write is **one transaction** that locks the bucket rows it touches (``SELECT … FOR UPDATE`` on PostgreSQL;
SQLite's ``BEGIN IMMEDIATE`` takes the database write lock), checks the writer's seq (idempotency), a
primary-key bucket's fencing epoch and expected end offset, inserts the frame rows (assigning offsets) and
advances the bucket's end offset. Rows are keyed by the storage root (``store``), so one database can hold the
metadata of several roots. See docs/architecture.md, "Hot storage on an object store".

The tables and the records read from them are in :mod:`.metaschema`; the commit transaction's statements in
:mod:`.metacommit`; this module holds the engines (one per URL in a process) and :class:`Metastore`.
"""

from __future__ import annotations

import contextlib
import functools
import json
import threading
import uuid
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.engine import Connection, Engine

from runtime.core.dbsessions import mark_lost_sessions
from runtime.core.errors import ErrorCode, Location, TidehouseError
from runtime.storage.objectstore.metacommit import LOCK_HEADS, Commit, Fenced, Stale
from runtime.storage.objectstore.metaschema import (
    BUCKETS,
    FRAMES,
    METADATA,
    SNAPSHOTS,
    TABLES,
    WRITERS,
    Frame,
    Head,
    NewFrame,
    frame_of,
)

_ENGINES: dict[tuple[str, bool], Engine] = {}
_ENGINES_LOCK = threading.Lock()


def disconnected(exc: BaseException) -> bool:
    """Whether ``exc`` (or its cause) is a database connection that was lost (the pool discards it)."""
    cause = exc if isinstance(exc, sa.exc.DBAPIError) else exc.__cause__
    return isinstance(cause, sa.exc.DBAPIError) and bool(cause.connection_invalidated)


def shown_url(url: str) -> str:
    """The URL with its password hidden (for messages)."""
    try:
        return sa.make_url(url).render_as_string(hide_password=True)
    except Exception:  # noqa: BLE001 - an unparsable URL is reported by the caller
        return "<unparsable URL>"


def engine_for(url: str, *, durable: bool = True) -> Engine:
    """One engine per URL in a process (SQLite: WAL, a busy timeout, ``BEGIN IMMEDIATE`` transactions)."""
    key = (url, durable)
    with _ENGINES_LOCK:
        engine = _ENGINES.get(key)
        if engine is not None:
            return engine
        try:
            parsed = sa.make_url(url)
        except Exception as exc:  # noqa: BLE001 - ArgumentError and friends
            raise TidehouseError(
                ErrorCode.CONFIG_INVALID,
                f"storage.metastore: {exc}",
                location=Location(path="storage.metastore"),
                hint="a SQLAlchemy URL, e.g. postgresql+psycopg://user:pw@host/db or "
                "sqlite:////path/metastore.db",
            ) from None
        if parsed.get_backend_name() == "sqlite":
            if parsed.database and parsed.database != ":memory:":
                Path(parsed.database).parent.mkdir(parents=True, exist_ok=True)
            engine = sa.create_engine(parsed, connect_args={"timeout": 60, "check_same_thread": False})
            sync = "FULL" if durable else "NORMAL"

            @event.listens_for(engine, "connect")
            def _connect(dbapi_conn, _record) -> None:
                dbapi_conn.isolation_level = None  # we issue BEGIN ourselves
                cur = dbapi_conn.cursor()
                cur.execute("PRAGMA journal_mode=WAL")
                cur.execute(f"PRAGMA synchronous={sync}")
                cur.execute("PRAGMA busy_timeout=60000")
                cur.close()

            @event.listens_for(engine, "begin")
            def _begin(conn) -> None:
                conn.exec_driver_sql("BEGIN IMMEDIATE")
        else:
            # no pre-ping: it is a round trip per checkout, i.e. per write; a connection the server dropped
            # fails its statement, is discarded, and the store retries the write once (see store.py)
            try:
                engine = sa.create_engine(parsed, pool_recycle=1800)
            except ImportError as exc:  # the URL's driver is not installed
                raise TidehouseError(
                    ErrorCode.CONFIG_INVALID,
                    f"storage.metastore: the database driver of {parsed.drivername} is not installed ({exc})",
                    location=Location(path="storage.metastore"),
                    hint="postgresql+psycopg:// needs the postgres extra: pip install 'tidehouse[postgres]'",
                ) from None
            mark_lost_sessions(engine)  # the pool discards a dropped connection, `disconnected` sees it
        _ENGINES[key] = engine
        return engine


def _retried(fn):
    """Run a read (or a repeatable transaction) again, once, when its pooled connection turned out dropped."""

    @functools.wraps(fn)
    def wrapper(self, *args, **kwargs):
        try:
            return fn(self, *args, **kwargs)
        except TidehouseError as exc:
            if not disconnected(exc):
                raise
            return fn(self, *args, **kwargs)

    return wrapper


def dispose_engines(urls: Sequence[str] | None = None) -> None:
    """Close pooled connections (tests that stop a database server)."""
    with _ENGINES_LOCK:
        for key in list(_ENGINES):
            if urls is None or key[0] in urls:
                _ENGINES.pop(key).dispose()


def _snapshot_of(incarnation: str, bucket: int) -> sa.Select:
    """The registered state snapshot of a bucket: (end_offset, object)."""
    return sa.select(SNAPSHOTS.c.end_offset, SNAPSHOTS.c.object).where(
        SNAPSHOTS.c.incarnation == incarnation, SNAPSHOTS.c.bucket == bucket
    )


class Metastore:
    """The metadata of one storage root (``store``) in a SQL database. Reads and repeatable transactions are
    retried once on a connection the server dropped; a write's commit is retried by the store."""

    def __init__(self, url: str, store: str, *, durable: bool = True) -> None:
        self.url = url
        self.store = store
        self.engine = engine_for(url, durable=durable)
        with self._errors("creating the metastore tables"):
            try:
                METADATA.create_all(self.engine, checkfirst=True)
            except sa.exc.IntegrityError:  # another process created them at the same moment
                METADATA.create_all(self.engine, checkfirst=True)
            except sa.exc.ProgrammingError:
                METADATA.create_all(self.engine, checkfirst=True)

    @contextlib.contextmanager
    def _errors(self, what: str) -> Iterator[None]:
        try:
            yield
        except sa.exc.SQLAlchemyError as exc:
            raise TidehouseError(
                ErrorCode.STORAGE_IO,
                f"metastore {shown_url(self.url)}: {what} failed: "
                f"{type(exc).__name__}: {str(exc).splitlines()[0]}",
                location=Location(path="storage.metastore"),
                hint="check that the database is reachable (storage.metastore); nothing "
                "uncommitted is visible, and a retried write is applied once",
            ) from exc

    @contextlib.contextmanager
    def tx(self, what: str) -> Iterator[Connection]:
        with self._errors(what), self.engine.begin() as conn:
            yield conn

    # -- tables ---------------------------------------------------------------------------------------
    @_retried
    def table(self, name: str) -> tuple[str, int, dict[str, Any]] | None:
        """(incarnation, version, definition document) of a table, or None."""
        with self._errors(f"reading table {name}"), self.engine.connect() as conn:
            row = conn.execute(
                sa.select(TABLES.c.incarnation, TABLES.c.version, TABLES.c.doc).where(
                    TABLES.c.store == self.store, TABLES.c.name == name
                )
            ).first()
        return None if row is None else (row.incarnation, row.version, json.loads(row.doc))

    @_retried
    def table_names(self) -> list[str]:
        with self._errors("listing tables"), self.engine.connect() as conn:
            return sorted(
                conn.execute(sa.select(TABLES.c.name).where(TABLES.c.store == self.store)).scalars()
            )

    @_retried
    def incarnations(self) -> dict[str, str]:
        """incarnation -> table name, for every live table of this store."""
        with self._errors("listing tables"), self.engine.connect() as conn:
            rows = conn.execute(
                sa.select(TABLES.c.incarnation, TABLES.c.name).where(TABLES.c.store == self.store)
            )
            return {r.incarnation: r.name for r in rows}

    def create(self, name: str, buckets: int, doc: Mapping[str, Any]) -> str | None:
        """Create a table; its incarnation, or None if one of that name exists (created meanwhile)."""
        inc = uuid.uuid4().hex
        try:
            with self.tx(f"creating table {name}") as conn:
                conn.execute(
                    TABLES.insert().values(
                        incarnation=inc, store=self.store, name=name, version=1, doc=json.dumps(doc)
                    )
                )
                conn.execute(
                    BUCKETS.insert(),
                    [
                        {
                            "incarnation": inc,
                            "bucket": b,
                            "end_offset": 0,
                            "start_offset": 0,
                            "epoch": 0,
                            "owner": None,
                        }
                        for b in range(buckets)
                    ],
                )
        except TidehouseError as exc:
            if isinstance(exc.__cause__, sa.exc.IntegrityError):
                return None
            raise
        return inc

    def update_doc(self, incarnation: str, version: int, doc: Mapping[str, Any]) -> bool:
        """Replace a table's document if its version is still ``version`` (compare-and-set)."""
        with self.tx("evolving a table") as conn:
            done = conn.execute(
                TABLES.update()
                .where(TABLES.c.incarnation == incarnation, TABLES.c.version == version)
                .values(version=version + 1, doc=json.dumps(doc))
            )
            return done.rowcount == 1

    def drop(self, name: str) -> str | None:
        """Delete a table's rows (one transaction); its incarnation, or None if there was none."""
        with self.tx(f"dropping table {name}") as conn:
            inc = conn.execute(
                sa.select(TABLES.c.incarnation).where(TABLES.c.store == self.store, TABLES.c.name == name)
            ).scalar()
            if inc is None:
                return None
            for t in (FRAMES, WRITERS, SNAPSHOTS, BUCKETS, TABLES):
                conn.execute(t.delete().where(t.c.incarnation == inc))
            return inc

    # -- bucket heads, seqs, frames ------------------------------------------------------------------
    @_retried
    def heads(self, incarnation: str) -> list[Head]:
        with self._errors("reading bucket offsets"), self.engine.connect() as conn:
            rows = conn.execute(
                sa.select(BUCKETS).where(BUCKETS.c.incarnation == incarnation).order_by(BUCKETS.c.bucket)
            ).all()
        return [Head(r.bucket, r.end_offset, r.start_offset, r.epoch, r.owner) for r in rows]

    @_retried
    def head(self, incarnation: str, bucket: int) -> Head | None:
        with self._errors("reading bucket offsets"), self.engine.connect() as conn:
            r = conn.execute(
                sa.select(BUCKETS).where(BUCKETS.c.incarnation == incarnation, BUCKETS.c.bucket == bucket)
            ).first()
        return None if r is None else Head(r.bucket, r.end_offset, r.start_offset, r.epoch, r.owner)

    @_retried
    def seqs(self, incarnation: str, writer: str) -> dict[int, int]:
        """bucket -> the writer's last committed seq there."""
        with self._errors("reading writer seqs"), self.engine.connect() as conn:
            rows = conn.execute(
                sa.select(WRITERS.c.bucket, WRITERS.c.seq).where(
                    WRITERS.c.incarnation == incarnation, WRITERS.c.writer == writer
                )
            )
            return {r.bucket: r.seq for r in rows}

    @_retried
    def frames(self, incarnation: str, bucket: int, start: int, end: int) -> list[Frame]:
        """The frames overlapping ``[start, end)``, in offset order."""
        with self._errors("listing frames"), self.engine.connect() as conn:
            rows = conn.execute(
                sa.select(FRAMES)
                .where(
                    FRAMES.c.incarnation == incarnation,
                    FRAMES.c.bucket == bucket,
                    FRAMES.c.base_offset < end,
                    FRAMES.c.base_offset + FRAMES.c.rows > start,
                )
                .order_by(FRAMES.c.base_offset)
            ).all()
        return [frame_of(r) for r in rows]

    @_retried
    def frame_at(self, incarnation: str, bucket: int, offset: int | None) -> Frame | None:
        """The frame holding ``offset`` (None: the last frame)."""
        q = sa.select(FRAMES).where(FRAMES.c.incarnation == incarnation, FRAMES.c.bucket == bucket)
        if offset is not None:
            q = q.where(FRAMES.c.base_offset <= offset, FRAMES.c.base_offset + FRAMES.c.rows > offset)
        q = q.order_by(FRAMES.c.base_offset.desc()).limit(1)
        with self._errors("reading a frame"), self.engine.connect() as conn:
            r = conn.execute(q).first()
        return None if r is None else frame_of(r)

    @_retried
    def objects(self, incarnation: str) -> set[str]:
        with self._errors("listing referenced objects"), self.engine.connect() as conn:
            return set(
                conn.execute(
                    sa.select(FRAMES.c.object).where(FRAMES.c.incarnation == incarnation).distinct()
                ).scalars()
            )

    # -- state snapshots -------------------------------------------------------------------------------
    @_retried
    def snapshot(self, incarnation: str, bucket: int) -> tuple[int, str] | None:
        """The registered state snapshot of a bucket: (the offset it reflects, its object), or None."""
        with self._errors("reading a state snapshot"), self.engine.connect() as conn:
            r = conn.execute(_snapshot_of(incarnation, bucket)).first()
        return None if r is None else (int(r.end_offset), r.object)

    @_retried
    def snapshot_objects(self, incarnation: str) -> set[str]:
        with self._errors("listing state snapshots"), self.engine.connect() as conn:
            return set(
                conn.execute(
                    sa.select(SNAPSHOTS.c.object).where(SNAPSHOTS.c.incarnation == incarnation)
                ).scalars()
            )

    def register_snapshot(self, incarnation: str, bucket: int, offset: int, obj: str) -> str | None:
        """Make ``obj`` (the state at ``offset``) the bucket's snapshot unless one at the same or a later
        offset is registered. Returns the object no longer registered — the one replaced, or ``obj`` itself
        when it lost — for the caller to delete; None when nothing was replaced."""
        with self.tx("registering a state snapshot") as conn:
            head = conn.execute(
                sa.select(BUCKETS.c.bucket)
                .where(BUCKETS.c.incarnation == incarnation, BUCKETS.c.bucket == bucket)
                .with_for_update()
            ).first()
            if head is None:  # dropped meanwhile
                return obj
            r = conn.execute(_snapshot_of(incarnation, bucket)).first()
            if r is None:
                conn.execute(
                    SNAPSHOTS.insert().values(
                        incarnation=incarnation, bucket=bucket, end_offset=offset, object=obj
                    )
                )
                return None
            if r.end_offset >= offset:
                return obj
            conn.execute(
                SNAPSHOTS.update()
                .where(SNAPSHOTS.c.incarnation == incarnation, SNAPSHOTS.c.bucket == bucket)
                .values(end_offset=offset, object=obj)
            )
            return r.object

    # -- commits ---------------------------------------------------------------------------------------
    @_retried
    def acquire(self, incarnation: str, bucket: int, owner: str) -> int:
        """Take a bucket for writing: a new epoch (fencing every earlier owner); returns it."""
        with self.tx("acquiring a bucket") as conn:
            r = conn.execute(
                sa.select(BUCKETS.c.epoch)
                .where(BUCKETS.c.incarnation == incarnation, BUCKETS.c.bucket == bucket)
                .with_for_update()
            ).first()
            if r is None:
                raise TidehouseError(ErrorCode.TABLE_UNKNOWN, "the table was dropped meanwhile")
            epoch = r.epoch + 1
            conn.execute(
                BUCKETS.update()
                .where(BUCKETS.c.incarnation == incarnation, BUCKETS.c.bucket == bucket)
                .values(epoch=epoch, owner=owner)
            )
            return epoch

    @property
    def row_locks(self) -> bool:
        """Whether a commit locks only its bucket rows (PostgreSQL and most servers) rather than the whole
        database (SQLite)."""
        return self.engine.dialect.name != "sqlite"

    @contextlib.contextmanager
    def committing(
        self,
        incarnation: str,
        *,
        writer: str,
        seq: int,
        buckets: Sequence[int],
        epochs: Mapping[int, int],
        expected: Mapping[int, int],
    ) -> Iterator[Commit]:
        """The commit transaction of one write, in two steps: on entry, lock the buckets' rows and check the
        writer's seq (replays), a primary-key bucket's epoch (:class:`Fenced`) and end offset
        (:class:`Stale`); then the caller records the frames with :meth:`Commit.record` (after its object
        is put) and the transaction commits on exit. An exception inside rolls everything back."""
        buckets = sorted(buckets)
        with self.tx(f"committing seq {seq} of writer {writer}") as conn:
            heads = {
                r.bucket: r
                for r in conn.execute(LOCK_HEADS, {"inc": incarnation, "buckets": buckets, "writer": writer})
            }
            if len(heads) != len(buckets):
                raise TidehouseError(ErrorCode.TABLE_UNKNOWN, "the table was dropped meanwhile")
            replays = set()
            for b in buckets:
                h = heads[b]
                if h.last_seq is not None and seq <= h.last_seq:
                    replays.add(b)
                    continue
                if b in epochs and h.epoch != epochs[b]:
                    raise Fenced(b, h.epoch, h.owner)
                if b in expected and h.end_offset != expected[b]:
                    raise Stale(b, h.end_offset)
            yield Commit(conn, incarnation, writer, seq, heads, replays)

    def commit(
        self,
        incarnation: str,
        *,
        writer: str,
        seq: int,
        obj: str,
        parts: Mapping[int, NewFrame],
        commit_us: int,
        origin_us: int | None,
        schema_id: int,
        epochs: Mapping[int, int],
        expected: Mapping[int, int],
    ) -> dict[int, tuple[int, int] | None]:
        """:meth:`committing` and :meth:`Commit.record` in one call."""
        with self.committing(
            incarnation, writer=writer, seq=seq, buckets=list(parts), epochs=epochs, expected=expected
        ) as c:
            return c.record(obj, parts, commit_us=commit_us, origin_us=origin_us, schema_id=schema_id)

    @_retried
    def trim(self, incarnation: str, bucket: int, offset: int, older_than_us: int) -> tuple[int, list[str]]:
        """Delete the longest prefix of a bucket's frames ending at or before ``offset`` and committed before
        ``older_than_us``; raise the bucket's watermark. Returns (frames deleted, objects no frame references
        any more)."""
        with self.tx("deleting frames (retention)") as conn:
            head = conn.execute(
                sa.select(BUCKETS)
                .where(BUCKETS.c.incarnation == incarnation, BUCKETS.c.bucket == bucket)
                .with_for_update()
            ).first()
            if head is None:
                return 0, []
            rows = conn.execute(
                sa.select(FRAMES.c.base_offset, FRAMES.c.rows, FRAMES.c.commit_us, FRAMES.c.object)
                .where(
                    FRAMES.c.incarnation == incarnation,
                    FRAMES.c.bucket == bucket,
                    FRAMES.c.base_offset < offset,
                )
                .order_by(FRAMES.c.base_offset)
            ).all()
            doomed = []
            for r in rows:
                if r.base_offset + r.rows > offset or r.commit_us >= older_than_us:
                    break
                doomed.append(r)
            if not doomed:
                return 0, []
            cut = doomed[-1].base_offset + doomed[-1].rows
            conn.execute(
                FRAMES.delete().where(
                    FRAMES.c.incarnation == incarnation, FRAMES.c.bucket == bucket, FRAMES.c.base_offset < cut
                )
            )
            conn.execute(
                BUCKETS.update()
                .where(BUCKETS.c.incarnation == incarnation, BUCKETS.c.bucket == bucket)
                .values(
                    start_offset=sa.func.max(BUCKETS.c.start_offset, cut)
                    if conn.dialect.name == "sqlite"
                    else sa.func.greatest(BUCKETS.c.start_offset, cut)
                )
            )
            candidates = sorted({r.object for r in doomed})
            still = set()
            for i in range(0, len(candidates), 500):
                chunk = candidates[i : i + 500]
                still |= set(
                    conn.execute(
                        sa.select(FRAMES.c.object)
                        .where(FRAMES.c.incarnation == incarnation, FRAMES.c.object.in_(chunk))
                        .distinct()
                    ).scalars()
                )
            return len(doomed), [o for o in candidates if o not in still]

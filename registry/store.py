"""The versioned store behind the registry: immutable integer versions of texts, per kind and name.

One interface (:class:`VersionStore`) and one implementation on SQLAlchemy Core (:class:`SqlStore`), which
covers the embedded default (SQLite under the home) and any database SQLAlchemy reaches (PostgreSQL for a
team). Versions are 1, 2, 3, ... per name; storing the same content again answers the existing version.

Concurrency: two processes storing at once must not lose a version nor store the same content twice.
The tables carry unique constraints on ``(name, version)`` and ``(name, content_hash)``; a writer reads the
existing row / the highest version and inserts inside one transaction, and retries when a concurrent
writer wins the race (IntegrityError). On SQLite each write transaction starts with ``BEGIN IMMEDIATE``, so
writers queue on the database lock instead of failing at commit time.
"""

from __future__ import annotations

import abc
import random
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Literal

from sqlalchemy import (
    JSON,
    Column,
    DateTime,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    UniqueConstraint,
    create_engine,
    event,
    func,
    insert,
    select,
)
from sqlalchemy.engine import Engine
from sqlalchemy.exc import ArgumentError, DBAPIError, IntegrityError, OperationalError, SQLAlchemyError

from runtime.core.dbsessions import mark_lost_sessions
from runtime.core.errors import ErrorCode, TidehouseError

Kind = Literal["action", "flow"]
SCHEMA_VERSION = 1

metadata = MetaData()


def _common() -> tuple[Column, ...]:
    """The columns both tables have (new objects per call: a Column belongs to one table)."""
    return (
        Column("name", String(128), nullable=False),
        Column("version", Integer, nullable=False),
        Column("content_hash", String(64), nullable=False),
        Column("text", Text, nullable=False),
        Column("path", Text, nullable=True),
        Column("created_at", DateTime(timezone=True), nullable=False),
    )


actions_table = Table(
    "actions",
    metadata,
    *_common(),
    UniqueConstraint("name", "version", name="uq_actions_version"),
    UniqueConstraint("name", "content_hash", name="uq_actions_content"),
)
flows_table = Table(
    "flows",
    metadata,
    *_common(),
    Column("pins", JSON, nullable=False),
    UniqueConstraint("name", "version", name="uq_flows_version"),
    UniqueConstraint("name", "content_hash", name="uq_flows_content"),
)
meta_table = Table(
    "registry_meta",
    metadata,
    Column("key", String(64), primary_key=True),
    Column("value", String(256), nullable=False),
)
_TABLES = {"action": actions_table, "flow": flows_table}


@dataclass(frozen=True)
class StoredVersion:
    """One stored version of an action or a flow."""

    kind: str
    name: str
    version: int
    content_hash: str
    text: str
    path: str | None
    created_at: datetime
    pins: dict[str, str] = field(default_factory=dict)  # flows only
    created: bool = False  # True when this call stored it, False when it already existed
    version_count: int | None = None  # filled by listings: how many versions the name has


class VersionStore(abc.ABC):
    """Immutable versions per (kind, name)."""

    @abc.abstractmethod
    def put(
        self,
        kind: Kind,
        name: str,
        content_hash: str,
        text: str,
        path: str | None,
        pins: dict[str, str] | None = None,
    ) -> StoredVersion:
        """Store content as the next version, or answer the existing version with the same hash."""

    @abc.abstractmethod
    def get(self, kind: Kind, name: str, version: int | None = None) -> StoredVersion | None:
        """One version (the latest when ``version`` is None), or None."""

    @abc.abstractmethod
    def versions(self, kind: Kind, name: str) -> list[StoredVersion]:
        """Every version of a name, oldest first."""

    @abc.abstractmethod
    def latest(self, kind: Kind) -> list[StoredVersion]:
        """The latest version of every name (with ``version_count``), sorted by name."""

    def close(self) -> None:  # noqa: B027  # pragma: no cover - optional hook; default: nothing to release
        pass


class SqlStore(VersionStore):
    """:class:`VersionStore` on any SQLAlchemy URL (SQLite embedded by default)."""

    RETRIES = 50

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self._guard(self._create_schema)

    @classmethod
    def open(cls, url: str) -> SqlStore:
        try:
            if url.startswith("sqlite"):
                engine = create_engine(url, connect_args={"timeout": 60})
                _sqlite_immediate(engine)
            else:
                engine = create_engine(url, pool_pre_ping=True)
                mark_lost_sessions(engine)  # a pre-ping that finds the session ended reconnects
        except (ArgumentError, ImportError, SQLAlchemyError) as exc:
            raise TidehouseError(
                ErrorCode.REGISTRY_UNAVAILABLE,
                f"cannot open the registry database: {exc}",
                hint="install the database driver (postgresql+psycopg://: pip install 'tidehouse[postgres]')"
                if isinstance(exc, ImportError)
                else "check registry.url in tidehouse.yaml",
            ) from exc
        return cls(engine)

    # -- schema ------------------------------------------------------------------------------------
    def _create_schema(self) -> None:
        for attempt in range(self.RETRIES):
            try:
                with self.engine.begin() as conn:
                    metadata.create_all(conn, checkfirst=True)
                    found = conn.execute(
                        select(meta_table.c.value).where(meta_table.c.key == "schema")
                    ).scalar()
                    if found is None:
                        conn.execute(insert(meta_table).values(key="schema", value=str(SCHEMA_VERSION)))
                    elif int(found) > SCHEMA_VERSION:
                        raise TidehouseError(
                            ErrorCode.REGISTRY_UNAVAILABLE,
                            f"the registry database has schema version {found}; this Tidehouse "
                            f"knows up to {SCHEMA_VERSION}",
                            hint="upgrade tidehouse",
                        )
                return
            except (IntegrityError, OperationalError, DBAPIError) as exc:  # another process created it first
                if attempt == self.RETRIES - 1 or not _is_race(exc):
                    raise
                _backoff(attempt)

    def _guard(self, fn, *args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except TidehouseError:
            raise
        except SQLAlchemyError as exc:
            raise TidehouseError(
                ErrorCode.REGISTRY_UNAVAILABLE,
                f"registry database error: {str(getattr(exc, 'orig', exc)).splitlines()[0]}",
                hint="check registry.url and that the database is reachable",
            ) from exc

    # -- writes ------------------------------------------------------------------------------------
    def put(
        self,
        kind: Kind,
        name: str,
        content_hash: str,
        text: str,
        path: str | None,
        pins: dict[str, str] | None = None,
    ) -> StoredVersion:
        return self._guard(self._put, kind, name, content_hash, text, path, pins)

    def _put(self, kind, name, content_hash, text, path, pins) -> StoredVersion:
        table = _TABLES[kind]
        for attempt in range(self.RETRIES):
            try:
                with self.engine.begin() as conn:
                    row = conn.execute(
                        select(table).where(table.c.name == name, table.c.content_hash == content_hash)
                    ).first()
                    if row is not None:
                        return _stored(kind, row)
                    current = conn.execute(
                        select(func.max(table.c.version)).where(table.c.name == name)
                    ).scalar()
                    values: dict[str, Any] = {
                        "name": name,
                        "version": (current or 0) + 1,
                        "content_hash": content_hash,
                        "text": text,
                        "path": path,
                        "created_at": datetime.now(timezone.utc),
                    }
                    if kind == "flow":
                        values["pins"] = dict(pins or {})
                    conn.execute(insert(table).values(**values))
                return StoredVersion(kind=kind, pins=values.pop("pins", {}), created=True, **values)
            except (IntegrityError, OperationalError) as exc:  # a concurrent writer won: read again
                if attempt == self.RETRIES - 1 or not _is_race(exc):
                    raise
                _backoff(attempt)
        raise AssertionError("unreachable")  # pragma: no cover

    # -- reads -------------------------------------------------------------------------------------
    def get(self, kind: Kind, name: str, version: int | None = None) -> StoredVersion | None:
        table = _TABLES[kind]
        query = select(table).where(table.c.name == name)
        query = (
            query.where(table.c.version == version)
            if version is not None
            else query.order_by(table.c.version.desc()).limit(1)
        )
        row = self._guard(self._first, query)
        return _stored(kind, row) if row is not None else None

    def versions(self, kind: Kind, name: str) -> list[StoredVersion]:
        table = _TABLES[kind]
        rows = self._guard(self._all, select(table).where(table.c.name == name).order_by(table.c.version))
        return [_stored(kind, r) for r in rows]

    def latest(self, kind: Kind) -> list[StoredVersion]:
        table = _TABLES[kind]
        counts = (
            select(table.c.name, func.max(table.c.version).label("latest"), func.count().label("n"))
            .group_by(table.c.name)
            .subquery()
        )
        query = (
            select(table, counts.c.n)
            .join(counts, (table.c.name == counts.c.name) & (table.c.version == counts.c.latest))
            .order_by(table.c.name)
        )
        rows = self._guard(self._all, query)
        return [_stored(kind, r, version_count=r.n) for r in rows]

    def names(self, kind: Kind) -> list[str]:
        table = _TABLES[kind]
        return [r[0] for r in self._guard(self._all, select(table.c.name).distinct().order_by(table.c.name))]

    def _first(self, query):
        with self.engine.connect() as conn:
            return conn.execute(query).first()

    def _all(self, query):
        with self.engine.connect() as conn:
            return conn.execute(query).all()

    def close(self) -> None:
        self.engine.dispose()


def _stored(kind: str, row, version_count: int | None = None) -> StoredVersion:
    created = row.created_at
    if created is not None and created.tzinfo is None:  # SQLite keeps no time zone; we store UTC
        created = created.replace(tzinfo=timezone.utc)
    return StoredVersion(
        kind=kind,
        name=row.name,
        version=row.version,
        content_hash=row.content_hash,
        text=row.text,
        path=row.path,
        created_at=created,
        pins=dict(getattr(row, "pins", None) or {}),
        version_count=version_count,
    )


def _is_race(exc: Exception) -> bool:
    if isinstance(exc, IntegrityError):
        return True
    text = str(getattr(exc, "orig", exc)).lower()
    return any(
        s in text
        for s in (
            "locked",
            "busy",
            "already exists",
            "duplicate",
            "unique",
            "deadlock",
            "could not serialize",
        )
    )


def _backoff(attempt: int) -> None:
    time.sleep(random.uniform(0.001, 0.01 * (1 + min(attempt, 10))))


def _sqlite_immediate(engine: Engine) -> None:
    """SQLite: take the write lock when a transaction begins (``BEGIN IMMEDIATE``) and wait for it."""

    @event.listens_for(engine, "connect")
    def _connect(dbapi_connection, _record) -> None:
        dbapi_connection.isolation_level = None  # we emit BEGIN ourselves
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA busy_timeout = 60000")
        if engine.url.database not in (None, "", ":memory:"):
            cursor.execute("PRAGMA journal_mode = WAL")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _begin(connection) -> None:
        connection.exec_driver_sql("BEGIN IMMEDIATE")

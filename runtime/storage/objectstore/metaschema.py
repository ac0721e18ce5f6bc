"""The metastore's tables (SQLAlchemy Core) and the records read from them.

``th_tables`` (a table's definition document per storage root and name, with its incarnation and a version
for compare-and-set), ``th_buckets`` (per bucket: end offset, retention watermark, fencing epoch and owner),
``th_frames`` (the committed frames: offsets, the data object and the part of it that holds the frame) and
``th_writers`` (the last seq of each writer per bucket: idempotency outlives retention) and ``th_snapshots``
(per bucket of a primary-key table that has one: the object holding a snapshot of its state and the offset
it reflects; docs/architecture.md, "Retention of state tables").
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa

METADATA = sa.MetaData()
TABLES = sa.Table(
    "th_tables",
    METADATA,
    sa.Column("incarnation", sa.String(32), primary_key=True),
    sa.Column("store", sa.String(1024), nullable=False),
    sa.Column("name", sa.String(255), nullable=False),
    sa.Column("version", sa.Integer, nullable=False),
    sa.Column("doc", sa.Text, nullable=False),
    sa.UniqueConstraint("store", "name", name="th_tables_store_name"),
)
BUCKETS = sa.Table(
    "th_buckets",
    METADATA,
    sa.Column("incarnation", sa.String(32), primary_key=True),
    sa.Column("bucket", sa.Integer, primary_key=True, autoincrement=False),
    sa.Column("end_offset", sa.BigInteger, nullable=False),
    sa.Column("start_offset", sa.BigInteger, nullable=False),  # the retention watermark
    sa.Column("epoch", sa.BigInteger, nullable=False),  # fencing of primary-key writers
    sa.Column("owner", sa.String(64)),
)
FRAMES = sa.Table(
    "th_frames",
    METADATA,
    sa.Column("incarnation", sa.String(32), primary_key=True),
    sa.Column("bucket", sa.Integer, primary_key=True, autoincrement=False),
    sa.Column("base_offset", sa.BigInteger, primary_key=True, autoincrement=False),
    sa.Column("rows", sa.BigInteger, nullable=False),
    sa.Column("object", sa.String(1024), nullable=False),
    sa.Column("position", sa.BigInteger, nullable=False),
    sa.Column("length", sa.BigInteger, nullable=False),
    sa.Column("crc", sa.BigInteger, nullable=False),
    sa.Column("commit_us", sa.BigInteger, nullable=False),
    sa.Column("origin_us", sa.BigInteger),
    sa.Column("writer", sa.Text, nullable=False),
    sa.Column("seq", sa.BigInteger, nullable=False),
    sa.Column("schema_id", sa.Integer, nullable=False),
)
sa.Index("th_frames_object", FRAMES.c.incarnation, FRAMES.c.object)
WRITERS = sa.Table(
    "th_writers",
    METADATA,
    sa.Column("incarnation", sa.String(32), primary_key=True),
    sa.Column("bucket", sa.Integer, primary_key=True, autoincrement=False),
    sa.Column("writer", sa.String(1024), primary_key=True),
    sa.Column("seq", sa.BigInteger, nullable=False),
)

SNAPSHOTS = sa.Table(
    "th_snapshots",
    METADATA,
    sa.Column("incarnation", sa.String(32), primary_key=True),
    sa.Column("bucket", sa.Integer, primary_key=True, autoincrement=False),
    sa.Column("end_offset", sa.BigInteger, nullable=False),  # the state is the changelog's up to here
    sa.Column("object", sa.String(1024), nullable=False),
)

# the commit's first statement, built once (its compiled form is cached): lock the buckets, read their heads
# and the writer's last seq in each


@dataclass(frozen=True)
class Head:
    bucket: int
    end_offset: int
    start_offset: int
    epoch: int
    owner: str | None


@dataclass(frozen=True)
class Frame:
    bucket: int
    base_offset: int
    rows: int
    object: str
    position: int
    length: int
    crc: int
    commit_us: int
    origin_us: int | None
    writer: str
    seq: int
    schema_id: int

    @property
    def end_offset(self) -> int:
        return self.base_offset + self.rows


@dataclass(frozen=True)
class NewFrame:
    """A bucket's part of a write, as the commit records it (rows == 0: only the writer's seq is recorded)."""

    rows: int
    position: int = 0
    length: int = 0
    crc: int = 0


def frame_of(r: Any) -> Frame:
    """The :class:`Frame` of a ``th_frames`` row."""
    return Frame(
        r.bucket,
        r.base_offset,
        r.rows,
        r.object,
        r.position,
        r.length,
        r.crc,
        r.commit_us,
        r.origin_us,
        r.writer,
        r.seq,
        r.schema_id,
    )

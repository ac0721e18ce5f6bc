"""The commit transaction of a write, in the metastore: lock and check the buckets, record the frames.

:meth:`runtime.storage.objectstore.metastore.Metastore.committing` opens it: one statement locks the buckets'
rows and reads their heads with the writer's last seq (:data:`LOCK_HEADS`), a primary-key bucket whose
epoch moved on is :class:`Fenced`, one whose end offset is not the expected one :class:`Stale`. Then
:meth:`Commit.record` inserts the frames, advances the end offsets and sets the writer's seq — on PostgreSQL
in one statement.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from runtime.storage.objectstore.metaschema import BUCKETS, FRAMES, WRITERS, NewFrame

LOCK_HEADS = (
    sa.select(
        BUCKETS.c.bucket,
        BUCKETS.c.end_offset,
        BUCKETS.c.epoch,
        BUCKETS.c.owner,
        WRITERS.c.seq.label("last_seq"),
    )
    .select_from(
        BUCKETS.outerjoin(
            WRITERS,
            sa.and_(
                WRITERS.c.incarnation == BUCKETS.c.incarnation,
                WRITERS.c.bucket == BUCKETS.c.bucket,
                WRITERS.c.writer == sa.bindparam("writer"),
            ),
        )
    )
    .where(
        BUCKETS.c.incarnation == sa.bindparam("inc"),
        BUCKETS.c.bucket.in_(sa.bindparam("buckets", expanding=True)),
    )
    .order_by(BUCKETS.c.bucket)
    .with_for_update(of=BUCKETS)
)


class Fenced(Exception):
    """A primary-key bucket's epoch moved on: a newer writer owns it."""

    def __init__(self, bucket: int, epoch: int, owner: str | None) -> None:
        super().__init__(bucket, epoch, owner)
        self.bucket, self.epoch, self.owner = bucket, epoch, owner


class Stale(Exception):
    """A primary-key bucket's end offset is not the one its changelog was computed at."""

    def __init__(self, bucket: int, end_offset: int) -> None:
        super().__init__(bucket, end_offset)
        self.bucket, self.end_offset = bucket, end_offset


@dataclass
class Commit:
    """An open commit transaction whose buckets are locked and checked (see :meth:`Metastore.committing`)."""

    conn: Connection
    incarnation: str
    writer: str
    seq: int
    heads: Mapping[int, Any]
    replays: set[int]

    def record(
        self,
        obj: str,
        parts: Mapping[int, NewFrame],
        *,
        commit_us: int,
        origin_us: int | None,
        schema_id: int,
    ) -> dict[int, tuple[int, int] | None]:
        """Insert the frames (offsets from the locked end offsets), advance the buckets, record the writer's
        seq; per bucket its offset range, or None for a replay."""
        conn, inc = self.conn, self.incarnation
        out: dict[int, tuple[int, int] | None] = {}
        frames, moved, seqs = [], [], []
        for b in sorted(parts):
            if b in self.replays:
                out[b] = None
                continue
            part, base = parts[b], self.heads[b].end_offset
            if part.rows:
                frames.append(
                    {
                        "incarnation": inc,
                        "bucket": b,
                        "base_offset": base,
                        "rows": part.rows,
                        "object": obj,
                        "position": part.position,
                        "length": part.length,
                        "crc": part.crc,
                        "commit_us": commit_us,
                        "origin_us": origin_us,
                        "writer": self.writer,
                        "seq": self.seq,
                        "schema_id": schema_id,
                    }
                )
                moved.append({"b_inc": inc, "b_bucket": b, "b_end": base + part.rows})
            seqs.append({"incarnation": inc, "bucket": b, "writer": self.writer, "seq": self.seq})
            out[b] = (base, base + part.rows)
        if conn.dialect.name == "postgresql" and seqs:
            _record_in_one_statement(conn, inc, frames, moved, seqs)
            return out
        if frames:
            conn.execute(FRAMES.insert(), frames)
            conn.execute(
                BUCKETS.update()
                .where(
                    BUCKETS.c.incarnation == sa.bindparam("b_inc"),
                    BUCKETS.c.bucket == sa.bindparam("b_bucket"),
                )
                .values(end_offset=sa.bindparam("b_end")),
                moved,
            )
        if seqs:
            _upsert_seqs(conn, seqs, {b for b in parts if self.heads[b].last_seq is not None})
        return out


def _record_in_one_statement(
    conn: Connection,
    inc: str,
    frames: list[dict[str, Any]],
    moved: list[dict[str, Any]],
    seqs: list[dict[str, Any]],
) -> None:
    """PostgreSQL: the frames, the writer's seqs and the new end offsets in one statement (data-modifying
    CTEs), so that a commit costs one round trip after its locks, plus COMMIT. The SQL text depends only on
    the numbers of buckets and frames, and is built once per shape."""
    params: dict[str, Any] = {"inc": inc, "writer": seqs[0]["writer"], "seq": seqs[0]["seq"]}
    for i, row in enumerate(seqs):
        params[f"sb{i}"] = row["bucket"]
    for i, (f, m) in enumerate(zip(frames, moved)):
        params.update(
            {
                f"fb{i}": f["bucket"],
                f"base{i}": f["base_offset"],
                f"rows{i}": f["rows"],
                f"pos{i}": f["position"],
                f"len{i}": f["length"],
                f"crc{i}": f["crc"],
                f"end{i}": m["b_end"],
            }
        )
    if frames:
        params.update(
            obj=frames[0]["object"],
            commit_us=frames[0]["commit_us"],
            origin_us=frames[0]["origin_us"],
            schema_id=frames[0]["schema_id"],
        )
    conn.execute(_pg_record_sql(len(seqs), len(frames)), params)


_PG_RECORD: dict[tuple[int, int], sa.TextClause] = {}


def _pg_record_sql(n_seqs: int, n_frames: int) -> sa.TextClause:
    key = (n_seqs, n_frames)
    sql = _PG_RECORD.get(key)
    if sql is None:
        seq_rows = ", ".join(f"(:inc, :sb{i}, :writer, :seq)" for i in range(n_seqs))
        w = (
            f"INSERT INTO th_writers (incarnation, bucket, writer, seq) VALUES {seq_rows} "
            "ON CONFLICT (incarnation, bucket, writer) DO UPDATE SET seq = EXCLUDED.seq"
        )
        if not n_frames:
            text = f"WITH w AS ({w}) SELECT 1"
        else:
            frame_rows = ", ".join(
                f"(:inc, :fb{i}, :base{i}, :rows{i}, :obj, :pos{i}, :len{i}, :crc{i}, :commit_us, "
                f"CAST(:origin_us AS BIGINT), :writer, :seq, :schema_id)"
                for i in range(n_frames)
            )
            f = (
                "INSERT INTO th_frames (incarnation, bucket, base_offset, rows, object, position, length, "
                f"crc, commit_us, origin_us, writer, seq, schema_id) VALUES {frame_rows}"
            )
            cases = " ".join(f"WHEN :fb{i} THEN CAST(:end{i} AS BIGINT)" for i in range(n_frames))
            which = ", ".join(f":fb{i}" for i in range(n_frames))
            text = (
                f"WITH w AS ({w}), f AS ({f}) UPDATE th_buckets SET end_offset = CASE bucket {cases} END "
                f"WHERE incarnation = :inc AND bucket IN ({which})"
            )
        sql = _PG_RECORD[key] = sa.text(text)
    return sql


def _upsert_seqs(conn: Connection, rows: list[dict[str, Any]], existing: set[int]) -> None:
    """Set each (bucket, writer)'s last seq: one INSERT … ON CONFLICT where the database has it."""
    if conn.dialect.name == "sqlite":
        from sqlalchemy.dialects.sqlite import insert

        stmt = insert(WRITERS)
        conn.execute(
            stmt.on_conflict_do_update(
                index_elements=[WRITERS.c.incarnation, WRITERS.c.bucket, WRITERS.c.writer],
                set_={"seq": stmt.excluded.seq},
            ),
            rows,
        )
        return
    for row in rows:  # other databases: the bucket rows are locked, so update-else-insert cannot race
        if row["bucket"] in existing:
            conn.execute(
                WRITERS.update()
                .where(
                    WRITERS.c.incarnation == row["incarnation"],
                    WRITERS.c.bucket == row["bucket"],
                    WRITERS.c.writer == row["writer"],
                )
                .values(seq=row["seq"])
            )
        else:
            conn.execute(WRITERS.insert().values(**row))

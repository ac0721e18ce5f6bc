"""A log table's tiering cycle with its data files written by Spark tasks (the executor data path).

The driver keeps the protocol of :mod:`runtime.lake.tiering` — the tiering lock, the lake's offsets, the one
commit that records the new offsets with the data — and hands only the writing of the data files to Spark:
the range ``[start, end)`` of each bucket is cut into pieces of at most ``piece_rows`` rows, one task per
piece reads its piece from the hot store, shapes it like the lake table and writes it as Parquet data files
of the table (:func:`runtime.lake.apply.data_files`), then returns their ``DataFile`` entries. The driver
checks they hold exactly the range's rows and are readable from where it commits, and appends them in one
snapshot. No row passes through the driver.

Crash cases are the driver's: a task Spark retries writes new files (a fresh name per attempt), the files of
a failed attempt or of a cycle that never commits are unreferenced orphans (as with a crash of a local
cycle), and a range is in the lake once the commit landed, never twice.
"""

from __future__ import annotations

import logging
import pickle
import uuid
from collections.abc import Iterator
from dataclasses import dataclass

import pyarrow as pa

from runtime.spark.options import Place
from runtime.spark.session import lost_server_error
from runtime.storage.api import TableMeta

log = logging.getLogger(__name__)
PIECE_ROWS = 1_000_000  # rows per task: a piece is held in one Python worker while it is written
RESULT = "rows long, file binary"


@dataclass(frozen=True)
class WritePiece:
    """On an executor: read ``(bucket, lo, hi)`` pieces of a hot log table and write them as lake data
    files; one output row per data file (its rows, its pickled ``DataFile``)."""

    place: Place
    table: str
    metadata_json: str  # the lake table's metadata at the start of the cycle
    io_properties: dict

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        import itertools

        from pyiceberg.io import load_file_io
        from pyiceberg.table.metadata import TableMetadataUtil

        from runtime.lake.apply import data_files
        from runtime.lake.schema import to_lake_arrow
        from runtime.lake.tiering import read_range

        metadata = TableMetadataUtil.parse_raw(self.metadata_json)
        io = load_file_io(self.io_properties, metadata.location)
        store = self.place.store()
        meta = store.get_table(self.table)
        counter = itertools.count(0)
        write_uuid = uuid.uuid4()  # per task attempt: a retried task never reuses a name
        for batch in batches:
            for bucket, lo, hi in zip(*(batch.column(c).to_pylist() for c in ("bucket", "lo", "hi"))):
                start, end = [0] * meta.buckets, [0] * meta.buckets
                start[bucket], end[bucket] = lo, hi
                data = read_range(store, meta, start, end)  # exactly hi - lo rows, else STORAGE_CORRUPT
                if data.num_rows == 0:
                    continue
                rows = to_lake_arrow(data, metadata.schema())
                for data_file in data_files(metadata, io, rows, write_uuid, counter):
                    yield pa.RecordBatch.from_pylist(
                        [{"rows": data_file.record_count, "file": pickle.dumps(data_file)}],
                        schema=pa.schema([("rows", pa.int64()), ("file", pa.binary())]),
                    )


def pieces(start: list[int], end: list[int], piece_rows: int) -> list[tuple[int, int, int]]:
    """``(bucket, lo, hi)`` of every piece of the range, at most ``piece_rows`` rows each."""
    return [
        (bucket, lo, min(hi, lo + piece_rows))
        for bucket, (s, hi) in enumerate(zip(start, end))
        for lo in range(s, hi, piece_rows)
    ]


class SparkLakeFiles:
    """``runtime.lake.tiering.LakeFiles`` run by Spark tasks: ``files(meta, table, start, end)``; a range of
    fewer than ``min_rows`` rows (setting ``tiering.executor_rows``) is left to the driver (None): a Spark job
    costs more than writing a small range there."""

    def __init__(self, spark, place: Place, *, min_rows: int, piece_rows: int = PIECE_ROWS) -> None:
        self.spark = spark
        self.place = place
        self.piece_rows = piece_rows
        self.min_rows = min_rows

    def __call__(self, meta: TableMeta, table, start: list[int], end: list[int]) -> list | None:
        if sum(hi - lo for lo, hi in zip(start, end)) < self.min_rows:
            return None
        todo = pieces(start, end, self.piece_rows)
        task = WritePiece(self.place, meta.name, table.metadata.model_dump_json(), dict(table.io.properties))
        try:
            listing = self.spark.createDataFrame(todo, "bucket int, lo long, hi long")
            rows = listing.repartition(len(todo)).mapInArrow(task, RESULT).collect()  # one task per piece
        except Exception as exc:  # a lost Spark Connect server is one clear error, not a traceback per cycle
            lost = lost_server_error(exc)
            if lost is None:
                raise
            raise lost from None
        log.info(
            "tiering %s: %d rows written as %d lake files by %d Spark tasks",
            meta.name,
            sum(r.rows for r in rows),
            len(rows),
            len(todo),
            extra={"table": meta.name},
        )
        return [pickle.loads(r.file) for r in rows]

"""Reading committed frames of the object-store hot storage: list them in the metastore, fetch their data
objects (several at a time, in order), check and decode each frame.

A frame's CRC and length are checked the first time this process decodes it (a frame it wrote itself is
known whole); a damaged or vanished object is an error naming it, never a partial read.
"""

from __future__ import annotations

import concurrent.futures
import threading
from collections.abc import Iterator
from dataclasses import dataclass

import pyarrow as pa

from runtime.core.errors import ErrorCode, Location, TidehouseError
from runtime.storage.api import BatchInfo, TableMeta
from runtime.storage.objectstore import blobs
from runtime.storage.objectstore.metaschema import Frame
from runtime.storage.objectstore.metastore import Metastore


@dataclass(frozen=True)
class Table:
    """A hot table as the metastore holds it: its definition, its incarnation, the definition's version."""

    meta: TableMeta
    incarnation: str
    version: int


class FrameReader:
    """The frames of the tables of one metastore, with their data objects from ``blobs``."""

    def __init__(self, metastore: Metastore, objects: blobs.Blobs) -> None:
        self.metastore = metastore
        self.blobs = objects
        self.verified: set[tuple[str, int]] = set()  # (object, position) of the frames known whole
        self._pool: concurrent.futures.ThreadPoolExecutor | None = None
        self._mutex = threading.Lock()

    def executor(self) -> concurrent.futures.ThreadPoolExecutor:
        """The threads that fetch (and put) data objects several at a time."""
        with self._mutex:
            if self._pool is None:
                self._pool = concurrent.futures.ThreadPoolExecutor(8, thread_name_prefix="tidehouse-s3")
            return self._pool

    def close(self) -> None:
        with self._mutex:
            if self._pool is not None:
                self._pool.shutdown(wait=False)
                self._pool = None

    def frames(
        self, table: Table, bucket: int, start: int, stop: int
    ) -> Iterator[tuple[Frame, pa.RecordBatch]]:
        """The committed frames overlapping ``[start, stop)`` with their decoded batches (objects fetched
        several at a time, in order)."""
        if stop <= start:
            return
        frames = self.metastore.frames(table.incarnation, bucket, start, stop)
        # a bucket's frames are contiguous from its first kept offset: a range that starts before the first
        # frame listed was deleted by retention after the caller checked the bucket's first offset (a read
        # never silently starts later, a state never skips changes)
        if not frames or frames[0].base_offset > start:
            head = self.metastore.head(table.incarnation, bucket)
            if frames or (head is not None and head.start_offset > start):
                raise TidehouseError(
                    ErrorCode.STORAGE_RANGE,
                    f"{table.meta.name} bucket {bucket}: offsets from {start} were deleted by retention "
                    "while being read",
                    location=Location(path=table.meta.name),
                    hint="read again from the earliest kept offset (start_offsets)",
                )
            return
        objects = list(dict.fromkeys(f.object for f in frames))
        if len(objects) == 1:
            fetched = iter([self._fetch(table, bucket, objects[0])])
        else:
            fetched = self.executor().map(lambda o: self._fetch(table, bucket, o), objects)
        bufs: dict[str, pa.Buffer] = {}
        for f in frames:
            while f.object not in bufs:
                buf = next(fetched)
                bufs[objects[len(bufs)]] = buf
            yield f, self._decode(table, f, bufs[f.object])

    def _fetch(self, table: Table, bucket: int, obj: str) -> pa.Buffer:
        try:
            return self.blobs.get(obj)
        except FileNotFoundError:
            head = self.metastore.head(table.incarnation, bucket)
            raise TidehouseError(
                ErrorCode.STORAGE_RANGE
                if head is not None and head.start_offset > 0
                else ErrorCode.STORAGE_CORRUPT,
                f"{table.meta.name} bucket {bucket}: data object {obj} is gone (deleted by retention while "
                "being read, or lost)",
                location=Location(file=obj),
                hint="read again from the earliest kept offset (start_offsets)",
            ) from None

    def _decode(self, table: Table, f: Frame, buf: pa.Buffer) -> pa.RecordBatch:
        part = blobs.Part(f.position, f.length, f.crc)
        key = (f.object, f.position)
        if key not in self.verified:
            if not blobs.part_ok(buf, part):
                raise TidehouseError(
                    ErrorCode.STORAGE_CORRUPT,
                    f"{table.meta.name} bucket {f.bucket}: the frame at offset {f.base_offset} "
                    f"({f.rows} rows) in data object {f.object} is damaged (CRC or length mismatch)",
                    location=Location(file=f.object),
                    params={"object": f.object, "offset": f.base_offset},
                    hint="restore the object from a backup, or drop and rebuild the table; nothing partial "
                    "was returned",
                )
            self.verified.add(key)
        try:
            return blobs.decode(buf, part)
        except (pa.ArrowInvalid, OSError) as exc:
            raise TidehouseError(
                ErrorCode.STORAGE_CORRUPT,
                f"{table.meta.name} bucket {f.bucket}: frame at offset "
                f"{f.base_offset} in {f.object} does not decode: {exc}",
                location=Location(file=f.object),
            ) from exc


def batch_info(f: Frame | None) -> BatchInfo | None:
    """What the storage interface tells of a committed frame."""
    if f is None:
        return None
    return BatchInfo(
        bucket=f.bucket,
        base_offset=f.base_offset,
        rows=f.rows,
        commit_ts=f.commit_us / 1e6,
        origin_ts=None if f.origin_us is None else f.origin_us / 1e6,
        writer=f.writer,
        seq=f.seq,
    )

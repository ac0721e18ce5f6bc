"""One bucket's log: appending frames, reading them, retention — on the view of :mod:`.logview` (segments,
index, refresh and recovery).

Offsets are dense per bucket; a segment rolls (a new file named by the next offset) once the active one
reaches ``segment_bytes``.

Writers take the lock (a thread mutex plus ``flock``), then refresh the view (repairing a torn tail, see
:mod:`.logview`), then write the frame with one ``pwritev``, ``fdatasync``\\ s it (unless ``fsync=False``)
and append the index entry.

Readers never lock. They read new index entries (an entry is written only after its frame is whole and
synced) and verify any whole frames past the index; an incomplete frame at the tail is simply not visible
yet. Every frame's CRC is checked the first time a process decodes it. Payloads are decoded zero-copy from a
memory map, so projecting a few columns costs ~nothing for the others.
"""

from __future__ import annotations

import bisect
import contextlib
import fcntl
import itertools
import json
import mmap
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa

from runtime.core.errors import ErrorCode, Location, TidehouseError
from runtime.core.settings import default
from runtime.storage import frames as _frames
from runtime.storage.frames import (
    HEADER_SIZE,
    NO_ORIGIN,
    Entry,
    encode_frame,
    frame_crc_ok,
    parse_header,
    writer_hash,
    writer_of,
)
from runtime.storage.logview import LogView, segment_name, seqs_crc

__all__ = ["BucketLog", "segment_name"]


class BucketLog(LogView):
    """The log of one bucket. Thread-safe; several processes may hold one for the same folder."""

    def __init__(
        self,
        path: Path,
        bucket: int,
        *,
        fsync: bool = default("storage.fsync"),
        segment_bytes: int = default("storage.segment_bytes"),
        table: str = "",
    ) -> None:
        super().__init__(path, bucket, fsync=fsync, table=table)
        self.segment_bytes = segment_bytes
        self._mutex = threading.RLock()
        self._lock_fd: int | None = None

    # -- locking --------------------------------------------------------------------------------------
    @contextlib.contextmanager
    def locked(self) -> Iterator[BucketLog]:
        """Exclusive write access across threads and processes; the state is refreshed and repaired."""
        with self._mutex:
            if self._lock_fd is None:
                self.path.mkdir(parents=True, exist_ok=True)
                self._lock_fd = os.open(self.path / "lock", os.O_RDWR | os.O_CREAT, 0o644)
            fcntl.flock(self._lock_fd, fcntl.LOCK_EX)
            try:
                self._refresh(repair=True)
                yield self
            finally:
                fcntl.flock(self._lock_fd, fcntl.LOCK_UN)

    def refresh(self) -> None:
        """Bring the view up to date with what other processes committed (no lock, no repair)."""
        with self._mutex:
            self._refresh(repair=False)

    # -- append ---------------------------------------------------------------------------------------
    def append(
        self,
        payload: pa.Buffer,
        *,
        rows: int,
        schema_id: int,
        writer: str,
        seq: int,
        origin_ts: float | None = None,
    ) -> tuple[int, int]:
        """Append one frame; call inside :meth:`locked`. Returns the offset range ``[start, end)``.

        Nothing is written when the frame would exceed the format's limits (``WRITE_INVALID``)."""
        self._check_limits(payload.size, rows, writer)
        base = self.end_offset
        seg = next(reversed(self._segs), None) if self._segs else None
        if seg is None or (self._segs[seg] >= self.segment_bytes and self._segs[seg] > 0):
            seg = base
            self.path.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.segment_path(seg), os.O_WRONLY | os.O_CREAT, 0o644)
            os.close(fd)
            if self.fsync:
                from runtime.storage.meta import fsync_dir

                fsync_dir(self.path)
            self._segs[seg] = 0
        pos = self._segs[seg]
        now_us = time.time_ns() // 1000
        origin_us = NO_ORIGIN if origin_ts is None else int(origin_ts * 1e6)
        pieces, flen, _crc = encode_frame(
            payload,
            base_offset=base,
            rows=rows,
            schema_id=schema_id,
            commit_ts=now_us,
            origin_ts=origin_us,
            writer=writer,
            seq=seq,
        )
        fd = os.open(self.segment_path(seg), os.O_WRONLY)
        try:
            written = os.pwritev(fd, pieces, pos)
            if written != flen:  # short write (rare, huge frames): write the rest
                rest = b"".join(bytes(p) for p in pieces)[written:]
                while rest:
                    n = os.pwrite(fd, rest, pos + flen - len(rest))
                    rest = rest[n:]
            if self.fsync:
                os.fdatasync(fd)
        finally:
            os.close(fd)
        self._segs[seg] = pos + flen
        e = Entry(base, seg, pos, flen, rows, now_us, origin_us, writer_hash(writer), seq)
        fd = os.open(self.index_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, e.pack())
        finally:
            os.close(fd)
        self._add(e)
        self._n_indexed += 1
        self._verified.add(base)
        return base, base + rows

    def _check_limits(self, payload_size: int, rows: int, writer: str) -> None:
        loc = Location(path=self.table)
        if len(writer.encode("utf-8")) > 0xFFFF:
            raise TidehouseError(
                ErrorCode.WRITE_INVALID,
                f"write to {self.table}: the writer id is longer than 65535 bytes",
                location=loc,
                hint="use a shorter writer id",
            )
        size = _frames.frame_size(payload_size, writer)
        if size >= _frames.MAX_FRAME or rows > 0xFFFFFFFF:
            raise TidehouseError(
                ErrorCode.WRITE_INVALID,
                f"write to {self.table} bucket {self.bucket}: {rows:,} rows encode to {size:,} bytes, over "
                f"the limit of {_frames.MAX_FRAME:,} bytes for one write to one bucket; nothing was written",
                location=loc,
                params={"bytes": size, "limit": _frames.MAX_FRAME},
                hint="split the data into several smaller writes (e.g. a smaller micro-batch or "
                "maxRecordsPerBatch) or give the table more buckets",
            )

    # -- reads ----------------------------------------------------------------------------------------
    def _buffer(self, seg: int, need: int) -> pa.Buffer:
        cached = self._maps.get(seg)
        if cached is not None and cached[0] >= need:
            return cached[2]
        try:
            fd = os.open(self.segment_path(seg), os.O_RDONLY)
        except FileNotFoundError as exc:  # retention (another process) deleted it after we listed it
            raise TidehouseError(
                ErrorCode.STORAGE_RANGE,
                f"{self.table} bucket {self.bucket}: segment {segment_name(seg)} was deleted by retention "
                "while being read",
                location=Location(path=self.table),
                hint="read again from the earliest kept offset (end_offsets / first offset)",
            ) from exc
        try:
            size = os.fstat(fd).st_size
            mm = mmap.mmap(fd, size, prot=mmap.PROT_READ)
        finally:
            os.close(fd)
        buf = pa.py_buffer(mm)
        self._maps[seg] = (size, mm, buf)
        return buf

    def frames(self, start: int, end: int) -> Iterator[tuple[Entry, pa.RecordBatch]]:
        """Decoded frames overlapping ``[start, end)`` (whole batches; the caller slices)."""
        with self._mutex:
            self._refresh(repair=False)
            if start < self._first_kept:
                raise TidehouseError(
                    ErrorCode.STORAGE_RANGE,
                    f"{self.table} bucket {self.bucket}: offset {start} was deleted by retention "
                    f"(earliest kept offset {self._first_kept})",
                    location=Location(path=self.table),
                )
            i = max(bisect.bisect_right(self._bases, start) - 1, 0)
            todo = []
            while i < len(self._entries) and self._entries[i].base_offset < end:
                if self._entries[i].end_offset > start and self._entries[i].rows:
                    todo.append((i, self._entries[i]))
                i += 1
            n_entries = len(self._entries)
        for i, e in todo:
            with self._mutex:
                frame = self._buffer(e.segment, e.end_position).slice(e.position, e.frame_len)
                header = parse_header(memoryview(frame)[:HEADER_SIZE])
                if e.base_offset not in self._verified:
                    if (
                        header is None
                        or not frame_crc_ok(memoryview(frame), header)
                        or header.base_offset != e.base_offset
                    ):
                        self._invalid_at(e.segment, e.position, False, "damaged frame (CRC mismatch)")
                        if i == n_entries - 1:
                            return  # a damaged last frame is a torn tail: not visible
                        raise self._corrupt(e.segment, e.position, "damaged frame (CRC mismatch)")
                    self._verified.add(e.base_offset)
            payload = frame.slice(header.payload_start)
            yield e, pa.ipc.open_stream(payload).read_next_batch()

    def frame_writer(self, e: Entry) -> tuple[str, int]:
        """(writer, schema_id) of a frame, read from its header (``("", 0)`` once retention deleted it)."""
        try:
            fd = os.open(self.segment_path(e.segment), os.O_RDONLY)
        except FileNotFoundError:
            return "", 0
        try:
            head = os.pread(fd, HEADER_SIZE + 512, e.position)
            header = parse_header(head)
            if header is None:
                return "", 0
            if header.writer_len > 512 - 8:
                head = os.pread(fd, HEADER_SIZE + header.writer_len, e.position)
        finally:
            os.close(fd)
        return writer_of(head, header), header.schema_id

    def entry_at(self, offset: int) -> Entry | None:
        with self._mutex:
            self._refresh(repair=False)
            i = bisect.bisect_right(self._bases, offset) - 1
            while 0 <= i < len(self._entries):
                e = self._entries[i]
                if e.base_offset <= offset < e.end_offset:
                    return e
                if e.rows == 0 and e.base_offset <= offset:
                    i -= 1
                    continue
                return None
            return None

    def last_entry(self) -> Entry | None:
        """The last batch that holds rows (empty marker frames only record a writer's seq)."""
        with self._mutex:
            self._refresh(repair=False)
            for e in reversed(self._entries):
                if e.rows:
                    return e
            return None

    # -- housekeeping ---------------------------------------------------------------------------------
    def delete_before(self, offset: int, older_than: float) -> int:
        """Delete whole segments ending at or before ``offset`` and last written before ``older_than``.

        Before any segment goes, the last ``seq`` of every writer is saved (atomically) in ``seqs.json``, so
        the idempotency of replayed writes survives the loss of their frames, even if the index is rebuilt
        from the remaining segments later.
        """
        with self.locked():
            doomed = self._doomed(self._segs, offset, older_than)
            if doomed:
                self._save_seqs()
            for seg in doomed:
                self.segment_path(seg).unlink()
                del self._segs[seg]
                self._drop_map(seg)
            if self._segs:
                self._first_kept = next(iter(self._segs))
            if doomed:
                self._compact_index()
        return len(doomed)

    def _compact_index(self) -> None:
        """Replace the index by the entries of the kept segments (atomic; readers notice the new inode), so
        that neither the file nor any process's memory grows with the whole history of the bucket."""
        from runtime.storage.meta import write_atomic

        kept = [e for e in self._entries if e.segment in self._segs]
        if len(kept) == len(self._entries) or self._n_indexed != len(self._entries):
            return
        write_atomic(self.index_path, b"".join(e.pack() for e in kept))
        self._index_ino = os.stat(self.index_path).st_ino
        self._entries = kept
        self._bases = [e.base_offset for e in kept]
        self._n_indexed = len(kept)
        self._verified = {b for b in self._verified if b >= self._first_kept}

    def _doomed(self, segs: dict[int, int], offset: int, older_than: float) -> list[int]:
        out = []
        for seg, nxt in itertools.pairwise(list(segs)):  # never the active (last) segment
            try:
                old = self.segment_path(seg).stat().st_mtime < older_than
            except FileNotFoundError:  # deleted meanwhile by another process's retention
                continue
            if nxt > offset or not old:
                break
            out.append(seg)
        return out

    def deletable(self, offset: int, older_than: float) -> bool:
        """Whether :meth:`delete_before` would delete anything now (no lock; a cheap listing)."""
        return bool(self._doomed(self._list_segments(), offset, older_than))

    def _save_seqs(self) -> None:
        from runtime.storage.meta import write_atomic

        seqs = {str(h): s for h, s in sorted(self._seqs.items())}
        doc = {"format": 1, "seqs": seqs, "crc": seqs_crc(seqs)}
        write_atomic(self.seqs_path, json.dumps(doc).encode())
        self._base_seqs = dict(self._seqs)

    def close(self) -> None:
        with self._mutex:
            self._maps.clear()
            if self._lock_fd is not None:
                os.close(self._lock_fd)
                self._lock_fd = None

"""One bucket's log: segments of frames, the per-bucket index, the cross-process lock, recovery and reads.

Folder ``<table>/bucket-<n>/``: ``lock`` (``fcntl.flock`` target), ``index`` (see :mod:`.frames`),
segments ``<base_offset:020d>.log`` and, once retention deleted segments, ``seqs.json`` (the last ``seq`` of
every writer as of that deletion: idempotency must not depend on frames that are gone). Retention also
replaces the index by the entries of the kept segments (atomic rename); every process notices the new inode
and reloads, and unmaps the deleted segments, so neither disk nor memory grows with the bucket's history. Offsets are dense per bucket; a segment rolls (a new file named by the
next offset) once the active one reaches ``segment_bytes``.

Writers take the lock (a thread mutex plus ``flock``), then *refresh*: read new index entries, verify and index
frames written after the index (a writer that died between the two), and on the first lock in a process also
re-verify the CRC of the last indexed frame. A frame that is not whole is a **torn tail** when nothing valid
follows it (it is truncated, with any later empty segment) and **corruption** when a whole frame follows it
(``STORAGE_CORRUPT`` naming the file and byte offset; nothing is truncated). The writer then writes the frame
with one ``pwritev``, ``fdatasync``\\ s it (unless ``fsync=False``) and appends the index entry.

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
import re
import threading
import time
import zlib
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa

from runtime.core.errors import ErrorCode, Location, TidehouseError
from runtime.core.settings import default
from runtime.storage import frames as _frames
from runtime.storage.frames import (
    ENTRY_SIZE,
    HEADER_SIZE,
    NO_ORIGIN,
    Entry,
    encode_frame,
    frame_crc_ok,
    parse_header,
    read_frame_at,
    valid_frame_after,
    writer_hash,
    writer_of,
)

_SEGMENT = re.compile(r"^(\d{20})\.log$")


def segment_name(base: int) -> str:
    return f"{base:020d}.log"


def _seqs_crc(seqs: dict[str, int]) -> int:
    return zlib.crc32(json.dumps(seqs, sort_keys=True).encode())


class BucketLog:
    """The log of one bucket. Thread-safe; several processes may hold one for the same folder."""

    def __init__(self, path: Path, bucket: int, *, fsync: bool = default("storage.fsync"),
                 segment_bytes: int = default("storage.segment_bytes"),
                 table: str = "") -> None:
        self.path = path
        self.bucket = bucket
        self.table = table
        self.fsync = fsync
        self.segment_bytes = segment_bytes
        self._mutex = threading.RLock()
        self._reset()
        self._lock_fd: int | None = None
        self._recovered = False
        self._maps: dict[int, tuple[int, mmap.mmap, pa.Buffer]] = {}

    def _reset(self) -> None:
        self._entries: list[Entry] = []
        self._bases: list[int] = []
        self._n_indexed = 0
        self._index_ino: int | None = None  # the index file we read (a new inode = replaced: start over)
        self._base_seqs = self._load_seqs()
        self._seqs: dict[int, int] = dict(self._base_seqs)
        self._verified: set[int] = set()
        self._segs: dict[int, int] = {}
        self._first_kept = 0

    # -- paths and state ------------------------------------------------------------------------------
    @property
    def index_path(self) -> Path:
        return self.path / "index"

    @property
    def seqs_path(self) -> Path:
        """Last ``seq`` per writer (hash) of every frame retention deleted; written before the segments go."""
        return self.path / "seqs.json"

    def _load_seqs(self) -> dict[int, int]:
        try:
            raw = self.seqs_path.read_bytes()
        except FileNotFoundError:
            return {}
        try:
            doc = json.loads(raw)
            seqs = doc["seqs"]
            if _seqs_crc(seqs) != doc["crc"]:
                raise ValueError("checksum mismatch")
            return {int(h): int(s) for h, s in seqs.items()}
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            file = str(self.seqs_path)
            raise TidehouseError(ErrorCode.STORAGE_CORRUPT, f"{self.table} bucket {self.bucket}: damaged "
                                 f"writer sequence file {file}: {exc}", location=Location(file=file),
                                 hint="restore it from a backup (it is replaced atomically, so this is damage); "
                                      "without it a replayed old write could be applied twice") from exc

    def segment_path(self, base: int) -> Path:
        return self.path / segment_name(base)

    @property
    def end_offset(self) -> int:
        return self._entries[-1].end_offset if self._entries else self._first_kept

    @property
    def first_offset(self) -> int:
        """The earliest offset still readable (segments before it were deleted by retention)."""
        return self._first_kept

    def last_seq(self, writer: str) -> int | None:
        return self._seqs.get(writer_hash(writer))

    def entries(self) -> list[Entry]:
        return list(self._entries)

    def _corrupt(self, seg: int, pos: int, what: str) -> TidehouseError:
        file = str(self.segment_path(seg))
        return TidehouseError(
            ErrorCode.STORAGE_CORRUPT,
            f"{self.table} bucket {self.bucket}: {what} at byte {pos} of {file}, followed by valid data",
            location=Location(file=file), params={"file": file, "position": pos},
            hint="restore the file from a backup or drop and rebuild the table; nothing was truncated")

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

    # -- refresh / recovery ---------------------------------------------------------------------------
    def _list_segments(self) -> dict[int, int]:
        segs: dict[int, int] = {}
        try:
            with os.scandir(self.path) as it:
                for de in it:
                    m = _SEGMENT.match(de.name)
                    if m:
                        segs[int(m.group(1))] = de.stat().st_size
        except FileNotFoundError:
            pass
        return dict(sorted(segs.items()))

    def _refresh(self, repair: bool) -> None:
        self._segs = self._list_segments()
        for seg in [s for s in self._maps if s not in self._segs]:  # deleted by retention elsewhere:
            self._drop_map(seg)  # unmap, or the disk space is never given back
        self._read_index(repair)
        if repair and not self._recovered:
            self._verify_last(repair)
            self._recovered = True
        self._scan_tail(repair)
        if self._segs:
            self._first_kept = max(self._first_kept, next(iter(self._segs)))
        elif not self._entries:
            self._first_kept = 0

    def _read_index(self, repair: bool) -> None:
        try:
            st = os.stat(self.index_path)
            size, ino = st.st_size, st.st_ino
        except FileNotFoundError:
            size, ino = 0, None
        if self._index_ino is not None and ino != self._index_ino:  # compacted by retention, or deleted
            self._reset()
            self._segs = self._list_segments()
        self._index_ino = ino
        n_full = size // ENTRY_SIZE
        if n_full < self._n_indexed:  # the index was rebuilt by a writer: start over
            self._reset()
            self._segs = self._list_segments()
        if n_full > self._n_indexed:
            with open(self.index_path, "rb") as fh:
                fh.seek(self._n_indexed * ENTRY_SIZE)
                raw = fh.read((n_full - self._n_indexed) * ENTRY_SIZE)
            first_seg = next(iter(self._segs), None)
            for k in range(len(raw) // ENTRY_SIZE):
                i = self._n_indexed
                e = Entry.unpack(raw[k * ENTRY_SIZE:(k + 1) * ENTRY_SIZE])
                if e is not None and i < len(self._entries):
                    if self._entries[i] != e:  # our tail view disagrees with the index: reload
                        self._reset()
                        self._segs = self._list_segments()
                        return self._read_index(repair)
                    self._n_indexed += 1
                    continue
                if e is None or not self._entry_fits(e, first_seg):
                    if repair:
                        self._truncate_index(i)
                    break
                self._add(e)
                self._n_indexed += 1
        if repair and size != self._n_indexed * ENTRY_SIZE and self._n_indexed == len(self._entries):
            self._truncate_index(self._n_indexed)

    def _entry_fits(self, e: Entry, first_seg: int | None) -> bool:
        prev = self._entries[-1] if self._entries else None
        if prev is not None and e.base_offset != prev.end_offset:
            return False
        if prev is not None and e.segment == prev.segment:
            if e.position != prev.end_position:
                return False
        elif e.position != 0 or e.segment != e.base_offset:
            return False
        size = self._segs.get(e.segment)
        if size is None:  # deleted by retention (older than every kept segment) or missing
            return first_seg is not None and e.segment < first_seg
        return e.end_position <= size

    def _add(self, e: Entry) -> None:
        self._entries.append(e)
        self._bases.append(e.base_offset)
        prev = self._seqs.get(e.writer_hash)
        if prev is None or e.seq > prev:
            self._seqs[e.writer_hash] = e.seq

    def _truncate_index(self, n: int) -> None:
        with open(self.index_path, "ab") as fh:
            fh.truncate(n * ENTRY_SIZE)
        self._n_indexed = min(self._n_indexed, n)

    def _drop_last(self) -> None:
        self._entries.pop()
        self._bases.pop()
        self._seqs = dict(self._base_seqs)
        for e in self._entries:
            if e.seq > self._seqs.get(e.writer_hash, -(1 << 63)):
                self._seqs[e.writer_hash] = e.seq
        self._n_indexed = min(self._n_indexed, len(self._entries))

    def _verify_last(self, repair: bool) -> None:
        """First lock in this process: the last indexed frame must still be whole (else it is the torn tail)."""
        if not self._entries:
            return
        e = self._entries[-1]
        if e.segment not in self._segs:
            return
        fd = os.open(self.segment_path(e.segment), os.O_RDONLY)
        try:
            got = read_frame_at(fd, e.position, self._segs[e.segment])
        finally:
            os.close(fd)
        if got is not None and got[0].base_offset == e.base_offset:
            self._verified.add(e.base_offset)
            return
        self._invalid_at(e.segment, e.position, repair, "index entry points at a damaged frame")
        self._drop_last()
        self._truncate_index(len(self._entries))

    def _scan_tail(self, repair: bool) -> None:
        """Index (writer) or just see (reader) whole frames written after the last indexed one."""
        if not self._segs:
            return
        if self._entries:
            seg, pos, expected = self._entries[-1].segment, self._entries[-1].end_position, self.end_offset
        else:
            seg = next(iter(self._segs))
            pos, expected = 0, seg
        index_fd = None
        try:
            while True:
                size = self._segs.get(seg, 0)
                if pos >= size:
                    later = [s for s in self._segs if s > seg]
                    if not later:
                        return
                    nxt = later[0]
                    if nxt != expected:
                        if any(self._segment_has_valid(s) for s in self._segs if s >= nxt):
                            raise self._corrupt(nxt, 0, f"segment named {nxt} where offset {expected} was expected")
                        if repair:  # a misnamed segment with nothing whole in it: a torn roll
                            for later in [s for s in self._segs if s >= nxt]:
                                os.unlink(self.segment_path(later))
                                del self._segs[later]
                        return
                    seg, pos = nxt, 0
                    continue
                fd = os.open(self.segment_path(seg), os.O_RDONLY)
                try:
                    got = read_frame_at(fd, pos, size)
                finally:
                    os.close(fd)
                if got is None or got[0].base_offset != expected:
                    if got is None and self._recheck_size(seg, size):
                        continue  # the file grew while we looked: a writer is appending; look again
                    self._invalid_at(seg, pos, repair, "incomplete or damaged frame")
                    return
                h = got[0]
                e = Entry(h.base_offset, seg, pos, h.frame_len, h.rows, h.commit_ts, h.origin_ts,
                          writer_hash(writer_of(got[1], h)), h.seq)
                self._add(e)
                self._verified.add(e.base_offset)
                if repair:
                    if index_fd is None:
                        index_fd = os.open(self.index_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
                    os.write(index_fd, e.pack())
                    self._n_indexed += 1
                pos, expected = e.end_position, e.end_offset
        finally:
            if index_fd is not None:
                os.close(index_fd)

    def _recheck_size(self, seg: int, size: int) -> bool:
        try:
            now = os.stat(self.segment_path(seg)).st_size
        except FileNotFoundError:
            return False
        if now != size:
            self._segs[seg] = now
            return True
        return False

    def _invalid_at(self, seg: int, pos: int, repair: bool, what: str) -> None:
        """A frame at (seg, pos) is not whole: raise if valid data follows, else treat it as a torn tail."""
        if self._valid_data_after(seg, pos):
            path = self.segment_path(seg)
            fd = os.open(path, os.O_RDONLY)
            try:  # a concurrent writer may have completed it meanwhile
                again = read_frame_at(fd, pos, os.fstat(fd).st_size)
            finally:
                os.close(fd)
            if again is None:
                raise self._corrupt(seg, pos, what)
            return
        if not repair:
            return
        path = self.segment_path(seg)
        with open(path, "r+b") as fh:
            fh.truncate(pos)
            if self.fsync:
                os.fsync(fh.fileno())
        self._segs[seg] = pos
        for later in [s for s in self._segs if s > seg]:
            os.unlink(self.segment_path(later))
            del self._segs[later]

    def _valid_data_after(self, seg: int, pos: int) -> bool:
        fd = os.open(self.segment_path(seg), os.O_RDONLY)
        try:
            if valid_frame_after(fd, pos, os.fstat(fd).st_size) is not None:
                return True
        finally:
            os.close(fd)
        return any(self._segment_has_valid(later) for later in self._segs if later > seg)

    def _segment_has_valid(self, seg: int) -> bool:
        fd = os.open(self.segment_path(seg), os.O_RDONLY)
        try:
            size = os.fstat(fd).st_size
            return read_frame_at(fd, 0, size) is not None or valid_frame_after(fd, 0, size) is not None
        finally:
            os.close(fd)

    # -- append ---------------------------------------------------------------------------------------
    def append(self, payload: pa.Buffer, *, rows: int, schema_id: int, writer: str, seq: int,
               origin_ts: float | None = None) -> tuple[int, int]:
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
        pieces, flen, _crc = encode_frame(payload, base_offset=base, rows=rows, schema_id=schema_id,
                                          commit_ts=now_us, origin_ts=origin_us, writer=writer, seq=seq)
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
            raise TidehouseError(ErrorCode.WRITE_INVALID, f"write to {self.table}: the writer id is longer than "
                                 "65535 bytes", location=loc, hint="use a shorter writer id")
        size = _frames.frame_size(payload_size, writer)
        if size >= _frames.MAX_FRAME or rows > 0xFFFFFFFF:
            raise TidehouseError(
                ErrorCode.WRITE_INVALID,
                f"write to {self.table} bucket {self.bucket}: {rows:,} rows encode to {size:,} bytes, over the "
                f"limit of {_frames.MAX_FRAME:,} bytes for one write to one bucket; nothing was written",
                location=loc, params={"bytes": size, "limit": _frames.MAX_FRAME},
                hint="split the data into several smaller writes (e.g. a smaller micro-batch or maxRecordsPerBatch)"
                     " or give the table more buckets")

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
                f"{self.table} bucket {self.bucket}: segment {segment_name(seg)} was deleted by retention while "
                "being read", location=Location(path=self.table),
                hint="read again from the earliest kept offset (end_offsets / first offset)") from exc
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
                    f"(earliest kept offset {self._first_kept})", location=Location(path=self.table))
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
                    if header is None or not frame_crc_ok(memoryview(frame), header) \
                            or header.base_offset != e.base_offset:
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
        doc = {"format": 1, "seqs": seqs, "crc": _seqs_crc(seqs)}
        write_atomic(self.seqs_path, json.dumps(doc).encode())
        self._base_seqs = dict(self._seqs)

    def _drop_map(self, seg: int) -> None:
        cached = self._maps.pop(seg, None)
        if cached is not None:
            del cached
        # the mmap itself is released when the last buffer slice referencing it is gone

    def close(self) -> None:
        with self._mutex:
            self._maps.clear()
            if self._lock_fd is not None:
                os.close(self._lock_fd)
                self._lock_fd = None

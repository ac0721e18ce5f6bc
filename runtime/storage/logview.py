"""A bucket's log as this process sees it: the segments, the index, the writers' last ``seq`` — and how that
view is brought up to date with what other processes wrote (*refresh*) and repaired after a crash
(*recovery*).

Folder ``<table>/bucket-<n>/``: ``lock`` (``fcntl.flock`` target), ``index`` (see :mod:`.frames`),
segments ``<base_offset:020d>.log`` and, once retention deleted segments, ``seqs.json`` (the last ``seq`` of
every writer as of that deletion: idempotency must not depend on frames that are gone). Retention replaces
the index by the entries of the kept segments (atomic rename); every process notices the new file (another
inode number, or another entry where the last one it read was: the number may be reused) and reloads, and
unmaps the deleted segments, so neither disk nor memory grows with the bucket's history.

A refresh reads new index entries and verifies (a writer: and indexes) whole frames written after the index
(a writer that died between the two); on the first lock in a process a writer also re-verifies the CRC of the
last indexed frame. A frame that is not whole is a **torn tail** when nothing valid follows it (a writer
truncates it, with any later empty segment) and **corruption** when a whole frame follows it
(``STORAGE_CORRUPT`` naming the file and byte offset; nothing is truncated). A reader never repairs: an
incomplete frame at the tail is simply not visible yet (one whose length reaches past the end of the file is
not searched past: the writer is still writing it).

Appends, reads and retention are :class:`runtime.storage.log.BucketLog`'s, built on this view.
"""

from __future__ import annotations

import json
import mmap
import os
import re
import zlib
from pathlib import Path

import pyarrow as pa

from runtime.core.errors import ErrorCode, Location, TidehouseError
from runtime.storage.frames import (
    ENTRY_SIZE,
    HEADER_SIZE,
    Entry,
    parse_header,
    read_frame_at,
    valid_frame_after,
    writer_hash,
    writer_of,
)

_SEGMENT = re.compile(r"^(\d{20})\.log$")


def segment_name(base: int) -> str:
    return f"{base:020d}.log"


def seqs_crc(seqs: dict[str, int]) -> int:
    return zlib.crc32(json.dumps(seqs, sort_keys=True).encode())


class LogView:
    """The state of one bucket's log in this process, kept in step with the folder (not thread-safe on its
    own: :class:`~runtime.storage.log.BucketLog` serialises every call)."""

    def __init__(self, path: Path, bucket: int, *, fsync: bool, table: str = "") -> None:
        self.path = path
        self.bucket = bucket
        self.table = table
        self.fsync = fsync
        self._reset()
        self._recovered = False
        self._maps: dict[int, tuple[int, mmap.mmap, pa.Buffer]] = {}  # segment -> (size, map, buffer)

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
            if seqs_crc(seqs) != doc["crc"]:
                raise ValueError("checksum mismatch")
            return {int(h): int(s) for h, s in seqs.items()}
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            file = str(self.seqs_path)
            raise TidehouseError(
                ErrorCode.STORAGE_CORRUPT,
                f"{self.table} bucket {self.bucket}: damaged writer sequence file {file}: {exc}",
                location=Location(file=file),
                hint="restore it from a backup (it is replaced atomically, so this is damage); "
                "without it a replayed old write could be applied twice",
            ) from exc

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
            location=Location(file=file),
            params={"file": file, "position": pos},
            hint="restore the file from a backup or drop and rebuild the table; nothing was truncated",
        )

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
        if n_full < self._n_indexed or not self._index_holds_ours(n_full):  # rebuilt or replaced: start over
            self._reset()
            self._segs = self._list_segments()
        if n_full > self._n_indexed:
            with open(self.index_path, "rb") as fh:
                fh.seek(self._n_indexed * ENTRY_SIZE)
                raw = fh.read((n_full - self._n_indexed) * ENTRY_SIZE)
            first_seg = next(iter(self._segs), None)
            for k in range(len(raw) // ENTRY_SIZE):
                i = self._n_indexed
                e = Entry.unpack(raw[k * ENTRY_SIZE : (k + 1) * ENTRY_SIZE])
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

    def _index_holds_ours(self, n_full: int) -> bool:
        """Whether the index file still holds, at its place, the last entry this view read from it.

        The inode number alone does not say so: retention replaces the file (a rename), and the filesystem
        may give the freed number to a later replacement (ext4 alternates two), so after two replacements a
        view meets the number it read. A replacement holds entries of later frames only, so its entry at
        that place differs. It costs one read of one entry per refresh: measured here, an ``end_offsets`` of
        another process's view of a one-bucket table took 34.5 µs, not 25.8 µs (median of 5 x 20,000)."""
        if not self._n_indexed or n_full < self._n_indexed:
            return True  # nothing read yet, or shorter: the caller starts over anyway
        at = (self._n_indexed - 1) * ENTRY_SIZE
        try:
            fd = os.open(self.index_path, os.O_RDONLY)
        except FileNotFoundError:
            return False
        try:
            raw = os.pread(fd, ENTRY_SIZE, at)
        finally:
            os.close(fd)
        # shorter: replaced again since the stat (then the caller starts over, or the next refresh does)
        return len(raw) == ENTRY_SIZE and Entry.unpack(raw) == self._entries[self._n_indexed - 1]

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
        """First lock in this process: the last indexed frame must still be whole (else it is the torn
        tail)."""
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
        # the first frame past an index this view read whole is the one a writer appends next
        next_to_index = bool(self._entries) and len(self._entries) == self._n_indexed
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
                            raise self._corrupt(
                                nxt, 0, f"segment named {nxt} where offset {expected} was expected"
                            )
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
                    if got is None and next_to_index and not repair and self._still_coming(seg, pos):
                        return  # the frame a writer is writing (or a torn one): not visible yet
                    self._invalid_at(seg, pos, repair, "incomplete or damaged frame")
                    return
                h = got[0]
                e = Entry(
                    h.base_offset,
                    seg,
                    pos,
                    h.frame_len,
                    h.rows,
                    h.commit_ts,
                    h.origin_ts,
                    writer_hash(writer_of(got[1], h)),
                    h.seq,
                )
                self._add(e)
                self._verified.add(e.base_offset)
                next_to_index = False
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

    def _still_coming(self, seg: int, pos: int) -> bool:
        """Whether the frame at (seg, pos), the first past the index, is the last one, its bytes yet to come:
        its header reads and its length reaches past the end of the last segment — a frame a writer is
        writing, or a torn one. Nothing can follow it (a writer indexes a frame before it writes the next), so
        a reader does not search the rest of the file for a frame: that read the whole partial frame (tens of
        MB for a micro-batch) at every look while it was written. The writer's recovery still searches (a
        damaged length), as does a reader whose view holds frames the index does not."""
        if any(s > seg for s in self._segs):
            return False
        fd = os.open(self.segment_path(seg), os.O_RDONLY)
        try:
            header = parse_header(os.pread(fd, HEADER_SIZE, pos))
            return header is not None and pos + header.frame_len > os.fstat(fd).st_size
        finally:
            os.close(fd)

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

    def _drop_map(self, seg: int) -> None:
        cached = self._maps.pop(seg, None)
        if cached is not None:
            del cached
        # the mmap itself is released when the last buffer slice referencing it is gone

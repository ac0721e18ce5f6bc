"""Log segment frames and index entries: the on-disk record format of a bucket's log.

A segment file ``<base_offset:020d>.log`` is a sequence of frames. One frame is::

    header   56 bytes, little endian (struct ``<4sIqIIqqqHHI``):
             magic b"THF1" | frame_len u32 (whole frame, a multiple of 8) | base_offset i64 | rows u32 |
             schema_id u32 | commit_ts i64 (µs since epoch) | origin_ts i64 (µs, -1 = unknown) |
             seq i64 | writer_len u16 | reserved u16 | crc u32
    writer   UTF-8 writer id, zero-padded to a multiple of 8
    payload  an uncompressed Arrow IPC *stream* holding the schema and one record batch, zero-padded to 8

``crc`` is CRC-32 (the zlib polynomial, computed with ISA-L when ``isal`` is installed) of the header's first
52 bytes, the padded writer and the padded payload. Every frame starts at a multiple of 8, so the payload's
buffers are 8-byte aligned inside a memory map and are decoded zero-copy: a reader that projects columns
touches only the pages of the columns it asks for.

A frame is *whole* when its header parses, its length fits in the file and its CRC matches. The bucket's
per-bucket index (``index``) holds one fixed 72-byte entry per whole frame (struct ``<qqqIIqqQqI4x``:
base_offset, segment base, position, frame_len, rows, commit_ts, origin_ts, writer hash, seq, crc of the
first 64 bytes). The index is derived data: it is written after the frame, rebuilt from the segments when
it is missing, torn or stale, and never trusted over the segments.
"""

from __future__ import annotations

import hashlib
import os
import struct
import zlib
from collections.abc import Sequence
from dataclasses import dataclass

import pyarrow as pa

try:  # ISA-L's CRC-32 computes the very same checksum as zlib's, ~5x faster (measured 6.4 vs 1.2 GB/s here)
    from isal.isal_zlib import crc32 as _crc32
except ImportError:  # pragma: no cover - isal is a dependency; zlib stays a correct fallback
    _crc32 = zlib.crc32

MAGIC = b"THF1"
HEADER = struct.Struct("<4sIqIIqqqHHI")
HEADER_SIZE = HEADER.size  # 56
_CRC_SPAN = HEADER_SIZE - 4
ENTRY = struct.Struct("<qqqIIqqQqI4x")
ENTRY_SIZE = ENTRY.size  # 72
_ENTRY_CRC_SPAN = ENTRY_SIZE - 8
MAX_FRAME = 1 << 31
NO_ORIGIN = -1

assert HEADER_SIZE == 56 and ENTRY_SIZE == 72


def writer_hash(writer: str) -> int:
    """A stable 64-bit id of a writer name (kept in the index to answer idempotency checks)."""
    return int.from_bytes(hashlib.blake2b(writer.encode("utf-8"), digest_size=8).digest(), "little")


def _pad8(n: int) -> int:
    return (-n) & 7


@dataclass(frozen=True)
class Entry:
    """One whole frame: where it is and what it holds (mirrors an index entry)."""

    base_offset: int
    segment: int  # base offset of the segment file that holds the frame
    position: int
    frame_len: int
    rows: int
    commit_ts: int  # µs
    origin_ts: int  # µs or NO_ORIGIN
    writer_hash: int
    seq: int

    @property
    def end_offset(self) -> int:
        return self.base_offset + self.rows

    @property
    def end_position(self) -> int:
        return self.position + self.frame_len

    def pack(self) -> bytes:
        body = ENTRY.pack(
            self.base_offset,
            self.segment,
            self.position,
            self.frame_len,
            self.rows,
            self.commit_ts,
            self.origin_ts,
            self.writer_hash,
            self.seq,
            0,
        )
        crc = zlib.crc32(body[:_ENTRY_CRC_SPAN])
        return body[:_ENTRY_CRC_SPAN] + struct.pack("<I4x", crc)

    @classmethod
    def unpack(cls, raw: bytes | memoryview) -> Entry | None:
        """The entry, or None when its CRC does not match (a torn or damaged index entry)."""
        fields = ENTRY.unpack(raw)
        if zlib.crc32(raw[:_ENTRY_CRC_SPAN]) != fields[9]:
            return None
        return cls(*fields[:9])


@dataclass(frozen=True)
class Header:
    frame_len: int
    base_offset: int
    rows: int
    schema_id: int
    commit_ts: int
    origin_ts: int
    seq: int
    writer_len: int
    crc: int

    @property
    def payload_start(self) -> int:
        return HEADER_SIZE + self.writer_len + _pad8(self.writer_len)


def frame_size(payload_size: int, writer: str) -> int:
    """The length of the frame that would hold a payload of ``payload_size`` bytes written by ``writer``."""
    wlen = len(writer.encode("utf-8"))
    return HEADER_SIZE + wlen + _pad8(wlen) + payload_size + _pad8(payload_size)


def ipc_streams(
    parts: Sequence[pa.RecordBatch | pa.Table], align: int = 1
) -> tuple[pa.Buffer, list[tuple[int, int]]]:
    """Each of ``parts`` (record batches or tables) as one Arrow IPC stream, one after the other in one
    buffer, each followed by zeros up to a multiple of ``align``; and each stream's (position, length).

    The buffer is allocated once at its exact size: the streams are first written to a ``MockOutputStream``,
    which only counts bytes. A ``BufferOutputStream`` grows by reallocating, copying what it holds each time:
    for a 1M-row batch of 62 MB that cost 150-340 ms of CPU against 11-70 ms this way (measured here)."""
    mock = pa.MockOutputStream()
    spans = [_write_stream(mock, part, align) for part in parts]
    buf = pa.allocate_buffer(mock.size())
    sink = pa.FixedSizeBufferWriter(buf)
    for part in parts:
        _write_stream(sink, part, align)
    return buf, spans


def _write_stream(sink: pa.NativeFile, part: pa.RecordBatch | pa.Table, align: int) -> tuple[int, int]:
    start = sink.tell()
    with pa.ipc.new_stream(sink, part.schema) as w:
        w.write(part)
    end = sink.tell()
    pad = (-end) % align
    if pad:
        sink.write(b"\0" * pad)
    return start, end - start


def encode_frame(
    payload: pa.Buffer,
    *,
    base_offset: int,
    rows: int,
    schema_id: int,
    commit_ts: int,
    origin_ts: int,
    writer: str,
    seq: int,
) -> tuple[list, int, int]:
    """The pieces of one frame (for ``os.writev``), its total length and its CRC."""
    wb = writer.encode("utf-8")
    wpad = wb + b"\0" * _pad8(len(wb))
    ppad = b"\0" * _pad8(payload.size)
    frame_len = HEADER_SIZE + len(wpad) + payload.size + len(ppad)
    head = HEADER.pack(
        MAGIC, frame_len, base_offset, rows, schema_id, commit_ts, origin_ts, seq, len(wb), 0, 0
    )
    crc = _crc32(head[:_CRC_SPAN])
    crc = _crc32(wpad, crc)
    crc = _crc32(payload, crc)
    crc = _crc32(ppad, crc)
    head = head[:_CRC_SPAN] + struct.pack("<I", crc)
    return [head, wpad, payload, ppad], frame_len, crc


def parse_header(raw: bytes | memoryview) -> Header | None:
    """The header at the start of ``raw``, or None if it is short or not a frame header."""
    if len(raw) < HEADER_SIZE:
        return None
    magic, flen, base, rows, sid, cts, ots, seq, wlen, _res, crc = HEADER.unpack_from(raw)
    if magic != MAGIC or flen < HEADER_SIZE or flen % 8 or flen >= MAX_FRAME or HEADER_SIZE + wlen > flen:
        return None
    return Header(flen, base, rows, sid, cts, ots, seq, wlen, crc)


def frame_crc_ok(frame: bytes | memoryview, header: Header) -> bool:
    """Whether a whole frame's bytes match the CRC in its header."""
    crc = _crc32(frame[:_CRC_SPAN])
    crc = _crc32(frame[HEADER_SIZE : header.frame_len], crc)
    return crc == header.crc


_CHECK_CHUNK = 1 << 20  # read_frame_at checks a frame's CRC this many bytes at a time


def read_frame_at(fd: int, position: int, size: int) -> tuple[Header, bytes] | None:
    """Verify the frame at ``position`` of an open segment of ``size`` bytes: (its header, its first bytes —
    the header and the writer id, :func:`writer_of`), or None if it is not whole.

    The frame is read in chunks of at most 1 MiB into one buffer and checked as it goes: a tail frame of a
    micro-batch is tens of MB, which a whole read (and the slice its CRC took) copied twice into fresh
    memory for every reader that looked at it before its index entry was written."""
    if position + HEADER_SIZE > size:
        return None
    head = os.pread(fd, HEADER_SIZE, position)
    header = parse_header(head)
    if header is None or position + header.frame_len > size:
        return None
    crc = _crc32(head[:_CRC_SPAN])
    at, end = position + HEADER_SIZE, position + header.frame_len
    view = memoryview(bytearray(min(_CHECK_CHUNK, end - at)))
    while at < end:
        n = os.preadv(fd, [view[: end - at]], at)
        if n <= 0:  # truncated meanwhile (a writer repairing its torn tail)
            return None
        crc = _crc32(view[:n], crc)
        at += n
    if crc != header.crc:
        return None
    return header, head + os.pread(fd, header.writer_len, position + HEADER_SIZE)


def valid_frame_after(fd: int, position: int, size: int, chunk: int = _CHECK_CHUNK) -> int | None:
    """Position of the first whole frame strictly after ``position`` in a segment (8-aligned), or None.

    Used to tell a torn tail (nothing valid follows) from corruption (valid data follows a bad frame). The
    rest of the segment is searched ``chunk`` bytes at a time, so the memory it takes does not grow with it.
    """
    start = position + 8
    while start < size:
        data = os.pread(fd, min(chunk, size - start), start)
        if not data:
            return None
        at = data.find(MAGIC)
        while at >= 0:
            pos = start + at
            if pos % 8 == 0 and read_frame_at(fd, pos, size) is not None:
                return pos
            at = data.find(MAGIC, at + 1)
        if start + len(data) >= size:
            return None
        start += len(data) - (len(MAGIC) - 1)  # a magic the chunk's end cuts is whole in the next one
    return None


def writer_of(frame_head: bytes, header: Header) -> str:
    return bytes(frame_head[HEADER_SIZE : HEADER_SIZE + header.writer_len]).decode("utf-8", "replace")

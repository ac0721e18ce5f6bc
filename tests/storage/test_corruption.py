"""Tail corruption: random truncations and bit flips in a segment.

A damaged or incomplete *last* frame is a torn tail: the next writer truncates it to the last whole frame and
readers never see it. Damage before the last frame (valid data follows) is STORAGE_CORRUPT naming the file and
byte offset, never a silent truncation.
"""

from __future__ import annotations

import os
import random
import shutil
from pathlib import Path

import pyarrow as pa
import pytest

from runtime.core.errors import ErrorCode, TidehouseError
from runtime.storage import TableMeta, open_store
from tests._support import scale

SCHEMA = pa.schema([("seq", pa.int64()), ("v", pa.string())])
FRAMES = 6


def _template(tmp_path) -> tuple[str, list[int]]:
    """A table with FRAMES frames in one segment; returns the root and each frame's start position."""
    root = str(tmp_path / "template")
    s = open_store(root, fsync=False)
    s.create_table(TableMeta("ods.t", SCHEMA))
    for seq in range(FRAMES):
        s.write(
            "ods.t",
            pa.table({"seq": [seq] * (seq + 3), "v": [f"value-{seq}"] * (seq + 3)}),
            writer="w",
            seq=seq,
        )
    s.close()
    from runtime.storage.log import BucketLog

    log = BucketLog(Path(root) / "ods" / "t" / "bucket-0", 0)
    log.refresh()
    return root, [e.position for e in log.entries()] + [log.entries()[-1].end_position]


def _seqs(store) -> list[int]:
    out = []
    for b in store.read("ods.t", 0, 0, columns=["seq"]):
        out.extend(b.column("seq").to_pylist())
    return sorted(set(out))


@pytest.mark.reliability
def test_truncations_and_bit_flips(tmp_path, seed):
    rng = random.Random(seed)
    template, starts = _template(tmp_path)
    last_start, size = starts[-2], starts[-1]
    outcomes = {"torn": 0, "corrupt": 0}
    for case in range(scale(50, 500)):
        root = str(tmp_path / f"case{case}")
        shutil.copytree(template, root)
        seg = f"{root}/ods/t/bucket-0/{0:020d}.log"
        if rng.random() < 0.4:
            cut = rng.randrange(last_start + 1, size)  # inside the last frame
            with open(seg, "r+b") as fh:
                fh.truncate(cut)
            damaged_last = True
            pos = cut
        else:
            pos = rng.randrange(0, size)
            with open(seg, "r+b") as fh:
                fh.seek(pos)
                byte = fh.read(1)[0]
                fh.seek(pos)
                fh.write(bytes([byte ^ (1 << rng.randrange(8))]))
            damaged_last = pos >= last_start
        if damaged_last:
            # readers do not see the torn frame; the writer truncates it and goes on at its offset
            reader = open_store(root)
            assert _seqs(reader) == list(range(FRAMES - 1)), (case, pos)
            writer = open_store(root)
            got = writer.write("ods.t", pa.table({"seq": [99], "v": ["new"]}), writer="w2", seq=1)
            assert got.ranges[0][0] == sum(s + 3 for s in range(FRAMES - 1)), (case, pos)
            assert _seqs(open_store(root)) == list(range(FRAMES - 1)) + [99]
            assert writer.last_seq("ods.t", "w") == FRAMES - 2  # the torn frame's seq is not committed
            outcomes["torn"] += 1
        else:
            frame = max(i for i, st in enumerate(starts[:-1]) if st <= pos)
            store = open_store(root)
            with pytest.raises(TidehouseError) as err:
                _seqs(store)
            assert err.value.code == ErrorCode.STORAGE_CORRUPT, (case, pos)
            assert err.value.params["file"] == seg and err.value.params["position"] == starts[frame]
            assert os.path.getsize(seg) == size  # nothing was truncated
            # a writer (which only re-verifies the tail) appends after the damage and loses nothing either
            open_store(root).write("ods.t", pa.table({"seq": [99], "v": ["x"]}), writer="w2", seq=1)
            assert os.path.getsize(seg) > size
            with pytest.raises(TidehouseError) as err:
                _seqs(open_store(root))
            assert err.value.code == ErrorCode.STORAGE_CORRUPT
            outcomes["corrupt"] += 1
    print(f"[corruption] {outcomes}")


def test_a_large_frame_is_checked_in_chunks(tmp_path):
    """read_frame_at checks a frame larger than its 1 MiB chunk piece by piece: whole, it gives the header
    and the writer id; one flipped byte in any chunk, or one byte missing, and it is not whole."""
    from runtime.storage import frames

    payload = pa.py_buffer(random.Random(7).randbytes(3 * frames._CHECK_CHUNK + 13))
    pieces, flen, _ = frames.encode_frame(
        payload, base_offset=40, rows=9, schema_id=1, commit_ts=1, origin_ts=2, writer="writer-7", seq=3
    )
    data = b"\0" * 64 + b"".join(bytes(p) for p in pieces)
    path = tmp_path / "segment"
    for flip in (None, 64 + 100, 64 + frames._CHECK_CHUNK + 5, 64 + flen - 1):
        damaged = bytearray(data)
        if flip is not None:
            damaged[flip] ^= 0x10
        path.write_bytes(bytes(damaged))
        fd = os.open(path, os.O_RDONLY)
        try:
            got = frames.read_frame_at(fd, 64, len(damaged))
            short = frames.read_frame_at(fd, 64, len(damaged) - 1)
        finally:
            os.close(fd)
        assert short is None
        if flip is None:
            assert got is not None and got[0].base_offset == 40 and got[0].frame_len == flen
            assert frames.writer_of(got[1], got[0]) == "writer-7"
        else:
            assert got is None, flip


def test_a_reader_sees_a_large_whole_frame_past_the_index_and_not_a_damaged_one(tmp_path):
    """A frame whole on disk whose index entry was never written (a crash between the two) is visible to a
    reader; the same frame with one byte flipped is a torn tail, not visible."""
    from runtime.storage.frames import ENTRY_SIZE
    from runtime.storage.log import BucketLog

    root = str(tmp_path / "t")
    s = open_store(root, fsync=False)
    s.create_table(TableMeta("ods.t", SCHEMA))
    big = "x" * 1000
    for seq in range(2):  # two frames of ~2 MB each
        s.write("ods.t", pa.table({"seq": [seq] * 2000, "v": [big] * 2000}), writer="w", seq=seq)
    s.close()
    log = BucketLog(Path(root) / "ods" / "t" / "bucket-0", 0)
    log.refresh()
    last = log.entries()[-1]
    assert last.frame_len > 2**20
    with open(log.index_path, "r+b") as fh:  # the last frame's index entry was never written
        fh.truncate(ENTRY_SIZE)
    reader = open_store(root, fsync=False)
    assert _seqs(reader) == [0, 1]
    reader.close()
    segment = log.segment_path(last.segment)
    damaged = bytearray(segment.read_bytes())
    damaged[last.position + last.frame_len // 2] ^= 0x01
    segment.write_bytes(bytes(damaged))
    reader = open_store(root, fsync=False)
    assert _seqs(reader) == [0]
    reader.close()


def test_a_reader_does_not_search_past_a_frame_still_being_written(tmp_path, monkeypatch):
    """The frame after the index whose length reaches past the file's end is one a writer is writing: a reader
    sees the frames before it without reading the rest of the file for another frame (it did, the whole
    partial frame at every look), and sees the frame once its bytes are all there."""
    from runtime.storage import logview
    from runtime.storage.frames import ENTRY_SIZE
    from runtime.storage.log import BucketLog

    root = str(tmp_path / "t")
    s = open_store(root, fsync=False)
    s.create_table(TableMeta("ods.t", SCHEMA))
    for seq in range(3):
        s.write("ods.t", pa.table({"seq": [seq] * 2000, "v": ["x" * 200] * 2000}), writer="w", seq=seq)
    s.close()
    log = BucketLog(Path(root) / "ods" / "t" / "bucket-0", 0)
    log.refresh()
    last = log.entries()[-1]
    segment = log.segment_path(last.segment)
    whole = segment.read_bytes()
    with open(log.index_path, "r+b") as fh:  # the third frame is being written: no index entry yet
        fh.truncate(2 * ENTRY_SIZE)
    segment.write_bytes(whole[: last.position + last.frame_len // 2])
    searched = []
    real = logview.valid_frame_after
    monkeypatch.setattr(logview, "valid_frame_after", lambda *a, **k: searched.append(a) or real(*a, **k))
    reader = open_store(root, fsync=False)
    assert _seqs(reader) == [0, 1] and searched == []
    segment.write_bytes(whole)  # its last bytes arrive
    assert _seqs(reader) == [0, 1, 2] and searched == []
    reader.close()


def test_a_reader_with_frames_the_index_does_not_hold_still_finds_damage(tmp_path):
    """Without an index the reader's view is its own scan: a frame whose length was damaged to reach past the
    file's end, followed by whole frames, is corruption for the reader too — not a frame being written."""
    from runtime.storage.log import BucketLog

    root = str(tmp_path / "t")
    s = open_store(root, fsync=False)
    s.create_table(TableMeta("ods.t", SCHEMA))
    for seq in range(3):
        s.write("ods.t", pa.table({"seq": [seq] * 50, "v": ["x"] * 50}), writer="w", seq=seq)
    s.close()
    log = BucketLog(Path(root) / "ods" / "t" / "bucket-0", 0)
    log.refresh()
    middle = log.entries()[1]
    os.unlink(log.index_path)
    segment = log.segment_path(middle.segment)
    damaged = bytearray(segment.read_bytes())
    damaged[middle.position + 4 : middle.position + 8] = (1 << 30).to_bytes(4, "little")  # frame_len
    segment.write_bytes(bytes(damaged))
    reader = open_store(root, fsync=False)
    with pytest.raises(TidehouseError) as err:
        _seqs(reader)
    assert err.value.code == ErrorCode.STORAGE_CORRUPT
    reader.close()


@pytest.mark.parametrize("chunk", [4, 7, 64, 1 << 20])
def test_the_search_for_a_frame_after_damage_reads_in_chunks(tmp_path, chunk):
    """valid_frame_after finds the same frame whatever its chunk, also when a chunk's end cuts the frame's
    magic, and nothing in bytes that only look like a frame's start."""
    from runtime.storage import frames

    pieces, _, _ = frames.encode_frame(
        pa.py_buffer(b"payload!" * 5),
        base_offset=3,
        rows=1,
        schema_id=1,
        commit_ts=1,
        origin_ts=2,
        writer="w",
        seq=1,
    )
    frame = b"".join(bytes(p) for p in pieces)
    junk = (frames.MAGIC + b"\1" * 4) * 9 + b"\0" * 21  # magics at 8-aligned positions, no frame
    at = 8 + len(junk) + (-(8 + len(junk)) % 8)
    data = (b"\0" * 8 + junk).ljust(at, b"\0") + frame
    path = tmp_path / "segment"
    path.write_bytes(data)
    fd = os.open(path, os.O_RDONLY)
    try:
        assert frames.valid_frame_after(fd, 0, len(data), chunk) == at
        assert frames.valid_frame_after(fd, at, len(data), chunk) is None
        assert frames.valid_frame_after(fd, 0, at, chunk) is None
    finally:
        os.close(fd)

"""Log tables: append, read, projection, offsets, idempotency, schema evolution, segments, retention."""

from __future__ import annotations

import os
import time

import pyarrow as pa
import pytest

from runtime.core.errors import ErrorCode, TidehouseError
from runtime.storage import TS_TYPE, TableMeta, bucket_of, open_store
from tests.storage._util import LOG_SCHEMA, log_meta, read_all, rows


def test_append_and_read_dense_offsets(store):
    store.create_table(log_meta())
    r1 = store.write("ods.events", rows(0, 5), writer="w", seq=1)
    r2 = store.write("ods.events", rows(5, 3), writer="w", seq=2)
    assert r1.ranges == {0: (0, 5)} and r2.ranges == {0: (5, 8)} and r2.rows == 3
    assert store.end_offsets("ods.events") == [8]
    got = read_all(store, "ods.events")
    assert got.column("id").to_pylist() == list(range(8))
    assert got.column("__offset").to_pylist() == list(range(8))
    assert got.column("__bucket").to_pylist() == [0] * 8
    assert got.schema.names == ["id", "name", "price", "ts", "__offset", "__bucket", "__ts"]
    assert got.schema.field("__ts").type == TS_TYPE


def test_read_range_slices_inside_batches(store):
    store.create_table(log_meta())
    for s in range(4):
        store.write("ods.events", rows(s * 10, 10), writer="w", seq=s)
    got = read_all(store, "ods.events", start=7, end=23)
    assert got.column("__offset").to_pylist() == list(range(7, 23))
    assert got.column("id").to_pylist() == list(range(7, 23))
    assert read_all(store, "ods.events", start=40) is None


def test_projection_returns_requested_columns_then_system(store):
    store.create_table(log_meta())
    store.write("ods.events", rows(0, 4), writer="w", seq=1)
    got = read_all(store, "ods.events", columns=["price", "id"])
    assert got.schema.names == ["price", "id", "__offset", "__bucket", "__ts"]
    assert got.column("price").to_pylist() == [0.0, 0.5, 1.0, 1.5]
    with pytest.raises(TidehouseError) as err:
        list(store.read("ods.events", 0, 0, columns=["nope"]))
    assert err.value.code == ErrorCode.TABLE_INVALID


def test_read_out_of_range_is_an_error(store):
    store.create_table(log_meta())
    store.write("ods.events", rows(0, 2), writer="w", seq=1)
    with pytest.raises(TidehouseError) as err:
        list(store.read("ods.events", 0, 5))
    assert err.value.code == ErrorCode.STORAGE_RANGE
    with pytest.raises(TidehouseError) as err:
        list(store.read("ods.events", 3, 0))
    assert err.value.code == ErrorCode.STORAGE_RANGE


def test_idempotent_replay_per_writer(store):
    store.create_table(log_meta())
    assert store.write("ods.events", rows(0, 3), writer="a", seq=7).rows == 3
    replay = store.write("ods.events", rows(0, 3), writer="a", seq=7)
    assert replay.skipped and replay.rows == 0
    assert store.write("ods.events", rows(0, 3), writer="a", seq=6).skipped
    assert not store.write("ods.events", rows(3, 1), writer="b", seq=1).skipped
    assert store.end_offsets("ods.events") == [4]
    assert store.last_seq("ods.events", "a") == 7
    assert store.last_seq("ods.events", "b") == 1
    assert store.last_seq("ods.events", "c") is None
    # a new process (fresh store) knows the committed seqs from disk
    other = open_store(str(store.root))
    assert other.write("ods.events", rows(0, 3), writer="a", seq=7).skipped
    assert other.last_seq("ods.events", "a") == 7


def test_buckets_route_with_bucket_of(store):
    store.create_table(log_meta(buckets=4))
    data = rows(0, 200)
    result = store.write("ods.events", data, writer="w", seq=1)
    expected = bucket_of(data, ["id"], 4).to_pylist()
    assert sum(result.rows for _ in [0]) == 200
    for b in range(4):
        got = read_all(store, "ods.events", bucket=b)
        ids = [] if got is None else got.column("id").to_pylist()
        assert ids == [i for i, bb in zip(range(200), expected) if bb == b]
        assert result.ranges.get(b, (0, 0))[1] == len(ids)
    # a replay where only some buckets were committed (crash between buckets) completes the others
    store2 = open_store(str(store.root))
    assert store2.write("ods.events", data, writer="w", seq=1).skipped


def test_bucket_of_is_stable_and_matches_reference():
    import hashlib

    t = pa.table({"k": ["a", None, "c", "a"], "n": [1, 2, None, 1]})
    got = bucket_of(t, ["k", "n"], 7).to_pylist()
    ref = []
    for k, n in zip(t.column("k").to_pylist(), t.column("n").to_pylist()):
        raw = "\x1f".join("\x00" if v is None else str(v) for v in (k, n)).encode()
        ref.append(int.from_bytes(hashlib.blake2b(raw, digest_size=8).digest(), "little") % 7)
    assert got == ref and got[0] == got[3]
    assert bucket_of(t, [], 7).to_pylist() == [0, 0, 0, 0]


def test_bucket_of_vectorised_paths_match_the_definition(seed):
    """Integer/string keys take Arrow rendering + numpy; other types str(); both equal the documented rule."""
    import datetime as dt
    import hashlib
    import random

    rng = random.Random(seed)
    n = 500
    t = pa.table(
        {
            "i": pa.array(
                [rng.choice([None, rng.randint(-(2**63), 2**63 - 1)]) for _ in range(n)], pa.int64()
            ),
            "u8": pa.array([rng.choice([None, rng.randint(0, 255)]) for _ in range(n)], pa.uint8()),
            "s": [rng.choice([None, "", "ü€" + str(rng.random())]) for _ in range(n)],
            "f": [rng.choice([None, rng.random() * 1e9, -0.5]) for _ in range(n)],
            "d": pa.array([dt.date(2020, 1, 1) + dt.timedelta(days=rng.randint(0, 999)) for _ in range(n)]),
        }
    )
    for cols in (["i"], ["u8"], ["s"], ["i", "s", "u8"], ["f"], ["d", "s"]):
        for buckets in (2, 5, 64):
            ref = []
            for row in zip(*(t.column(c).to_pylist() for c in cols)):
                raw = "\x1f".join("\x00" if v is None else str(v) for v in row).encode()
                ref.append(int.from_bytes(hashlib.blake2b(raw, digest_size=8).digest(), "little") % buckets)
            assert bucket_of(t, cols, buckets).to_pylist() == ref, (cols, buckets)


def test_bucket_of_hashes_each_distinct_key_once_with_the_same_result(seed):
    """Repeated keys over several chunks (a Table's columns) and a RecordBatch: the rows take their key's
    bucket, equal to the documented rule applied row by row."""
    import hashlib
    import random

    rng = random.Random(seed)
    users = [f"user_{i}" for i in range(50)] + [None, ""]
    chunks = [
        pa.record_batch(
            {
                "u": pa.array([rng.choice(users) for _ in range(n)], pa.string()),
                "n": pa.array([rng.choice([None, 1, 2, 3]) for _ in range(n)], pa.int64()),
            }
        )
        for n in (300, 0, 200)
    ]
    table = pa.Table.from_batches(chunks)
    assert table.column("u").num_chunks == 3
    for data in (table, chunks[0], table.slice(0, 0)):
        for cols in (["u"], ["u", "n"], ["n"]):
            ref = []
            for row in zip(*(data.column(c).to_pylist() for c in cols)):
                raw = "\x1f".join("\x00" if v is None else str(v) for v in row).encode()
                ref.append(int.from_bytes(hashlib.blake2b(raw, digest_size=8).digest(), "little") % 7)
            got = bucket_of(data, cols, 7)
            assert got.type == pa.int32() and got.to_pylist() == ref, cols


def test_write_validation(store):
    store.create_table(log_meta())
    cases = [
        (pa.table({"id": [1], "bogus": [1]}), "unknown column"),
        (pa.table({"id": [1], "__change": ["+I"]}), "__change"),
        (pa.table({"id": ["x"]}), "cannot be stored"),
    ]
    for data, text in cases:
        with pytest.raises(TidehouseError) as err:
            store.write("ods.events", data, writer="w", seq=1)
        assert err.value.code == ErrorCode.WRITE_INVALID and text in err.value.message
    # missing nullable columns are null; system columns of an upstream read are ignored
    store.write("ods.events", pa.table({"id": [1], "__offset": [9]}), writer="w", seq=1)
    got = read_all(store, "ods.events")
    assert got.column("name").to_pylist() == [None] and got.column("__offset").to_pylist() == [0]


def test_timestamps_are_normalised_to_us_utc(store):
    meta = store.create_table(TableMeta("ods.t", pa.schema([("ts", pa.timestamp("ms"))])))
    assert meta.schema.field("ts").type == TS_TYPE
    store.write("ods.t", pa.table({"ts": pa.array([1_500, 2_000], pa.timestamp("ms"))}), writer="w", seq=1)
    store.write("ods.t", pa.table({"ts": pa.array([3_000_000_999], pa.timestamp("ns"))}), writer="w", seq=2)
    got = read_all(store, "ods.t")
    assert got.schema.field("ts").type == TS_TYPE
    assert got.column("ts").cast(pa.int64()).to_pylist() == [1_500_000, 2_000_000, 3_000_000]


def test_schema_evolution_adds_nullable_columns(store):
    store.create_table(log_meta())
    store.write("ods.events", rows(0, 2), writer="w", seq=1)
    assert store.create_table(log_meta()).schema_id == 0  # identical: unchanged
    wider = TableMeta("ods.events", LOG_SCHEMA.append(pa.field("extra", pa.string())))
    evolved = store.create_table(wider)
    assert evolved.schema_id == 1 and store.get_table("ods.events").schema.names[-1] == "extra"
    store.write("ods.events", rows(2, 1).append_column("extra", pa.array(["x"])), writer="w", seq=2)
    got = read_all(store, "ods.events")
    assert got.column("extra").to_pylist() == [None, None, "x"]
    assert store.scan("ods.events").column("extra").to_pylist() == [None, None, "x"]


@pytest.mark.parametrize(
    "schema, what",
    [
        (pa.schema([("id", pa.int64()), ("name", pa.string())]), "columns removed"),
        (LOG_SCHEMA.set(0, pa.field("id", pa.string())), "changed"),
        (LOG_SCHEMA.append(pa.field("extra", pa.string(), nullable=False)), "nullable"),
    ],
)
def test_schema_incompatible_names_both(store, schema, what):
    store.create_table(log_meta())
    with pytest.raises(TidehouseError) as err:
        store.create_table(TableMeta("ods.events", schema))
    assert err.value.code == ErrorCode.SCHEMA_INCOMPATIBLE
    assert (
        what in err.value.message and "existing [" in err.value.message and "requested [" in err.value.message
    )


def test_table_catalog(store):
    with pytest.raises(TidehouseError) as err:
        store.get_table("ods.none")
    assert err.value.code == ErrorCode.TABLE_UNKNOWN
    store.create_table(log_meta("ods.a"))
    store.create_table(log_meta("dwd.b"))
    assert store.list_tables() == ["dwd.b", "ods.a"]
    with pytest.raises(TidehouseError) as err:
        store.create_table(log_meta("ods.a"), exist_ok=False)
    assert err.value.code == ErrorCode.TABLE_EXISTS
    store.write("ods.a", rows(0, 2), writer="w", seq=1)
    store.drop_table("ods.a")
    assert store.list_tables() == ["dwd.b"] and not store.has_table("ods.a")
    store.create_table(log_meta("ods.a"))
    assert store.end_offsets("ods.a") == [0] and store.last_seq("ods.a", "w") is None


@pytest.mark.parametrize(
    "meta",
    [
        TableMeta("nodot", LOG_SCHEMA),
        TableMeta("ods.x", pa.schema([("__x", pa.int64())])),
        TableMeta("ods.x", LOG_SCHEMA, kind="primary_key"),
        TableMeta("ods.x", LOG_SCHEMA, kind="primary_key", primary_key=("nope",)),
        TableMeta("ods.x", LOG_SCHEMA, buckets=0),
        TableMeta(
            "ods.x",
            LOG_SCHEMA,
            kind="primary_key",
            primary_key=("id",),
            merge_engine="aggregate",
            aggregations={"price": "avg"},
        ),
    ],
)
def test_invalid_definitions(store, meta):
    with pytest.raises(TidehouseError) as err:
        store.create_table(meta)
    assert err.value.code in (ErrorCode.TABLE_INVALID, ErrorCode.PRIMARY_KEY_INVALID)


def test_batch_info_and_offset_times(store):
    store.create_table(log_meta())
    assert store.batch_info("ods.events", 0) is None
    before = time.time()
    store.write("ods.events", rows(0, 3), writer="q1", seq=4, origin_ts=1000.5)
    store.write("ods.events", rows(3, 2), writer="q2", seq=9)
    info = store.batch_info("ods.events", 0)
    assert (info.base_offset, info.rows, info.writer, info.seq, info.origin_ts) == (3, 2, "q2", 9, None)
    assert before - 1 <= info.commit_ts <= time.time() + 1
    first = store.offset_times("ods.events", 0, 2)
    assert (first.base_offset, first.rows, first.writer, first.seq, first.origin_ts) == (
        0,
        3,
        "q1",
        4,
        1000.5,
    )
    assert store.offset_times("ods.events", 0, 5) is None


def test_segments_roll_and_retention(tmp_path):
    s = open_store(str(tmp_path / "hot"), fsync=False, segment_bytes=4096)
    s.create_table(log_meta())
    for i in range(30):
        s.write("ods.events", rows(i * 20, 20), writer="w", seq=i)
    bdir = tmp_path / "hot" / "ods" / "events" / "bucket-0"
    segs = sorted(p.name for p in bdir.glob("*.log"))
    assert len(segs) > 3 and segs[0] == f"{0:020d}.log"
    assert read_all(s, "ods.events").column("id").to_pylist() == list(range(600))
    assert s.delete_before("ods.events", 0, 300, older_than=time.time() - 3600) == 0  # too young
    deleted = s.delete_before("ods.events", 0, 300, older_than=time.time() + 1)
    assert deleted >= 1
    first = int(min(p.name for p in bdir.glob("*.log"))[:20])
    assert 0 < first <= 300
    with pytest.raises(TidehouseError) as err:
        list(s.read("ods.events", 0, 0))
    assert err.value.code == ErrorCode.STORAGE_RANGE
    assert read_all(s, "ods.events", start=first).column("id").to_pylist() == list(range(first, 600))
    # seqs of deleted segments are still known (kept in the index)
    assert s.write("ods.events", rows(0, 1), writer="w", seq=0).skipped
    fresh = open_store(str(tmp_path / "hot"))
    assert fresh.end_offsets("ods.events") == [600]
    assert fresh.write("ods.events", rows(0, 1), writer="w", seq=0).skipped


def test_index_is_rebuilt_when_missing_or_torn(tmp_path):
    root = str(tmp_path / "hot")
    s = open_store(root, fsync=False)
    s.create_table(log_meta())
    for i in range(5):
        s.write("ods.events", rows(i * 2, 2), writer="w", seq=i)
    index = tmp_path / "hot" / "ods" / "events" / "bucket-0" / "index"
    size = index.stat().st_size
    with open(index, "r+b") as fh:
        fh.truncate(size - 30)  # a torn last entry
    r = open_store(root)
    assert r.end_offsets("ods.events") == [10]  # the unindexed frame is seen from the segment
    os.unlink(index)
    w = open_store(root)
    assert w.write("ods.events", rows(10, 1), writer="w", seq=4).skipped  # seq known from the segment
    w.write("ods.events", rows(10, 1), writer="w", seq=5)
    assert index.stat().st_size == 6 * 72
    assert read_all(open_store(root), "ods.events").column("id").to_pylist() == list(range(11))


@pytest.mark.parametrize("kind", ["log", "primary_key"])
def test_write_over_the_frame_limit_is_refused_and_writes_nothing(store, monkeypatch, kind):
    """A bucket write of 2 GiB or more cannot be one frame: WRITE_INVALID, not a struct error (limit
    mocked)."""
    from runtime.storage import frames

    meta = (
        log_meta()
        if kind == "log"
        else TableMeta("ods.events", LOG_SCHEMA, kind="primary_key", primary_key=("id",))
    )
    store.create_table(meta)
    store.write("ods.events", rows(0, 5), writer="w", seq=1)
    monkeypatch.setattr(frames, "MAX_FRAME", 8192)  # stands for 2 GiB
    with pytest.raises(TidehouseError) as err:
        store.write("ods.events", rows(5, 500), writer="w", seq=2)
    assert err.value.code == ErrorCode.WRITE_INVALID and "over the limit of 8,192 bytes" in err.value.message
    assert err.value.location.path == "ods.events"
    assert store.end_offsets("ods.events") == [5] and store.last_seq("ods.events", "w") == 1
    assert store.write("ods.events", rows(5, 5), writer="w", seq=2).rows == 5  # the seq was not consumed
    assert store.scan("ods.events").column("id").to_pylist() == list(range(10))


def test_ipc_streams_are_the_bytes_a_growing_stream_writes():
    """Frames and objects are written into a buffer of their exact size (runtime/storage/frames.ipc_streams):
    the same bytes, stream by stream and padding by padding, as writing them to a BufferOutputStream."""
    from runtime.storage.frames import ipc_streams

    batch = pa.record_batch({"id": pa.array(range(1000)), "name": pa.array([f"n{i}" for i in range(1000)])})
    chunked = pa.Table.from_batches([batch.slice(0, 300), batch.slice(300)])
    empty = batch.slice(0, 0)
    for parts, align in (([batch], 1), ([chunked], 1), ([empty], 1), ([batch, empty, batch.slice(7, 3)], 8)):
        sink, spans = pa.BufferOutputStream(), []
        for part in parts:
            start = sink.tell()
            with pa.ipc.new_stream(sink, part.schema) as w:
                w.write(part)
            spans.append((start, sink.tell() - start))
            sink.write(b"\0" * ((-sink.tell()) % align))
        buf, got = ipc_streams(parts, align=align)
        assert got == spans and buf.equals(sink.getvalue())
        for part, (position, length) in zip(parts, spans):
            assert (
                pa.ipc.open_stream(buf.slice(position, length))
                .read_all()
                .equals(pa.Table.from_batches(part.to_batches() if isinstance(part, pa.Table) else [part]))
            )

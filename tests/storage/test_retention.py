"""Retention: never below the key-value state of a PK table; writers' seqs survive deleted segments."""

from __future__ import annotations

import itertools
import os
import time

import pytest

from runtime.core.errors import ErrorCode, TidehouseError
from runtime.storage import TableMeta, open_store
from tests.storage._util import LOG_SCHEMA, log_meta, read_all, rows

LATER = 3600.0  # older_than = now + LATER: every segment is old enough


def _pk_meta() -> TableMeta:
    return TableMeta("dws.p", LOG_SCHEMA, kind="primary_key", primary_key=("id",))


def _segments(root, name: str) -> list[int]:
    layer, table = name.split(".")
    return sorted(int(p.name[:20]) for p in (root / layer / table / "bucket-0").glob("*.log"))


def test_pk_retention_stops_at_the_applied_offset(tmp_path):
    from rocksdict import Options, Rdict

    root = tmp_path / "hot"
    s = open_store(str(root), fsync=False, segment_bytes=2048)
    s.create_table(_pk_meta())
    for i in range(20):  # keys 0..29, each batch overwrites some and adds some
        s.write("dws.p", rows(i, 10), writer="w", seq=i)
    end = s.end_offsets("dws.p")[0]
    expected = sorted(s.scan("dws.p").to_pylist(), key=lambda r: r["id"])
    s.close()
    assert len(_segments(root, "dws.p")) > 4
    # pretend the KV state lags (a crash after the changelog append, before the state commit)
    kv = Rdict(str(root / "dws" / "p" / "bucket-0" / "kv"), Options(raw_mode=True))
    applied = _segments(root, "dws.p")[2] + 1
    kv[b"\x00applied"] = str(applied).encode()
    kv.close()
    other = open_store(str(root))  # e.g. the tiering service, another process: it does not hold the KV
    assert other.delete_before("dws.p", 0, end, older_than=time.time() + LATER) == 2
    assert _segments(root, "dws.p")[0] <= applied  # the log the KV still needs is all there
    w = open_store(str(root))
    w.write("dws.p", rows(100, 1), writer="w", seq=100)  # the writer replays the tail, then writes
    got = sorted(w.scan("dws.p").to_pylist(), key=lambda r: r["id"])
    assert got == expected + rows(100, 1).to_pylist()
    # its own KV handle is flushed and caught up: now retention may go as far as the tiered offset
    end = w.end_offsets("dws.p")[0]
    assert w.delete_before("dws.p", 0, end, older_than=time.time() + LATER) >= 1
    assert _segments(root, "dws.p")[0] > applied
    w.close()
    assert sorted(open_store(str(root)).scan("dws.p").to_pylist(), key=lambda r: r["id"]) == got


def test_pk_retention_without_state_deletes_nothing(tmp_path):
    root = tmp_path / "hot"
    s = open_store(str(root), fsync=False, segment_bytes=2048)
    s.create_table(_pk_meta())
    for i in range(10):
        s.write("dws.p", rows(i * 10, 10), writer="w", seq=i)
    s.close()
    os.rename(root / "dws" / "p" / "bucket-0" / "kv", tmp_path / "kv-away")
    assert open_store(str(root)).delete_before("dws.p", 0, 10**9, older_than=time.time() + LATER) == 0


def test_writer_seqs_survive_retention_and_a_lost_index(tmp_path):
    root = tmp_path / "hot"
    s = open_store(str(root), fsync=False, segment_bytes=2048)
    s.create_table(log_meta())
    s.write("ods.events", rows(0, 5), writer="early", seq=7)  # only ever in the first segment
    for i in range(1, 30):
        s.write("ods.events", rows(i * 10, 10), writer="w", seq=i)
    end = s.end_offsets("ods.events")[0]
    assert s.delete_before("ods.events", 0, end, older_than=time.time() + LATER) >= 2
    first = _segments(root, "ods.events")[0]
    s.close()
    os.unlink(root / "ods" / "events" / "bucket-0" / "index")  # lost: rebuilt from the kept segments
    fresh = open_store(str(root))
    assert fresh.end_offsets("ods.events") == [end]
    assert fresh.last_seq("ods.events", "early") == 7 and fresh.last_seq("ods.events", "w") == 29
    assert fresh.write("ods.events", rows(0, 5), writer="early", seq=7).skipped  # a replay stays a no-op
    assert fresh.write("ods.events", rows(0, 5), writer="early", seq=3).skipped
    assert fresh.write("ods.events", rows(300, 1), writer="w", seq=30).ranges == {0: (end, end + 1)}
    assert read_all(fresh, "ods.events", start=first).column("__offset").to_pylist() == list(
        range(first, end + 1)
    )
    fresh.close()


def test_seqs_file_keeps_the_maximum_across_retentions(tmp_path):
    root = tmp_path / "hot"
    s = open_store(str(root), fsync=False, segment_bytes=1024)
    s.create_table(log_meta())
    for i in range(40):
        s.write("ods.events", rows(i * 5, 5), writer=f"w{i % 3}", seq=i)
        if i % 10 == 9:
            s.delete_before("ods.events", 0, s.end_offsets("ods.events")[0], older_than=time.time() + LATER)
    s.close()
    os.unlink(root / "ods" / "events" / "bucket-0" / "index")
    fresh = open_store(str(root))
    assert [fresh.last_seq("ods.events", f"w{k}") for k in range(3)] == [39, 37, 38]
    fresh.close()


def test_pk_retention_flushes_the_state_only_when_it_deletes(tmp_path, monkeypatch):
    from runtime.storage.pk import Tablet

    s = open_store(str(tmp_path / "hot"), fsync=False, segment_bytes=2048)
    s.create_table(_pk_meta())
    for i in range(10):
        s.write("dws.p", rows(i * 10, 10), writer="w", seq=i)
    flushes = []
    real = Tablet.applied_offset
    monkeypatch.setattr(
        Tablet,
        "applied_offset",
        lambda self, durable=True: flushes.append(durable) or real(self, durable=durable),
    )
    end = s.end_offsets("dws.p")[0]
    assert s.delete_before("dws.p", 0, end, older_than=time.time() - LATER) == 0  # too young: no flush
    assert flushes == [False]
    assert s.delete_before("dws.p", 0, end, older_than=time.time() + LATER) >= 1
    assert flushes == [False, False, True]
    s.close()


def test_retention_compacts_the_index_and_other_views_follow(tmp_path):
    root = tmp_path / "hot"
    bdir = root / "ods" / "events" / "bucket-0"
    a = open_store(str(root), fsync=False, segment_bytes=2048)
    a.create_table(log_meta())
    for i in range(30):
        a.write("ods.events", rows(i * 10, 10), writer="w", seq=i)
    b = open_store(str(root), fsync=False)  # another process's view, loaded before retention
    assert read_all(b, "ods.events").num_rows == 300
    log_b = b._table("ods.events").logs[0]
    assert log_b._maps  # it has segments mapped
    before = (bdir / "index").stat().st_size
    end = a.end_offsets("ods.events")[0]
    assert a.delete_before("ods.events", 0, end, older_than=time.time() + LATER) >= 2
    first = _segments(root, "ods.events")[0]
    assert (bdir / "index").stat().st_size < before  # entries of deleted segments are gone from the file
    assert len(a._table("ods.events").logs[0].entries()) == (bdir / "index").stat().st_size // 72
    for i in range(30, 60):  # the compacted index grows past what the stale view had read
        a.write("ods.events", rows(i * 10, 10), writer="w", seq=i)
    end = a.end_offsets("ods.events")[0]
    # the stale view notices the new index, unmaps deleted segments, and writes on at the right offset
    assert b.write("ods.events", rows(end, 10), writer="w", seq=60).ranges == {0: (end, end + 10)}
    assert not set(log_b._maps) - set(_segments(root, "ods.events"))
    assert b.write("ods.events", rows(0, 10), writer="w", seq=3).skipped  # seqs of deleted frames hold
    for view in (a, b, open_store(str(root))):
        got = read_all(view, "ods.events", start=first)
        assert got.column("__offset").to_pylist() == list(range(first, end + 10))
        assert got.column("id").to_pylist() == list(range(first, end + 10))
        assert view.offset_times("ods.events", 0, end + 3).base_offset == end
    # the index file itself is whole: dense entries from the first kept segment, one per frame
    from runtime.storage.frames import ENTRY_SIZE, Entry

    raw = (bdir / "index").read_bytes()
    entries = [Entry.unpack(raw[i : i + ENTRY_SIZE]) for i in range(0, len(raw), ENTRY_SIZE)]
    assert entries[0].base_offset == first and entries[-1].end_offset == end + 10
    assert all(x.end_offset == y.base_offset for x, y in itertools.pairwise(entries))
    a.close()
    b.close()


def test_a_damaged_seqs_file_is_a_clean_error(tmp_path):
    root = tmp_path / "hot"
    s = open_store(str(root), fsync=False, segment_bytes=1024)
    s.create_table(log_meta())
    for i in range(20):
        s.write("ods.events", rows(i * 5, 5), writer="w", seq=i)
    assert s.delete_before("ods.events", 0, s.end_offsets("ods.events")[0], older_than=time.time() + LATER)
    s.close()
    path = root / "ods" / "events" / "bucket-0" / "seqs.json"
    text = path.read_text()
    assert '"crc"' in text
    path.write_text(text.replace(": 19", ": 17"))  # a flipped digit would silently re-admit seqs 18 and 19
    with pytest.raises(TidehouseError) as err:
        open_store(str(root)).last_seq("ods.events", "w")
    assert err.value.code == ErrorCode.STORAGE_CORRUPT and err.value.location.file == str(path)


def test_a_segment_deleted_under_a_running_read_is_storage_range(tmp_path):
    root = tmp_path / "hot"
    a = open_store(str(root), fsync=False, segment_bytes=1024)
    a.create_table(log_meta())
    for i in range(20):
        a.write("ods.events", rows(i * 5, 5), writer="w", seq=i)
    reader = open_store(str(root))
    it = reader.read("ods.events", 0, 0)
    assert next(it).column("__offset").to_pylist()[0] == 0
    assert (
        a.delete_before("ods.events", 0, a.end_offsets("ods.events")[0], older_than=time.time() + LATER) >= 2
    )
    with pytest.raises(TidehouseError) as err:
        list(it)
    assert err.value.code == ErrorCode.STORAGE_RANGE and "deleted by retention" in err.value.message
    first = _segments(root, "ods.events")[0]
    assert read_all(reader, "ods.events", start=first).column("__offset").to_pylist()[0] == first


def test_a_scan_of_a_log_table_trimmed_by_retention_fails_instead_of_returning_part_of_it(tmp_path):
    s = open_store(str(tmp_path / "hot"), fsync=False, segment_bytes=2048)
    s.create_table(log_meta())
    for i in range(30):
        s.write("ods.events", rows(i * 10, 10), writer="w", seq=i)
    assert s.scan("ods.events").num_rows == 300
    end = s.end_offsets("ods.events")[0]
    assert s.delete_before("ods.events", 0, end, older_than=time.time() + LATER) >= 1
    with pytest.raises(TidehouseError) as info:
        s.scan("ods.events")
    assert info.value.code is ErrorCode.STORAGE_RANGE
    assert info.value.location.path == "ods.events"


def test_start_offsets_name_the_earliest_readable_offset_after_retention(tmp_path):
    s = open_store(str(tmp_path / "hot"), fsync=False, segment_bytes=2048)
    s.create_table(log_meta())
    assert s.start_offsets("ods.events") == [0]
    for i in range(30):
        s.write("ods.events", rows(i * 10, 10), writer="w", seq=i)
    s.delete_before("ods.events", 0, 150, older_than=time.time() + LATER)
    first = s.start_offsets("ods.events")[0]
    assert 0 < first <= 150
    assert read_all(s, "ods.events", start=first).num_rows == 300 - first
    with pytest.raises(TidehouseError):
        list(s.read("ods.events", 0, first - 1))


def test_private_state_is_trimmed_below_what_its_state_covers(tmp_path):
    """maintenance.trim_state: a query's state tables (never tiered) lose their closed segments on the local
    store, whose key-value state covers the whole changelog, whatever their age; the table's other tables
    are left alone, and a store whose checkpoint covers nothing trims nothing."""
    from runtime.lake.maintenance import trim_state

    root = tmp_path / "hot"
    s = open_store(str(root), fsync=False, segment_bytes=2048)
    for name in ("dws.p__state", "dws.p__distinct__state", "dws.pq__state", "dws.p__x"):
        s.create_table(TableMeta(name, LOG_SCHEMA, kind="primary_key", primary_key=("id",)))
        for i in range(20):
            s.write(name, rows(i, 10), writer="w", seq=i)
    expected = sorted(s.scan("dws.p__state").to_pylist(), key=lambda r: r["id"])
    assert s.checkpoint_state("dws.p__state") == s.end_offsets("dws.p__state")
    before = {name: _segments(root, name) for name in s.list_tables()}
    assert all(len(segs) > 4 for segs in before.values())
    assert trim_state(s, "dws.p") > 0  # no age: the state covers it all
    after = {name: _segments(root, name) for name in s.list_tables()}
    assert len(after["dws.p__state"]) < len(before["dws.p__state"])
    assert len(after["dws.p__distinct__state"]) < len(before["dws.p__distinct__state"])
    assert after["dws.pq__state"] == before["dws.pq__state"]  # another table's state
    assert after["dws.p__x"] == before["dws.p__x"]  # not a state table
    s.close()
    again = open_store(str(root))  # the state survives its trimmed changelog
    assert sorted(again.scan("dws.p__state").to_pylist(), key=lambda r: r["id"]) == expected
    again.checkpoint_state = lambda name: [0] * len(again.end_offsets(name))  # TableStore's default
    assert trim_state(again, "dws.pq") == 0
    again.close()


def test_a_view_notices_a_replaced_index_whose_inode_number_was_reused(tmp_path):
    """Retention replaces the index by renaming a new file over it, and a filesystem gives the freed inode
    number to a later file at once (ext4 here alternates two numbers). A view that read the index before two
    such replacements sees its old number again: it must not take the new file, which holds more entries
    than it read, for the one it read (it then looked for the offsets after its last entry in deleted
    segments: a spurious TH303 "segment named 27 where offset 9 was expected", CI 2026-11-30)."""
    root = tmp_path / "hot"
    a = open_store(str(root), fsync=False, segment_bytes=2048)
    a.create_table(log_meta())
    for i in range(2):
        a.write("ods.events", rows(i * 10, 10), writer="w", seq=i)
    b = open_store(str(root), fsync=False)  # a reader in another process, e.g. a Spark task's worker
    assert b.end_offsets("ods.events") == [20]
    log_b = b._table("ods.events").logs[0]
    n = 2
    for _ in range(2):  # two retentions, more rows before each
        for _ in range(20):
            a.write("ods.events", rows(n * 10, 10), writer="w", seq=n)
            n += 1
        end = a.end_offsets("ods.events")[0]
        assert a.delete_before("ods.events", 0, end, older_than=time.time() + LATER) >= 1
    index = root / "ods" / "events" / "bucket-0" / "index"
    log_b._index_ino = index.stat().st_ino  # the view meets the number it read (what ext4 did in CI)
    first = _segments(root, "ods.events")[0]
    assert first > 20  # every segment the view knew is gone,
    assert index.stat().st_size // 72 > 2  # and the new index holds more entries than the view read
    assert b.start_offsets("ods.events") == [first]
    assert b.end_offsets("ods.events") == [end]
    got = read_all(b, "ods.events", start=first)
    assert got.column("id").to_pylist() == list(range(first, end))
    a.close()
    b.close()

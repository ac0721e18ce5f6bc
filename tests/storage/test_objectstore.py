"""The object-store hot storage's own protocol (docs/architecture.md, "Hot storage on an object store"):
orphans of a crash between put and commit, garbage collection, fencing of a zombie, primary-key state rebuilt
from a bootstrap snapshot + the changelog (or refused), and the metastore's errors. These run on a pyarrow
``LocalFileSystem`` with the default SQLite metastore next to the data (no server); the shared behaviour runs
on SeaweedFS + PostgreSQL in ``tests/storage/contract``."""

from __future__ import annotations

import time

import pyarrow as pa
import pyarrow.fs as pafs
import pytest

from runtime.core.errors import ErrorCode, TidehouseError
from runtime.storage import TableMeta
from runtime.storage.objectstore import ObjectTableStore
from runtime.storage.objectstore import metastore as metastore_mod
from tests.storage._util import log_meta, read_all, rows

SCHEMA = pa.schema([("k", pa.string()), ("a", pa.int64())])


def _store(tmp_path, **kw) -> ObjectTableStore:
    return ObjectTableStore(pafs.LocalFileSystem(), str(tmp_path / "obj"), fsync=False, **kw)


def _objects(tmp_path) -> list:
    return sorted((tmp_path / "obj").rglob("*.thd"))


def _pk(name: str = "dws.p", buckets: int = 1) -> TableMeta:
    return TableMeta(
        name,
        SCHEMA,
        kind="primary_key",
        primary_key=("k",),
        buckets=buckets,
        merge_engine="aggregate",
        aggregations={"a": "sum"},
    )


def test_the_default_metastore_is_sqlite_next_to_the_data(tmp_path):
    store = _store(tmp_path)
    assert (tmp_path / "obj" / "metastore.db").is_file()
    store.create_table(log_meta(buckets=2))
    assert store.write("ods.events", rows(0, 10), writer="w", seq=1).rows == 10
    assert len(_objects(tmp_path)) == 1  # one object per write, whatever the number of buckets


def test_a_crash_between_put_and_commit_leaves_an_invisible_orphan_that_gc_collects(tmp_path, monkeypatch):
    store = _store(tmp_path)
    store.create_table(log_meta())
    store.write("ods.events", rows(0, 3), writer="w", seq=1)

    def crash(*args, **kwargs):
        raise KeyboardInterrupt("killed after the put")

    monkeypatch.setattr(store.metastore, "committing", crash)
    with pytest.raises(KeyboardInterrupt):
        store.write("ods.events", rows(3, 3), writer="w", seq=2)
    monkeypatch.undo()
    assert len(_objects(tmp_path)) == 2  # the orphan is on storage ...
    other = _store(tmp_path)
    assert other.end_offsets("ods.events") == [3]  # ... and invisible
    assert other.last_seq("ods.events", "w") == 1
    assert other.write("ods.events", rows(3, 3), writer="w", seq=2).ranges == {0: (3, 6)}  # the retry, once
    assert read_all(other, "ods.events").column("id").to_pylist() == list(range(6))
    assert other.collect_garbage(grace=3600) == 0  # too young: it could be a write about to commit
    assert other.collect_garbage(grace=0) == 1
    assert len(_objects(tmp_path)) == 2
    assert read_all(_store(tmp_path), "ods.events").column("id").to_pylist() == list(range(6))


def test_a_failed_commit_deletes_its_object_and_a_fenced_zombie_stays_fenced(tmp_path):
    old, new = _store(tmp_path), _store(tmp_path)
    old.create_table(_pk())
    old.write("dws.p", pa.table({"k": ["a"], "a": [1]}), writer="old", seq=1)
    new.write("dws.p", pa.table({"k": ["a"], "a": [10]}), writer="new", seq=1)  # takes the bucket over
    before = _objects(tmp_path)
    for seq in (2, 3):
        with pytest.raises(TidehouseError) as err:
            old.write("dws.p", pa.table({"k": ["a"], "a": [100]}), writer="old", seq=seq)
        assert err.value.code is ErrorCode.STORAGE_LOCKED and err.value.params["bucket"] == 0
    assert _objects(tmp_path) == before  # the fenced attempts' objects were deleted
    new.write("dws.p", pa.table({"k": ["a"], "a": [5]}), writer="new", seq=2)
    assert _store(tmp_path).scan("dws.p").to_pylist() == [{"k": "a", "a": 16}]


def test_pk_state_is_rebuilt_from_a_bootstrap_snapshot_after_retention(tmp_path):
    store = _store(tmp_path)
    store.create_table(_pk(buckets=2))
    for seq in range(1, 6):
        store.write("dws.p", pa.table({"k": ["a", "b", "c", "d"], "a": [seq] * 4}), writer="w", seq=seq)
    expected = sorted(store.scan("dws.p").to_pylist(), key=lambda r: r["k"])
    ends = store.end_offsets("dws.p")
    snapshots = {
        b: (pa.Table.from_pylist([r for r in expected if _bucket(store, r["k"]) == b], SCHEMA), ends[b])
        for b in range(2)
    }
    assert store.delete_before("dws.p", 0, ends[0], older_than=time.time() + 3600) == 0  # no snapshot source:
    assert store.start_offsets("dws.p") == [0, 0]  # the changelog is the state's only copy, kept whole
    calls = []

    def bootstrap(meta, bucket):
        calls.append((meta.name, bucket))
        return snapshots[bucket]

    trimmer = _store(tmp_path, bootstrap=bootstrap)  # e.g. the tiering service, wired to the lake
    for b in range(2):  # the lake covers everything: retention may delete every frame
        assert trimmer.delete_before("dws.p", b, ends[b], older_than=time.time() + 3600) > 0
    with pytest.raises(TidehouseError) as err:  # a store without a snapshot source: never a partial state
        _store(tmp_path).scan("dws.p")
    assert err.value.code is ErrorCode.STORAGE_RANGE
    calls.clear()

    fresh = _store(tmp_path, bootstrap=bootstrap)
    assert sorted(fresh.scan("dws.p").to_pylist(), key=lambda r: r["k"]) == expected
    fresh.write("dws.p", pa.table({"k": ["a", "e"], "a": [100, 1]}), writer="w", seq=6)  # continues after it
    got = {r["k"]: r["a"] for r in _store(tmp_path, bootstrap=bootstrap).scan("dws.p").to_pylist()}
    assert got == {"a": 115, "b": 15, "c": 15, "d": 15, "e": 1}
    assert sorted(set(calls)) == [("dws.p", 0), ("dws.p", 1)]


def test_a_snapshot_older_than_the_kept_changelog_is_refused(tmp_path):
    store = _store(tmp_path)
    store.create_table(_pk())
    for seq in range(1, 4):
        store.write("dws.p", pa.table({"k": [f"k{seq}"], "a": [seq]}), writer="w", seq=seq)
    stale = _store(tmp_path, bootstrap=lambda t, b: (SCHEMA.empty_table(), 1))
    stale.delete_before("dws.p", 0, 2, older_than=time.time() + 3600)
    with pytest.raises(TidehouseError) as err:
        stale.lookup("dws.p", pa.table({"k": ["k1"]}))
    assert err.value.code is ErrorCode.STORAGE_RANGE


def test_a_read_whose_range_retention_deletes_meanwhile_fails_rather_than_starting_later(tmp_path):
    store = _store(tmp_path)
    store.create_table(log_meta())
    for seq in range(1, 4):
        store.write("ods.events", rows(10 * seq, 10), writer="w", seq=seq)
    batches = store.read("ods.events", 0, 0)  # checks the first kept offset (0) now, lists frames later
    _store(tmp_path).delete_before("ods.events", 0, 20, older_than=time.time() + 3600)
    with pytest.raises(TidehouseError) as err:
        list(batches)
    assert err.value.code is ErrorCode.STORAGE_RANGE
    assert read_all(store, "ods.events", start=20).column("id").to_pylist() == list(range(30, 40))


def test_a_cached_state_left_behind_by_retention_is_loaded_again_from_a_newer_snapshot(tmp_path):
    writer = _store(tmp_path)
    writer.create_table(_pk())
    writer.write("dws.p", pa.table({"k": ["a", "b"], "a": [1, 2]}), writer="w", seq=1)
    snapshot = {"at": None}
    reader = _store(tmp_path, bootstrap=lambda meta, b: snapshot["at"])
    assert reader.lookup("dws.p", pa.table({"k": ["a"]})).to_pylist() == [{"k": "a", "a": 1}]  # cached at 1
    for seq in range(2, 5):
        writer.write("dws.p", pa.table({"k": ["a"], "a": [10]}), writer="w", seq=seq)
    end = writer.end_offsets("dws.p")[0]
    snapshot["at"] = (pa.table({"k": ["a", "b"], "a": [31, 2]}), end)  # e.g. the lake after a tiering
    writer.write("dws.p", pa.table({"k": ["b"], "a": [5]}), writer="w", seq=5)
    _store(tmp_path, bootstrap=lambda meta, b: snapshot["at"]).delete_before(
        "dws.p", 0, end, older_than=time.time() + 3600
    )
    assert writer.start_offsets("dws.p") == [end]  # the reader's cache needs offsets retention deleted
    got = {r["k"]: r["a"] for r in reader.scan("dws.p").to_pylist()}
    assert got == {"a": 31, "b": 7}


def test_a_snapshot_ahead_of_the_hot_bucket_is_corrupt_never_a_state(tmp_path):
    store = _store(tmp_path)
    store.create_table(_pk())
    store.write("dws.p", pa.table({"k": ["a"], "a": [1]}), writer="w", seq=1)
    ahead = _store(tmp_path, bootstrap=lambda meta, b: (pa.table({"k": ["z"], "a": [9]}), 50))
    with pytest.raises(TidehouseError) as err:  # the lake kept a dropped incarnation's snapshot
        ahead.scan("dws.p")
    assert err.value.code is ErrorCode.STORAGE_CORRUPT


def test_a_reader_follows_a_writer_in_another_instance(tmp_path):
    writer, reader = _store(tmp_path), _store(tmp_path)
    writer.create_table(_pk())
    writer.write("dws.p", pa.table({"k": ["a"], "a": [1]}), writer="w", seq=1)
    assert reader.lookup("dws.p", pa.table({"k": ["a"]})).to_pylist() == [{"k": "a", "a": 1}]
    writer.write("dws.p", pa.table({"k": ["a", "b"], "a": [2, 3]}), writer="w", seq=2)
    assert sorted(reader.scan("dws.p").to_pylist(), key=lambda r: r["k"]) == [
        {"k": "a", "a": 3},
        {"k": "b", "a": 3},
    ]


def test_an_unreachable_metastore_is_storage_io_naming_the_setting(tmp_path):
    url = "postgresql+psycopg://nobody@127.0.0.1:1/none"
    try:
        with pytest.raises(TidehouseError) as err:
            ObjectTableStore(pafs.LocalFileSystem(), str(tmp_path / "obj"), metastore=url)
    finally:
        metastore_mod.dispose_engines([url])
    assert err.value.code is ErrorCode.STORAGE_IO and err.value.location.path == "storage.metastore"


def test_an_object_store_without_a_metastore_is_refused(tmp_path):
    remote_like = pafs.SubTreeFileSystem(str(tmp_path), pafs.LocalFileSystem())  # not the local filesystem
    with pytest.raises(TidehouseError) as err:
        ObjectTableStore(remote_like, "bucket/prefix")
    assert err.value.code is ErrorCode.CONFIG_INVALID and err.value.location.path == "storage.metastore"


def _bucket(store, key: str) -> int:
    from runtime.storage import bucket_of

    return int(bucket_of(pa.table({"k": [key]}), ["k"], 2).to_pylist()[0])


# -- state snapshots: a query's state table trimmed below a snapshot of its own ----------------------------


def _state_table(store, name: str = "dws.p__state") -> None:
    store.create_table(TableMeta(name, SCHEMA, kind="primary_key", primary_key=("k",)))


def _state_rows(i: int, keys: int = 30) -> pa.Table:
    return pa.table(
        {"k": [f"k{(i * 7 + j) % keys}" for j in range(10)], "a": [i * 100 + j for j in range(10)]}
    )


def _snapshots(tmp_path) -> list:
    return sorted(p for p in (tmp_path / "obj").rglob("*.thd") if p.parent.name == "snapshots")


def _sorted_scan(store, name: str = "dws.p__state") -> list:
    return sorted(store.scan(name).to_pylist(), key=lambda r: r["k"])


def test_a_state_table_is_trimmed_only_below_its_own_snapshot(tmp_path):
    """checkpoint_state snapshots a bucket once its changelog since the last snapshot is as long as the state;
    delete_before of a state table never goes past the snapshot, whatever it is asked; a cold store rebuilds
    the state from the snapshot plus the changelog after it; a newer snapshot replaces (and deletes) the old
    object."""
    # a lake bootstrap (which has no state table), and storage.state_snapshot_rows: 20
    store = _store(tmp_path, bootstrap=lambda meta, bucket: None, snapshot_min_rows=20)
    _state_table(store)
    for i in range(4):
        store.write("dws.p__state", _state_rows(i), writer="w", seq=i)
    end = store.end_offsets("dws.p__state")[0]
    later = time.time() + 3600
    assert store.delete_before("dws.p__state", 0, end, older_than=later) == 0  # no snapshot: nothing goes
    assert store.checkpoint_state("dws.p__state") == [end]  # changelog >= state rows (30) and >= 20
    (first,) = _snapshots(tmp_path)
    store.write("dws.p__state", _state_rows(9), writer="w", seq=9)
    now = store.end_offsets("dws.p__state")[0]
    assert store.delete_before("dws.p__state", 0, now, older_than=later) > 0  # capped at the snapshot
    assert store.start_offsets("dws.p__state") == [end]
    expected = _sorted_scan(store)
    assert _sorted_scan(_store(tmp_path)) == expected  # a cold cache: snapshot + tail
    assert store.checkpoint_state("dws.p__state") == [end]  # 10 new changelog rows: below the thresholds
    for i in range(10, 16):
        store.write("dws.p__state", _state_rows(i), writer="w", seq=i)
    expected = _sorted_scan(store)
    cold = _store(tmp_path)
    cold.snapshot_min_rows = 20
    assert _sorted_scan(cold) == expected  # snapshot + a tail of several writes
    end2 = store.end_offsets("dws.p__state")[0]
    assert cold.checkpoint_state("dws.p__state") == [end2]  # any instance may snapshot
    (second,) = _snapshots(tmp_path)
    assert second != first  # the replaced object is deleted
    assert cold.delete_before("dws.p__state", 0, end2, older_than=later) > 0
    assert _sorted_scan(_store(tmp_path)) == expected
    store.write("dws.p__state", _state_rows(20), writer="w", seq=20)  # the old writer's cache follows
    assert _sorted_scan(_store(tmp_path)) == _sorted_scan(store)


def test_a_snapshot_that_lost_or_was_never_registered_is_garbage(tmp_path):
    store = _store(tmp_path)
    store.snapshot_min_rows = 1
    _state_table(store)
    store.write("dws.p__state", _state_rows(0), writer="w", seq=0)
    inc = store._table("dws.p__state").incarnation
    end = store.end_offsets("dws.p__state")[0]
    assert store.checkpoint_state("dws.p__state") == [end]
    (kept,) = _snapshots(tmp_path)
    # a crash between the put and the registration leaves an orphan; a snapshot at an offset not beyond the
    # registered one loses the registration
    orphan = tmp_path / "obj" / "dws" / "p__state" / inc / "snapshots" / "0-orphan.thd"
    orphan.write_bytes(b"never registered")
    assert store.metastore.register_snapshot(inc, 0, end, "other") == "other"
    assert store.collect_garbage("dws.p__state", grace=0) == 1
    assert _snapshots(tmp_path) == [kept]
    store.drop_table("dws.p__state")  # the drop deletes its folder; a leftover of it is garbage
    assert _snapshots(tmp_path) == []
    orphan.parent.mkdir(parents=True)
    orphan.write_bytes(b"left by a crash during the drop")
    assert store.collect_garbage(grace=0) == 1
    assert _snapshots(tmp_path) == []


def test_a_snapshot_replaced_between_its_registration_and_its_read_is_loaded_again(tmp_path, monkeypatch):
    store = _store(tmp_path)
    store.snapshot_min_rows = 1
    _state_table(store)
    for i in range(3):
        store.write("dws.p__state", _state_rows(i), writer="w", seq=i)
    store.checkpoint_state("dws.p__state")
    store.delete_before("dws.p__state", 0, 10**9, older_than=time.time() + 3600)
    expected = _sorted_scan(store)
    cold = _store(tmp_path)
    real = cold.metastore.snapshot
    calls = []

    def stale(incarnation, bucket):  # the first read names an object a newer snapshot already replaced
        calls.append(bucket)
        got = real(incarnation, bucket)
        return (got[0] - 5, got[1] + ".gone") if len(calls) == 1 else got

    monkeypatch.setattr(cold.metastore, "snapshot", stale)
    assert _sorted_scan(cold) == expected
    assert len(calls) >= 2


def test_a_log_table_has_no_state_to_checkpoint(tmp_path):
    store = _store(tmp_path)
    store.create_table(log_meta())
    with pytest.raises(TidehouseError, match="no state"):
        store.checkpoint_state("ods.events")

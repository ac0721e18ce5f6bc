"""Primary-key tables: merge engines against a plain-Python model, changelog, lookup, scan, recovery."""

from __future__ import annotations

import random
from decimal import Decimal
from pathlib import Path

import pyarrow as pa
import pytest

from runtime.core.errors import ErrorCode, TidehouseError
from runtime.storage import TableMeta, open_store
from tests.storage._util import read_all

SCHEMA = pa.schema([("k", pa.string()), ("a", pa.int64()), ("b", pa.float64()), ("c", pa.string())])
AGGS = {"a": "sum", "b": "max", "c": "last_non_null"}


def pk_meta(engine: str = "last_row", buckets: int = 1, name: str = "dws.t") -> TableMeta:
    return TableMeta(
        name,
        SCHEMA,
        kind="primary_key",
        primary_key=("k",),
        buckets=buckets,
        merge_engine=engine,
        aggregations=AGGS if engine == "aggregate" else {},
    )


# -- the model --------------------------------------------------------------------------------------------


def _agg(fn, old, new):
    if fn == "sum":
        return old if new is None else new if old is None else old + new
    if fn == "max":
        return old if new is None else new if old is None else max(old, new)
    if fn == "last_non_null":
        return new if new is not None else old
    raise AssertionError(fn)


def model_apply(engine, state, row, kind, present):
    """Apply one incoming row to ``state`` (dict k -> tuple); return the changelog entries."""
    k = row["k"]
    old = state.get(k)
    if kind in ("-U", "-D"):
        if old is None:
            return []
        del state[k]
        return [("-D", old)]
    names = SCHEMA.names
    if engine == "last_row":
        new = tuple(row.get(n) for n in names)
    elif engine == "first_row":
        new = old if old is not None else tuple(row.get(n) for n in names)
    elif engine == "partial_update":
        base = list(old) if old is not None else [None] * len(names)
        for i, n in enumerate(names):
            if n in present:
                base[i] = row.get(n)
        new = tuple(base)
    else:
        if old is None:
            new = tuple(row.get(n) for n in names)
        else:
            new = (k,) + tuple(_agg(AGGS[n], old[i + 1], row.get(n)) for i, n in enumerate(names[1:]))
    state[k] = new
    if old is None:
        return [("+I", new)]
    if old == new:
        return []
    return [("-U", old), ("+U", new)]


def random_write(rng: random.Random, engine: str, keys: list[str]):
    n = rng.randint(1, 30)
    present = ["k", "a", "b", "c"]
    if engine == "partial_update":
        present = ["k"] + sorted(rng.sample(["a", "b", "c"], rng.randint(1, 3)))
    data = []
    for _ in range(n):
        row = {"k": rng.choice(keys)}
        for c in present[1:]:
            if rng.random() < 0.15:
                row[c] = None
            elif c == "a":
                row[c] = rng.randint(-3, 3)
            elif c == "b":
                row[c] = float(rng.randint(0, 5))
            else:
                row[c] = rng.choice(["x", "y"])
        data.append(row)
    kinds = [rng.choice(["+I", "+U", "+U", "+U", "-D", "-U"]) if rng.random() < 0.3 else "+U" for _ in data]
    return present, data, kinds


@pytest.mark.parametrize("engine", ["last_row", "first_row", "aggregate", "partial_update"])
@pytest.mark.parametrize("buckets", [1, 3])
def test_merge_engine_matches_model(tmp_path, seed, engine, buckets):
    rng = random.Random(seed)
    root = str(tmp_path / "hot")
    store = open_store(root, fsync=False)
    meta = store.create_table(pk_meta(engine, buckets))
    keys = [f"k{i}" for i in range(12)]
    state: dict = {}
    expected_log: dict[str, list] = {}
    for seq in range(40):
        present, data, kinds = random_write(rng, engine, keys)
        cols = {c: [r.get(c) for r in data] for c in present}
        table = pa.table(cols, schema=pa.schema([SCHEMA.field(c) for c in present]))
        table = table.append_column("__change", pa.array(kinds))
        for r, kind in zip(data, kinds):
            for entry in model_apply(engine, state, r, kind, present):
                expected_log.setdefault(entry[1][0], []).append(entry)
        store.write("dws.t", table, writer="w", seq=seq)
        if rng.random() < 0.2:  # replays are no-ops
            assert store.write("dws.t", table, writer="w", seq=seq).skipped
    scan = store.scan("dws.t")
    got = {r["k"]: tuple(r[n] for n in SCHEMA.names) for r in scan.to_pylist()}
    assert got == state
    # the changelog, per key in order, is the model's
    actual_log: dict[str, list] = {}
    for b in range(meta.buckets):
        t = read_all(store, "dws.t", bucket=b)
        for r in [] if t is None else t.to_pylist():
            actual_log.setdefault(r["k"], []).append((r["__change"], tuple(r[n] for n in SCHEMA.names)))
    assert actual_log == expected_log
    # a fresh process sees the same state; lookup answers present keys only
    other = open_store(root)
    assert {r["k"]: tuple(r[n] for n in SCHEMA.names) for r in other.scan("dws.t").to_pylist()} == state
    found = other.lookup("dws.t", pa.table({"k": keys + ["missing"]}))
    assert {r["k"]: tuple(r[n] for n in SCHEMA.names) for r in found.to_pylist()} == state


def test_noop_update_emits_nothing_but_records_seq(store):
    store.create_table(pk_meta())
    store.write("dws.t", pa.table({"k": ["a"], "a": [1]}), writer="w", seq=1)
    result = store.write("dws.t", pa.table({"k": ["a"], "a": [1]}), writer="w", seq=2)
    assert result.rows == 0 and not result.skipped
    assert store.end_offsets("dws.t") == [1]
    assert store.last_seq("dws.t", "w") == 2
    assert store.write("dws.t", pa.table({"k": ["a"], "a": [5]}), writer="w", seq=2).skipped


def test_changelog_kinds(store):
    store.create_table(pk_meta())
    store.write("dws.t", pa.table({"k": ["a", "b"], "a": [1, 2]}), writer="w", seq=1)
    store.write(
        "dws.t", pa.table({"k": ["a", "b"], "a": [3, 2], "__change": ["+U", "-D"]}), writer="w", seq=2
    )
    t = read_all(store, "dws.t")
    assert list(
        zip(t.column("__change").to_pylist(), t.column("k").to_pylist(), t.column("a").to_pylist())
    ) == [("+I", "a", 1), ("+I", "b", 2), ("-U", "a", 1), ("+U", "a", 3), ("-D", "b", 2)]
    assert t.schema.names[-4:] == ["__offset", "__bucket", "__ts", "__change"]


def test_partial_update_two_writers_both_land(tmp_path):
    root = str(tmp_path / "hot")
    s1, s2 = open_store(root, fsync=False), open_store(root, fsync=False)
    s1.create_table(pk_meta("partial_update"))
    s1.write("dws.t", pa.table({"k": ["x", "y"], "a": [1, 2]}), writer="w1", seq=1)
    s1.close()  # one writer process at a time holds the key-value state
    s2.write("dws.t", pa.table({"k": ["x"], "c": ["hello"]}), writer="w2", seq=1)
    rows = {r["k"]: r for r in s2.scan("dws.t").to_pylist()}
    assert rows["x"] == {"k": "x", "a": 1, "b": None, "c": "hello"}
    assert rows["y"] == {"k": "y", "a": 2, "b": None, "c": None}


def test_pk_write_validation(store):
    store.create_table(pk_meta())
    for data, text in [
        (pa.table({"a": [1]}), "primary key"),
        (
            pa.table({"k": [None], "a": [1]}, schema=pa.schema([("k", pa.string()), ("a", pa.int64())])),
            "null",
        ),
        (pa.table({"k": ["a"], "__change": ["?"]}), "row kinds"),
    ]:
        with pytest.raises(TidehouseError) as err:
            store.write("dws.t", data, writer="w", seq=1)
        assert err.value.code == ErrorCode.WRITE_INVALID and text in err.value.message
    store.create_table(TableMeta("ods.log", SCHEMA))
    with pytest.raises(TidehouseError) as err:
        store.lookup("ods.log", pa.table({"k": ["a"]}))
    assert err.value.code == ErrorCode.TABLE_INVALID


def test_kv_state_catches_up_from_the_log(tmp_path):
    """The log is the truth: a KV state behind the log (crash between the two) is replayed on open."""
    from rocksdict import Options, Rdict

    root = tmp_path / "hot"
    s = open_store(str(root), fsync=False)
    s.create_table(pk_meta())
    s.write("dws.t", pa.table({"k": ["a", "b"], "a": [1, 2]}), writer="w", seq=1)
    s.write("dws.t", pa.table({"k": ["a", "b"], "a": [5, 2], "__change": ["+U", "-D"]}), writer="w", seq=2)
    s.close()
    kv = Rdict(str(root / "dws" / "t" / "bucket-0" / "kv"), Options(raw_mode=True))
    kv[b"\x00applied"] = b"2"  # pretend the second write's state never landed
    kv.close()
    reader = open_store(str(root))
    assert reader.scan("dws.t").to_pylist() == [{"k": "a", "a": 5, "b": None, "c": None}]
    reader.close()
    w = open_store(str(root))
    w.write("dws.t", pa.table({"k": ["c"], "a": [7]}), writer="w", seq=3)
    assert sorted(r["k"] for r in w.scan("dws.t").to_pylist()) == ["a", "c"]
    w.close()


def test_schema_evolution_pk(store):
    store.create_table(pk_meta())
    store.write("dws.t", pa.table({"k": ["a"], "a": [1]}), writer="w", seq=1)
    store.create_table(
        TableMeta("dws.t", SCHEMA.append(pa.field("d", pa.int32())), kind="primary_key", primary_key=("k",))
    )
    assert store.lookup("dws.t", pa.table({"k": ["a"]})).to_pylist() == [
        {"k": "a", "a": 1, "b": None, "c": None, "d": None}
    ]
    store.write("dws.t", pa.table({"k": ["a"], "a": [1], "d": pa.array([4], pa.int32())}), writer="w", seq=2)
    t = read_all(store, "dws.t")
    assert t.column("d").to_pylist() == [None, None, 4] and t.column("__change").to_pylist() == [
        "+I",
        "-U",
        "+U",
    ]


def test_timestamp_keys_and_values_roundtrip(store):
    schema = pa.schema(
        [("day", pa.date32()), ("ts", pa.timestamp("us", tz="UTC")), ("v", pa.decimal128(10, 2))]
    )
    store.create_table(TableMeta("dws.d", schema, kind="primary_key", primary_key=("day",)))
    data = pa.table(
        {
            "day": pa.array([19000, 19001], pa.date32()),
            "ts": pa.array([5, 6], pa.timestamp("ms")),
            "v": pa.array([Decimal("1.00"), Decimal("2.00")], pa.decimal128(10, 2)),
        }
    )
    store.write("dws.d", data, writer="w", seq=1)
    got = store.lookup("dws.d", pa.table({"day": pa.array([19001], pa.date32())}))
    assert got.column("ts").cast(pa.int64()).to_pylist() == [6000] and str(got.column("v")[0]) == "2.00"


def test_reader_in_another_store_follows_the_writer(tmp_path):
    """A store that does not hold the KV (another process) follows it as a RocksDB secondary, caught up per
    call."""
    import os

    root = str(tmp_path / "hot")
    w = open_store(root, fsync=False)
    w.create_table(pk_meta())
    w.write("dws.t", pa.table({"k": ["a", "b"], "a": [1, 2]}), writer="w", seq=1)
    r = open_store(root)
    assert r.lookup("dws.t", pa.table({"k": ["a"]})).column("a").to_pylist() == [1]
    tablet = r._table("dws.t").tablets[0]
    scratch = tablet._scratch
    assert tablet._secondary is not None and os.path.isdir(scratch)
    w.write("dws.t", pa.table({"k": ["a", "b"], "a": [5, 2], "__change": ["+U", "-D"]}), writer="w", seq=2)
    assert tablet._applied(tablet._reader_db()[0], None) == r.end_offsets("dws.t")[0] == 5  # caught up
    assert r.scan("dws.t").to_pylist() == [{"k": "a", "a": 5, "b": None, "c": None}]
    w.close()  # a new writer (new WAL) later: the secondary follows it too
    w2 = open_store(root, fsync=False)
    w2.write("dws.t", pa.table({"k": ["c"], "a": [7]}), writer="w", seq=3)
    assert sorted(r.lookup("dws.t", pa.table({"k": ["a", "b", "c"]})).column("k").to_pylist()) == ["a", "c"]
    r.close()
    assert not os.path.exists(scratch)
    w2.close()


def test_a_killed_readers_folder_is_removed_by_the_next_reader(tmp_path):
    """A reader's secondary instance keeps its files in the bucket's ``kv.readers/<pid>@<host>-...`` (not
    the system's temp folder, where a ``kill -9`` left one behind per process forever): the next reader
    removes those of this host's processes that no longer run, and keeps those of live ones and of other
    hosts (a root on a shared file system)."""
    import os
    import socket
    import subprocess
    import sys

    from runtime.storage.pk import READERS

    root = str(tmp_path / "hot")
    w = open_store(root, fsync=False)
    w.create_table(pk_meta())
    w.write("dws.t", pa.table({"k": ["a"], "a": [1]}), writer="w", seq=1)
    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True, check=True
    ).stdout.strip()
    host = socket.gethostname()
    readers = Path(w._table("dws.t").logs[0].path) / READERS
    readers.mkdir()
    kept = [
        f"{os.getppid()}@{host}-x2",
        f"{dead}@another-host.example-x3",
    ]  # a live process's; another host's
    for name in [f"{dead}@{host}-x1", *kept]:  # x1: a reader killed with kill -9 (its pid is gone)
        (readers / name).mkdir()
    r = open_store(root)
    assert r.lookup("dws.t", pa.table({"k": ["a"]})).column("a").to_pylist() == [1]
    scratch = Path(r._table("dws.t").tablets[0]._scratch)
    assert scratch.parent == readers and scratch.name.startswith(f"{os.getpid()}@{host}-")
    assert sorted(p.name for p in readers.iterdir()) == sorted([*kept, scratch.name])
    r.close()
    assert not scratch.exists()
    w.close()


def test_reader_falls_back_to_read_only_without_temp_space(tmp_path, monkeypatch):
    import errno
    import tempfile

    root = str(tmp_path / "hot")
    w = open_store(root, fsync=False)
    w.create_table(pk_meta())
    w.write("dws.t", pa.table({"k": ["a"], "a": [1]}), writer="w", seq=1)

    def full(*_a, **_k):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(tempfile, "mkdtemp", full)
    r = open_store(root)
    assert r.lookup("dws.t", pa.table({"k": ["a"]})).column("a").to_pylist() == [1]
    assert r._table("dws.t").tablets[0]._secondary is None
    r.close()
    w.close()


class _FailingKV:
    """The writer's RocksDB handle with a failing ``write`` (a full disk under the state)."""

    def __init__(self, db) -> None:
        self.db = db

    def write(self, *_a, **_k):
        raise Exception("IO error: No space left on device")

    def close(self) -> None:
        self.db.close()

    def __getattr__(self, name):
        return getattr(self.db, name)


@pytest.mark.parametrize("engine", ["last_row", "aggregate"])
def test_a_failing_state_write_is_storage_io_and_catches_up(tmp_path, engine):
    root = str(tmp_path / "hot")
    s = open_store(root, fsync=False)
    s.create_table(pk_meta(engine))
    s.write("dws.t", pa.table({"k": ["a", "b"], "a": [1, 2]}), writer="w", seq=1)
    tablet = s._table("dws.t").tablets[0]
    tablet._db = _FailingKV(tablet._db)
    with pytest.raises(TidehouseError) as err:
        s.write("dws.t", pa.table({"k": ["a", "c"], "a": [3, 4]}), writer="w", seq=2)
    assert err.value.code == ErrorCode.STORAGE_IO and err.value.location.file == str(tablet.path)
    assert tablet._db is None  # dropped: the next write reopens the state and replays the changelog
    assert s.write("dws.t", pa.table({"k": ["a", "c"], "a": [3, 4]}), writer="w", seq=2).skipped  # it landed
    s.write("dws.t", pa.table({"k": ["d"], "a": [5]}), writer="w", seq=3)
    want = {"a": 3 if engine == "last_row" else 4, "b": 2, "c": 4, "d": 5}
    assert {r["k"]: r["a"] for r in s.scan("dws.t").to_pylist()} == want
    s.close()
    assert {r["k"]: r["a"] for r in open_store(root).scan("dws.t").to_pylist()} == want


def test_second_writer_of_a_bucket_waits_then_is_locked_and_a_broken_state_is_io(tmp_path):
    from runtime.storage.local import LocalTableStore

    root = str(tmp_path / "hot")
    s1 = open_store(root, fsync=False)
    s1.create_table(pk_meta())
    s1.write("dws.t", pa.table({"k": ["a"], "a": [1]}), writer="w1", seq=1)  # holds the KV until closed
    s2 = LocalTableStore(root, fsync=False, lock_timeout=0.3)
    with pytest.raises(TidehouseError) as err:
        s2.write("dws.t", pa.table({"k": ["b"], "a": [2]}), writer="w2", seq=1)
    assert err.value.code == ErrorCode.STORAGE_LOCKED
    s1.close()
    assert s2.write("dws.t", pa.table({"k": ["b"], "a": [2]}), writer="w2", seq=1).rows == 1
    s2.close()
    s3 = open_store(str(tmp_path / "other"), fsync=False)
    s3.create_table(pk_meta())
    kv = tmp_path / "other" / "dws" / "t" / "bucket-0" / "kv"
    kv.parent.mkdir(parents=True, exist_ok=True)
    kv.write_text("not a database")  # a file where the state's folder belongs
    with pytest.raises(TidehouseError) as err:
        s3.write("dws.t", pa.table({"k": ["a"], "a": [1]}), writer="w", seq=1)
    assert err.value.code == ErrorCode.STORAGE_IO and err.value.location.file == str(kv)

"""The hot-storage contract: the same behaviour from every implementation (local disk; SeaweedFS +
PostgreSQL).

Each test names the promise of :class:`runtime.storage.api.TableStore` it checks. Faults whose shape differs
per implementation (a torn write, damaged data) are injected by the backend (``_backends.py``); what a
reader and the next writer see afterwards is the same contract everywhere.
"""

from __future__ import annotations

import random
import signal
import subprocess
import sys
import threading
import time
from collections import Counter

import pyarrow as pa
import pytest

from runtime.core.errors import ErrorCode, TidehouseError
from runtime.storage import TableMeta
from tests._support import REPO, scale
from tests.storage._util import LOG_SCHEMA, log_meta, read_all, rows
from tests.storage.contract._backends import subprocess_env
from tests.storage.contract._writer import batch as writer_batch

PK_SCHEMA = pa.schema([("k", pa.string()), ("a", pa.int64()), ("b", pa.float64()), ("c", pa.string())])
AGGS = {"a": "sum", "b": "max", "c": "last_non_null"}
LATER = 3600.0


def pk_meta(engine: str = "last_row", buckets: int = 1, name: str = "dws.t") -> TableMeta:
    return TableMeta(
        name,
        PK_SCHEMA,
        kind="primary_key",
        primary_key=("k",),
        buckets=buckets,
        merge_engine=engine,
        aggregations=AGGS if engine == "aggregate" else {},
    )


def _state(table: pa.Table) -> dict:
    return {r["k"]: tuple(r[n] for n in PK_SCHEMA.names) for r in table.to_pylist()}


# -- append and read ---------------------------------------------------------------------------------------


def test_append_assigns_dense_offsets_and_reads_any_range(backend):
    store = backend.open()
    store.create_table(log_meta(buckets=3))
    results = [store.write("ods.events", rows(i * 10, 10), writer="w", seq=i) for i in range(6)]
    assert sum(r.rows for r in results) == 60
    ends = store.end_offsets("ods.events")
    assert sum(ends) == 60 and store.start_offsets("ods.events") == [0, 0, 0]
    other = backend.open()  # another process's view
    seen = []
    for b in range(3):
        got = read_all(other, "ods.events", bucket=b)
        assert got.column("__offset").to_pylist() == list(range(ends[b]))
        assert set(got.column("__bucket").to_pylist()) == {b}
        seen += got.column("id").to_pylist()
        if ends[b] > 7:  # a range inside batches, and a projection
            part = read_all(other, "ods.events", bucket=b, start=3, end=ends[b] - 2, columns=["price"])
            assert part.schema.names == ["price", "__offset", "__bucket", "__ts"]
            assert part.column("__offset").to_pylist() == list(range(3, ends[b] - 2))
            assert part.column("price").to_pylist() == got.column("price").to_pylist()[3 : ends[b] - 2]
    assert sorted(seen) == list(range(60))
    assert sorted(other.scan("ods.events").column("id").to_pylist()) == list(range(60))
    assert read_all(other, "ods.events", bucket=0, start=ends[0]) is None
    for bad in [(0, ends[0] + 1), (7, 0)]:
        with pytest.raises(TidehouseError) as err:
            list(other.read("ods.events", *bad))
        assert err.value.code is ErrorCode.STORAGE_RANGE
    with pytest.raises(TidehouseError) as err:  # past what is committed: an error, never fewer rows
        list(other.read("ods.events", 0, 0, ends[0] + 1))
    assert err.value.code is ErrorCode.STORAGE_RANGE and "only" in err.value.message
    info = other.batch_info("ods.events", 0)
    assert info.writer == "w" and info.base_offset + info.rows == ends[0]
    assert other.offset_times("ods.events", 0, 0).seq <= info.seq


def test_replayed_writes_are_no_ops_in_every_instance(backend):
    store = backend.open()
    store.create_table(log_meta(buckets=2))
    assert store.write("ods.events", rows(0, 8), writer="a", seq=7).rows == 8
    assert store.write("ods.events", rows(0, 8), writer="a", seq=7).skipped
    assert store.write("ods.events", rows(0, 8), writer="a", seq=3).skipped
    assert not store.write("ods.events", rows(8, 2), writer="b", seq=1).skipped
    other = backend.open()
    assert other.write("ods.events", rows(0, 8), writer="a", seq=7).skipped
    assert (
        other.last_seq("ods.events", "a"),
        other.last_seq("ods.events", "b"),
        other.last_seq("ods.events", "c"),
    ) == (7, 1, None)
    assert sorted(other.scan("ods.events").column("id").to_pylist()) == list(range(10))


def test_schema_evolution_reads_old_rows_with_nulls(backend):
    store = backend.open()
    store.create_table(log_meta())
    store.write("ods.events", rows(0, 2), writer="w", seq=1)
    wider = TableMeta("ods.events", LOG_SCHEMA.append(pa.field("extra", pa.string())))
    assert store.create_table(wider).schema_id == 1
    store.write("ods.events", rows(2, 1).append_column("extra", pa.array(["x"])), writer="w", seq=2)
    got = read_all(backend.open(), "ods.events")
    assert got.column("extra").to_pylist() == [None, None, "x"]
    with pytest.raises(TidehouseError) as err:
        store.create_table(TableMeta("ods.events", pa.schema([("id", pa.string())])))
    assert err.value.code is ErrorCode.SCHEMA_INCOMPATIBLE


def test_drop_and_recreate_is_a_new_table(backend):
    store = backend.open()
    store.create_table(log_meta())
    store.write("ods.events", rows(0, 3), writer="w", seq=1)
    first = store.incarnation("ods.events")
    store.drop_table("ods.events")
    assert not store.has_table("ods.events")
    with pytest.raises(TidehouseError) as err:
        backend.open().get_table("ods.events")
    assert err.value.code is ErrorCode.TABLE_UNKNOWN
    store.create_table(log_meta())
    assert store.incarnation("ods.events") != first
    assert store.end_offsets("ods.events") == [0] and store.last_seq("ods.events", "w") is None
    assert store.write("ods.events", rows(0, 1), writer="w", seq=1).ranges == {0: (0, 1)}


# -- primary keys ------------------------------------------------------------------------------------------


def _model(engine, state, row, kind, present):
    k, old = row["k"], state.get(row["k"])
    if kind in ("-U", "-D"):
        if old is None:
            return []
        del state[k]
        return [("-D", old)]
    names = PK_SCHEMA.names
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
    elif old is None:
        new = tuple(row.get(n) for n in names)
    else:

        def agg(fn, a, b):
            if b is None or a is None:
                return a if b is None else b
            return a + b if fn == "sum" else max(a, b) if fn == "max" else b

        new = (k,) + tuple(agg(AGGS[n], old[i + 1], row.get(n)) for i, n in enumerate(names[1:]))
    state[k] = new
    if old is None:
        return [("+I", new)]
    return [] if old == new else [("-U", old), ("+U", new)]


@pytest.mark.parametrize("engine", ["last_row", "first_row", "aggregate", "partial_update"])
def test_primary_key_merge_engines_and_changelog_match_the_model(backend, seed, engine):
    rng = random.Random(seed)
    store = backend.open()
    store.create_table(pk_meta(engine, buckets=2))
    keys = [f"k{i}" for i in range(10)]
    state: dict = {}
    expected_log: dict = {}
    for seq in range(25):
        present = (
            ["k", "a", "b", "c"]
            if engine != "partial_update"
            else ["k"] + sorted(rng.sample(["a", "b", "c"], rng.randint(1, 3)))
        )
        data = [
            {
                "k": rng.choice(keys),
                "a": rng.choice([None, rng.randint(-3, 3)]),
                "b": float(rng.randint(0, 5)),
                "c": rng.choice([None, "x", "y"]),
            }
            for _ in range(rng.randint(1, 12))
        ]
        kinds = [rng.choice(["+I", "+U", "-D", "-U"]) if rng.random() < 0.3 else "+U" for _ in data]
        table = pa.table(
            {c: [r[c] for r in data] for c in present},
            schema=pa.schema([PK_SCHEMA.field(c) for c in present]),
        ).append_column("__change", pa.array(kinds))
        for r, kind in zip(data, kinds):
            for entry in _model(engine, state, r, kind, present):
                expected_log.setdefault(entry[1][0], []).append(entry)
        store.write("dws.t", table, writer="w", seq=seq)
        if rng.random() < 0.2:
            assert store.write("dws.t", table, writer="w", seq=seq).skipped
    assert _state(store.scan("dws.t")) == state
    fresh = backend.open()  # rebuilt elsewhere from what is stored
    assert _state(fresh.scan("dws.t")) == state
    found = fresh.lookup("dws.t", pa.table({"k": keys + ["missing"]}))
    assert _state(found) == state
    actual_log: dict = {}
    for b in range(2):
        t = read_all(fresh, "dws.t", bucket=b)
        for r in [] if t is None else t.to_pylist():
            actual_log.setdefault(r["k"], []).append((r["__change"], tuple(r[n] for n in PK_SCHEMA.names)))
    assert actual_log == expected_log


def test_a_no_op_upsert_records_its_seq_and_emits_nothing(backend):
    store = backend.open()
    store.create_table(pk_meta())
    store.write("dws.t", pa.table({"k": ["a"], "a": [1]}), writer="w", seq=1)
    result = store.write("dws.t", pa.table({"k": ["a"], "a": [1]}), writer="w", seq=2)
    assert result.rows == 0 and not result.skipped
    assert store.end_offsets("dws.t") == [1] and store.last_seq("dws.t", "w") == 2
    assert backend.open().write("dws.t", pa.table({"k": ["a"], "a": [5]}), writer="w", seq=2).skipped


def test_two_writers_of_a_primary_key_bucket_are_fenced(backend):
    """Of two live writers of one primary-key bucket exactly one writes; the other gets STORAGE_LOCKED and
    nothing it attempted becomes visible. (Local disk: the first holder keeps the bucket; object store: the
    newer epoch wins.)"""
    first, second = backend.open(), backend.open()
    first.create_table(pk_meta())
    first.write("dws.t", pa.table({"k": ["a"], "a": [1]}), writer="first", seq=1)
    outcomes = {}
    for who, store, value in [("second", second, 2), ("first", first, 3)]:
        try:
            store.write("dws.t", pa.table({"k": ["a"], "a": [value]}), writer=who, seq=2)
            outcomes[who] = value
        except TidehouseError as exc:
            assert exc.code is ErrorCode.STORAGE_LOCKED
            outcomes[who] = None
    assert sorted(v is None for v in outcomes.values()) == [False, True], outcomes
    winner = next(v for v in outcomes.values() if v is not None)
    for store in (first, second):
        store.close()
    check = backend.open()
    assert _state(check.scan("dws.t")) == {"a": ("a", winner, None, None)}
    changes = read_all(check, "dws.t").column("__change").to_pylist()
    assert changes == ["+I", "-U", "+U"]  # one update landed, the fenced one left nothing


def test_shared_writers_take_turns_writing_a_primary_key_bucket(backend, seed):
    """Spark's Python workers write a primary-key bucket in turns (one task per bucket and batch, any worker
    process): with ``shared_writers`` each instance hands the bucket over after its write, so the next one,
    whichever it is, writes on the state its predecessor left — no STORAGE_LOCKED, no update lost (an
    aggregate table sums every write once), and a replayed seq is still a no-op in any instance."""
    rng = random.Random(seed)
    stores = [backend.open(shared_writers=True) for _ in range(3)]
    stores[0].create_table(pk_meta("aggregate", buckets=2))
    total: Counter = Counter()
    for seq in range(1, 13):
        keys = rng.sample("abcdef", 3)
        store = rng.choice(stores)
        store.write("dws.t", pa.table({"k": keys, "a": [seq] * 3}), writer="query", seq=seq)
        total.update({k: seq for k in keys})
        assert (
            rng.choice(stores)
            .write("dws.t", pa.table({"k": keys, "a": [seq] * 3}), writer="query", seq=seq)
            .skipped
        )
    for store in stores:
        assert {k: v[1] for k, v in _state(store.scan("dws.t")).items()} == dict(total)
    check = backend.open()  # a writer that holds buckets, as on the driver path, can take over afterwards
    check.write("dws.t", pa.table({"k": ["a"], "a": [100]}), writer="driver", seq=1)
    assert _state(check.scan("dws.t"))["a"][1] == total["a"] + 100


def test_concurrent_appenders_of_a_log_bucket_interleave_whole_batches(backend):
    store = backend.open()
    store.create_table(
        TableMeta("ods.c", pa.schema([("writer", pa.string()), ("seq", pa.int64()), ("i", pa.int64())]))
    )
    errors = []

    def run(name: str) -> None:
        s = backend.open()
        try:
            for seq in range(1, 16):
                n = 1 + seq % 5
                s.write(
                    "ods.c",
                    pa.table({"writer": [name] * n, "seq": [seq] * n, "i": list(range(n))}),
                    writer=name,
                    seq=seq,
                )
        except Exception as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(f"w{k}",)) for k in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors
    got = read_all(backend.open(), "ods.c")
    assert got.column("__offset").to_pylist() == list(range(got.num_rows))
    groups = Counter(zip(got.column("writer").to_pylist(), got.column("seq").to_pylist()))
    assert groups == {(f"w{k}", seq): 1 + seq % 5 for k in range(3) for seq in range(1, 16)}
    prev = None  # each batch is contiguous: rows of one write are never split by another's
    runs = 0
    for key in zip(got.column("writer").to_pylist(), got.column("seq").to_pylist()):
        runs += key != prev
        prev = key
    assert runs == len(groups)


# -- retention ---------------------------------------------------------------------------------------------


def test_retention_deletes_below_the_given_offset_and_keeps_seqs(backend):
    store = backend.open(segment_bytes=2048)
    store.create_table(log_meta())
    store.write("ods.events", rows(0, 5), writer="early", seq=7)
    for i in range(1, 30):
        store.write("ods.events", rows(i * 10, 10), writer="w", seq=i)
    end = store.end_offsets("ods.events")[0]
    assert store.delete_before("ods.events", 0, end // 2, older_than=time.time() - LATER) == 0  # too young
    assert store.delete_before("ods.events", 0, end // 2, older_than=time.time() + LATER) >= 1
    first = store.start_offsets("ods.events")[0]
    assert 0 < first <= end // 2
    other = backend.open()
    assert other.start_offsets("ods.events") == [first] and other.end_offsets("ods.events") == [end]
    with pytest.raises(TidehouseError) as err:
        list(other.read("ods.events", 0, first - 1))
    assert err.value.code is ErrorCode.STORAGE_RANGE
    with pytest.raises(TidehouseError) as err:
        other.scan("ods.events")
    assert err.value.code is ErrorCode.STORAGE_RANGE  # never a partial table
    assert read_all(other, "ods.events", start=first).column("__offset").to_pylist() == list(
        range(first, end)
    )
    assert other.write("ods.events", rows(0, 5), writer="early", seq=7).skipped  # idempotency outlives frames
    assert other.last_seq("ods.events", "w") == 29
    assert other.write("ods.events", rows(999, 1), writer="w", seq=30).ranges == {0: (end, end + 1)}


def test_a_state_tables_changelog_trimmed_below_its_checkpoint_leaves_the_state_whole(backend, seed):
    """checkpoint_state covers a query's state table up to its end (local: the durable key-value state; s3: a
    snapshot taken now), and another instance rebuilds the same state once the changelog below is gone."""
    rng = random.Random(seed)
    store = backend.open(segment_bytes=2048, state_snapshot_rows=1)
    store.create_table(pk_meta(name="dws.t__state"))

    def batch() -> pa.Table:
        keys = [f"k{rng.randrange(40)}" for _ in range(12)]
        return pa.table(
            {"k": keys, "a": [rng.randrange(100) for _ in keys], "b": [1.0] * 12, "c": ["x"] * 12},
            schema=PK_SCHEMA,
        )

    for i in range(30):
        store.write("dws.t__state", batch(), writer="w", seq=i)
    end = store.end_offsets("dws.t__state")
    assert store.checkpoint_state("dws.t__state") == end
    assert store.delete_before("dws.t__state", 0, end[0], older_than=time.time() + LATER) >= 1
    assert store.start_offsets("dws.t__state")[0] > 0
    other = backend.open()
    assert _state(other.scan("dws.t__state")) == _state(store.scan("dws.t__state"))
    store.write("dws.t__state", batch(), writer="w", seq=30)
    assert _state(backend.open().scan("dws.t__state")) == _state(store.scan("dws.t__state"))


# -- faults ------------------------------------------------------------------------------------------------


def test_a_torn_write_is_never_visible_and_the_next_write_lands_after_the_last_commit(backend, seed):
    rng = random.Random(seed)
    store = backend.open()
    store.create_table(log_meta())
    for i in range(3):
        store.write("ods.events", rows(i * 4, 4), writer="w", seq=i + 1)
    backend.tear(store, "ods.events", 0, rng)
    reader = backend.open()
    assert reader.end_offsets("ods.events") == [12]
    assert read_all(reader, "ods.events").column("id").to_pylist() == list(range(12))
    writer = backend.open()  # the writer restarting after its crash
    assert writer.write("ods.events", rows(0, 4), writer="w", seq=3).skipped
    assert writer.write("ods.events", rows(12, 4), writer="w", seq=4).ranges == {0: (12, 16)}
    got = read_all(backend.open(), "ods.events")
    assert got.column("id").to_pylist() == list(range(16))
    assert got.column("__offset").to_pylist() == list(range(16))


def test_damaged_committed_data_is_an_error_never_a_partial_read(backend):
    store = backend.open()
    store.create_table(log_meta())
    for i in range(3):
        store.write("ods.events", rows(i * 50, 50), writer="w", seq=i + 1)
    store.close()
    backend.damage(store, "ods.events", 0)
    with pytest.raises(TidehouseError) as err:
        read_all(backend.open(), "ods.events")
    assert err.value.code is ErrorCode.STORAGE_CORRUPT


def _run_and_kill(backend, rng, acked, rows_per_write):
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.storage.contract._writer", backend.spec, "ods.c", str(rows_per_write)],
        stdout=subprocess.PIPE,
        text=True,
        env=subprocess_env(),
        cwd=str(REPO),
    )
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(iter(proc.stdout.readline, "")), daemon=True)
    reader.start()
    deadline = time.monotonic() + 60
    while not any(x.startswith("ack") for x in lines) and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.002)
    time.sleep(rng.uniform(0, 0.08))
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    reader.join(5)
    assert "ready\n" in lines, f"writer did not start: {lines}"
    acked.update(int(line.split()[1]) for line in lines if line.startswith("ack"))


@pytest.mark.slow
@pytest.mark.reliability
@pytest.mark.parametrize("kind", ["log", "primary_key"])
def test_kill9_mid_append_loses_duplicates_and_tears_nothing(backend, seed, kind):
    rng = random.Random(seed)
    n = 200
    schema = pa.schema([("seq", pa.int64()), ("i", pa.int64()), ("pad", pa.string())])
    store = backend.open()
    if kind == "log":
        store.create_table(TableMeta("ods.c", schema, buckets=2, bucket_key=("i",)))
    else:  # each seq counts once per key
        store.create_table(
            TableMeta(
                "ods.c",
                schema,
                kind="primary_key",
                primary_key=("i",),
                buckets=2,
                merge_engine="aggregate",
                aggregations={"seq": "count"},
            )
        )
    store.close()
    acked: set[int] = set()
    for _ in range(scale(6, 40)):
        _run_and_kill(backend, rng, acked, n)
        if kind == "log":  # between kills a reader sees whole batches only
            check = backend.open()
            seqs = Counter()
            for b in range(2):
                for part in check.read("ods.c", b, 0, columns=["seq"]):
                    seqs.update(part.column("seq").to_pylist())
            newest = max(seqs, default=0)
            assert all(v == n for s, v in seqs.items() if s != newest), "a partial batch is visible"
            check.close()
    final = backend.open()
    last = final.last_seq("ods.c", "w") or 0
    final.write("ods.c", writer_batch(last, n), writer="w", seq=last)  # the restart replays its newest seq
    assert acked and max(acked) <= last
    if kind == "log":
        t = final.scan("ods.c")
        per_seq = Counter(t.column("seq").to_pylist())
        assert set(per_seq) == set(range(1, last + 1)) >= acked  # 0 lost, every committed seq once ...
        assert set(per_seq.values()) == {n}  # ... whole: 0 duplicated, 0 partial
    else:
        state = final.scan("ods.c")
        assert sorted(state.column("i").to_pylist()) == list(range(n))
        assert set(state.column("seq").to_pylist()) == {
            last
        }  # each committed seq counted exactly once per key
    orphans = 0
    if hasattr(final, "collect_garbage"):  # the puts of writes killed before their commit: garbage, not data
        before = final.scan("ods.c").num_rows
        orphans = final.collect_garbage(grace=0)
        assert backend.open().scan("ods.c").num_rows == before
    print(
        f"[kill -9] {backend.name}/{kind}: {len(acked)} acked, {last} committed, {orphans} orphans collected"
    )

"""A tiering cycle makes the lake equal the hot table: log tables, primary-key tables, schema evolution."""

from __future__ import annotations

import random

import pyarrow as pa
import pytest

from materializer.status import LakeSnapshots
from runtime.lake.state import lake_offsets
from runtime.lake.tiering import lake_snapshot, lake_status, tier_table
from runtime.storage.api import CHANGE, TableMeta
from tests.lake._lakekit import ACTIVITY, ALL_CATALOGS, CLICKS, clicks, data_files_stored, lake_rows, rows_of

pytestmark = pytest.mark.catalogs(*ALL_CATALOGS)  # SQLite, SeaweedFS's REST catalog, PostgreSQL


def test_log_table_lake_equals_hot_after_each_cycle(store, lake):
    store.create_table(TableMeta("ods.clicks", CLICKS, buckets=3, bucket_key=("user_id",)))
    seq = 0
    for cycle, n in enumerate([50, 0, 7, 120]):
        if n:
            store.write("ods.clicks", clicks(n, start=seq * 1000), writer="w", seq=seq)
            seq += 1
        result = tier_table(store, lake, "ods.clicks")
        assert result.committed == bool(n), cycle
        assert result.rows == n
        assert lake_rows(lake, "ods.clicks") == rows_of(store.scan("ods.clicks"))
        assert list(result.offsets_after) == store.end_offsets("ods.clicks")
        assert result.lake_delay_s == 0.0
    # every hot offset is in the lake exactly once
    data = lake.load("ods.clicks").scan(selected_fields=("__bucket", "__offset")).to_arrow().to_pylist()
    pairs = sorted((r["__bucket"], r["__offset"]) for r in data)
    ends = store.end_offsets("ods.clicks")
    assert pairs == [(b, o) for b in range(3) for o in range(ends[b])]


def test_empty_table_makes_no_snapshot(store, lake):
    store.create_table(TableMeta("ods.empty", CLICKS))
    for _ in range(3):
        result = tier_table(store, lake, "ods.empty")
        assert not result.committed and result.rows == 0 and result.snapshot_id is None
    assert lake.load("ods.empty").snapshots() == []


def _apply(state: dict, batch: list[dict]) -> None:
    for row in batch:
        if row.get(CHANGE) == "-D":
            state.pop(row["user_id"], None)
        else:
            state[row["user_id"]] = {k: row[k] for k in ("user_id", "events", "last_item")}


@pytest.mark.parametrize("buckets", [1, 4])
def test_primary_key_table_with_updates_and_deletes(store, lake, seed, buckets):
    rng = random.Random(seed)
    store.create_table(
        TableMeta("dws.activity", ACTIVITY, kind="primary_key", primary_key=("user_id",), buckets=buckets)
    )
    expected: dict = {}
    for seq in range(12):
        batch = []
        for _ in range(rng.randrange(0, 40)):
            user = f"u{rng.randrange(30)}"
            if rng.random() < 0.25:
                batch.append({"user_id": user, "events": None, "last_item": None, CHANGE: "-D"})
            else:
                batch.append(
                    {
                        "user_id": user,
                        "events": rng.randrange(100),
                        "last_item": f"i{rng.randrange(9)}",
                        CHANGE: "+U",
                    }
                )
        if batch:
            store.write(
                "dws.activity",
                pa.Table.from_pylist(batch, schema=ACTIVITY.append(pa.field(CHANGE, pa.string()))),
                writer="w",
                seq=seq,
            )
            _apply(expected, batch)
        if rng.random() < 0.6 or seq == 11:
            tier_table(store, lake, "dws.activity")
            assert lake_rows(lake, "dws.activity") == rows_of(store.scan("dws.activity"))
            assert lake_rows(lake, "dws.activity") == sorted(expected.values(), key=repr)


def test_composite_primary_key(store, lake):
    schema = pa.schema([("shop", pa.string()), ("day", pa.int32()), ("total", pa.float64())])
    store.create_table(
        TableMeta("ads.totals", schema, kind="primary_key", primary_key=("shop", "day"), buckets=2)
    )

    def t(rows: list[dict]) -> pa.Table:
        return pa.Table.from_pylist(rows, schema=schema.append(pa.field(CHANGE, pa.string())))

    store.write(
        "ads.totals",
        t(
            [
                {"shop": "a", "day": 1, "total": 1.0, CHANGE: "+I"},
                {"shop": "a", "day": 2, "total": 2.0, CHANGE: "+I"},
                {"shop": "b", "day": 1, "total": 3.0, CHANGE: "+I"},
            ]
        ),
        writer="w",
        seq=0,
    )
    tier_table(store, lake, "ads.totals")
    store.write(
        "ads.totals",
        t(
            [
                {"shop": "a", "day": 1, "total": 10.0, CHANGE: "+U"},
                {"shop": "b", "day": 1, "total": None, CHANGE: "-D"},
            ]
        ),
        writer="w",
        seq=1,
    )
    tier_table(store, lake, "ads.totals")
    assert lake_rows(lake, "ads.totals") == [
        {"shop": "a", "day": 1, "total": 10.0},
        {"shop": "a", "day": 2, "total": 2.0},
    ]
    assert lake.load("ads.totals").schema().identifier_field_names() == {"shop", "day"}


def test_schema_evolution_adds_lake_columns(store, lake):
    store.create_table(TableMeta("ods.clicks", CLICKS))
    store.write("ods.clicks", clicks(5), writer="w", seq=0)
    tier_table(store, lake, "ods.clicks")
    wider = CLICKS.append(pa.field("country", pa.string()))
    store.create_table(TableMeta("ods.clicks", wider))
    store.write(
        "ods.clicks", clicks(3, start=5).append_column("country", pa.array(["fr"] * 3)), writer="w", seq=1
    )
    tier_table(store, lake, "ods.clicks")
    rows = lake_rows(lake, "ods.clicks")
    assert sorted(r["country"] or "" for r in rows) == [""] * 5 + ["fr"] * 3
    assert rows == rows_of(store.scan("ods.clicks"))


def test_lake_status_reports_backlog_and_delay(store, lake):
    store.create_table(TableMeta("ods.clicks", CLICKS, buckets=2, bucket_key=("user_id",)))
    store.write("ods.clicks", clicks(10), writer="w", seq=0)
    status = lake_status(store, lake, "ods.clicks")
    assert status["pending_rows"] == 10 and status["lake_delay_s"] >= 0.0 and not status["lake_table"]
    tier_table(store, lake, "ods.clicks")
    status = lake_status(store, lake, "ods.clicks")
    assert status["pending_rows"] == 0 and status["lake_delay_s"] == 0.0
    assert status["last_cycle_rows"] == 10 and status["last_snapshot_id"] is not None
    assert status["lake_offsets"] == store.end_offsets("ods.clicks")
    offsets, snap = lake_offsets(lake.load("ods.clicks"), 2)
    assert offsets == status["lake_offsets"] and snap.snapshot_id == status["last_snapshot_id"]


def test_a_running_flows_status_rereads_the_lake_after_a_commit_or_a_while(store, lake, monkeypatch):
    store.create_table(TableMeta("ods.clicks", CLICKS, buckets=2, bucket_key=("user_id",)))
    store.write("ods.clicks", clicks(10), writer="w", seq=0)
    reads = []
    real = lake.load
    monkeypatch.setattr(lake, "load", lambda name: reads.append(name) or real(name))
    memory = LakeSnapshots(reread_s=10.0)
    assert memory.get(lake, "ods.clicks", 2, commits=0, now=1000.0) == lake_snapshot(lake, "ods.clicks", 2)
    assert not memory.get(lake, "ods.clicks", 2, commits=0, now=1000.0).exists
    tier_table(store, lake, "ods.clicks")
    reads.clear()
    # the same commit count within 10 s: the last read, no catalog call (the commit was another process's)
    assert memory.get(lake, "ods.clicks", 2, commits=0, now=1009.0).offsets == [0, 0] and reads == []
    # the flow's tiering committed: read again, and the status shows the new offsets
    seen = memory.get(lake, "ods.clicks", 2, commits=1, now=1011.0)
    assert seen.exists and seen.offsets == store.end_offsets("ods.clicks") and reads == ["ods.clicks"]
    status = lake_status(store, lake, "ods.clicks", snapshot=seen)
    assert status == {**lake_status(store, lake, "ods.clicks"), "lake_delay_s": status["lake_delay_s"]}
    assert status["pending_rows"] == 0 and status["last_snapshot_id"] == seen.snapshot_id
    store.write("ods.clicks", clicks(5, start=100), writer="w", seq=1)
    tier_table(store, lake, "ods.clicks")  # committed by another process: seen after at most 10 s
    assert memory.get(lake, "ods.clicks", 2, commits=1, now=1020.0) == seen
    later = memory.get(lake, "ods.clicks", 2, commits=1, now=1021.5)
    assert later.offsets == store.end_offsets("ods.clicks") and later.snapshot_id != seen.snapshot_id


def test_expiry_deletes_unreferenced_files_and_keeps_offsets(store, lake):
    lake.max_snapshots = 4
    store.create_table(
        TableMeta("dws.activity", ACTIVITY, kind="primary_key", primary_key=("user_id",), buckets=2)
    )
    schema = ACTIVITY.append(pa.field(CHANGE, pa.string()))
    expired = 0
    for seq in range(16):
        rows = [
            {"user_id": f"u{(seq * 3 + k) % 11}", "events": seq, "last_item": "x", CHANGE: "+U"}
            for k in range(3)
        ]
        store.write("dws.activity", pa.Table.from_pylist(rows, schema=schema), writer="w", seq=seq)
        result = tier_table(store, lake, "dws.activity")
        expired += sum(int(n.split()[1]) for n in result.maintenance if n.startswith("expired"))
    table = lake.load("dws.activity")
    assert expired >= 10 and len(table.snapshots()) <= 4
    assert lake_offsets(table, 2)[0] == store.end_offsets("dws.activity")
    assert lake_rows(lake, "dws.activity") == rows_of(store.scan("dws.activity"))
    for snap in table.snapshots():  # every kept snapshot is still readable (no live file was deleted)
        table.scan(snapshot_id=snap.snapshot_id).to_arrow()
    on_disk = data_files_stored(table)
    assert len(on_disk) <= 4 * 2 * 2, f"{len(on_disk)} data files stored for 4 snapshots of a 2-bucket table"


def test_a_keyed_read_prunes_the_files_of_other_buckets(store, lake):
    """Each data file holds one bucket, and tables of several buckets are partitioned by it: a read of one
    key's bucket plans only that bucket's files."""
    from pyiceberg.expressions import EqualTo

    from runtime.storage.api import bucket_of

    store.create_table(TableMeta("ods.clicks", CLICKS, buckets=4, bucket_key=("user_id",)))
    for seq in range(3):
        store.write("ods.clicks", clicks(70, start=100 * seq), writer="w", seq=seq)
        tier_table(store, lake, "ods.clicks", maintain=False)
    table = lake.load("ods.clicks")
    assert [f.name for f in table.spec().fields] == ["__bucket"]
    files = list(table.scan().plan_files())
    used = sorted(set(bucket_of(clicks(70), ["user_id"], 4).to_pylist()))  # the buckets the users fall in
    assert len(used) > 1 and len(files) == 3 * len(used)  # 3 cycles x one file per bucket
    assert sorted(task.file.partition[0] for task in files) == sorted(used * 3)
    wanted = bucket_of(pa.table({"user_id": ["u3"]}), ["user_id"], 4)[0].as_py()
    pruned = list(table.scan(row_filter=EqualTo("__bucket", wanted)).plan_files())
    assert len(pruned) == 3
    rows = table.scan(row_filter=EqualTo("__bucket", wanted)).to_arrow()
    assert set(rows.column("__bucket").to_pylist()) == {wanted} and "u3" in rows.column("user_id").to_pylist()


def test_a_cycle_that_loses_the_commit_race_rereads_the_offsets_and_commits_no_range_twice(
    store, lake, monkeypatch
):
    """Two tiering processes without a shared lock (two machines): the one whose commit comes second fails
    the catalog's check that ``main`` is still the snapshot it read, reads the offsets again, finds the range
    committed and commits nothing."""
    import contextlib

    from runtime.lake import tiering

    store.create_table(TableMeta("ods.clicks", CLICKS, buckets=2, bucket_key=("user_id",)))
    store.write("ods.clicks", clicks(40), writer="w", seq=0)
    monkeypatch.setattr(tiering, "table_lock", lambda *a, **k: contextlib.nullcontext())
    original, other = tiering.stage_append, []

    def racing(*args, **kwargs):
        if not other:  # the other process tiers the same range between this one's read and its commit
            other.append(None)
            other[0] = tiering.tier_table(store, lake, "ods.clicks")
        return original(*args, **kwargs)

    monkeypatch.setattr(tiering, "stage_append", racing)
    result = tiering.tier_table(store, lake, "ods.clicks")
    assert other[0].committed and other[0].rows == 40
    assert (result.committed, result.attempts) == (False, 2)
    data = lake.load("ods.clicks").scan(selected_fields=("__bucket", "__offset")).to_arrow().to_pylist()
    ends = store.end_offsets("ods.clicks")
    assert sorted((r["__bucket"], r["__offset"]) for r in data) == [
        (b, o) for b in range(2) for o in range(ends[b])
    ]
    assert len(lake.load("ods.clicks").snapshots()) == 1


@pytest.mark.parametrize("rows_left", [0, 1])
def test_a_reset_lake_table_records_offsets_zero_even_when_it_holds_no_rows(store, lake, rows_left):
    """A full refresh resets the lake table (Lake.reset) while its hot table is rebuilt from offset 0. A lake
    table that holds no rows but covers offsets (a key inserted, then deleted) must get offsets 0 too: else
    the rebuilt hot table's first cycle finds the lake ahead of it (TH303), as a full refresh of a table whose
    top rows had all left did."""
    meta = TableMeta("ads.low", ACTIVITY, kind="primary_key", primary_key=("user_id",))
    store.create_table(meta)
    schema = ACTIVITY.append(pa.field(CHANGE, pa.string()))
    batch = [{"user_id": "u1", "events": 1, "last_item": "i", CHANGE: "+U"}]
    batch += [{"user_id": "u2", "events": 2, "last_item": "i", CHANGE: "+U"}] * rows_left
    store.write("ads.low", pa.Table.from_pylist(batch, schema=schema), writer="w", seq=1)
    gone = [{"user_id": "u1", "events": None, "last_item": None, CHANGE: "-D"}]
    store.write("ads.low", pa.Table.from_pylist(gone, schema=schema), writer="w", seq=2)
    tier_table(store, lake, "ads.low")
    ends = store.end_offsets("ads.low")
    assert lake_offsets(lake.load("ads.low"), 1)[0] == ends and ends[0] > 0
    assert len(lake_rows(lake, "ads.low")) == rows_left
    lake.reset(meta)
    assert lake_offsets(lake.load("ads.low"), 1)[0] == [0]
    assert lake_rows(lake, "ads.low") == []
    store.drop_table("ads.low")  # the hot table rebuilt, still empty: its next cycle has nothing to tier
    store.create_table(meta)
    assert not tier_table(store, lake, "ads.low").committed

"""A primary-key table's state on shared services is never only on one host: with the hot store on SeaweedFS
(its metastore on PostgreSQL) the state is a cache, and once retention trimmed the changelog a fresh store
instance — another process, another host, a Spark Python worker — rebuilds it from the lake snapshot (here in
SeaweedFS's Iceberg REST catalog) plus the changelog after the offsets that snapshot records."""

from __future__ import annotations

import random

import pyarrow as pa
import pytest

from runtime.core.errors import ErrorCode, TidehouseError
from runtime.lake.state import lake_offsets
from runtime.project import Project
from runtime.storage import open_store
from runtime.storage.api import CHANGE, TableMeta
from tests.lake._lakekit import ACTIVITY, lake_rows
from tests.services import shared_settings, write_project_file

PK = "dws.activity"
CHANGES = ACTIVITY.append(pa.field(CHANGE, pa.string()))


def _changes(rng: random.Random, expected: dict) -> pa.Table:
    rows = []
    for _ in range(rng.randrange(3, 12)):
        user = f"u{rng.randrange(15)}"
        if rng.random() < 0.2:
            rows.append({"user_id": user, "events": None, "last_item": None, CHANGE: "-D"})
            expected.pop(user, None)
        else:
            row = {"user_id": user, "events": rng.randrange(1000), "last_item": f"i{rng.randrange(9)}"}
            rows.append({**row, CHANGE: "+U"})
            expected[user] = row
    return pa.Table.from_pylist(rows, schema=CHANGES)


def _state(table: pa.Table) -> dict:
    return {r["user_id"]: r for r in table.select(ACTIVITY.names).to_pylist()}


def test_a_trimmed_changelog_on_s3_is_rebuilt_from_the_lake_snapshot_in_a_fresh_store(
    seaweedfs, postgres, tmp_path, seed
):
    from runtime.spark.options import cached_store, close_cached

    settings = shared_settings(seaweedfs, postgres, registry=False)
    write_project_file(tmp_path, settings, {"storage": {"fsync": False, "retention": "0s"}})
    rng, expected = random.Random(seed), {}
    first = Project.open(home=tmp_path / "home", project_dir=tmp_path)
    try:
        first.store.create_table(
            TableMeta(PK, ACTIVITY, kind="primary_key", primary_key=("user_id",), buckets=2)
        )
        for seq in range(6):
            first.store.write(PK, _changes(rng, expected), writer="w", seq=seq)
            if seq in (2, 4):  # tiering, then retention (0 s) deletes every frame the lake covers
                first.tier(table=PK).raise_for_errors()
        lake_ends, _ = lake_offsets(first.lake.load(PK), 2)
        assert first.store.start_offsets(PK) == lake_ends  # trimmed exactly to what the lake covers
        assert min(first.store.start_offsets(PK)) > 0
        assert first.store.start_offsets(PK) != first.store.end_offsets(PK)  # a tail after the snapshot
    finally:
        first.close()

    bare = open_store(  # without the lake the changelog cannot be replayed from 0: refused, never partial
        settings["storage"]["root"], metastore=settings["storage"]["metastore"], s3=settings["storage"]["s3"]
    )
    with pytest.raises(TidehouseError) as err:
        bare.scan(PK)
    assert err.value.code is ErrorCode.STORAGE_RANGE
    bare.close()

    fresh = Project.open(home=tmp_path / "home", project_dir=tmp_path)
    try:
        assert _state(fresh.store.scan(PK)) == expected  # lake snapshot + the changelog tail
        # it writes on from there (taking the buckets over): an update's before-image comes from the snapshot
        user = sorted(expected)[0]
        ends = fresh.store.end_offsets(PK)
        update = {"user_id": user, "events": -1, "last_item": "z"}
        fresh.store.write(PK, pa.Table.from_pylist([update], schema=ACTIVITY), writer="w2", seq=1)
        changed = [
            r
            for b, end in enumerate(ends)
            for batch in fresh.store.read(PK, b, end)
            for r in pa.Table.from_batches([batch]).to_pylist()
        ]
        assert [(r[CHANGE], r["events"]) for r in changed] == [("-U", expected[user]["events"]), ("+U", -1)]
        expected[user] = update
        # a Spark Python worker opens the project's store the same way (the source's Place)
        worker = cached_store(fresh.config.storage_root, False, fresh.config)
        assert _state(worker.scan(PK)) == expected
        fresh.tier(table=PK).raise_for_errors()
        assert {r["user_id"]: r for r in lake_rows(fresh.lake, PK)} == expected
    finally:
        close_cached()
        fresh.close()

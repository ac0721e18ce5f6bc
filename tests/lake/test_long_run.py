"""Thousands of small cycles must not slow the lake down: snapshots are expired and files compacted."""

from __future__ import annotations

import statistics
import time

import pyarrow as pa
import pytest

from runtime.lake.state import lake_offsets
from runtime.lake.tiering import tier_table
from runtime.storage.api import CHANGE, TableMeta
from tests._support import scale
from tests.lake._lakekit import ACTIVITY, CLICKS, clicks, lake_rows, rows_of


@pytest.mark.slow
@pytest.mark.parametrize("store", ["local"], indirect=True)
def test_commit_time_stays_flat_over_many_cycles(store, lake):
    """scale(200, 1000) consecutive small cycles: the last cycles are no slower than 2x the first ones.

    pyiceberg's commit cost grows with the number of snapshots kept (it copies the whole metadata several
    times per commit), so the steady state depends on ``tiering.max_snapshots``; this test keeps 20 (the
    figure with the default 100 is in docs/benchmarks.md). Compaction runs at its default threshold. Cycles
    are timed in process CPU time, which other processes on a shared CI machine do not inflate.
    """
    cycles = scale(200, 1000)
    lake.max_snapshots = 20
    store.create_table(TableMeta("ods.clicks", CLICKS, buckets=2, bucket_key=("user_id",)))
    store.create_table(
        TableMeta("dws.activity", ACTIVITY, kind="primary_key", primary_key=("user_id",), buckets=2)
    )
    timings: dict[str, list[float]] = {"ods.clicks": [], "dws.activity": []}
    notes = []
    for i in range(cycles):
        store.write("ods.clicks", clicks(10, start=i * 10), writer="w", seq=i)
        store.write(
            "dws.activity",
            pa.Table.from_pylist(
                [
                    {"user_id": f"u{(i * 7 + k) % 50}", "events": i, "last_item": str(k), CHANGE: "+U"}
                    for k in range(5)
                ],
                schema=ACTIVITY.append(pa.field(CHANGE, pa.string())),
            ),
            writer="w",
            seq=i,
        )
        for name, values in timings.items():
            # CPU time of this process: the machine is shared, wall time is noisy
            started = time.process_time()
            result = tier_table(store, lake, name)
            values.append(time.process_time() - started)
            assert result.committed
            notes.extend(result.maintenance)
    window = max(10, cycles // 10)
    for name, values in timings.items():
        first, last = statistics.median(values[5 : 5 + window]), statistics.median(values[-window:])
        print(
            f"{name}: median cycle CPU {first * 1000:.0f} ms at the start, "
            f"{last * 1000:.0f} ms after {cycles} cycles"
        )
        assert last <= 2 * first, f"{name}: {last:.3f}s vs {first:.3f}s"
        table = lake.load(name)
        assert len(table.snapshots()) <= lake.max_snapshots
        assert lake_offsets(table, 2)[0] == store.end_offsets(name)
    assert any("expired" in n for n in notes) and any("compacted" in n for n in notes)
    assert lake_rows(lake, "dws.activity") == rows_of(store.scan("dws.activity"))
    assert lake.load("ods.clicks").scan().to_arrow().num_rows == cycles * 10

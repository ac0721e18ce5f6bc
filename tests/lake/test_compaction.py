"""Size-tiered compaction: small files merge with files of a similar size, big ones are left alone."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from runtime.lake.maintenance import compaction_groups, similar_size_groups
from runtime.lake.tiering import tier_table
from runtime.storage.api import TableMeta
from tests.lake._lakekit import CATALOGS, CLICKS, clicks, rows_of

KB, MB = 1024, 1024 * 1024


def task(size: int, partition=(), name: str = "") -> SimpleNamespace:
    return SimpleNamespace(file=SimpleNamespace(file_size_in_bytes=size, partition=partition, file_path=name))


def test_similar_sizes_group_together_and_an_8x_gap_splits():
    sizes = [15_900] * 5 + [16_100] * 5 + [1_600_000] + [2_000_000] + [200]
    groups = similar_size_groups([task(s) for s in sizes])
    assert [sorted(t.file.file_size_in_bytes for t in g) for g in groups] == [
        [200],
        [15_900] * 5 + [16_100] * 5,
        [1_600_000, 2_000_000],
    ]


def test_a_full_tier_merges_without_the_big_files():
    small = [task(50 * KB, name=f"s{i}") for i in range(32)]
    merged_before = task(1600 * KB, name="m")  # an earlier compaction's output: another tier
    huge = task(200 * MB, name="h")  # above the target: never rewritten
    groups, fullest = compaction_groups([merged_before, *small, huge], 32, 128 * MB)
    assert fullest == 32
    assert [sorted(t.file.file_path for t in g) for g in groups] == [sorted(t.file.file_path for t in small)]


def test_tiers_below_the_threshold_wait_and_partitions_never_mix():
    tasks = [task(50 * KB, ("a",)) for _ in range(20)] + [task(50 * KB, ("b",)) for _ in range(20)]
    groups, fullest = compaction_groups(tasks, 32, 128 * MB)
    assert groups == [] and fullest == 20
    tasks += [task(50 * KB, ("a",)) for _ in range(12)]
    groups, _ = compaction_groups(tasks, 32, 128 * MB)
    assert len(groups) == 1 and {t.file.partition for t in groups[0]} == {("a",)} and len(groups[0]) == 32


def test_one_compaction_reads_at_most_the_target_size():
    tasks = [task(3 * MB) for _ in range(40)]
    groups, _ = compaction_groups(tasks, 32, 16 * MB)
    assert sum(len(g) for g in groups) == 40
    assert all(sum(t.file.file_size_in_bytes for t in g) <= 16 * MB for g in groups)


@pytest.mark.catalogs(*CATALOGS)
@pytest.mark.parametrize("store", ["local"], indirect=True)
def test_compacted_files_at_the_target_are_never_rewritten(store, lake):
    lake.compact_min_files = 8
    store.create_table(TableMeta("ods.clicks", CLICKS, buckets=1))
    cycle = 0

    def tier_until_compacted() -> None:
        nonlocal cycle
        for _ in range(20):
            store.write("ods.clicks", clicks(500, start=cycle * 500), writer="w", seq=cycle)
            cycle += 1
            result = tier_table(store, lake, "ods.clicks")
            if any("compacted" in n for n in result.maintenance):
                return
        pytest.fail("no compaction within 20 cycles")

    tier_until_compacted()
    files = {t.file.file_path: t.file.file_size_in_bytes for t in lake.load("ods.clicks").scan().plan_files()}
    assert len(files) == 1, files
    ((first, size),) = files.items()
    # the first compaction's output is now "big": it must stay as it is, while the small files (each well
    # under half of it) still merge, in pairs or more
    lake.compact_target_bytes = size
    tier_until_compacted()
    now = {t.file.file_path for t in lake.load("ods.clicks").scan().plan_files()}
    assert first in now and len(now) < 1 + lake.compact_min_files, now
    lake_data = lake.load("ods.clicks").scan().to_arrow()
    assert lake_data.num_rows == cycle * 500
    assert rows_of(lake_data.select(CLICKS.names)) == rows_of(store.scan("ods.clicks").select(CLICKS.names))
